"""Conversation summaries by the route's summariser backend, cached in Redis by the turns they cover.

Keys chain the turns: key_i = hash(key_{i-1}, turn_i), seeded by tenant, summariser and prompt version. One
MGET finds the longest already-summarised run of leading turns, so a growing conversation sends the
summariser only the previous summary and the turns that are new. Redis errors are cache misses; summariser
errors and timeouts return None, and the caller drops the oldest turns instead.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from gateway.backends.base import BackendError, BackendPool, Timeouts
from gateway.context.metrics import ContextMetrics
from gateway.context.tokens import digest, message_key
from gateway.redis_guard import RedisGuard, RedisUnavailable

log = logging.getLogger("gateway.context")

PROMPT_VERSION = "1"
# Transcript characters per summariser call (about 6k tokens): small enough for the bundled engine's window;
# longer histories are folded in batch by batch, each batch's summary cached under its chain key.
BATCH_CHARS = 24_000
TURN_CHARS = BATCH_CHARS // 2  # one huge message is cut to this in the transcript
KEY_PREFIX = "gw:ctx:sum:"
INSTRUCTIONS = (
    "You compress chat transcripts. Write a concise summary of the conversation below so that an assistant "
    "can continue it without the original messages. Keep every fact, decision, name, number, code identifier, "
    "open question and instruction the user gave; drop pleasantries and repetition. Write plain prose in the "
    "conversation's language, no preamble."
)


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    tenant: str
    backend: str
    model: str
    units: list[list[dict]]  # the turns to cover, oldest first
    max_tokens: int
    timeout_s: float
    ttl_s: int


@dataclass(frozen=True, slots=True)
class Summary:
    text: str | None  # None: no summary (the caller falls back to dropping turns)
    result: str  # hit | extended | miss | error | timeout


def render_turns(units: list[list[dict]]) -> str:
    lines: list[str] = []
    for unit in units:
        for message in unit:
            role = str(message.get("name") or message.get("role") or "unknown")
            text = _text(message.get("content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    text += f"\n[calls {function.get('name')}({function.get('arguments', '')})]"
            text = text.strip()
            if len(text) > TURN_CHARS:
                text = text[:TURN_CHARS] + " [...]"
            lines.append(f"{role}: {text}")
    return "\n".join(lines)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def batches(units: list[list[dict]], start: int) -> list[tuple[int, int]]:
    """[start, end) ranges of turns whose transcript stays within BATCH_CHARS (at least one turn each)."""
    out: list[tuple[int, int]] = []
    size, first = 0, start
    for i in range(start, len(units)):
        length = len(render_turns([units[i]]))
        if i > first and size + length > BATCH_CHARS:
            out.append((first, i))
            first, size = i, 0
        size += length
    if first < len(units):
        out.append((first, len(units)))
    return out


def chain_keys(request: SummaryRequest) -> list[str]:
    seed = f"{PROMPT_VERSION}|{request.tenant}|{request.backend}|{request.model}|{request.max_tokens}"
    h = digest(seed.encode())
    hashes = []
    for unit in request.units:
        h = digest(h + b"".join(message_key(m) for m in unit))
        hashes.append(h.hex())
    # A conversation's keys share a hash tag (its first turn's hash), so one MGET stays in one Redis Cluster slot.
    tag = hashes[0][:16] if hashes else ""
    return [f"{KEY_PREFIX}{{{tag}}}:{h}" for h in hashes]


class Summarizer:
    def __init__(self, backends: BackendPool, redis: object, guard: RedisGuard, metrics: ContextMetrics) -> None:
        self.backends = backends
        self.redis = redis
        self.guard = guard
        self.metrics = metrics

    async def summarize(self, request: SummaryRequest) -> Summary:
        keys = chain_keys(request)
        cached = await self._lookup(keys)
        covered, previous = 0, None
        for i in range(len(keys) - 1, -1, -1):
            if cached[i] is not None:
                covered, previous = i + 1, cached[i]
                break
        if covered == len(keys):
            return self._count(Summary(previous, "hit"))
        try:
            text = await asyncio.wait_for(self._extend(request, keys, covered, previous), request.timeout_s)
        except TimeoutError:
            log.warning("summariser %s timed out after %.1fs", request.backend, request.timeout_s)
            return self._count(Summary(None, "timeout"))
        except BackendError as e:
            log.warning("summariser %s failed: %s", request.backend, e)
            return self._count(Summary(None, "timeout" if e.reason == "timeout" else "error"))
        except (KeyError, ValueError, TypeError, IndexError) as e:  # unknown backend, malformed completion
            log.warning("summariser %s failed: %s: %s", request.backend, type(e).__name__, e)
            return self._count(Summary(None, "error"))
        if not text:
            return self._count(Summary(None, "error"))
        return self._count(Summary(text, "extended" if previous is not None else "miss"))

    def _count(self, summary: Summary) -> Summary:
        self.metrics.summaries.labels(summary.result).inc()
        return summary

    async def _lookup(self, keys: list[str]) -> list[str | None]:
        try:
            values = await self.guard.call(lambda: self.redis.mget(keys))  # type: ignore[attr-defined]
        except RedisUnavailable:
            return [None] * len(keys)
        return [v.decode() if isinstance(v, bytes) else v for v in values]

    async def _store(self, key: str, text: str, ttl_s: int) -> None:
        try:
            await self.guard.call(lambda: self.redis.set(key, text.encode(), ex=ttl_s))  # type: ignore[attr-defined]
        except RedisUnavailable:
            return  # fail open: the next request summarises again

    async def _extend(self, request: SummaryRequest, keys: list[str], covered: int, previous: str | None) -> str:
        """Fold the uncovered turns into the summary a batch at a time, storing each step's summary."""
        text = previous or ""
        for start, end in batches(request.units, covered):
            text = await self._call(request, text or None, request.units[start:end])
            if not text:
                return ""
            await self._store(keys[end - 1], text, request.ttl_s)
        return text

    async def _call(self, request: SummaryRequest, previous: str | None, turns: list[list[dict]]) -> str:
        transcript = render_turns(turns)
        if previous:
            transcript = f"Summary so far:\n{previous}\n\nLater messages:\n{transcript}"
        body = {
            "model": request.model,
            "messages": [
                {"role": "system", "content": INSTRUCTIONS},
                {"role": "user", "content": transcript},
            ],
            "max_tokens": request.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        backend = self.backends.get(request.backend)
        t = request.timeout_s
        completion = await backend.chat(body, Timeouts(connect=min(5.0, t), first_byte=t, total=t))
        content = completion["choices"][0]["message"].get("content")
        return content.strip() if isinstance(content, str) else ""
