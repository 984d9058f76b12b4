"""A fake Anthropic Messages API on aiohttp that speaks the real wire format, for tests and benchmarks.

    fake = FakeAnthropic()
    with ServerThread(lambda: fake.app) as srv:      # base_url = srv.url
        ...

Endpoints: POST /v1/messages (a `message` JSON, or named SSE events: message_start, ping,
content_block_start / content_block_delta (text_delta, input_json_delta) / content_block_stop, message_delta,
message_stop), GET /v1/models. Errors are `{"type": "error", "error": {"type", "message"}}`.

It is strict where Anthropic's docs are (each check answers 400 invalid_request_error, or 401 for the key):
- headers: `x-api-key` (any non-empty key; the configured one when `api_key` is set) and `anthropic-version`;
- fields: `model`, `max_tokens` (a positive integer), `messages` (non-empty); `temperature` and `top_p` in
  [0, 1], and not both for the models that refuse the pair (Opus 4.1 and later, Sonnet 4.5 and later, Haiku
  4.5 and later); non-streaming requests whose `max_tokens` is too large to finish within 10 minutes
  (> 21,333 tokens, or over the SDK's per-model table) are refused, as the SDKs refuse them;
- turns: roles user/assistant only; consecutive same-role turns are merged into one (as the API does); no
  empty text blocks; in a user turn `tool_result` blocks come first, each answering a `tool_use` of the
  previous assistant turn, and every `tool_use` is answered in the very next turn;
- prompt caching: at most 4 `cache_control` breakpoints, type `ephemeral`, ttl `5m` or `1h`, and no 1h
  breakpoint after a 5m one (in the order tools, system, messages);
- extended thinking (`thinking: {type: enabled, budget_tokens}` with 1024 <= budget < max_tokens, or
  `adaptive`): no temperature other than 1, top_p only in [0.95, 1], no forced tool use; the reply starts with
  a `thinking` block whose `signature` the fake derives from its text, and thinking blocks sent back must
  carry an unchanged signature; a tool loop's last assistant turn must start with its thinking block.

Replies are deterministic: `"echo: " + <text of the last user turn>`, one word per text_delta (with thinking on,
first a thinking block `"Thinking about: <text>"` streamed as thinking_delta + signature_delta); after a
tool_result `"tool said: <result>"`; with `tools` (tool_choice not none) a tool_use of the named (or first)
tool with input `{"text": <last user text>}`. `stop_sequences` and `max_tokens` cut the reply with the matching
stop_reason. Prompt caching is simulated: tokens are len(JSON of a block) // 4; a prefix ending at a block with
cache_control is written on first sight (cache_creation_input_tokens) and read afterwards
(cache_read_input_tokens: the longest cached prefix ending at a breakpoint or up to 20 blocks before one, as
Anthropic looks back), if it has at least `cache_min_tokens` tokens.

Knobs (attributes; `reset()` restores them): delay_headers, delay_per_chunk, cut_after (close after N events),
stream_error_after (send an `error` event, overloaded_error, after N events; only for the next
`stream_error_times` streams when that is set), fail_next(n, status,
retry_after, body, content_type), api_key (checked against x-api-key), cache_min_tokens, reply, record.
State: requests, last, request_count, streams_started, streams_completed, disconnects, disconnected,
prompt_cache (prefix digest -> tokens).
"""

from __future__ import annotations

import hashlib
import hmac

import orjson
from aiohttp import web

from tests.fakes.common import FakeUpstream, pieces, text_of

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
MAX_BREAKPOINTS = 4
JSON_FRAGMENT = 8  # characters of tool input per input_json_delta
LOOKBACK = 20  # blocks before a breakpoint where Anthropic also looks for a cache hit
SIGNING_KEY = b"fake-anthropic-thinking"
# The SDKs' rule (anthropic-sdk-python `_calculate_nonstreaming_timeout`): a non-streaming request may take
# 3600 s * max_tokens / 128,000; over 10 minutes (or the per-model table) it must stream.
NONSTREAMING_MAX_TOKENS = 600 * 128_000 // 3600
MODEL_NONSTREAMING_TOKENS = {"claude-opus-4-20250514": 8_192, "claude-opus-4-0": 8_192,
                             "claude-4-opus-20250514": 8_192}
# Models that refuse temperature and top_p together (Opus 4.1 and later, Sonnet 4.5 and later, Haiku 4.5 and
# later, every 5-series model).
ONE_SAMPLER_MODELS = ("claude-opus-4-1", "claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8",
                      "claude-sonnet-4-5", "claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-5",
                      "claude-sonnet-5", "claude-haiku-5", "claude-fable-5", "claude-mythos-5")


