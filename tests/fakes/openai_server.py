"""A fake OpenAI API on aiohttp that speaks the real wire format, for tests and benchmarks.

    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as srv:      # base_url = srv.url + "/v1"
        ...

Endpoints: POST /v1/chat/completions (JSON or SSE `chat.completion.chunk` events ending in `data: [DONE]`,
a usage chunk with `choices: []` when `stream_options.include_usage`, tool_calls streamed as OpenAI does),
POST /v1/completions, POST /v1/embeddings (float or base64), GET /v1/models.

Replies are deterministic: `"echo: " + <last user message text>`, streamed one word per chunk; `max_tokens` /
`max_completion_tokens` cut it (finish_reason "length"), a `stop` string cuts before it. With `tools` (and
tool_choice not "none") and a user message last, the reply is a call of the named (or first) tool with
arguments `{"text": <last user text>}` (finish_reason "tool_calls"); after a tool message it answers
`"tool said: <tool content>"`. Token counts are word counts. `reply` set to a string replaces the echo.
`n` > 1 repeats the choice in non-streaming answers (streams carry choice 0 only).
`top_logprobs` set to [(token, logprob), ...] answers non-streaming requests that ask for `logprobs` with those
alternatives for the first token (the first pair is the chosen token), as a judge's yes/no reply carries them.

Knobs (attributes; set them at run time, `reset()` restores them):
  delay_headers      seconds before response headers (every endpoint, errors included)
  delay_per_chunk    seconds before each streamed event (the fake notices a client that leaves meanwhile)
  cut_after          close the connection after N streamed events, without [DONE]
  stream_error_after send `data: {"error": {...}}` after N events and end the stream (as vLLM/OpenAI do)
  fail_next(n, status=503, retry_after=None, body=None, content_type=...)
                     answer the next n requests with that status (default body: OpenAI's error envelope)
  api_key            when set, a missing/wrong `Authorization: Bearer` gets 401
  cached_tokens      chat answers report this many prompt tokens (at most all) as served by a prefix cache
  record             keep every request (method, path, headers, parsed body, raw) in `requests`
State: requests, last, request_count, streams_started, streams_completed, disconnects, disconnected
(a threading.Event set when a client leaves mid-stream).
"""

from __future__ import annotations

import base64
import hashlib
import struct
import time
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.common import FakeUpstream, pieces, text_of

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
               404: "invalid_request_error", 429: "rate_limit_exceeded"}
ARG_FRAGMENT = 8  # characters of tool arguments per streamed chunk


