"""The one choice rule both prefix routers use (engine replicas from KV events, OpenAI-compatible pools from
the router's own approximate view): weigh what a cached prefix saves against what waiting costs.

- Imbalance override (SGLang): when the in-flight counts drift apart (max - min > balance_abs and
  max > balance_rel * min) the least-loaded candidate wins, whatever it caches.
- Otherwise the lowest cost wins:
      cost = overlap_weight * (private blocks to prefill + shared_weight * shared blocks to prefill)
             + load_weight * mean_request_blocks * (recent + inflight / 2)
  Prefill time grows with the blocks left to prefill, so that term is what a cached prefix saves. A request
  routed to a replica waits, roughly, for the work of those already queued there; `mean_request_blocks` (a
  moving average of the routed requests' sizes in blocks) prices one queued request in the same unit, so the
  rule holds for short and long prompts alike. (Pricing it by the mean *prefilled* blocks instead undervalues
  waiting exactly when routing works: hits make prefills small, and a hot prefix then drew every request
  while a replica stood idle.) `recent` counts the decisions that went to the candidate lately (see
  RecentLoad); shared blocks are those of a prefix conversations branch from (see Branches), discounted only
  while no candidate holds the request past them (a new conversation; an old one moving re-prefills it all). The earlier rule
  (Dynamo's `+ active_blocks`, every block a request *holds* counted as load) gave a long cached prefix away as soon as another replica had one request fewer, because a request in
  flight with a cached 30-block history weighed as much as 30 blocks of prefill saved.
- Ties go to fewer requests in flight, then to the candidate caching less (so cold prefixes spread over the
  pool instead of piling up), then to the name.
"""

from __future__ import annotations

from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass

# The strategy of the route a request is on (set by the Router before it calls a backend): an engine backend
# routes across its own replicas by it, so `weighted` / `least_loaded` / `prefix_aware` mean the same on an
# engine pool as on a pool of backends. Calls made outside any route (an engine backend used directly, a
# summariser) keep prefix-aware replica routing.
ROUTE_STRATEGY: ContextVar[str] = ContextVar("route_strategy", default="prefix_aware")

DEFAULT_LOAD_WEIGHT = 0.35  # measured with bench/routing.py (0.25 starved a replica, 0.5 moved histories)
MEAN_DECAY = 0.05  # weight of each new request in the moving average of prefilled blocks
RECENT_WINDOW = 8  # decisions per candidate the recent load remembers
# in-flight counts are the noisy half of the load signal (they move a conversation off its history for a
# momentary queue); recent decisions carry the lasting skew
INFLIGHT_SHARE = 0.5  # weight of in-flight counts beside the recent decisions in a candidate's load
DEFAULT_SHARED_WEIGHT = 0.25
BRANCH_MEMORY = 200_000  # parent blocks whose children are remembered


@dataclass(slots=True)
class Candidate:
    name: str
    inflight: int
    recent: float  # requests routed here lately (decayed): load that in-flight counts alone miss
    cached_blocks: int  # leading blocks of the request this candidate holds
    to_prefill: int  # blocks of the request left to compute there
    shared_missing: int  # of those, blocks of a shared prefix (one others branch from): cheap to replicate
    occupancy: int  # blocks this candidate caches in all (the tie-break towards emptier caches)


@dataclass(frozen=True, slots=True)
class Balance:
    overlap_weight: float = 1.0
    load_weight: float = DEFAULT_LOAD_WEIGHT
    balance_abs: int = 64
    balance_rel: float = 1.5
    shared_weight: float = DEFAULT_SHARED_WEIGHT


@dataclass(frozen=True, slots=True)
class Pick:
    name: str
    cached_blocks: int
    cost: float
    reason: str  # "prefix" (the candidate with the longest cached prefix won on cost), "load" otherwise
    override: bool  # the imbalance override decided