def sign(thinking: str) -> str:
    """The signature the fake puts on its thinking blocks (and checks on the ones sent back)."""
    return hmac.new(SIGNING_KEY, thinking.encode(), hashlib.sha256).hexdigest()


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
        self.stream_error_times: int | None = None
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
        self.stream_error_times = None
        self.cache_min_tokens = 0
        self.prompt_cache.clear()

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        kind = kind or ERROR_TYPES.get(status) or "api_error"
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message},
                             "request_id": self._id("req")})

    def authorized(self, request: web.Request) -> bool:
        key = request.headers.get("x-api-key")
        return bool(key) and (self.api_key is None or key == self.api_key)

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
        if not self.authorized(request):
            return self.error_response(401, "x-api-key header is required", "authentication_error")
        if not request.headers.get("anthropic-version"):
            return self.error_response(400, "anthropic-version: header is required")
        try:
            _validate(body)
        except Invalid as e:
            return self.error_response(400, str(e))
        body = {**body, "messages": _merged(body["messages"])}
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
        blocks, reason, tokens = self._reply(body)
        if _thinking_on(body):
            thought = "Thinking about: " + text_of(_last_user_text(body["messages"]))
            blocks = [{"type": "thinking", "thinking": thought, "signature": sign(thought)}, *blocks]
            tokens += len(pieces(thought))
        return blocks, reason, tokens

    def _reply(self, body: dict) -> tuple[list[dict], str, int]:
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
        prefixes: list[tuple[str, int]] = []  # (digest of the prefix ending at each block, its tokens)
        breakpoints: list[tuple[str, int]] = []  # the same, at the marked blocks
        for serial, marked in _prompt_blocks(body):
            digest.update(serial)
            running += max(1, len(serial) // 4)
            prefixes.append((digest.copy().hexdigest(), running))
            if marked and running >= self.cache_min_tokens:
                breakpoints.append(prefixes[-1])
                # A breakpoint also finds entries written at up to LOOKBACK earlier block boundaries.
                for key, tokens in prefixes[-LOOKBACK:]:
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
            if block["type"] == "thinking":
                events.append(event("content_block_start", {"type": "content_block_start", "index": index,
                                                            "content_block": {"type": "thinking", "thinking": "",
                                                                              "signature": ""}}))
                for word in pieces(block["thinking"]):
                    events.append(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                                "delta": {"type": "thinking_delta",
                                                                          "thinking": word}}))
                events.append(event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                            "delta": {"type": "signature_delta",
                                                                      "signature": block["signature"]}}))
            elif block["type"] == "text":
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
        if self.stream_error_after is not None and self.stream_error_times != 0:
            if self.stream_error_times is not None:
                self.stream_error_times -= 1
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


def _merged(messages: list[dict]) -> list[dict]:
    """Consecutive same-role turns as one turn, as the API combines them."""
    out: list[dict] = []
    for msg in messages:
        content = msg["content"] if isinstance(msg["content"], list) else [{"type": "text", "text": msg["content"]}]
        if out and out[-1]["role"] == msg["role"]:
            out[-1]["content"] = [*out[-1]["content"], *content]
        else:
            out.append({"role": msg["role"], "content": list(content)})
    return out


def _last_user_text(messages: list[dict]) -> list[dict]:
    for msg in reversed(messages):
        texts = [b for b in msg["content"] if b.get("type") == "text"]
        if msg["role"] == "user" and texts:
            return texts
    return []


def _thinking_on(body: dict) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _number(body: dict, key: str, low: float, high: float) -> None:
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise Invalid(f"{key}: Input should be less than or equal to {high:g}" if isinstance(value, int | float)
                      and value > high else f"{key}: Input should be a number in [{low:g}, {high:g}]")


def _validate_sampling(body: dict) -> None:
    _number(body, "temperature", 0.0, 1.0)
    _number(body, "top_p", 0.0, 1.0)
    model = body["model"]
    if body.get("temperature") is not None and body.get("top_p") is not None and model.startswith(ONE_SAMPLER_MODELS):
        raise Invalid("`temperature` and `top_p` cannot both be specified for this model. Please use only one.")
    if not body.get("stream"):
        limit = MODEL_NONSTREAMING_TOKENS.get(model)
        if body["max_tokens"] > NONSTREAMING_MAX_TOKENS or (limit is not None and body["max_tokens"] > limit):
            raise Invalid("Streaming is required for operations that may take longer than 10 minutes. "
                          f"max_tokens: {body['max_tokens']} needs stream: true")
    thinking = body.get("thinking")
    if thinking is None:
        return
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive", "disabled"):
        raise Invalid("thinking.type: Input should be 'enabled', 'adaptive' or 'disabled'")
    if thinking["type"] == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
            raise Invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= body["max_tokens"]:
            raise Invalid("`max_tokens` must be greater than `thinking.budget_tokens`")
    if _thinking_on(body):
        if body.get("temperature") not in (None, 1, 1.0):
            raise Invalid("`temperature` may only be set to 1 when thinking is enabled.")
        if body.get("top_p") is not None and body["top_p"] < 0.95:
            raise Invalid("`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled.")
        if body.get("top_k") is not None:
            raise Invalid("`top_k` must be unset when thinking is enabled.")
        if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
            raise Invalid("Thinking may not be enabled when tool_choice forces tool use.")


