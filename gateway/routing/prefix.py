"""Prefix-aware routing across engine replicas.

Each replica's cached blocks are mirrored from its `/kv_events` stream (a snapshot, then stored/removed
events carrying the engine's own chained block hashes), plus an optimistic entry for blocks a request was
just routed with, which expires unless the engine confirms it. A request's block hashes are computed with
the engine's hash function, so router and engine agree exactly.

Choice (SGLang's imbalance override, then Dynamo's cost in blocks):
- if the in-flight request counts are imbalanced (max - min > balance_abs and max > balance_rel * min),
  the least-loaded replica wins;
- otherwise the lowest `overlap_weight * blocks_to_prefill + active_blocks` wins, where blocks_to_prefill
  counts the request's blocks past the replica's longest cached prefix and active_blocks is this router's
  count of the blocks held by requests it has in flight there. Ties go to fewer requests in flight, then
  to the replica caching fewer blocks, so cold prefixes spread over the pool instead of piling up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

OPTIMISTIC_TTL_S = 10.0


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
    reason: str  # "prefix" (cost) or "imbalance" (least-loaded override)


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self.overlap_weight = overlap_weight
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self._clock = clock
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

    def choose(self, block_hashes: list[int], num_tokens: int) -> Decision:
        candidates = [s for s in self.replicas.values() if s.healthy]
        if not candidates:
            raise LookupError("no healthy engine replica")
        loads = [s.inflight for s in candidates]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.balance_abs and hi > self.balance_rel * lo:
            best = min(candidates, key=lambda s: (s.inflight, s.active_blocks, s.name))
            return Decision(best.name, self.cached_blocks(best.name, block_hashes), 0.0, "imbalance")
        scored = []
        for state in candidates:
            cached = self.cached_blocks(state.name, block_hashes)
            # a hit never covers the last prompt token, so at least one token is always prefilled
            cached_tokens = min(cached * self.block_size, max(num_tokens - 1, 0))
            to_prefill = -(-(num_tokens - cached_tokens) // self.block_size)
            cost = self.overlap_weight * to_prefill + state.active_blocks
            # ties (e.g. a cold prefix on idle replicas) go to the emptier cache, spreading prefixes out
            occupancy = len(state.confirmed) + len(state.predicted)
            scored.append((cost, state.inflight, occupancy, state.name, cached))
        cost, _, _, name, cached = min(scored)
        return Decision(name, cached, cost, "prefix")

    # --- in-flight bookkeeping ------------------------------------------------------------------------

    def start(self, decision: Decision, block_hashes: list[int], num_tokens: int) -> Ticket:
        """Count the request against its replica and predict that its full blocks will be cached there."""
        state = self.replicas[decision.replica]
        blocks = -(-num_tokens // self.block_size)
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
