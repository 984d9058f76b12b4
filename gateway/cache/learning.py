"""The semantic cache learns from its own traffic, under an error budget per route.

Every request that goes upstream while a look-alike entry was at hand is a labelled example for free: the
fresh answer is compared with the cached one (agreement.py). Those are the near misses (a candidate turned
down or just below the threshold) and the would-be hits held back because the route is over its budget. On
top of them a share of would-be hits is sent upstream on purpose (exploration): a floor always, more while
the route's estimate is close to its budget, at most a cap.

What is learned:
- per entry, in the entry's own Redis hash (so it is shared by every process and expires with the entry):
  `hi`, the highest similarity at which a question was found to need another answer, and `lo`, the lowest at
  which one was found to share it. A candidate at or below `hi` is never served again (the look-alike found
  wrong, and anything further away); one verified at or above `lo` is explored at the floor only, and served
  even below the threshold, while its band is within the budget;
- per route and similarity band, in one Redis hash: would-be hits (and verified look-alikes just below the
  threshold, counted in the lowest band) observed right or wrong. The band's wrong
  rate has a weak Beta prior at half the budget, and a would-be hit is served only while the band's estimate
  plus one standard deviation stays within `max_wrong`; otherwise the request goes upstream and is compared.
  So a new route serves near repeats only until some 30 checked answers open a band.

The answer check errs both ways; the route's estimate corrects the observed disagreement rate for the check's
error rates measured on labelled answers (FALSE_DISAGREE, FALSE_AGREE), so it estimates wrong answers served,
not disagreements.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.redis_guard import RedisGuard

BANDS = (0.85, 0.90, 0.95)  # band edges: [.., 0.85), [0.85, 0.90), [0.90, 0.95), [0.95, 1]
PRIOR_WEIGHT = 100.0  # pseudo-observations behind the prior: its bound is over the budget until answers are checked
NEAR_REPEAT = 0.98  # the same question reworded by case, spacing or a typo: nothing to learn, never explored
FALSE_DISAGREE = 0.05  # answers to one question the check calls different (measured on labelled answers)
FALSE_AGREE = 0.23  # answers to look-alikes the check calls the same
SYNC_EVERY_S = 1.0
STATS_TTL_S = 7 * 24 * 3600
MIN_OBSERVED = 30  # a band with fewer answer checks than this is explored at the cap
EPS = 1e-6


def band_of(similarity: float) -> int:
    return sum(similarity >= edge for edge in BANDS)


@dataclass(slots=True)
class Evidence:
    """What an entry's own outcomes say: None where nothing was learned."""

    lo: float | None = None  # lowest similarity found to share the answer
    hi: float | None = None  # highest similarity found to need another

    @classmethod
    def parse(cls, lo: object, hi: object) -> Evidence:
        return cls(_float(lo), _float(hi))

    def verdict(self, similarity: float) -> str | None:
        """"wrong" (found wrong at this similarity or closer), "right" (found right this far or further), None."""
        if self.hi is not None and similarity <= self.hi + EPS:
            return "wrong"
        if self.lo is not None and similarity >= self.lo - EPS:
            return "right"
        return None


def _float(value: object) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.decode() if isinstance(value, bytes) else value)  # type: ignore[arg-type]
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    return number if math.isfinite(number) else None


@dataclass(slots=True)
class Counts:
    """A route's counts as kept in its Redis hash, one field each: `r<band>` / `w<band>` would-be hits checked
    right / wrong, `s<band>` hits served, `repeats` near repeats served, `explored`."""

    values: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, n: float = 1.0) -> None:
        self.values[name] = self.values.get(name, 0.0) + n

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)

    def merge(self, other: Counts) -> None:
        for name, n in other.values.items():
            self.add(name, n)

    @classmethod
    def parse(cls, raw: dict) -> Counts:
        return cls({(k.decode() if isinstance(k, bytes) else k): _float(v) or 0.0 for k, v in raw.items()})


def wrong_rate(right: float, wrong: float, max_wrong: float) -> tuple[float, float]:
    """(estimate, estimate + one standard deviation) of the wrong-answer rate of would-be hits from answer
    checks observed right/wrong, corrected for the check's own errors, with a Beta prior at half the budget."""
    n = right + wrong
    disagree = wrong / n if n else 0.0
    corrected = min(1.0, max(0.0, (disagree - FALSE_DISAGREE) / (1.0 - FALSE_DISAGREE - FALSE_AGREE)))
    prior = max_wrong / 2
    a = prior * PRIOR_WEIGHT + corrected * n
    b = (1 - prior) * PRIOR_WEIGHT + (1 - corrected) * n
    mean = a / (a + b)
    sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    return mean, mean + sd


@dataclass(slots=True)
class RouteLearning:
    local: Counts = field(default_factory=Counts)  # this process's increments not yet written to Redis
    shared: Counts = field(default_factory=Counts)  # the route's totals as last read from Redis
    synced_at: float = 0.0

    def total(self, name: str) -> float:
        return self.shared.get(name) + self.local.get(name)

    def observed(self, b: int) -> float:
        return self.total(f"r{b}") + self.total(f"w{b}")

    def band(self, b: int, max_wrong: float) -> tuple[float, float]:
        return wrong_rate(self.total(f"r{b}"), self.total(f"w{b}"), max_wrong)

    def estimate(self, max_wrong: float) -> tuple[float, float]:
        """The route's wrong rate among served hits: each band's estimate weighted by what it served."""
        weights = [self.total(f"s{b}") for b in range(len(BANDS) + 1)]
        total = sum(weights) + self.total("repeats")  # near repeats: none wrong
        if not total:
            return wrong_rate(0, 0, max_wrong)
        bands = [self.band(b, max_wrong) for b in range(len(BANDS) + 1)]
        return (sum(w * e for w, (e, _) in zip(weights, bands, strict=True)) / total,
                sum(w * u for w, (_, u) in zip(weights, bands, strict=True)) / total)


