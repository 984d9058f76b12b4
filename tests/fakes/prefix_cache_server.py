"""A fake OpenAI-compatible server (a vLLM or SGLang replica, as far as routing can tell) that keeps a prefix
cache: the prompt, rendered by its own chat template and split into words as tokens, is cut into blocks of
`block_size` tokens with chained hashes; an LRU of `capacity_blocks` blocks holds what earlier prompts left.
A request's leading cached blocks are its `usage.prompt_tokens_details.cached_tokens` (never the last token,
as vLLM); the rest is prefilled, and counted. The reply's blocks are cached after the prompt's, as vLLM keeps
a sequence's output blocks, so a conversation's next turn finds its whole history.

    fake = PrefixCacheServer(capacity_blocks=64)
    with ServerThread(lambda: fake.app) as srv:      # base_url = srv.url + "/v1"
        ...

Prefill takes `prefill_s_per_token` seconds per uncached token, one request at a time per server (as one
engine's prefill steps are), so a queue builds where routing piles requests up. `clear()` empties the cache
(a restart). Endpoints: POST /v1/chat/completions (JSON, or SSE with a usage chunk when
`stream_options.include_usage`), POST /v1/completions, GET /v1/models, GET /health.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict

import orjson
from aiohttp import web


def template(messages: list) -> str:
    """A ChatML-like template: what the server tokenizes (not what the router renders)."""
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append(f"<|im_start|>{m.get('role') if isinstance(m, dict) else '?'} {content or ''} <|im_end|>")
    return " ".join(out) + " <|im_start|>assistant"


class PrefixCacheServer:
    def __init__(self, capacity_blocks: int = 256, block_size: int = 16, reply_words: int = 12,
                 prefill_s_per_token: float = 0.0, model: str = "fleet-model") -> None:
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.reply_words = reply_words
        self.prefill_s_per_token = prefill_s_per_token
        self.model = model
        self.cache: OrderedDict[bytes, None] = OrderedDict()
        self.requests = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self._prefill_lock: asyncio.Lock | None = None
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_post("/v1/completions", self._completions)
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_get("/health", self._health)

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def clear(self) -> None:
        self.cache.clear()

    # ---- the cache ---------------------------------------------------------------------------------------

    def _blocks(self, tokens: list[str]) -> list[bytes]:
        out, parent = [], b""
        for i in range(0, len(tokens) - self.block_size + 1, self.block_size):
            parent = hashlib.blake2b(parent + " ".join(tokens[i : i + self.block_size]).encode(),
                                     digest_size=8).digest()
            out.append(parent)
        return out

    async def _serve_prompt(self, tokens: list[str], generated: list[str]) -> int:
        """Look the prompt up, prefill the rest (taking time), store its blocks and those of the generated
        tokens after it (vLLM caches a sequence's output blocks too); returns the cached tokens."""
        blocks = self._blocks(tokens)
        hit = 0
        for h in blocks:
            if h not in self.cache:
                break
            hit += 1
        cached = min(hit * self.block_size, max(len(tokens) - 1, 0))
        for h in blocks[:hit]:
            self.cache.move_to_end(h)
        if self.prefill_s_per_token > 0:
            if self._prefill_lock is None:
                self._prefill_lock = asyncio.Lock()
            async with self._prefill_lock:
                await asyncio.sleep((len(tokens) - cached) * self.prefill_s_per_token)
        for h in self._blocks(tokens + generated)[hit:]:
            self.cache[h] = None
            self.cache.move_to_end(h)
        while len(self.cache) > self.capacity_blocks:
            self.cache.popitem(last=False)
        self.requests += 1
        self.prompt_tokens += len(tokens)
        self.cached_tokens += cached
        return cached

    def _reply(self, seed: str) -> str:
        digest = hashlib.blake2b(seed.encode(), digest_size=16).hexdigest()
        return " ".join(digest[i % 16 : i % 16 + 4] for i in range(self.reply_words))

    # ---- endpoints ---------------------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return web.json_response({"error": {"message": "'messages' must be a non-empty array",
                                                "type": "invalid_request_error", "param": "messages",
                                                "code": None}}, status=400)
        tokens = template(messages).split()
        text = self._reply(template(messages[-1:]))
        cached = await self._serve_prompt(tokens, text.split())
        return await self._answer(request, body, "chat.completion", len(tokens), cached, text)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        prompt = body.get("prompt")
        tokens = (prompt if isinstance(prompt, str) else " ".join(map(str, prompt or []))).split()
        text = self._reply(str(prompt))
        cached = await self._serve_prompt(tokens, text.split())
        return await self._answer(request, body, "text_completion", len(tokens), cached, text)

    async def _answer(self, request: web.Request, body: dict, kind: str, prompt_tokens: int, cached: int,
                      text: str) -> web.StreamResponse:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": self.reply_words,
                 "total_tokens": prompt_tokens + self.reply_words,
                 "prompt_tokens_details": {"cached_tokens": cached}}
        rid, created = f"cmpl-{self.requests}", int(time.time())
        chat = kind == "chat.completion"
        if not body.get("stream"):
            choice = {"index": 0, "finish_reason": "stop", "logprobs": None,
                      **({"message": {"role": "assistant", "content": text}} if chat else {"text": text})}
            return web.json_response({"id": rid, "object": kind, "created": created, "model": self.model,
                                      "choices": [choice], "usage": usage}, dumps=lambda o: orjson.dumps(o).decode())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"
        for i, word in enumerate(text.split(" ")):
            piece = word if i == 0 else " " + word
            delta = {"delta": {"role": "assistant", "content": piece} if i == 0 else {"content": piece}} if chat \
                else {"text": piece}
            await resp.write(b"data: " + orjson.dumps({"id": rid, "object": obj, "created": created,
                                                       "model": self.model, "choices": [
                                                           {"index": 0, "finish_reason": None, **delta}]}) + b"\n\n")
        end = {"delta": {}} if chat else {"text": ""}
        await resp.write(b"data: " + orjson.dumps({"id": rid, "object": obj, "created": created, "model": self.model,
                                                   "choices": [{"index": 0, "finish_reason": "stop", **end}]}) + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(b"data: " + orjson.dumps({"id": rid, "object": obj, "created": created,
                                                       "model": self.model, "choices": [], "usage": usage}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model", "created": 0,
                                                              "owned_by": "fake"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


# ---- a multi-turn workload: users sharing a few system prompts, turns interleaved ---------------------------

WORDS = ("river stone cloud lantern harbor meadow copper signal orchard glacier violet engine quiet "
         "tunnel falcon ledger marble canyon willow ember prism saddle beacon thistle").split()


def system_prompt(i: int, words: int) -> str:
    """A long, distinct system prompt (the shared prefix of every conversation that uses it)."""
    digest = hashlib.sha256(f"system {i}".encode()).digest() * (words // 32 + 1)
    return f"You are assistant number {i}. " + " ".join(WORDS[b % len(WORDS)] for b in digest[:words])


def user_message(user: int, turn: int, words: int) -> str:
    digest = hashlib.sha256(f"user {user} turn {turn}".encode()).digest() * (words // 32 + 1)
    return f"Question {turn} from user {user}: " + " ".join(WORDS[b % len(WORDS)] for b in digest[:words])


async def run_conversations(chat, *, users: int, prompts: int, turns: int, concurrency: int,
                            system_words: int = 200, user_words: int = 20) -> list[dict]:
    """Run every user's conversation (turn after turn, each turn resending the history), `concurrency` turns
    in flight at a time across users. `chat(messages) -> (reply text, usage dict, backend)`; returns one
    record per turn."""
    gate = asyncio.Semaphore(concurrency)
    records: list[dict] = []

    async def converse(u: int) -> None:
        messages = [{"role": "system", "content": system_prompt(u % prompts, system_words)}]
        for t in range(turns):
            messages.append({"role": "user", "content": user_message(u, t, user_words)})
            async with gate:
                text, usage, backend = await chat(list(messages))
            messages.append({"role": "assistant", "content": text})
            records.append({"user": u, "turn": t, "backend": backend, "usage": usage})

    await asyncio.gather(*(converse(u) for u in range(users)))
    return records