def sse(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class FakeOpenAI(FakeUpstream):
    def __init__(self, api_key: str | None = None, models: list[str] | None = None) -> None:
        super().__init__(api_key)
        self.models = models or ["fake-model", "fake-model-2"]
        self.reply: str | None = None
        self.top_logprobs: list[tuple[str, float]] | None = None
        self.stream_error_after: int | None = None
        self.cached_tokens = 0
        self.embedding_dim = 8
        self._seq = 0
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_post("/v1/completions", self._completions)
        self.app.router.add_post("/v1/embeddings", self._embeddings)
        self.app.router.add_get("/v1/models", self._models)

    def reset(self) -> None:
        super().reset()
        self.reply = None
        self.top_logprobs = None
        self.stream_error_after = None
        self.cached_tokens = 0

    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        kind = kind or ERROR_TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
        code = "invalid_api_key" if status == 401 else None
        return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})

    def authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-fake{self._seq:06d}"

    # ---- chat --------------------------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, early = await self.front(request)
        if early is not None:
            return early
        messages = body.get("messages")
        if not body.get("model"):
            return self.error_response(400, "you must provide a model parameter")
        if not isinstance(messages, list) or not messages:
            return self.error_response(400, "'messages' must be a non-empty array")
        answer = self._answer(body, messages)
        answer["cached_tokens"] = min(self.cached_tokens, answer["prompt_tokens"])
        if body.get("stream"):
            return await self._chat_stream(request, body, answer)
        message: dict[str, Any] = {"role": "assistant", "content": answer["text"], "refusal": None,
                                   "annotations": []}
        if answer["tool"] is not None:
            name, args, call_id = answer["tool"]
            message["content"] = None
            message["tool_calls"] = [{"id": call_id, "type": "function",
                                      "function": {"name": name, "arguments": args}}]
        n = body.get("n") or 1
        choices = [{"index": i, "message": message, "logprobs": self._logprobs(body), "finish_reason": answer["finish"]}
                   for i in range(n)]
        return web.Response(body=orjson.dumps({
            "id": self._id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
            "model": body["model"], "choices": choices, "usage": _usage(answer, n),
            "service_tier": "default", "system_fingerprint": "fp_fake",
        }), content_type="application/json", headers={"x-request-id": self._id("req")})

    def _logprobs(self, body: dict) -> dict | None:
        if not body.get("logprobs") or not self.top_logprobs:
            return None
        top = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in self.top_logprobs]
        return {"content": [{**top[0], "top_logprobs": top[: body.get("top_logprobs") or 0]}], "refusal": None}

    def _answer(self, body: dict, messages: list) -> dict:
        last = messages[-1] if isinstance(messages[-1], dict) else {}
        prompt_tokens = sum(len(text_of(m.get("content")).split()) for m in messages if isinstance(m, dict))
        tools = body.get("tools")
        choice = body.get("tool_choice", "auto")
        if tools and choice != "none" and last.get("role") == "user":
            named = choice.get("function") if isinstance(choice, dict) else None
            name = (named or (tools[0].get("function") or {})).get("name", "")
            args = orjson.dumps({"text": text_of(last.get("content"))}).decode()
            return {"text": None, "tool": (name, args, self._id("call")), "finish": "tool_calls",
                    "prompt_tokens": prompt_tokens, "completion_tokens": len(args.split())}
        if last.get("role") == "tool":
            text = "tool said: " + text_of(last.get("content"))
        else:
            user = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), {})
            text = self.reply if self.reply is not None else "echo: " + text_of(user.get("content"))
        words, finish = _limit(pieces(text), body)
        return {"text": "".join(words), "words": words, "tool": None, "finish": finish,
                "prompt_tokens": prompt_tokens, "completion_tokens": len(words)}

    async def _chat_stream(self, request: web.Request, body: dict, answer: dict) -> web.StreamResponse:
        resp = await self.open_stream(request)
        cid, created, model = self._id("chatcmpl"), int(time.time()), body["model"]
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            out: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                                   "model": model, "system_fingerprint": "fp_fake",
                                   "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                "finish_reason": finish}]}
            if include_usage:
                out["usage"] = None
            return sse(out)

        events: list[bytes] = []
        if answer["tool"] is not None:
            name, args, call_id = answer["tool"]
            events.append(chunk({"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}))
            for i in range(0, len(args), ARG_FRAGMENT):
                events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + ARG_FRAGMENT]}}]}))
        else:
            events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
            events.extend(chunk({"content": w}) for w in answer["words"])
        events.append(chunk({}, answer["finish"]))
        if include_usage:
            events.append(sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                               "system_fingerprint": "fp_fake", "choices": [], "usage": _usage(answer, 1)}))
        if self.stream_error_after is not None:
            events = events[: self.stream_error_after]
            events.append(sse({"error": {"message": "scripted stream error", "type": "server_error",
                                         "param": None, "code": None}}))
        else:
            events.append(b"data: [DONE]\n\n")
        await self.send_events(request, resp, events)
        return resp

    # ---- completions -------------------------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body, early = await self.front(request)
        if early is not None:
            return early
        prompt = body.get("prompt")
        if not body.get("model"):
            return self.error_response(400, "you must provide a model parameter")
        if not isinstance(prompt, str | list):
            return self.error_response(400, "'prompt' must be a string or an array")
        text = prompt if isinstance(prompt, str) else " ".join(str(p) for p in prompt)
        words, finish = _limit(pieces("echo: " + text if self.reply is None else self.reply), body)
        answer = {"prompt_tokens": len(text.split()), "completion_tokens": len(words)}
        cid, created = self._id("cmpl"), int(time.time())
        if not body.get("stream"):
            return web.Response(body=orjson.dumps({
                "id": cid, "object": "text_completion", "created": created, "model": body["model"],
                "choices": [{"text": "".join(words), "index": 0, "logprobs": None, "finish_reason": finish}],
                "usage": _usage(answer, 1)}), content_type="application/json")
        resp = await self.open_stream(request)

        def chunk(text: str, fin: str | None) -> bytes:
            return sse({"id": cid, "object": "text_completion", "created": created, "model": body["model"],
                        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": fin}]})

        events = [chunk(w, None) for w in words] + [chunk("", finish)]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(sse({"id": cid, "object": "text_completion", "created": created, "model": body["model"],
                               "choices": [], "usage": _usage(answer, 1)}))
        events.append(b"data: [DONE]\n\n")
        await self.send_events(request, resp, events)
        return resp

    # ---- embeddings, models ------------------------------------------------------------------------------
    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body, early = await self.front(request)
        if early is not None:
            return early
        raw_input = body.get("input")
        if not body.get("model"):
            return self.error_response(400, "you must provide a model parameter")
        if isinstance(raw_input, str) or (isinstance(raw_input, list) and raw_input and
                                          all(isinstance(t, int) for t in raw_input)):
            inputs: list = [raw_input]
        elif isinstance(raw_input, list) and raw_input:
            inputs = raw_input
        else:
            return self.error_response(400, "'input' must be a non-empty string or array", "invalid_request_error")
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, item in enumerate(inputs):
            vector = self.embed(item if isinstance(item, str) else orjson.dumps(item).decode())
            value: object = (base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                             if as_base64 else vector)
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(len(str(x).split()) for x in inputs)
        return web.Response(body=orjson.dumps({
            "object": "list", "data": data, "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}), content_type="application/json")

    def embed(self, text: str) -> list[float]:
        """The fake's deterministic unit vector for a text."""
        digest = hashlib.sha256(text.encode()).digest()
        raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(self.embedding_dim)]
        norm = sum(x * x for x in raw) ** 0.5 or 1.0
        return [x / norm for x in raw]

    async def _models(self, request: web.Request) -> web.StreamResponse:
        _, early = await self.front(request)
        if early is not None:
            return early
        return web.Response(body=orjson.dumps({"object": "list", "data": [
            {"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"} for m in self.models]}),
            content_type="application/json")


def _limit(words: list[str], body: dict) -> tuple[list[str], str]:
    """Apply `stop` and `max_tokens` to the reply's words; returns (words kept, finish_reason)."""
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else [s for s in stop or [] if isinstance(s, str) and s]
    text = "".join(words)
    cut = min((text.find(s) for s in stops if s in text), default=-1)
    if cut >= 0:
        words = pieces(text[:cut]) if text[:cut] else []
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and len(words) > limit:
        return words[:limit], "length"
    return words, "stop"


def _usage(answer: dict, n: int) -> dict:
    prompt, completion = answer["prompt_tokens"], answer["completion_tokens"] * n
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": answer.get("cached_tokens", 0), "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