def _cache_markers(body: dict) -> list[dict]:
    """Every cache_control marker in prompt order: tools, system, messages."""
    blocks: list[dict] = list(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, list):
        blocks += system
    for msg in body["messages"]:
        if isinstance(msg.get("content"), list):
            blocks += [b for b in msg["content"] if isinstance(b, dict)]
    return [b["cache_control"] for b in blocks if "cache_control" in b]


def _validate_cache(body: dict) -> None:
    markers = _cache_markers(body)
    if len(markers) > MAX_BREAKPOINTS:
        raise Invalid(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                      f"Found {len(markers)}.")
    seen_short = False
    for marker in markers:
        if not isinstance(marker, dict) or marker.get("type") != "ephemeral":
            raise Invalid("cache_control.type: Input should be 'ephemeral'")
        ttl = marker.get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            raise Invalid("cache_control.ttl: Input should be '5m' or '1h'")
        if ttl == "1h" and seen_short:
            raise Invalid("A cache_control block with ttl='1h' must not come after one with ttl='5m' "
                          "(tools, then system, then messages).")
        seen_short = seen_short or ttl == "5m"


def _validate_turns(body: dict) -> None:
    thinking = _thinking_on(body)
    raw = body["messages"]
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise Invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = msg.get("content")
        if isinstance(content, str):
            if not content:
                raise Invalid(f"messages.{i}: text content blocks must be non-empty")
        elif not isinstance(content, list) or not content:
            raise Invalid(f"messages.{i}: content must be a non-empty string or list")
    turns = _merged(raw)
    pending: set[str] = set()  # tool_use ids of the previous assistant turn, still to be answered
    for i, turn in enumerate(turns):
        role, content = turn["role"], turn["content"]
        results_done = False
        answered: set[str] = set()
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            where = f"messages.{i}.content.{j}"
            if kind not in ("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"):
                raise Invalid(f"{where}.type: unknown block type {kind!r}")
            if kind == "text" and not block.get("text"):
                raise Invalid(f"{where}.text: text content blocks must be non-empty")
            if kind in ("thinking", "redacted_thinking", "tool_use") and role != "assistant":
                raise Invalid(f"{where}: {kind} blocks may only appear in assistant turns")
            if kind == "thinking" and block.get("signature") != sign(str(block.get("thinking"))):
                raise Invalid(f"{where}: Invalid `signature` in `thinking` block")
            if kind == "tool_result":
                if role != "user":
                    raise Invalid(f"{where}: tool_result blocks may only appear in user turns")
                if results_done:
                    raise Invalid(f"{where}: tool_result blocks must come first in the user turn, before any "
                                  f"other content")
                if block.get("tool_use_id") not in pending:
                    raise Invalid(f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                                  f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                                  f"`tool_use` block in the previous message.")
                answered.add(block["tool_use_id"])
            else:
                results_done = True
        if pending - answered:
            raise Invalid(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                          f"after: {', '.join(sorted(pending - answered))}. Each `tool_use` block must have a "
                          f"corresponding `tool_result` block in the next message.")
        pending = {b.get("id") for b in content if b.get("type") == "tool_use"} if role == "assistant" else set()
        if (thinking and role == "assistant" and pending and i == len(turns) - 2
                and content[0].get("type") not in ("thinking", "redacted_thinking")):
            raise Invalid(f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                          f"`{content[0].get('type')}`. When `thinking` is enabled, a final `assistant` message "
                          f"must start with a thinking block.")


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
    system = body.get("system")
    if isinstance(system, list):
        for block in system:
            if not isinstance(block, dict) or block.get("type") != "text" or not block.get("text"):
                raise Invalid("system: text content blocks must be non-empty")
    elif system is not None and not isinstance(system, str):
        raise Invalid("system: Input should be a valid string or list")
    _validate_sampling(body)
    _validate_turns(body)
    _validate_cache(body)