class RecentLoad:
    """Requests routed to each candidate lately, decayed per decision over a window of RECENT_WINDOW per candidate.

    In-flight counts alone are a noisy load signal when requests are short (most of the time every replica
    has zero or one in flight), and under it a hot prefix kept drawing every new conversation while a replica
    stood idle; the recent share of decisions shows the skew that sticky prefixes build up."""

    def __init__(self, window: int = RECENT_WINDOW) -> None:
        self.window = window
        self.counts: dict[str, float] = {}

    def get(self, name: str) -> float:
        # scaled so each candidate's fair share reads as one request in flight
        return self.counts.get(name, 0.0) / self.window

    def add(self, name: str, members: int) -> None:
        keep = 1.0 - 1.0 / max(self.window * members, 2)
        for key in self.counts:
            self.counts[key] *= keep
        self.counts[name] = self.counts.get(name, 0.0) + 1.0

    def forget(self, name: str) -> None:
        self.counts.pop(name, None)


class Branches:
    """Where conversations branch: for each block, whether two different blocks have followed it.

    A prefix that others branch from (a system prompt many conversations share) is worth copying to another
    replica: its prefill is paid once there and then serves every later conversation routed there. A private
    history (each block followed by one block only, the conversation's next turn) is not. So the blocks a
    candidate lacks within the shared prefix are priced at `shared_weight`, the rest in full: new
    conversations spread over the pool while old ones stay with their history."""

    def __init__(self, limit: int = BRANCH_MEMORY) -> None:
        self.limit = limit
        self.children: OrderedDict[int, object] = OrderedDict()  # parent -> its one child seen so far, or BRANCHED

    def observe(self, hashes: list[int]) -> None:
        children = self.children
        for parent, child in zip(hashes, hashes[1:], strict=False):
            seen = children.get(parent)
            if seen is None:
                children[parent] = child
                if len(children) > self.limit:
                    children.popitem(last=False)
            elif seen != child and seen is not BRANCHED:
                children[parent] = BRANCHED

    def shared_depth(self, hashes: list[int]) -> int:
        """Leading blocks up to the last one conversations branch from, this request counted (0 when none):
        a block another request continued differently is a branch point from the second conversation on."""
        depth = 0
        children = self.children
        for i, h in enumerate(hashes[:-1]):
            seen = children.get(h)
            if seen is None:
                break
            if seen is BRANCHED or seen != hashes[i + 1]:
                depth = i + 1
        return depth


BRANCHED = object()


class RequestMean:
    """Moving average of routed requests' sizes in blocks: the unit that prices one queued request."""

    def __init__(self, initial: float = 8.0) -> None:
        self.value = initial

    def add(self, blocks: int) -> None:
        self.value += MEAN_DECAY * (max(blocks, 1) - self.value)


def imbalanced(loads: list[int], rules: Balance) -> bool:
    lo, hi = min(loads), max(loads)
    return hi - lo > rules.balance_abs and hi > rules.balance_rel * lo


def pick(candidates: list[Candidate], rules: Balance, mean_request: float, shared_depth: int = 0) -> Pick:
    """`shared_depth`: the request's leading blocks that conversations branch from (Branches.shared_depth)."""
    if not candidates:
        raise LookupError("no healthy candidate")
    longest = max(c.cached_blocks for c in candidates)
    if imbalanced([c.inflight for c in candidates], rules):
        best = min(candidates, key=lambda c: (c.inflight, c.occupancy, c.name))
        return Pick(best.name, best.cached_blocks, 0.0, "load", True)
    per_request = rules.load_weight * max(mean_request, 1.0)
    # The shared prefix is cheap to copy only for a new conversation. Once a replica holds the request's own
    # history (cached past the shared prefix), going elsewhere prefills the whole prefix again, system prompt
    # included, for this request: measured on engine replicas, the discount moved 17-block histories (15 of
    # them a system prompt) off a replica with two requests in flight, each move a full re-prefill.
    discount = 0.0 if longest > shared_depth else 1.0 - rules.shared_weight
    scored = [(rules.overlap_weight * (c.to_prefill - discount * c.shared_missing) + per_request * (INFLIGHT_SHARE * c.inflight + c.recent),
               c.inflight, c.occupancy, c.name, c) for c in candidates]
    cost, _, _, _, best = min(scored)
    reason = "prefix" if longest > 0 and best.cached_blocks == longest else "load"
    return Pick(best.name, best.cached_blocks, cost, reason, False)
