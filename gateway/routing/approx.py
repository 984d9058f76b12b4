"""Prefix-aware routing for pools of OpenAI-compatible servers (vLLM, SGLang, TGI, other gateways).

Such servers keep their own prefix caches and tell nobody what they hold, so the router keeps an approximate
view of each one, as SGLang's router does: the text a request presents to the server (its messages rendered
role by role, or its prompt) is cut into blocks of `block_chars` characters and hashed as a chain (each
block's hash covers every block before it), so a block hash stands for a whole prefix. Each backend's view is
an LRU of those hashes, sized from its capacity in tokens. Routing a request there inserts its blocks (the
server will have cached them once it has prefilled them) and refreshes the ones it matched.

The choice is `gateway.routing.choice.pick`, the same rule as the engine router's.

The servers correct the view where they can: an answer's `usage.prompt_tokens_details.cached_tokens` (vLLM
with --enable-prompt-tokens-details, SGLang, OpenAI) says how much of the prompt the server really had. Far
fewer than predicted (below `evicted_ratio`) means the server evicted blocks the view still holds; an LRU
evicts oldest first, so every block older than the first missing one is dropped from the view too, and the
view's capacity shrinks to what the server evidently keeps (it grows back as predictions come true). The
usage also calibrates tokens per character, so predictions are in the server's own tokens.

Backends that fail health checks (or refuse a connection) leave the choice and their views are cleared: a
server that comes back has restarted with an empty cache, or may have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.pipeline import CHAT, Endpoint
from gateway.routing.choice import Balance, Branches, Candidate, Pick, RecentLoad, RequestMean, pick

log = logging.getLogger(__name__)

TOKENS_PER_CHAR = 0.25  # first guess (English text, BPE tokenizers); calibrated from each answer's usage
TPC_DECAY = 0.1
MIN_CAPACITY_BLOCKS = 16


def render(endpoint: Endpoint, body: dict) -> str:
    """The text a request presents to the server, in an order where an earlier turn is a prefix of a later one.

    Chat templates differ, but every one renders messages in order with the tools first, so a conversation's
    next turn extends this text exactly where it extends the server's prompt.
    """
    if endpoint != CHAT:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            return prompt[0]  # a batch: the first prompt decides; the rest share the replica
        if isinstance(prompt, list):
            return " ".join(str(t) for t in prompt)
        return ""
    parts: list[str] = []
    tools = body.get("tools")
    if tools:
        parts.append(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode())
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        parts.append(f"\x1e{message.get('role')}\x1f")
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                # images and audio: their JSON stands for them (equal parts, equal text)
                parts.append(text if isinstance(text, str) else orjson.dumps(part, option=orjson.OPT_SORT_KEYS)
                             .decode())
        if message.get("tool_calls"):
            parts.append(orjson.dumps(message["tool_calls"], option=orjson.OPT_SORT_KEYS).decode())
    return "".join(parts)


def chain_hashes(text: str, block_chars: int) -> list[int]:
    """One hash per full block, each over its parent's hash and its own text (a prefix identity)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(text) - block_chars + 1, block_chars):
        parent = hash((parent, text[start : start + block_chars]))
        out.append(parent)
    return out


@dataclass(slots=True)
class View:
    """What the router believes one backend caches: block hash -> last use (a sequence number), in LRU order."""

    capacity: int  # blocks, the configured ceiling
    limit: int = 0  # blocks, what the server evidently keeps (<= capacity)
    blocks: OrderedDict[int, int] = field(default_factory=OrderedDict)
    clock: int = 0

    def __post_init__(self) -> None:
        self.limit = self.limit or self.capacity

    def match(self, hashes: list[int]) -> int:
        n = 0
        for h in hashes:
            if h not in self.blocks:
                break
            n += 1
        return n

    def touch(self, hashes: list[int]) -> None:
        for h in hashes:
            self.clock += 1
            self.blocks[h] = self.clock
            self.blocks.move_to_end(h)
        self._trim()

    def _trim(self) -> None:
        while len(self.blocks) > self.limit:
            self.blocks.popitem(last=False)

    def evicted_before(self, last_use: int) -> None:
        """The server evicted a block last used at `last_use`: under LRU so did every block used earlier."""
        while self.blocks:
            h, seq = next(iter(self.blocks.items()))
            if seq > last_use:
                break
            del self.blocks[h]
        self.limit = max(MIN_CAPACITY_BLOCKS, min(self.capacity, len(self.blocks)))

    def confirmed(self, blocks: int) -> None:
        """A prediction came true: let the estimate grow back towards the configured capacity."""
        self.limit = min(self.capacity, self.limit + max(blocks, 1))

    def clear(self) -> None:
        self.blocks.clear()
        self.limit = self.capacity


