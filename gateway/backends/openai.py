"""Any OpenAI-compatible upstream: OpenAI, vLLM, SGLang, TGI, DeepSeek, our own engine replicas.

Bodies are forwarded as given (unknown fields included); only `model` is rewritten when the backend config
names one, and `stream` is set to match the call. Streams are parsed as bytes arrive and end at `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import orjson

from gateway.backends.base import BackendError, Timeouts
from gateway.backends.checks import chunk_problem, completion_problem, embeddings_problem
from gateway.backends.sse import SSEEvent
from gateway.backends.upstream import HTTPUpstream
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DONE = b"[DONE]"


def _is_done(event: SSEEvent) -> bool:
    return event.data == DONE


class OpenAIBackend:
    def __init__(self, config: BackendConfig, metrics: Metrics) -> None:
        self.name = config.name
        self.config = config
        headers = dict(config.headers)
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self.http = HTTPUpstream(
            config.name, config.base_url or DEFAULT_BASE_URL, headers, config.max_connections, metrics
        )

    async def start(self) -> None:
        await self.http.start()

    async def close(self) -> None:
        await self.http.close()

    def _payload(self, body: dict, stream: bool) -> bytes:
        out = dict(body)
        if self.config.model:
            out["model"] = self.config.model
        if stream:
            out["stream"] = True
        else:
            out.pop("stream", None)
            out.pop("stream_options", None)
        return orjson.dumps(out)

    async def chat(self, body: dict, timeouts: Timeouts) -> dict:
        answer = await self.http.request_json("POST", "/chat/completions", self._payload(body, False), timeouts)
        return self._checked(answer, completion_problem(answer))

    async def completions(self, body: dict, timeouts: Timeouts) -> dict:
        answer = await self.http.request_json("POST", "/completions", self._payload(body, False), timeouts)
        return self._checked(answer, completion_problem(answer))

    async def embeddings(self, body: dict, timeouts: Timeouts) -> dict:
        answer = await self.http.request_json("POST", "/embeddings", self._payload(body, False), timeouts)
        return self._checked(answer, embeddings_problem(answer))

    def _checked(self, answer: dict, problem: str | None) -> dict:
        if problem is not None:
            raise self.http.fail(BackendError("protocol", f"upstream {self.name} sent a malformed answer: "
                                              f"{problem}", 502))
        return answer

    def chat_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        return self._stream("/chat/completions", body, timeouts)

    def completions_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        return self._stream("/completions", body, timeouts)

    async def _stream(self, path: str, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        batches = self.http.stream_batches(path, self._payload(body, True), timeouts, _is_done)
        yielded = False
        async with aclosing(batches):
            async for batch in batches:
                for event in batch:
                    if event.data == DONE:
                        continue  # the iterator ends right after it, having drained the body
                    chunk = self._chunk(event, yielded)
                    yielded = True
                    yield chunk

    def _chunk(self, event: SSEEvent, yielded: bool) -> dict:
        """One event's chunk, shape-checked (the gateway past this point trusts it)."""
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            raise self.http.fail(BackendError(
                "protocol", f"upstream sent an event that is not JSON: {event.data[:200]!r}", 502,
                retryable=not yielded)) from None
        if not isinstance(chunk, dict):
            raise self.http.fail(BackendError("protocol", "upstream sent an event that is not an object", 502,
                                              retryable=not yielded))
        err = chunk.get("error")
        if err is not None:
            raise self.http.fail(_stream_error(err, yielded))
        problem = chunk_problem(chunk)
        if problem is not None:
            raise self.http.fail(BackendError("protocol", f"upstream {self.name} sent a malformed stream chunk: "
                                              f"{problem}", 502, retryable=not yielded))
        return chunk

    async def list_models(self) -> list[str]:
        return await self.http.list_models("/models", self.config.models)

    async def check_ready(self) -> str | None:
        return await self.http.check_ready("/models")


def _stream_error(err: object, yielded: bool) -> BackendError:
    """An error sent as a stream event (vLLM and OpenAI do this after the headers went out)."""
    if isinstance(err, dict):
        message = str(err.get("message") or "upstream stream error")
        body = {"error": {"message": message, "type": err.get("type") or "upstream_error",
                          "param": err.get("param"), "code": err.get("code")}}
    else:
        message = str(err)
        body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": None}}
    return BackendError("protocol", f"upstream stream error: {message}", 502, retryable=not yielded, body=body)
