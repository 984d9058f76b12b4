"""Prefix-aware routing across engine replicas.

Each replica's cached blocks are mirrored from its `/kv_events` stream (a snapshot, then stored/removed
events carrying the engine's own chained block hashes), plus an optimistic entry for blocks a request was
just routed with, which expires unless the engine confirms it. A request's block hashes are computed with
the engine's hash function, so router and engine agree exactly.

The route's strategy decides (ROUTE_STRATEGY, set by the Router; prefix_aware outside any route):
`prefix_aware` is `gateway.routing.choice.pick`, the rule the OpenAI-compatible pools use too (SGLang's
imbalance override, then blocks left to prefill against queued and recently routed requests priced in mean
request blocks); `weighted` spreads uniformly, `least_loaded` takes the fewest in flight. Each decision is
logged at DEBUG on this module's logger (the choice log: every candidate's cached prefix, blocks to prefill,
in-flight and recent load), which `bench/routing.py --choice-log FILE` writes out.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.routing.choice import (
    DEFAULT_LOAD_WEIGHT,
    DEFAULT_SHARED_WEIGHT,
    ROUTE_STRATEGY,
    Balance,
    Branches,
    Candidate,
    RecentLoad,
    RequestMean,
    pick,
)

OPTIMISTIC_TTL_S = 10.0

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplicaState:
    name: str
    confirmed: set[int] = field(default_factory=set)  # hashes the engine said it holds
    predicted: dict[int, float] = field(default_factory=dict)  # hash -> expiry (monotonic seconds)
    inflight: int = 0
    active_blocks: int = 0
    healthy: bool = True

    def holds(self, block_hash: int, now: float) -> bool:
        if block_hash in self.confirmed:
            return True
        expiry = self.predicted.get(block_hash)
        if expiry is None:
            return False
        if expiry < now:
            del self.predicted[block_hash]
            return False
        return True


@dataclass(frozen=True, slots=True)
class Decision:
    replica: str
    cached_blocks: int  # the chosen replica's cached prefix, in blocks
    cost: float
    reason: str  # "prefix" (the longest cached prefix won), "load" (cost or the imbalance override chose another)
    override: bool = False  # the imbalance override decided


@dataclass(slots=True)
class Ticket:
    """One routed request; give it back with `PrefixRouter.finish` when the request ends."""

    replica: str
    blocks: int
    done: bool = False


class PrefixRouter:
    def __init__(
        self,
        block_size: int,
        overlap_weight: float = 1.0,
        balance_abs: int = 64,
        balance_rel: float = 1.5,
        load_weight: float = DEFAULT_LOAD_WEIGHT,
        shared_weight: float = DEFAULT_SHARED_WEIGHT,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self.rules = Balance(overlap_weight, load_weight, balance_abs, balance_rel, shared_weight)
        self.mean_request = RequestMean()
        self.recent = RecentLoad()
        self.branches = Branches()
        self._clock = clock
        self._rng = rng or random.Random()
        self.replicas: dict[str, ReplicaState] = {}

    # --- replica membership and KV mirror -------------------------------------------------------------

    def add_replica(self, name: str) -> None:
        self.replicas.setdefault(name, ReplicaState(name))

    def set_healthy(self, name: str, healthy: bool) -> None:
        """Take a replica out of (or back into) the choice; its mirror stays until a snapshot replaces it."""
        self.replicas[name].healthy = healthy

    def apply_snapshot(self, name: str, block_hashes: list[int]) -> None:
        state = self.replicas[name]
        state.confirmed = set(block_hashes)
        state.predicted.clear()

    def apply_stored(self, name: str, block_hashes: list[int]) -> None:
        state = self.replicas[name]
        state.confirmed.update(block_hashes)
        for h in block_hashes:
            state.predicted.pop(h, None)

    def apply_removed(self, name: str, block_hashes: list[int]) -> None:
        state = self.replicas[name]
        state.confirmed.difference_update(block_hashes)
        for h in block_hashes:
            state.predicted.pop(h, None)

    def apply_event(self, name: str, event: dict) -> None:
        """One `/kv_events` record: {"type": "snapshot"|"stored"|"removed", "block_hashes": [...]}."""
        kind = event.get("type")
        hashes = [int(h) for h in event.get("block_hashes", ())]
        if kind == "snapshot":
            self.apply_snapshot(name, hashes)
        elif kind == "stored":
            self.apply_stored(name, hashes)
        elif kind == "removed":
            self.apply_removed(name, hashes)

    # --- choice ---------------------------------------------------------------------------------------

    def cached_blocks(self, name: str, block_hashes: list[int]) -> int:
        """How many leading blocks of the request `name` holds."""
        state = self.replicas[name]
        now = self._clock()
        count = 0
        for h in block_hashes:
            if not state.holds(h, now):
                break
            count += 1
        return count

    def choose(self, block_hashes: list[int], num_tokens: int, strategy: str | None = None) -> Decision:
        """The replica for a request, by `strategy` (default: the strategy of the route the request is on):
        `prefix_aware` by the choice rule, `weighted` uniformly at random (replicas weigh the same),
        `least_loaded` by fewest requests in flight."""
        strategy = strategy or ROUTE_STRATEGY.get()
        if strategy != "prefix_aware":
            return self._by_load(block_hashes, strategy)
        candidates = []
        shared = self.branches.shared_depth(block_hashes)
        for state in self.replicas.values():
            if not state.healthy:
                continue
            cached = self.cached_blocks(state.name, block_hashes)
            # a hit never covers the last prompt token, so at least one token is always prefilled
            cached_tokens = min(cached * self.block_size, max(num_tokens - 1, 0))
            to_prefill = -(-(num_tokens - cached_tokens) // self.block_size)
            occupancy = len(state.confirmed) + len(state.predicted)
            candidates.append(Candidate(state.name, state.inflight, self.recent.get(state.name), cached, to_prefill,
                                        max(shared - cached, 0), occupancy))
        if not candidates:
            raise LookupError("no healthy engine replica")
        chosen = pick(candidates, self.rules, self.mean_request.value, shared)
        if log.isEnabledFor(logging.DEBUG):  # the choice log: why each request went where
            log.debug("route %d tokens shared=%d mean=%.1f -> %s (%s%s) | %s", num_tokens, shared,
                      self.mean_request.value, chosen.name, chosen.reason, ", override" if chosen.override else "",
                      "; ".join(f"{c.name}: inflight={c.inflight} recent={c.recent:.2f} cached={c.cached_blocks} "
                                f"prefill={c.to_prefill} shared_missing={c.shared_missing}" for c in candidates))
        return Decision(chosen.name, chosen.cached_blocks, chosen.cost, chosen.reason, chosen.override)

    def _by_load(self, block_hashes: list[int], strategy: str) -> Decision:
        healthy = [s for s in self.replicas.values() if s.healthy]
        if not healthy:
            raise LookupError("no healthy engine replica")
        if strategy == "least_loaded":
            chosen = min(healthy, key=lambda s: (s.inflight, self._rng.random()))
        else:
            chosen = self._rng.choice(healthy)
        return Decision(chosen.name, self.cached_blocks(chosen.name, block_hashes), 0.0, "load")

    # --- in-flight bookkeeping ------------------------------------------------------------------------

    def start(self, decision: Decision, block_hashes: list[int], num_tokens: int) -> Ticket:
        """Count the request against its replica and predict that its full blocks will be cached there."""
        state = self.replicas[decision.replica]
        blocks = -(-num_tokens // self.block_size)
        self.mean_request.add(blocks)
        self.recent.add(decision.replica, sum(1 for s in self.replicas.values() if s.healthy))
        self.branches.observe(block_hashes)
        state.inflight += 1
        state.active_blocks += blocks
        expiry = self._clock() + OPTIMISTIC_TTL_S
        for h in block_hashes:
            if h not in state.confirmed:
                state.predicted[h] = expiry
        return Ticket(decision.replica, blocks)

    def finish(self, ticket: Ticket) -> None:
        if ticket.done:
            return
        ticket.done = True
        state = self.replicas.get(ticket.replica)
        if state is not None:
            state.inflight -= 1
            state.active_blocks -= ticket.blocks
