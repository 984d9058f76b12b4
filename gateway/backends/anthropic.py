"""Anthropic's Messages API behind the OpenAI chat interface (translation in `anthropic_format`).

Config: `base_url` (default https://api.anthropic.com), `api_key` (sent as x-api-key), `model` (rewrites the
forwarded model), `options.anthropic_version` (default 2023-06-01), `options.anthropic_beta` (the
anthropic-beta header), `options.default_max_tokens` (default 4096; Anthropic requires max_tokens).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import orjson

from gateway.backends.anthropic_format import (
    ERROR_STATUS,
    STOP_REASONS,
    TranslationError,
    anthropic_error,
    anthropic_error_envelope,
    from_anthropic,
    to_anthropic,
    tool_call,
    usage_to_openai,
)
from gateway.backends.base import BackendError, Timeouts
from gateway.backends.sse import SSEEvent
from gateway.backends.upstream import HTTPUpstream
from gateway.config.schema import BackendConfig
from gateway.errors import error_body
from gateway.metrics import Metrics

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096


def _is_message_stop(event: SSEEvent) -> bool:
    return event.event == "message_stop" or (event.event is None and b'"message_stop"' in event.data)


class AnthropicBackend:
    def __init__(self, config: BackendConfig, metrics: Metrics) -> None:
        self.name = config.name
        self.config = config
        options = config.options
        headers = {"anthropic-version": str(options.get("anthropic_version") or DEFAULT_VERSION)}
        if options.get("anthropic_beta"):
            headers["anthropic-beta"] = str(options["anthropic_beta"])
        headers.update(config.headers)
        if config.api_key:
            headers["x-api-key"] = config.api_key
        base = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._prefix = "" if base.endswith("/v1") else "/v1"  # accept base_url with or without /v1
        self._default_max_tokens = int(options.get("default_max_tokens") or DEFAULT_MAX_TOKENS)
        self.http = HTTPUpstream(config.name, base, headers, config.max_connections, metrics,
                                 envelope=anthropic_error_envelope)

    async def start(self) -> None:
        await self.http.start()

    async def close(self) -> None:
        await self.http.close()

    def _payload(self, body: dict, stream: bool) -> bytes:
        try:
            request = to_anthropic(body, self.config.model, self._default_max_tokens)
        except TranslationError as e:
            raise BackendError("bad_request", e.message, 400, body=error_body(
                e.message, "invalid_request_error", None, e.param)) from None
        if stream:
            request["stream"] = True
        return orjson.dumps(request)

    async def chat(self, body: dict, timeouts: Timeouts) -> dict:
        payload = self._payload(body, False)
        message = await self.http.request_json("POST", self._prefix + "/messages", payload, timeouts)
        return from_anthropic(message)

    async def chat_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        payload = self._payload(body, True)
        translator = StreamTranslator(bool((body.get("stream_options") or {}).get("include_usage")))
        events = self.http.stream_events(self._prefix + "/messages", payload, timeouts, _is_message_stop)
        async with aclosing(events):
            async for event in events:
                try:
                    data = orjson.loads(event.data)
                except orjson.JSONDecodeError:
                    raise self.http.fail(BackendError(
                        "protocol", f"anthropic sent an event that is not JSON: {event.data[:200]!r}", 502,
                        retryable=not translator.started)) from None
                if not isinstance(data, dict):
                    raise self.http.fail(BackendError("protocol", "anthropic sent an event that is not an object",
                                                      502, retryable=not translator.started))
                try:
                    chunks = translator.feed(event.event, data)
                except BackendError as e:
                    raise self.http.fail(e) from None
                except (TypeError, ValueError, AttributeError) as e:
                    raise self.http.fail(BackendError(
                        "protocol", f"anthropic sent a malformed {event.event or 'stream'} event: {e}", 502,
                        retryable=not translator.started)) from None
                for chunk in chunks:
                    yield chunk

    async def completions(self, body: dict, timeouts: Timeouts) -> dict:
        raise _unsupported("completions")

    def completions_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        return _RaisingStream(_unsupported("completions"))

    async def embeddings(self, body: dict, timeouts: Timeouts) -> dict:
        raise _unsupported("embeddings")

    async def list_models(self) -> list[str]:
        return await self.http.list_models(self._prefix + "/models", self.config.models)

    async def check_ready(self) -> str | None:
        return await self.http.check_ready(self._prefix + "/models")


def _unsupported(endpoint: str) -> BackendError:
    message = f"{endpoint} are not supported by this backend (anthropic offers chat only)"
    return BackendError("unsupported", message, 400,
                        body=error_body(message, "invalid_request_error", "unsupported_endpoint"))


class _RaisingStream:
    """A stream that fails on its first step, as a stream whose upstream refused would."""

    def __init__(self, error: BackendError) -> None:
        self._error = error

    def __aiter__(self) -> _RaisingStream:
        return self

    async def __anext__(self) -> dict:
        raise self._error

    async def aclose(self) -> None:
        return None


def _reason(status: int) -> str:
    if status == 429:
        return "status_429"
    return "status_5xx" if status >= 500 else "status_4xx"


class StreamTranslator:
    """Anthropic stream events -> OpenAI chat.completion.chunk dicts: a role chunk first, content and
    tool-call deltas, a finish chunk, then a usage chunk (choices: []) when include_usage was asked."""

    def __init__(self, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.started = False  # a chunk has gone out: errors from now on are not retryable
        self.id = "msg"
        self.model: str | None = None
        self.created = int(time.time())
        self.usage: dict[str, Any] = {}
        self._tools: dict[int, int] = {}  # Anthropic content block index -> OpenAI tool_calls index

    def _chunk(self, delta: dict, finish: str | None = None) -> dict:
        self.started = True
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def feed(self, name: str | None, data: dict) -> list[dict]:
        kind = data.get("type") or name
        if kind == "message_start":
            message = data.get("message") or {}
            self.id = str(message.get("id") or self.id)
            self.model = message.get("model")
            self.usage.update(message.get("usage") or {})
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            return self._block_start(int(data.get("index", 0)), data.get("content_block") or {})
        if kind == "content_block_delta":
            return self._block_delta(int(data.get("index", 0)), data.get("delta") or {})
        if kind == "message_delta":
            self.usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
            reason = (data.get("delta") or {}).get("stop_reason")
            if reason is None:
                return []
            return [self._chunk({}, STOP_REASONS.get(str(reason), "stop"))]
        if kind == "message_stop":
            if not self.include_usage:
                return []
            return [{"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                     "model": self.model, "choices": [], "usage": usage_to_openai(self.usage)}]
        if kind == "error":
            found = anthropic_error(data) or ("api_error", "anthropic stream error")
            status = ERROR_STATUS.get(found[0], 502)
            raise BackendError(
                _reason(status), f"anthropic stream error ({found[0]}): {found[1]}", status,
                retryable=not self.started and (status >= 500 or status == 429),
                body=error_body(found[1], found[0]))
        return []  # ping, content_block_stop, and event types added later

    def _block_start(self, index: int, block: dict) -> list[dict]:
        if block.get("type") == "tool_use":
            position = self._tools[index] = len(self._tools)
            call = tool_call(block, "")
            return [self._chunk({"tool_calls": [{"index": position, **call}]})]
        if block.get("type") == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        return []

    def _block_delta(self, index: int, delta: dict) -> list[dict]:
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return [self._chunk({"content": delta["text"]})]
        if kind == "input_json_delta" and delta.get("partial_json") and index in self._tools:
            args = {"index": self._tools[index], "function": {"arguments": delta["partial_json"]}}
            return [self._chunk({"tool_calls": [args]})]
        return []  # thinking, signature and citation deltas have no OpenAI chat form
