"""A fake Anthropic Messages API on aiohttp that speaks the real wire format, for tests and benchmarks.

    fake = FakeAnthropic()
    with ServerThread(lambda: fake.app) as srv:      # base_url = srv.url
        ...

Endpoints: POST /v1/messages (a `message` JSON, or named SSE events: message_start, ping,
content_block_start / content_block_delta (text_delta, input_json_delta) / content_block_stop, message_delta,
message_stop), GET /v1/models. Errors are `{"type": "error", "error": {"type", "message"}}`.

It checks what the real API checks and a translator can get wrong: the anthropic-version header, model,
max_tokens, roles user/assistant only, no empty text blocks, tool_result ids matching a tool_use of the
previous assistant turn, at most 4 cache_control breakpoints.

Replies are deterministic: `"echo: " + <text of the last user turn>`, one word per text_delta; after a
tool_result `"tool said: <result>"`; with `tools` (tool_choice not none) a tool_use of the named (or first)
tool with input `{"text": <last user text>}`. `stop_sequences` and `max_tokens` cut the reply with the matching
stop_reason. Prompt caching is simulated: tokens are len(JSON of a block) // 4; a prefix ending at a block with
cache_control is written on first sight (cache_creation_input_tokens) and read afterwards
(cache_read_input_tokens, the longest cached breakpoint), if it has at least `cache_min_tokens` tokens.

Knobs (attributes; `reset()` restores them): delay_headers, delay_per_chunk, cut_after (close after N events),
stream_error_after (send an `error` event, overloaded_error, after N events), fail_next(n, status,
retry_after, body, content_type), api_key (checked against x-api-key), cache_min_tokens, reply, record.
State: requests, last, request_count, streams_started, streams_completed, disconnects, disconnected,
prompt_cache (prefix digest -> tokens).
"""

from __future__ import annotations

import hashlib

import orjson
from aiohttp import web

from tests.fakes.common import FakeUpstream, pieces, text_of

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
MAX_BREAKPOINTS = 4
JSON_FRAGMENT = 8  # characters of tool input per input_json_delta


def event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class Invalid(Exception):
    pass