@dataclass(slots=True)
class Member:
    name: str
    view: View
    healthy: bool = True


@dataclass(slots=True)
class RouteTicket:
    """One routed request: what was predicted where, to check against the answer's usage."""

    backend: str
    hashes: list[int]
    chars: int
    predicted_blocks: int
    last_uses: list[int]  # the matched blocks' last use before this request refreshed them


@dataclass(frozen=True, slots=True)
class PoolOptions:
    """`routing:` options of a prefix_aware route (parsed and validated by gateway.routing.options)."""

    block_chars: int = 64
    cache_tokens: int = 1_000_000
    capacity_tokens: tuple[tuple[str, int], ...] = ()  # per backend (options.prefix_cache_tokens); hashable
    evicted_ratio: float = 0.5
    health_check_s: float = 5.0
    balance: Balance = field(default_factory=Balance)


class PoolRouter:
    """The approximate prefix router of one route's backends."""

    def __init__(self, names: Iterable[str], options: PoolOptions, metrics: Any = None) -> None:
        self.options = options
        self.tokens_per_char = TOKENS_PER_CHAR
        self.mean_request = RequestMean()
        self.recent = RecentLoad()
        self.branches = Branches()
        self.metrics = metrics
        self.members = {n: Member(n, View(self._capacity_blocks(n))) for n in names}

    def _capacity_blocks(self, name: str) -> int:
        tokens = dict(self.options.capacity_tokens).get(name, self.options.cache_tokens)
        return max(MIN_CAPACITY_BLOCKS, int(tokens / (self.options.block_chars * self.tokens_per_char)))

    # --- choice -----------------------------------------------------------------------------------------

    def choose(self, endpoint: Endpoint, body: dict, inflight: dict[str, int]) -> tuple[list[str], RouteTicket | None]:
        """The backends in the order to try (healthy ones by the choice, unhealthy last), and the ticket."""
        text = render(endpoint, body)
        hashes = chain_hashes(text, self.options.block_chars)
        total = len(hashes) + 1  # + the partial tail block, always prefilled
        shared = self.branches.shared_depth(hashes)
        candidates = []
        for m in self.members.values():
            if m.healthy:
                cached = m.view.match(hashes)
                candidates.append(Candidate(m.name, inflight.get(m.name, 0), self.recent.get(m.name), cached,
                                            total - cached, max(shared - cached, 0), len(m.view.blocks)))
        unhealthy = [m.name for m in self.members.values() if not m.healthy]
        if not candidates:
            return unhealthy, None
        chosen: Pick = pick(candidates, self.options.balance, self.mean_request.value, shared)
        rest = sorted((c for c in candidates if c.name != chosen.name), key=lambda c: (c.to_prefill, c.inflight))
        order = [chosen.name] + [c.name for c in rest] + unhealthy
        view = self.members[chosen.name].view
        last_uses = [view.blocks[h] for h in hashes[: chosen.cached_blocks]]
        self.mean_request.add(total)
        self.recent.add(chosen.name, len(candidates))
        self.branches.observe(hashes)
        view.touch(hashes)
        if self.metrics is not None:
            self.metrics.decision(chosen.name, chosen.reason)
        return order, RouteTicket(chosen.name, hashes, len(text), chosen.cached_blocks, last_uses)

    # --- what the answer says ---------------------------------------------------------------------------

    def answered(self, ticket: RouteTicket, backend: str, usage: object) -> None:
        """Learn from the answer's usage; `backend` is the one that answered (a retry may have moved it)."""
        member = self.members.get(backend)
        if member is None:
            return
        if backend != ticket.backend:
            member.view.touch(ticket.hashes)  # it has the prompt now; nothing was predicted there
            return
        if not isinstance(usage, dict):
            return
        prompt_tokens = usage.get("prompt_tokens")
        if isinstance(prompt_tokens, int) and prompt_tokens > 0 and ticket.chars > 0:
            self.tokens_per_char += TPC_DECAY * (prompt_tokens / ticket.chars - self.tokens_per_char)
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if not isinstance(cached, int) or isinstance(cached, bool):
            return  # this server does not say: the view stays a prediction
        block_tokens = self.options.block_chars * self.tokens_per_char
        predicted = ticket.predicted_blocks * block_tokens
        if isinstance(prompt_tokens, int):
            predicted = min(predicted, max(prompt_tokens - 1, 0))
        if self.metrics is not None:
            self.metrics.cached_tokens(backend, predicted, cached)
        if cached < self.options.evicted_ratio * predicted:
            kept = min(int(cached / block_tokens), ticket.predicted_blocks - 1)
            log.debug("backend %s had %d cached tokens where %d were predicted: evicted", backend, cached,
                      int(predicted))
            member.view.evicted_before(ticket.last_uses[kept])
        elif ticket.predicted_blocks:
            member.view.confirmed(ticket.predicted_blocks)

    # --- health -----------------------------------------------------------------------------------------

    def set_healthy(self, name: str, healthy: bool) -> None:
        member = self.members.get(name)
        if member is None or member.healthy == healthy:
            return
        log.info("backend %s is %s for prefix routing", name, "back" if healthy else "down")
        member.healthy = healthy
        member.view.clear()  # down: whatever it cached is gone or stale; back: it may have restarted empty


