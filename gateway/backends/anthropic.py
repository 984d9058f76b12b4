"""Anthropic's Messages API behind the OpenAI chat interface (translation in `anthropic_format`).

Config: `base_url` (default https://api.anthropic.com), `api_key` (sent as x-api-key), `model` (rewrites the
forwarded model), `options.anthropic_version` (default 2023-06-01), `options.anthropic_beta` (the
anthropic-beta header), `options.default_max_tokens` (default 4096; Anthropic requires max_tokens).

A non-streaming request whose max_tokens is too large for Anthropic to answer in one response (the SDKs
refuse more than 10 minutes of expected generation: over 21,333 tokens, or 8,192 on Opus 4) is sent as a
stream and assembled here, so the client still gets one chat.completion. Streams send their first chunk only
with the first content, so an `error` event before any content is retried like an error status.
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
    default_max_tokens,
    from_anthropic,
    thinking_block,
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
# anthropic-sdk-python: a non-streaming call may take 3600 s * max_tokens / 128,000, at most 10 minutes;
# some models have a lower per-model limit (MODEL_NONSTREAMING_TOKENS).
NONSTREAMING_MAX_TOKENS = 600 * 128_000 // 3600
MODEL_NONSTREAMING_TOKENS = {"claude-opus-4-20250514": 8_192, "claude-opus-4-0": 8_192,
                             "claude-4-opus-20250514": 8_192}


def needs_stream(request: dict) -> bool:
    """Whether Anthropic (and its SDKs) would refuse this request without streaming."""
    limit = MODEL_NONSTREAMING_TOKENS.get(str(request.get("model")), NONSTREAMING_MAX_TOKENS)
    return int(request.get("max_tokens") or 0) > limit


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
        self._default_max_tokens = default_max_tokens(options)
        self.http = HTTPUpstream(config.name, base, headers, config.max_connections, metrics,
                                 envelope=anthropic_error_envelope)

    async def start(self) -> None:
        await self.http.start()

    async def close(self) -> None:
        await self.http.close()

    def _request(self, body: dict) -> dict:
        try:
            return to_anthropic(body, self.config.model, self._default_max_tokens)
        except TranslationError as e:
            raise BackendError("bad_request", e.message, 400, body=error_body(
                e.message, "invalid_request_error", None, e.param)) from None

    async def chat(self, body: dict, timeouts: Timeouts) -> dict:
        request = self._request(body)
        if needs_stream(request):  # Anthropic wants a stream for this much output: stream, then assemble
            translator = StreamTranslator(include_usage=False)
            async for _ in self._stream(request, translator, timeouts):
                pass
            return translator.completion()
        message = await self.http.request_json("POST", self._prefix + "/messages", orjson.dumps(request), timeouts)
        return from_anthropic(message)

    async def chat_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        request = self._request(body)
        translator = StreamTranslator(bool((body.get("stream_options") or {}).get("include_usage")))
        async for chunk in self._stream(request, translator, timeouts):
            yield chunk

    async def _stream(self, request: dict, translator: StreamTranslator, timeouts: Timeouts) -> AsyncIterator[dict]:
        payload = orjson.dumps({**request, "stream": True})
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
    """Anthropic stream events -> OpenAI chat.completion.chunk dicts: a role chunk first (sent with the first
    content, so an error before any content is still retryable), content, reasoning_content (thinking) and
    tool-call deltas, a thinking_blocks delta with each block's signature, a finish chunk, then a usage chunk
    (choices: []) when include_usage was asked. It also keeps the whole message, for `completion()`."""

    def __init__(self, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.started = False  # a chunk has gone out: errors from now on are not retryable
        self.id = "msg"
        self.model: str | None = None
        self.created = int(time.time())
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self._tools: dict[int, int] = {}  # Anthropic content block index -> OpenAI tool_calls index
        self._blocks: dict[int, dict] = {}  # the message's content blocks as they build up
        self._json: dict[int, list[str]] = {}  # tool_use input fragments per block index

    def _chunk(self, delta: dict, finish: str | None = None) -> list[dict]:
        chunks = []
        if not self.started:
            self.started = True
            chunks.append(self._choice_chunk({"role": "assistant", "content": ""}, None))
        chunks.append(self._choice_chunk(delta, finish))
        return chunks

    def _choice_chunk(self, delta: dict, finish: str | None) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def feed(self, name: str | None, data: dict) -> list[dict]:
        kind = data.get("type") or name
        if kind == "message_start":
            message = data.get("message") or {}
            self.id = str(message.get("id") or self.id)
            self.model = message.get("model")
            self.usage.update(message.get("usage") or {})
            return []
        if kind == "content_block_start":
            return self._block_start(int(data.get("index", 0)), data.get("content_block") or {})
        if kind == "content_block_delta":
            return self._block_delta(int(data.get("index", 0)), data.get("delta") or {})
        if kind == "message_delta":
            self.usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
            reason = (data.get("delta") or {}).get("stop_reason")
            if reason is None:
                return []
            self.stop_reason = str(reason)
            return self._chunk({}, STOP_REASONS.get(str(reason), "stop"))
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
        kind = block.get("type")
        self._blocks[index] = dict(block)
        if kind == "tool_use":
            position = self._tools[index] = len(self._tools)
            self._json[index] = []
            return self._chunk({"tool_calls": [{"index": position, **tool_call(block, "")}]})
        if kind == "text" and block.get("text"):
            return self._chunk({"content": block["text"]})
        if kind == "thinking" and block.get("thinking"):
            return self._chunk({"reasoning_content": block["thinking"]})
        if kind == "redacted_thinking":
            return self._chunk({"thinking_blocks": [thinking_block(block)]})
        return []

    def _block_delta(self, index: int, delta: dict) -> list[dict]:
        kind = delta.get("type")
        block = self._blocks.setdefault(index, {})
        if kind == "text_delta" and delta.get("text"):
            block["text"] = block.get("text", "") + delta["text"]
            return self._chunk({"content": delta["text"]})
        if kind == "input_json_delta" and delta.get("partial_json") and index in self._tools:
            self._json[index].append(delta["partial_json"])
            args = {"index": self._tools[index], "function": {"arguments": delta["partial_json"]}}
            return self._chunk({"tool_calls": [args]})
        if kind == "thinking_delta" and delta.get("thinking"):
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
            return self._chunk({"reasoning_content": delta["thinking"]})
        if kind == "signature_delta" and delta.get("signature"):
            # The signature closes a thinking block: the client gets the whole block to send back next turn.
            block["signature"] = delta["signature"]
            return self._chunk({"thinking_blocks": [thinking_block({**block, "type": "thinking"})]})
        return []  # citation deltas have no OpenAI chat form

    def completion(self) -> dict:
        """The whole message as a chat.completion (for a non-streaming request that was streamed upstream)."""
        content = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if block.get("type") == "tool_use":
                fragments = "".join(self._json.get(index, []))
                try:
                    block["input"] = orjson.loads(fragments) if fragments else (block.get("input") or {})
                except orjson.JSONDecodeError:
                    raise BackendError("protocol", f"anthropic streamed tool input that is not JSON: "
                                                   f"{fragments[:200]!r}", 502) from None
            content.append(block)
        return from_anthropic({"id": self.id, "model": self.model, "content": content,
                               "stop_reason": self.stop_reason, "usage": self.usage})