class FakeAnthropic(FakeUpstream):
    def __init__(self, api_key: str | None = None, models: list[str] | None = None) -> None:
        super().__init__(api_key)
        self.models = models or ["claude-fake-1", "claude-fake-2"]
        self.reply: str | None = None
        self.stream_error_after: int | None = None
        self.cache_min_tokens = 0
        self.prompt_cache: dict[str, int] = {}
        self._seq = 0
        self._stopped_by: str | None = None  # the stop sequence that cut the last reply
        self.app.router.add_post("/v1/messages", self._messages)
        self.app.router.add_get("/v1/models", self._models)

    def reset(self) -> None:
        super().reset()
        self.reply = None
        self.stream_error_after = None
        self.cache_min_tokens = 0
        self.prompt_cache.clear()

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        kind = kind or ERROR_TYPES.get(status) or "api_error"
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message},
                             "request_id": self._id("req")})

    def authorized(self, request: web.Request) -> bool:
        return request.headers.get("x-api-key") == self.api_key

    def _id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}_fake{self._seq:06d}"

    async def _models(self, request: web.Request) -> web.StreamResponse:
        _, early = await self.front(request)
        if early is not None:
            return early
        data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in self.models]
        return web.json_response({"data": data, "has_more": False, "first_id": self.models[0],
                                  "last_id": self.models[-1]}, dumps=lambda o: orjson.dumps(o).decode())

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body, early = await self.front(request)
        if early is not None:
            return early
        if not request.headers.get("anthropic-version"):
            return self.error_response(400, "anthropic-version: header is required")
        try:
            _validate(body)
        except Invalid as e:
            return self.error_response(400, str(e))
        blocks, stop_reason, output_tokens = self._answer(body)
        usage = {**self._cache_usage(body), "output_tokens": output_tokens}
        message = {"id": self._id("msg"), "type": "message", "role": "assistant", "model": body["model"],
                   "content": blocks, "stop_reason": stop_reason, "stop_sequence": None, "usage": usage}
        if stop_reason == "stop_sequence":
            message["stop_sequence"] = self._stopped_by
        if body.get("stream"):
            return await self._stream(request, message)
        return web.Response(body=orjson.dumps(message), content_type="application/json",
                            headers={"request-id": self._id("req")})

    def _answer(self, body: dict) -> tuple[list[dict], str, int]:
        self._stopped_by = None
        last = body["messages"][-1]
        content = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
        results = [b for b in content if b.get("type") == "tool_result"]
        tools = body.get("tools")
        choice = body.get("tool_choice") or {"type": "auto"}
        if results:
            text = "tool said: " + text_of(results[-1].get("content", ""))
        elif tools and choice.get("type") != "none":
            name = choice.get("name") if choice.get("type") == "tool" else tools[0]["name"]
            block = {"type": "tool_use", "id": self._id("toolu"), "name": name, "input": {"text": text_of(content)}}
            return [block], "tool_use", len(orjson.dumps(block["input"])) // 4 + 1
        else:
            text = self.reply if self.reply is not None else "echo: " + text_of(content)
        words = pieces(text)
        reason = "end_turn"
        joined = "".join(words)
        for stop in body.get("stop_sequences") or []:
            at = joined.find(stop)
            if at >= 0:
                words, reason, self._stopped_by = (pieces(joined[:at]) if joined[:at] else []), "stop_sequence", stop
                break
        if len(words) > body["max_tokens"]:
            words, reason = words[: body["max_tokens"]], "max_tokens"
        return [{"type": "text", "text": "".join(words)}], reason, len(words)

    def _cache_usage(self, body: dict) -> dict:
        """Simulated prompt caching over the prefix order tools -> system -> messages."""
        digest = hashlib.sha256(body["model"].encode())
        running = read = written = 0
        breakpoints: list[tuple[str, int]] = []  # (digest of the prefix ending here, its tokens)
        for serial, marked in _prompt_blocks(body):
            digest.update(serial)
            running += max(1, len(serial) // 4)
            if marked and running >= self.cache_min_tokens:
                breakpoints.append((digest.copy().hexdigest(), running))
        for key, tokens in breakpoints:
            if key in self.prompt_cache:
                read = max(read, tokens)
        if breakpoints and breakpoints[-1][0] not in self.prompt_cache:
            written = breakpoints[-1][1] - read
        for key, tokens in breakpoints:
            self.prompt_cache[key] = tokens
        return {"input_tokens": running - read - written, "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read}

    async def _stream(self, request: web.Request, message: dict) -> web.StreamResponse:
        resp = await self.open_stream(request)
        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {**message["usage"], "output_tokens": 1}}
        events = [event("message_start", {"type": "message_start", "message": start}),
                  event("ping", {"type": "ping"})]
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                events.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                            "content_block": {"type": "text", "text": ""}}))
                for word in pieces(block["text"]) if block["text"] else []:
                    events.append(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                                "delta": {"type": "text_delta", "text": word}}))
            else:
                events.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                            "content_block": {**block, "input": {}}}))
                raw = orjson.dumps(block["input"]).decode()
                for i in range(0, len(raw), JSON_FRAGMENT):
                    events.append(event("content_block_delta", {
                        "type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": raw[i:i + JSON_FRAGMENT]}}))
            events.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                               "stop_sequence": message["stop_sequence"]},
            "usage": {"output_tokens": message["usage"]["output_tokens"]}}))
        events.append(event("message_stop", {"type": "message_stop"}))
        if self.stream_error_after is not None:
            events = events[: self.stream_error_after]
            events.append(event("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                      "message": "Overloaded"}}))
        await self.send_events(request, resp, events)
        return resp


def _prompt_blocks(body: dict) -> list[tuple[bytes, bool]]:
    """Every block of the prompt in cache order, serialised without cache_control, and whether it is marked."""
    blocks: list[tuple[bytes, dict]] = [(b"tool", t) for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, list):
        blocks += [(b"system", b) for b in system]
    elif system:
        blocks.append((b"system", {"type": "text", "text": system}))
    for msg in body["messages"]:
        content = msg["content"] if isinstance(msg["content"], list) else [{"type": "text", "text": msg["content"]}]
        blocks += [(msg["role"].encode(), b) for b in content]
    return [(where + orjson.dumps({k: v for k, v in b.items() if k != "cache_control"}), "cache_control" in b)
            for where, b in blocks]


def _validate(body: dict) -> None:
    """The checks of the real API that a translation can trip."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise Invalid("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages: at least one message is required")
    breakpoints = sum("cache_control" in t for t in body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, list):
        for block in system:
            if block.get("type") != "text" or not block.get("text"):
                raise Invalid("system: text content blocks must be non-empty")
            breakpoints += "cache_control" in block
    elif system is not None and not isinstance(system, str):
        raise Invalid("system: Input should be a valid string or list")
    previous_tool_uses: set[str] = set()
    for i, msg in enumerate(messages):
        if msg.get("role") not in ("user", "assistant"):
            raise Invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = msg.get("content")
        if isinstance(content, str):
            if not content:
                raise Invalid(f"messages.{i}: text content blocks must be non-empty")
            previous_tool_uses = set()
            continue
        if not isinstance(content, list) or not content:
            raise Invalid(f"messages.{i}: content must be a non-empty string or list")
        tool_uses = set()
        for j, block in enumerate(content):
            kind = block.get("type")
            breakpoints += "cache_control" in block
            if kind == "text" and not block.get("text"):
                raise Invalid(f"messages.{i}.content.{j}.text: text content blocks must be non-empty")
            if kind == "tool_use":
                tool_uses.add(block.get("id"))
            if kind == "tool_result" and block.get("tool_use_id") not in previous_tool_uses:
                raise Invalid(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                              f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                              f"`tool_use` block in the previous message.")
            if kind not in ("text", "image", "document", "tool_use", "tool_result"):
                raise Invalid(f"messages.{i}.content.{j}.type: unknown block type {kind!r}")
        previous_tool_uses = tool_uses if msg["role"] == "assistant" else set()
    if breakpoints > MAX_BREAKPOINTS:
        raise Invalid(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                      f"Found {breakpoints}.")