class HealthWatch:
    """Polls each backend's readiness while a prefix-aware route uses it; the verdict goes to `on_result`."""

    def __init__(self, interval_s: float, check: Callable[[str], Any], on_result: Callable[[str, bool], None]):
        self.interval_s = interval_s
        self._check = check
        self._on_result = on_result
        self._tasks: dict[str, asyncio.Task] = {}

    def watch(self, names: Iterable[str]) -> None:
        wanted = set(names)
        for name in list(self._tasks):
            if name not in wanted:
                self._tasks.pop(name).cancel()
        for name in wanted - set(self._tasks):
            self._tasks[name] = asyncio.create_task(self._poll(name), name=f"prefix health {name}")

    async def _poll(self, name: str) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                problem = await asyncio.wait_for(self._check(name), max(self.interval_s, 1.0))
            except (KeyError, TimeoutError):
                problem = "no answer"
            except Exception as e:  # a check that raises is a failed check, never a dead watcher
                problem = f"{type(e).__name__}: {e}"
            self._on_result(name, problem is None)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


class PrefixMetrics:
    """Routed by prefix vs by load, and predicted vs reported cached tokens, per backend of a prefix route."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter

        self.decisions = Counter("gateway_routing_decisions", "Prefix-aware choices by what decided them "
                                 "(prefix: the longest cached prefix won; load: queue cost or imbalance)",
                                 ["backend", "reason"], registry=registry)
        self.tokens = Counter("gateway_routing_cached_tokens", "Cached prompt tokens per backend: predicted by "
                              "the router's view vs reported in the answer's usage", ["backend", "kind"],
                              registry=registry)

    def prepare(self, names: Iterable[str]) -> None:
        """Every label set exists (at 0) before its first event."""
        for name in names:
            for reason in ("prefix", "load"):
                self.decisions.labels(name, reason)
            for kind in ("predicted", "reported"):
                self.tokens.labels(name, kind)

    def decision(self, name: str, reason: str) -> None:
        self.decisions.labels(name, reason).inc()

    def cached_tokens(self, name: str, predicted: float, reported: int) -> None:
        self.tokens.labels(name, "predicted").inc(predicted)
        self.tokens.labels(name, "reported").inc(reported)
