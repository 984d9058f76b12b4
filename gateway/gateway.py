"""The Gateway: everything the handlers share, built at start-up and torn down at shutdown."""

from __future__ import annotations

import asyncio
import fnmatch
import gc
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import aiohttp
import orjson
import redis.asyncio as aioredis

from gateway.auth import Authenticator
from gateway.backends.base import Backend
from gateway.config.errors import PolicyRefused
from gateway.config.schema import Policy
from gateway.limits import RateLimiter
from gateway.metrics import Metrics
from gateway.pipeline import Endpoint, RequestContext, Resources, Stage
from gateway.redis_client import create_redis
from gateway.routing.balancer import Router
from gateway.state import Backends, Snapshot
from gateway.usage.accounting import Accounting

if TYPE_CHECKING:
    from gateway.cache.stage import CacheStage
    from gateway.context.stage import ContextStage

log = logging.getLogger("gateway")

MODELS_TTL_S = 30.0


class Gateway:
    def __init__(self, policy: Policy, redis_url: str | None = None) -> None:
        self.metrics = Metrics()
        self.router = Router(self.metrics)
        self._initial_policy = policy
        self._redis_url = redis_url or policy.redis.url
        if self._redis_url == "embedded":
            # One owner of the embedded server: `llm-gateway serve` (gateway/cli.py) starts it before its workers
            # and stops it after the last, so they all share it; a Gateway only connects to a URL.
            raise ValueError("redis.url 'embedded' is started by `llm-gateway serve`: pass its URL as redis_url "
                             "(gateway.embedded_redis.EmbeddedRedis(data_dir).start().url)")
        self.redis: aioredis.Redis
        self.http: aiohttp.ClientSession
        self.limiter: RateLimiter
        self.accounting: Accounting
        self.snapshot: Snapshot
        self.cache: CacheStage
        self.context: ContextStage
        self.stages: tuple[Stage, ...] = ()  # in request order, each once (start-up and shutdown walk these)
        # the stages that serve each endpoint, in request order: built once, read per request
        self.stages_by_endpoint: dict[Endpoint, tuple[Stage, ...]] = {}
        self._models: tuple[float, list[tuple[str, str]]] = (0.0, [])
        self._retiring: set[asyncio.Task] = set()
        self._retired: list[Backend] = []

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        policy = self._initial_policy
        timeout_s = policy.redis.timeout_ms / 1000
        # One server or a Redis Cluster (redis.mode, detected from the seed node by default): redis_client.py.
        # The embedded Redis (the CLI passed its socket) is one server: nothing to detect.
        mode = "single" if policy.redis.url == "embedded" else policy.redis.mode
        self.redis = await create_redis(self._redis_url, mode, timeout_s)  # closes its own client on a cancel
        try:
            await self._build(policy, timeout_s)
        except BaseException:
            # Cancelled by a shutdown during start-up, or a step that failed: nobody calls close() for a gateway
            # that never started (aiohttp runs a cleanup context's exit only after its start finished), so
            # close what was built here, the Redis client's connections and tasks above all.
            await self.close()
            raise

    async def _build(self, policy: Policy, timeout_s: float) -> None:
        # Limits get a wider budget than cache lookups: failing open there lets traffic past a tenant's limit.
        self.limiter = RateLimiter(self.redis, self.metrics, max(timeout_s * 10, 0.05))
        self.accounting = Accounting(self.redis, self.metrics, max(timeout_s * 10, 0.05))
        try:
            await asyncio.wait_for(self.redis.ping(), 2.0)  # open a connection now, not on the first request
        except Exception as e:  # Redis is optional for serving: log it and go on; the client reconnects later
            log.warning("redis at start-up: %s: %s (requests are served; limits and caches fail open)",
                        type(e).__name__, e)
        self.http = aiohttp.ClientSession(json_serialize=lambda o: orjson.dumps(o).decode())
        backends, _ = await Backends.build(policy, self.metrics)
        self.snapshot = Snapshot(policy, Authenticator(policy), backends)
        self.metrics.prepare(policy)
        self.accounting.prepare(policy)
        self.accounting.store.start()
        self.router.prepare(policy, backends)
        if self.snapshot.auth.open:
            log.warning("no API keys configured: the gateway is open and serves everyone as tenant 'default'%s",
                        " (auth: {open: true})" if policy.auth_open else
                        "; say `auth: {open: true}` in the policy if that is meant")
        resources = Resources(
            redis=self.redis, metrics=self.metrics, data_dir=Path(policy.server.data_dir),
            get_policy=lambda: self.snapshot.policy, backends=_LiveBackends(self), http=self.http,
        )
        # imported here: the stages load their models (FAISS, tokenizers) and only a serving gateway needs them
        from gateway.cache.stage import create_stage as create_cache_stage
        from gateway.context.stage import create_stage as create_context_stage

        # Request order: the cache keys on the request as sent, then context economy rewrites what is sent.
        self.cache = await create_cache_stage(resources)
        self.stages = (self.cache,)  # closed at shutdown even if the next one fails to build
        self.context = await create_context_stage(resources)
        self.stages = (self.cache, self.context)
        self.stages_by_endpoint = {e: tuple(s for s in self.stages if e in s.endpoints) for e in get_args(Endpoint)}
        # Everything built so far (torch, FAISS, the models) lives as long as the process: move it out of the
        # collector's sight, so the collections that request garbage triggers stay cheap. Garbage first: what
        # is frozen is never collected, so start-up's cyclic garbage (load temporaries) would stay for good.
        gc.collect()
        gc.freeze()

    async def close(self) -> None:
        """Close everything start() built; also after a start() that did not finish (what it did not build yet
        is skipped)."""
        built = vars(self)
        try:
            for stage in self.stages:
                await stage.close()
            await self.router.close()
            for task in list(self._retiring):
                task.cancel()
            for backend in self._retired:
                await backend.close()
            if "snapshot" in built:
                await self.snapshot.backends.close()
            if "http" in built:
                await self.http.close()
            if "accounting" in built:
                await self.accounting.store.close()  # the last pending totals, while Redis is still open
        finally:  # whatever failed above, Redis's connections and the cluster client's tasks end
            if "redis" in built:
                await self.redis.aclose()
            # What start() froze goes back to the collector: the gateway's objects form cycles (and hold the
            # in-process engines' weights), which would otherwise outlive it in a process that goes on.
            gc.unfreeze()

    async def apply_policy(self, policy: Policy) -> None:
        """Swap to a new policy; unchanged backends are kept, replaced ones close after their requests."""
        if (policy.redis.url, policy.redis.mode) != (self._initial_policy.redis.url, self._initial_policy.redis.mode):
            log.warning("redis.url or redis.mode changed in the policy; it takes effect on restart")
        auth = Authenticator(policy)
        if auth.open and not self.snapshot.auth.open and not policy.auth_open:
            raise PolicyRefused("it has no API keys, so it would open a keyed gateway to everyone; "
                                "add `auth: {open: true}` to the policy if that is meant")
        backends, retired = await Backends.build(policy, self.metrics, reuse=self.snapshot.backends)
        self.snapshot = Snapshot(policy, auth, backends)
        self.metrics.prepare(policy)
        self.accounting.prepare(policy)
        self.router.prepare(policy, backends)
        self._models = (0.0, [])
        if retired:
            self._retired.extend(retired)  # closed after a grace period, or at shutdown if that comes first
            grace = max((r.timeouts.total for r in self.snapshot.policy.routes), default=60.0)
            task = asyncio.create_task(self._close_later(retired, grace))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        log.info("policy %s applied (%s)", policy.source, policy.digest[:12])

    async def _close_later(self, backends: list[Backend], delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        for backend in backends:
            self._retired.remove(backend)
            await backend.close()

    # ---- helpers for handlers -----------------------------------------------------------------------------

    async def charge(self, ctx: RequestContext, usage: dict | None) -> None:
        """Charge the answer's tokens to the tenant's TPM: before the answer goes out, so the tenant's next
        request is admitted against them (nothing to do, and no await, for a tenant without a TPM limit).

        Shielded: a client that hangs up while the charge is on its way to Redis cancels its request's task,
        but the tokens are spent all the same; the charge runs to its end (the cancel is raised at once)."""
        if usage and ctx.tenant.limits.tpm:
            await asyncio.shield(self.limiter.charge_tokens(
                ctx.tenant, int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)))

    def count_tokens(self, usage: dict | None) -> None:
        """The answer's tokens in the metrics: the hot path counts them after its answer is written (the
        counters take a lock each)."""
        if usage:
            self.metrics.prompt_tokens.inc(int(usage.get("prompt_tokens") or 0))
            self.metrics.completion_tokens.inc(int(usage.get("completion_tokens") or 0))

    async def models(self) -> list[tuple[str, str]]:
        """(model id, owner): every exact route name, plus each backend's own models that a glob route matches."""
        fetched_at, cached = self._models
        if time.monotonic() - fetched_at < MODELS_TTL_S and cached:
            return cached
        snap = self.snapshot
        seen: dict[str, str] = {}
        for route in snap.policy.routes:
            if not route.is_glob:
                seen.setdefault(route.model, route.backends[0].name)
        globs = [r for r in snap.policy.routes if r.is_glob]
        if globs:
            names = {b.name for r in globs for b in r.backends}
            listed = await asyncio.gather(*(_list_models(snap.backends.get(n)) for n in names))
            for name, models in zip(names, listed, strict=True):
                for model in models:
                    if any(fnmatch.fnmatchcase(model, r.model) and name in {b.name for b in r.backends} for r in globs):
                        seen.setdefault(model, name)
        result = sorted(seen.items())
        self._models = (time.monotonic(), result)
        return result

    async def readiness(self) -> tuple[list[str], list[str]]:
        """(reasons the gateway cannot serve, degraded parts). Only a route with no live backend (or a stage
        that cannot work yet) is a reason: Redis is optional (limits and caches fail open) and one dead
        upstream of several is degraded, not a cause for a load balancer to pull the replica."""
        snap = self.snapshot
        reasons: list[str] = []
        degraded: list[str] = []
        checks = {name: asyncio.create_task(b.check_ready()) for name, b in snap.backends.items()}
        try:
            await asyncio.wait_for(self.redis.ping(), 1.0)
        except Exception as e:  # any failure is reported; the text says which
            degraded.append(f"redis: {type(e).__name__}: {e} (limits and caches fail open)")
        status = {name: await task for name, task in checks.items()}
        for route in snap.policy.routes:
            names = [b.name for b in route.backends] + route.fallbacks
            detail = "; ".join(f"{n}: {status[n]}" for n in names if status.get(n))
            if all(status.get(n) for n in names):
                reasons.append(f"route {route.name}: no backend reachable ({detail})")
            elif detail:
                degraded.append(f"route {route.name}: {detail}")
        for stage in self.stages:  # e.g. the semantic cache while its model loads
            stage_readiness = getattr(stage, "readiness", None)
            if stage_readiness is not None:
                reasons.extend(stage_readiness())
        return reasons, degraded

    def cache_admin(self) -> CacheStage:
        """The cache stage, for the admin endpoints (purge, stats)."""
        return self.cache


class _LiveBackends:
    """The current policy's backends, for stages that outlive a reload (the summariser, say)."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def get(self, name: str) -> Backend:
        return self._gateway.snapshot.backends.get(name)

    def names(self) -> list[str]:
        return self._gateway.snapshot.backends.names()


async def _list_models(backend: Backend) -> list[str]:
    try:
        return await asyncio.wait_for(backend.list_models(), 5.0)
    except Exception as e:  # a backend that cannot list its models just adds none
        log.warning("listing models of %s failed: %s", getattr(backend, "name", backend), e)
        return []