def decide(route: RouteLearning, similarity: float, evidence: Evidence, max_wrong: float, floor: float,
           cap: float, rng: random.Random) -> str:
    """"serve", "explore" (a would-be hit sent upstream to learn) or "hold" (over the budget: upstream)."""
    if similarity >= NEAR_REPEAT:
        return "serve"
    band = band_of(similarity)
    _, bound = route.band(band, max_wrong)
    if bound > max_wrong:
        return "hold"
    if evidence.verdict(similarity) == "right":
        return "explore" if rng.random() < floor else "serve"
    # At the cap while the band has little evidence, then from the floor at 0.9 of the budget up to the cap at
    # the budget: evidence is bought where the margin is thin.
    thin = route.observed(band) < MIN_OBSERVED
    share = 1.0 if thin else min(1.0, max(0.0, (bound - 0.9 * max_wrong) / (0.1 * max_wrong)))
    return "explore" if rng.random() < floor + (cap - floor) * share else "serve"


@dataclass(slots=True)
class Probe:
    """A cached answer to compare with the fresh one once the request has gone upstream."""

    ns: str
    entry_id: str
    similarity: float
    kind: str  # explore | hold (would-be hits) | near (turned down or below the threshold)
    verified: bool  # the verifier accepted the pair: only then may a right outcome lower the entry's bar
    completion: dict | None  # the cached answer, when the lookup already read it


_KEEP = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local new = tonumber(ARGV[2])
if cur == nil or (ARGV[3] == 'min' and new < cur) or (ARGV[3] == 'max' and new > cur) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
"""


class Learner:
    """Per-route counts (local increments, shared totals in Redis) and per-entry evidence writes."""

    def __init__(self, redis: aioredis.Redis, guard: RedisGuard, seed: int | None = None) -> None:
        self._redis = redis
        self._guard = guard
        self.routes: dict[str, RouteLearning] = {}
        self.rng = random.Random(seed)
        self._keep = redis.register_script(_KEEP)

    def route(self, name: str) -> RouteLearning:
        route = self.routes.get(name)
        if route is None:
            route = self.routes[name] = RouteLearning()
        return route

    def sync_due(self, name: str) -> bool:
        """Whether the route's counts are due to be shared (at most every SYNC_EVERY_S); marks them begun."""
        route = self.route(name)
        now = time.monotonic()
        if now - route.synced_at < SYNC_EVERY_S:
            return False
        route.synced_at = now
        return True

    def served(self, name: str, similarity: float) -> None:
        self.route(name).local.add("repeats" if similarity >= NEAR_REPEAT else f"s{band_of(similarity)}")

    def explored(self, name: str) -> None:
        self.route(name).local.add("explored")

    async def record(self, name: str, probe: Probe, agree: bool, key: str) -> None:
        """One outcome: the entry's evidence in its own hash, the route's band counts for would-be hits."""
        if agree and probe.verified:
            await self._guard.call(lambda: self._keep(keys=[key], args=["lo", f"{probe.similarity:.6f}", "min"]),
                                   key=key)
        elif not agree:
            await self._guard.call(lambda: self._keep(keys=[key], args=["hi", f"{probe.similarity:.6f}", "max"]),
                                   key=key)
        if probe.verified:  # would-be hits, and verified look-alikes below the threshold (pessimistic for band 0)
            self.route(name).local.add(f"{'r' if agree else 'w'}{band_of(probe.similarity)}")

    async def sync(self, name: str, stats_key: str) -> None:
        """Add this process's increments to the route's totals in Redis and read the totals back. Increments
        are atomic, so syncs that overlap (Redis slower than SYNC_EVERY_S) each add their own share."""
        route = self.route(name)
        pending, route.local = route.local, Counts()

        async def write() -> list:
            pipe = self._redis.pipeline(transaction=True)
            for field_name, n in pending.values.items():
                pipe.hincrbyfloat(stats_key, field_name, n)
            pipe.expire(stats_key, STATS_TTL_S)
            pipe.hgetall(stats_key)
            return await pipe.execute()

        try:
            replies = await self._guard.call(write, key=stats_key)
        except Exception:  # Redis away: the increments wait for the next sync
            route.local.merge(pending)
            raise
        route.shared = Counts.parse(replies[-1])

    def stats(self, max_wrong: dict[str, float]) -> dict[str, dict]:
        out = {}
        for name, route in sorted(self.routes.items()):
            budget = max_wrong.get(name)
            if budget is None:
                continue
            estimate, bound = route.estimate(budget)
            bands = range(len(BANDS) + 1)
            wrong = sum(route.total(f"w{b}") for b in bands)
            out[name] = {
                "max_wrong": budget,
                "explored": int(route.total("explored")),
                "served": int(sum(route.total(f"s{b}") for b in bands) + route.total("repeats")),
                "observed": int(sum(route.observed(b) for b in bands)),
                "disagreed": int(wrong),
                "wrong_estimate": round(estimate, 5),
                "wrong_bound": round(bound, 5),
                "bands": [{"from": ([0.0, *BANDS])[b], "served": int(route.total(f"s{b}")),
                           "right": int(route.total(f"r{b}")), "wrong": int(route.total(f"w{b}")),
                           "bound": round(route.band(b, budget)[1], 5)} for b in bands],
            }
        return out
