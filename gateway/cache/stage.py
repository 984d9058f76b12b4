"""The cache stage: L1 exact then L2 semantic before the backend, stores after a complete success.

Hits are answered with the stored completion unchanged except `id` (`chatcmpl-<request id>`, so every answer has
its own id) and `created` (now). `usage` stays what the original call cost, which is also what the hit saved.

Every Redis call on the request path goes through a RedisGuard; when Redis is slow or down, or the embedding
model is not loaded, lookups are misses and stores are skipped: the request is always answered by the backend.

The embedding model loads at start-up when any route uses L2, and `/ready` stays 503 until it is loaded, the
shared entries are indexed and the answers that arrived meanwhile are stored. An exact hit whose semantic entry is
missing writes it back from the exact entry (backfill). A last message that does not fit the embedding window is
exact-only (window.py); every semantic lookup has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge, Histogram
from redis.exceptions import RedisClusterException, RedisError

from gateway.cache import keyspace as ks
from gateway.cache.agreement import by_facts, by_meaning, fact_text
from gateway.cache.embedder import DIM, shared_embedder
from gateway.cache.exact import ExactCache, Stored, parse_namespace_member, replayable, storable
from gateway.cache.judge import Judge, JudgeMetrics, VerdictCache
from gateway.cache.keys import SemanticQuery, exact_key, is_deterministic, namespace_id, semantic_query
from gateway.cache.learning import Learner, Probe, decide
from gateway.cache.semantic import Outcome, SemanticCache, entry_id
from gateway.cache.verifier import REASONS as VERIFIER_REASONS
from gateway.cache.window import MAX_CHARS, last_message_chars
from gateway.cache.worker import SemanticWorker
from gateway.errors import GatewayError, bad_request
from gateway.pipeline import CHAT, COMPLETIONS
from gateway.redis_client import scan_masters
from gateway.redis_guard import RedisGuard, RedisUnavailable
from gateway.usage.ledger import explore as explore_cost

if TYPE_CHECKING:
    from gateway.cache.config import CacheConfig, JudgeConfig, StoreMode
    from gateway.config.schema import Policy
    from gateway.pipeline import RequestContext, Resources

log = logging.getLogger("gateway.cache")
CACHEABLE_ENDPOINTS = frozenset({CHAT, COMPLETIONS})
THRESHOLD_HEADER = "X-Cache-Threshold"  # a request may raise the route's semantic threshold, never lower it
SLOW_PATH_FACTOR = 10  # stores and semantic reads: off the path of exact hits, more room than exact lookups
LOOKUP_RESULTS = {
    "exact": ("hit", "miss", "stale", "bypass", "error"),
    "semantic": ("hit", "miss", "stale", "rejected", "bypass", "error", "unavailable", "timeout", "overflow",
                 "explored", "held"),
}
STORE_RESULTS = {
    "exact": ("stored", "error"),
    "semantic": ("stored", "backfilled", "overflow", "expired", "error", "unavailable", "dropped"),
    "any": ("not_storable",),
}
MAX_BACKLOG = 1024  # answers waiting for the model to load before they are stored; more are dropped (counted)
MODEL_WAIT_S = 300.0  # how long such an answer waits at most
MAX_UNEMBEDDABLE = 10_000  # entry ids known not to fit the window, so their exact hits do not retry a backfill


class CacheLookup:
    """What a lookup learned that the store after the response reuses (keys, the query's embedding)."""

    __slots__ = ("config", "ns", "digest", "query", "vector", "overflow", "probe")

    def __init__(self, config: CacheConfig, ns: str, digest: str | None, query: SemanticQuery | None,
                 overflow: bool) -> None:
        self.config = config
        self.ns = ns
        self.digest = digest
        self.query = query
        self.vector: Any = None
        self.overflow = overflow  # the last message does not fit the embedding window: exact-only
        self.probe: Probe | None = None  # a cached look-alike to compare with the fresh answer (learning)


class CacheStage:
    endpoints = CACHEABLE_ENDPOINTS  # the handler runs this stage for these only (L2 only for chat: see before)

    def __init__(self, resources: Resources, worker: SemanticWorker | None = None) -> None:
        self.metrics = resources.metrics
        self._redis = resources.redis
        self._get_policy = resources.get_policy
        self._backends = resources.backends
        timeout_s = resources.get_policy().redis.timeout_ms / 1000
        self.lookup_guard = RedisGuard(self.metrics, "cache", timeout_s, redis=self._redis)  # per master
        self.store_guard = RedisGuard(self.metrics, "cache_store", timeout_s * SLOW_PATH_FACTOR, redis=self._redis)
        # A semantic lookup already spends milliseconds embedding; its Redis read gets the wider budget, and
        # its own breaker, so an overloaded event loop late on that read cannot switch off the exact layer.
        self.semantic_guard = RedisGuard(self.metrics, "cache_semantic", timeout_s * SLOW_PATH_FACTOR,
                                         redis=self._redis)
        self.exact = ExactCache(self._redis, self.lookup_guard, self.store_guard)
        self.worker = worker or SemanticWorker(shared_embedder, DIM)
        self.semantic = SemanticCache(self._redis, self.semantic_guard, self.store_guard, self.worker)
        self.counts: Counter[tuple[str, str]] = Counter()
        r = self.metrics.registry
        self._stores = PromCounter("gateway_cache_stores", "Cache stores", ["layer", "result"], registry=r)
        self._rejections = PromCounter(
            "gateway_cache_verifier_rejections", "Semantic candidates turned down by the verifier", ["reason"],
            registry=r,
        )
        for reason in VERIFIER_REASONS:  # every reason's series exists at 0 before its first rejection
            self._rejections.labels(reason)
        self._entries = Gauge("gateway_cache_semantic_entries", "Semantic entries indexed in this process",
                              registry=r)
        self._entries.set_function(lambda: len(self.worker.indexes))
        self._batch = Histogram("gateway_cache_embed_batch_size", "Texts per embedding call",
                                buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.worker.on_batch = self._batch.observe
        # Every label set exists at 0 before its first event; the children are resolved once here, since
        # `labels()` costs a lock and a dict build on every lookup of the hot path.
        self._lookup_counts = {(layer, result): self.metrics.cache_lookups.labels(layer, result)
                               for layer, results in LOOKUP_RESULTS.items() for result in results}
        self._lookup_seconds = {layer: self.metrics.cache_lookup_seconds.labels(layer) for layer in LOOKUP_RESULTS}
        self._saved_tokens = self.metrics.tokens.labels("saved_by_cache")
        for layer, results in STORE_RESULTS.items():
            for result in results:
                self._stores.labels(layer, result)
        self._judge_metrics = JudgeMetrics(r)
        self._verdicts = VerdictCache(self._redis, self.semantic_guard)
        self._judges: dict[tuple, Judge] = {}
        self.learner = Learner(self._redis, self.semantic_guard)
        self._learned = PromCounter("gateway_cache_semantic_learned", "Cached answers compared with a fresh one",
                                    ["route", "kind", "outcome"], registry=r)
        self._explored = PromCounter("gateway_cache_semantic_explored", "Would-be hits sent upstream to learn",
                                     ["route"], registry=r)
        self._held = PromCounter("gateway_cache_semantic_held", "Would-be hits sent upstream: over the budget",
                                 ["route"], registry=r)
        self._served = PromCounter("gateway_cache_semantic_served", "Semantic hits served within the budget",
                                   ["route"], registry=r)
        self._wrong_estimate = Gauge("gateway_cache_semantic_wrong_estimate",
                                     "Estimated share of semantic hits served wrong", ["route"], registry=r)
        self._wrong_bound = Gauge("gateway_cache_semantic_wrong_bound",
                                  "That estimate plus one standard deviation", ["route"], registry=r)
        self._backlog = 0  # answers waiting for the model (they hold /ready at 503 until stored)
        self._backfilling: set[str] = set()
        self._unembeddable: dict[str, None] = {}

    def start(self, policy_uses_semantic: bool) -> None:
        if policy_uses_semantic:
            self.semantic.start()
        self._label_routes()

    def _label_routes(self) -> None:
        """Every learning route's series exist (at 0, the gauges at the prior) before its first lookup."""
        for route, budget in _budgets(self._get_policy()).items():
            for counter in (self._explored, self._held, self._served):
                counter.labels(route)
            for kind in ("explore", "hold", "near"):
                for outcome in ("right", "wrong"):
                    self._learned.labels(route, kind, outcome)
            estimate, bound = self.learner.route(route).estimate(budget)
            self._wrong_estimate.labels(route).set(estimate)
            self._wrong_bound.labels(route).set(bound)

    def readiness(self) -> list[str]:
        """Why L2 cannot serve yet (empty when it can, or when no route uses it); /ready lists these."""
        if not uses_semantic(self._get_policy()):
            return []
        self.start(True)  # a reload that turned L2 on loads the model now, not at the first request (and labels)
        if self.worker.loading:
            return ["semantic cache model loading"]
        if not self.worker.ready:
            return [f"semantic cache model failed to load: {self.worker.load_error}"]
        if not self.semantic.synced.is_set():
            return ["semantic cache loading its entries from Redis"]
        if self._backlog:
            return [f"semantic cache storing {self._backlog} answers that arrived while the model loaded"]
        return []

    # ---- Stage protocol -----------------------------------------------------------------------------------

    async def before(self, ctx: RequestContext) -> dict | None:
        config: CacheConfig | None = ctx.route.cache
        if config is None or ctx.endpoint not in CACHEABLE_ENDPOINTS:
            ctx.response_headers["X-Cache"] = "BYPASS"
            return None
        threshold, floor = self._threshold(ctx, config)
        tenant = ctx.tenant.name
        ns = namespace_id(tenant, ctx.model)
        digest = (exact_key(tenant, ctx.route.index, ctx.route.model, config.version, ctx.endpoint, ctx.body)
                  if config.exact else None)
        query: SemanticQuery | None = None
        overflow = False
        if config.semantic and ctx.endpoint == CHAT:
            # Measured before normalising: a multi-megabyte message is never normalised, tokenized or embedded.
            overflow = last_message_chars(ctx.body) > MAX_CHARS
            if not overflow:
                query = semantic_query(tenant, ctx.route.index, ctx.route.model, config.version, ctx.body)
        lookup = ctx.cache_lookup = CacheLookup(config, ns, digest, query, overflow)
        if ctx.cache_control.no_cache:
            ctx.response_headers["X-Cache"] = "BYPASS"
            self._count("exact" if digest else "semantic", "bypass")
            return None
        ctx.response_headers["X-Cache"] = "MISS"
        max_age = ctx.cache_control.max_age
        if digest is not None:
            hit = await self._exact_lookup(ns, digest, max_age)
            if hit is not None:
                ctx.response_headers["X-Cache"] = "HIT-EXACT"
                if query is not None:
                    self._backfill(ctx, lookup, hit)
                return self._replay(ctx, hit.completion)
        if overflow:
            self._count("semantic", "overflow")
        elif query is not None and config.semantic is not None:
            self.semantic.start()
            hit_completion = await self._semantic_lookup(ctx, lookup, query, threshold, floor, max_age)
            if hit_completion is not None:
                return self._replay(ctx, hit_completion)
        return None

    async def after(self, ctx: RequestContext, completion: dict) -> None:
        lookup = ctx.cache_lookup
        if lookup is None:
            return
        learning = lookup.config.semantic
        if lookup.probe is not None and learning is not None and learning.max_wrong is not None \
                and storable(completion):  # learned under no-store too: a similarity is kept, never the answer
            self.semantic.spawn(self._learn(ctx.route.name, lookup.probe, completion))
        if ctx.cache_control.no_store:
            return
        try:
            if not storable(completion):
                self._stores.labels("any", "not_storable").inc()
                return
            config = lookup.config
            tenant = ctx.tenant.name
            if lookup.digest is not None and config.exact is not None and _allowed(config.exact.store, ctx):
                try:
                    await self.exact.put(tenant, ctx.model, lookup.ns, lookup.digest, completion, config.exact.ttl)
                    self._stores.labels("exact", "stored").inc()
                except RedisUnavailable:
                    self._stores.labels("exact", "error").inc()
            semantic = config.semantic
            if lookup.overflow and semantic is not None:
                self._stores.labels("semantic", "overflow").inc()
            elif lookup.query is not None and semantic is not None and _allowed(semantic.store, ctx):
                # Embedding takes milliseconds: store in the background so the response is not held up.
                self.semantic.spawn(self._semantic_store(tenant, ctx.model, lookup, completion))
        except Exception:  # after() must never fail a request that already succeeded
            log.exception("cache store failed")

    async def close(self) -> None:
        self.exact.close()
        await self.semantic.close()
        await self.worker.close()

    # ---- admin --------------------------------------------------------------------------------------------

    async def purge(self, tenant: str | None, model: str | None) -> int:
        """Delete the entries of a tenant, a model, both, or everything (both None). Returns entries deleted."""
        try:
            deleted = 0
            for member in await self._redis.smembers(ks.NAMESPACES):
                parsed = parse_namespace_member(member)
                if parsed is None:  # not a member the gateway writes: a purge of everything drops it
                    if tenant is None and model is None:
                        await self._redis.srem(ks.NAMESPACES, member)
                    continue
                t, m, ns = parsed
                if (tenant is not None and t != tenant) or (model is not None and m != model):
                    continue
                deleted += await self._purge_exact(ns)
                deleted += await self.semantic.purge_namespace(ns)
                await self._redis.srem(ks.NAMESPACES, member)
            if tenant is None and model is None:
                deleted += await self._purge_unlisted()
            return deleted
        # RedisClusterException: what redis-py's cluster client raises outside RedisError (SlotNotCoveredError,
        # a command it finds no node for); a 500 otherwise
        except (RedisError, RedisClusterException, OSError) as e:
            raise _unavailable(e) from e

    async def stats(self) -> dict:
        now = time.time()
        namespaces = []
        try:
            for member in await self._redis.smembers(ks.NAMESPACES):
                parsed = parse_namespace_member(member)
                if parsed is None:
                    continue
                tenant, model, ns = parsed
                pipe = self._redis.pipeline(transaction=False)
                pipe.zcount(ks.exact_index(ns), now, "+inf")
                pipe.zcount(ks.semantic_index(ns), now, "+inf")
                exact_n, semantic_n = await pipe.execute()
                namespaces.append({"tenant": tenant, "model": model, "exact_entries": int(exact_n),
                                   "semantic_entries": int(semantic_n)})
        # RedisClusterException: what redis-py's cluster client raises outside RedisError (SlotNotCoveredError,
        # a command it finds no node for); a 500 otherwise
        except (RedisError, RedisClusterException, OSError) as e:
            raise _unavailable(e) from e
        namespaces.sort(key=lambda n: (n["tenant"], n["model"]))
        lookups: dict[str, dict[str, int]] = {}
        for (layer, result), n in sorted(self.counts.items()):
            lookups.setdefault(layer, {})[result] = n
        return {
            "exact_entries": sum(n["exact_entries"] for n in namespaces),
            "semantic_entries": sum(n["semantic_entries"] for n in namespaces),
            "namespaces": namespaces,
            "learning": self.learner.stats(_budgets(self._get_policy())),  # this process's view of shared counts
            "process": {
                "lookups": lookups,
                "semantic_indexed": len(self.worker.indexes),
                "semantic_scopes": len(self.worker.indexes.scopes),
                "embedder": self.worker.state,  # e.g. "ready (onnx/int8)"
                "timings": self.worker.timings.as_dict(),
            },
        }

    async def drain(self) -> None:
        await self.semantic.drain()

    # ---- internals ----------------------------------------------------------------------------------------

    async def _exact_lookup(self, ns: str, digest: str, max_age: float | None) -> Stored | None:
        t0 = time.perf_counter()
        try:
            stored = await self.exact.get(ns, digest)
        except RedisUnavailable:
            self._observe("exact", "error", t0)
            return None
        except (ValueError, KeyError, TypeError):  # not JSON, or JSON of another shape: see _sound
            self._observe("exact", "error", t0)
            return None
        if stored is None:
            self._observe("exact", "miss", t0)
            return None
        if not _sound(stored):
            self._observe("exact", "error", t0)
            return None
        if max_age is not None and time.time() - stored.stored_at > max_age:
            self._observe("exact", "stale", t0)
            return None
        self._observe("exact", "hit", t0)
        return stored

    async def _semantic_lookup(self, ctx: RequestContext, lookup: CacheLookup, query: SemanticQuery,
                               threshold: float, floor: float, max_age: float | None) -> dict | None:
        semantic = lookup.config.semantic
        assert semantic is not None
        judge = self._judge(semantic.judge, semantic.ttl) if semantic.judge is not None else None
        t0 = time.perf_counter()
        try:
            outcome = await self.semantic.lookup(
                lookup.ns, query, threshold, semantic.verify, max_age, deadline_s=semantic.lookup_timeout_ms / 1000,
                judge=judge, judge_threshold=max(semantic.judge.threshold, floor) if semantic.judge else None,
                learn=semantic.max_wrong is not None)
        except RedisUnavailable:
            self._observe("semantic", "error", t0)
            return None
        except Exception:  # the embedder failing must not fail the request
            log.exception("semantic lookup failed")
            self._observe("semantic", "error", t0)
            return None
        lookup.vector = outcome.vector
        lookup.overflow = outcome.result == "overflow"
        if outcome.reason and outcome.reason != "judge":
            self._rejections.labels(outcome.reason).inc()
        result = self._budget(ctx, lookup, outcome) if semantic.max_wrong is not None else outcome.result
        self._observe("semantic", result, t0)
        if result != "hit" or outcome.completion is None:
            return None
        ctx.response_headers["X-Cache"] = "HIT-SEMANTIC"
        ctx.response_headers["X-Cache-Similarity"] = f"{outcome.similarity:.4f}"
        return outcome.completion

    def _budget(self, ctx: RequestContext, lookup: CacheLookup, outcome: Outcome) -> str:
        """The lookup's result under the route's error budget: a would-be hit is served, explored or held
        (both go upstream and are compared); a miss keeps its nearest look-alike to compare."""
        semantic = lookup.config.semantic
        assert semantic is not None and semantic.max_wrong is not None
        route = ctx.route.name
        self._sync_soon(route)
        if outcome.result != "hit":
            lookup.probe = outcome.probe
            return outcome.result
        if outcome.probe is None or outcome.evidence is None:  # a judge's hit: the judge answers for it
            return "hit"
        choice = decide(self.learner.route(route), outcome.similarity, outcome.evidence, semantic.max_wrong,
                        semantic.explore_floor, semantic.explore_cap, self.learner.rng)
        if choice == "serve":
            self.learner.served(route, outcome.similarity)
            self._served.labels(route).inc()
            return "hit"
        lookup.probe = dataclasses.replace(outcome.probe, kind=choice)
        if choice == "explore":
            explore_cost(ctx.ledger)  # the upstream call is a cost of saving, not a plain miss
            self.learner.explored(route)
            self._explored.labels(route).inc()
            ctx.response_headers["X-Cache-Explore"] = "1"
            return "explored"
        self._held.labels(route).inc()
        return "held"

    def _sync_soon(self, route: str) -> None:
        """Share this process's counts and read the route's totals, at most once a second, off the request."""
        if self.learner.sync_due(route):
            self.semantic.spawn(self._sync(route))

    async def _sync(self, route: str) -> None:
        with contextlib.suppress(RedisUnavailable, RedisError, RedisClusterException, OSError):
            await self.learner.sync(route, ks.learning(route))
        budget = _budgets(self._get_policy()).get(route)
        if budget is not None:
            estimate, bound = self.learner.route(route).estimate(budget)
            self._wrong_estimate.labels(route).set(estimate)
            self._wrong_bound.labels(route).set(bound)

    async def _learn(self, route: str, probe: Probe, completion: dict) -> None:
        """Compare the fresh answer with the cached look-alike's and record the outcome (in the background)."""
        try:
            cached = probe.completion or await self.semantic.fetch_completion(probe.ns, probe.entry_id)
            if cached is None:
                return
            fresh_text, cached_text = fact_text(completion), fact_text(cached)
            if not fresh_text or not cached_text:
                return
            verdict = by_facts(cached_text, fresh_text)
            if verdict is None:  # only then is the meaning needed: both texts go to the embedder together
                va, vb = await asyncio.gather(self.worker.embed(cached_text), self.worker.embed(fresh_text))
                verdict = by_meaning(va, vb) if va is not None and vb is not None else (True, "facts")
            agree = verdict[0]
            await self.learner.record(route, probe, agree, ks.semantic_entry(probe.ns, probe.entry_id))
            self._learned.labels(route, probe.kind, "right" if agree else "wrong").inc()
        except Exception as e:  # learning must never fail anything: count nothing, log what is not Redis
            if not isinstance(e, (RedisUnavailable, RedisError)):
                log.exception("semantic learning failed")

    def _judge(self, config: JudgeConfig, ttl_s: float) -> Judge:
        """One Judge per (judge settings, backend type, TTL); the backend itself is looked up per call."""
        backend_config = self._get_policy().backends.get(config.backend)
        kind = backend_config.type if backend_config is not None else None
        key = (config, kind, ttl_s)
        judge = self._judges.get(key)
        if judge is None:
            judge = self._judges[key] = Judge(
                config, lambda: self._backends.get(config.backend), logprobs=kind != "anthropic",
                metrics=self._judge_metrics, verdicts=self._verdicts, verdict_ttl_s=ttl_s)
        return judge

    async def _semantic_store(self, tenant: str, model: str, lookup: CacheLookup, completion: dict) -> None:
        assert lookup.query is not None and lookup.config.semantic is not None
        queued = not self.worker.ready
        if queued:
            if self._backlog >= MAX_BACKLOG:
                self._stores.labels("semantic", "dropped").inc()
                log.warning("semantic cache: %d answers already wait for the model; one more dropped", MAX_BACKLOG)
                return
            self._backlog += 1
        try:
            if queued:
                try:
                    loaded = await asyncio.wait_for(self.worker.wait_ready_or_load(), MODEL_WAIT_S)
                except TimeoutError:
                    loaded = False
                if not loaded:
                    self._stores.labels("semantic", "unavailable").inc()
                    return
            self.semantic.start()
            result = await self.semantic.store(tenant, model, lookup.ns, lookup.query, completion,
                                               lookup.config.semantic, lookup.vector)
            self._stores.labels("semantic", result).inc()
        except Exception as e:  # a store must never fail anything: count it (and log what is not Redis)
            self._stores.labels("semantic", "error").inc()
            if not isinstance(e, RedisUnavailable):
                log.exception("semantic store failed")
        finally:
            if queued:
                self._backlog -= 1

    def _backfill(self, ctx: RequestContext, lookup: CacheLookup, stored: Stored) -> None:
        """An exact hit whose semantic entry is missing (stored while L2 was off or loading, or the L2 data was
        lost): write the entry from the exact one, in the background."""
        semantic, query = lookup.config.semantic, lookup.query
        if semantic is None or query is None or ctx.cache_control.no_store or not _allowed(semantic.store, ctx):
            return
        if not self.worker.ready or not self.semantic.synced.is_set():
            return  # the local index is not complete yet, so a missing entry proves nothing
        eid = entry_id(query.scope, query.text)
        if eid in self.worker.indexes or eid in self._backfilling or eid in self._unembeddable:
            return
        self._backfilling.add(eid)
        self.semantic.spawn(self._backfill_entry(ctx.tenant.name, ctx.model, lookup, stored, eid))

    async def _backfill_entry(self, tenant: str, model: str, lookup: CacheLookup, stored: Stored, eid: str) -> None:
        assert lookup.query is not None and lookup.config.semantic is not None
        try:
            if await self.semantic.has_entry(lookup.ns, eid):
                return  # stored by another process; its event has not reached this one yet
            result = await self.semantic.store(tenant, model, lookup.ns, lookup.query, stored.completion,
                                               lookup.config.semantic, None, stored_at=stored.stored_at)
            self._stores.labels("semantic", "backfilled" if result == "stored" else result).inc()
            if result == "overflow":
                self._unembeddable[eid] = None
                if len(self._unembeddable) > MAX_UNEMBEDDABLE:
                    del self._unembeddable[next(iter(self._unembeddable))]
        except Exception as e:
            self._stores.labels("semantic", "error").inc()
            if not isinstance(e, RedisUnavailable):
                log.exception("semantic backfill failed")
        finally:
            self._backfilling.discard(eid)

    def _replay(self, ctx: RequestContext, completion: dict) -> dict:
        usage = completion.get("usage") or {}
        saved = usage.get("total_tokens")
        if isinstance(saved, int) and saved > 0:  # a count read back from Redis: any other value must not 500
            self._saved_tokens.inc(saved)
        prefix = "cmpl" if ctx.endpoint == "completions" else "chatcmpl"  # OpenAI's id prefixes per endpoint
        return {**completion, "id": f"{prefix}-{ctx.request_id}", "created": int(time.time())}

    def _threshold(self, ctx: RequestContext, config: CacheConfig) -> tuple[float, float]:
        """(threshold, floor): the route's threshold raised by the header, and the header's value (0 without
        it), under which not even the judge may serve a candidate."""
        base = config.semantic.threshold if config.semantic else 1.0
        raw = ctx.headers.get(THRESHOLD_HEADER)
        if raw is None:
            return base, 0.0
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not 0.0 <= value <= 1.0:
            raise bad_request(f"{THRESHOLD_HEADER} must be a number between 0 and 1, got {raw!r}.",
                              code="invalid_cache_threshold")
        return max(base, value), value

    def _observe(self, layer: str, result: str, t0: float) -> None:
        self._count(layer, result)
        self._lookup_seconds[layer].observe(time.perf_counter() - t0)

    def _count(self, layer: str, result: str) -> None:
        self._lookup_counts[(layer, result)].inc()  # KeyError: a result missing from LOOKUP_RESULTS
        self.counts[(layer, result)] += 1

    async def _purge_unlisted(self) -> int:
        """What the namespace set does not list (its master lost a write in a failover, say): SCAN every master
        (never KEYS), delete per namespace (one slot per DEL) and tell every process. Returns entries deleted."""
        found: dict[str, list[str]] = {}
        async for raw in scan_masters(self._redis, ks.NAMESPACED):
            key = raw.decode() if isinstance(raw, bytes) else raw
            ns = ks.namespace_of(key)
            if ns is not None:
                found.setdefault(ns, []).append(key)
        deleted = 0
        for ns, keys in found.items():
            await self.semantic.purge_namespace(ns)  # indexes and LRU sets, and the event every process applies
            for start in range(0, len(keys), 512):
                await self._redis.delete(*keys[start:start + 512])
            deleted += sum(1 for k in keys if ks.is_entry(k))
        return deleted

    async def _purge_exact(self, ns: str) -> int:
        digests = [d.decode() if isinstance(d, bytes) else d for d in await self._redis.zrange(ks.exact_index(ns), 0, -1)]
        deleted = 0
        for start in range(0, len(digests), 512):
            chunk = digests[start:start + 512]
            deleted += await self._redis.delete(*(ks.exact_entry(ns, d) for d in chunk))
        await self._redis.delete(ks.exact_index(ns))
        return int(deleted)


def _sound(stored: Stored) -> bool:
    """Whether an exact entry read back is one the gateway stores (a complete answer and when it was stored).
    Anything else under the key (another program's value, one cut short) is a miss: replayed, it would be a 500
    or an answer with no choices."""
    return isinstance(stored.stored_at, (int, float)) and replayable(stored.completion)


def _allowed(mode: StoreMode, ctx: RequestContext) -> bool:
    if mode == "never":
        return False
    return mode == "always" or is_deterministic(ctx.endpoint, ctx.body)


def _unavailable(e: BaseException) -> GatewayError:
    return GatewayError(503, f"The cache store (Redis) is unavailable: {e}", "server_error", "cache_unavailable")


def _budgets(policy: Policy) -> dict[str, float]:
    """Each learning route's error budget, by route name."""
    return {r.name: r.cache.semantic.max_wrong for r in policy.routes
            if r.cache is not None and r.cache.semantic is not None and r.cache.semantic.max_wrong is not None}


def uses_semantic(policy: Policy) -> bool:
    return any(r.cache is not None and r.cache.semantic is not None for r in policy.routes)


async def create_stage(resources: Resources) -> CacheStage:
    stage = CacheStage(resources)
    try:
        try:  # open a pooled connection and the lookups' own now, so the first lookup's few-ms budget is not
            # spent connecting (resolving a container's name alone can outlast it)
            # (every outcome gathered: a failed ping must not leave a connect's error unretrieved)
            outcomes = await asyncio.wait_for(asyncio.gather(
                resources.redis.ping(), stage.exact.connect(), stage.semantic.connect(), return_exceptions=True), 1.0)
            if failed := [o for o in outcomes if isinstance(o, BaseException)]:
                raise failed[0]
        except (TimeoutError, RedisError, RedisClusterException, OSError) as e:
            log.warning("cache: Redis not reachable at start (%s); lookups fail open until it is", e)
        policy = resources.get_policy()
        stage.start(uses_semantic(policy))  # load the model now, not at the first semantic request
    except BaseException:  # start-up cancelled here: the gateway never holds this stage to close it
        await stage.close()
        raise
    return stage
