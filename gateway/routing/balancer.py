"""Which backend answers: weighted, least-loaded or prefix-aware choice, retries with exponential backoff,
then fallbacks.

A `prefix_aware` route with several backends (a pool of vLLM/SGLang/OpenAI-compatible servers) picks by the
approximate prefix view of gateway/routing/approx.py and learns from each answer's usage; an engine backend
also routes across its own replicas by their KV blocks (gateway/routing/prefix.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from gateway.backends.admission import for_tenant
from gateway.backends.base import Backend, BackendError, BackendPool
from gateway.config.schema import Policy, Route
from gateway.metrics import Metrics
from gateway.pipeline import CHAT, Endpoint
from gateway.routing.approx import HealthWatch, PoolRouter, PrefixMetrics, RouteTicket
from gateway.routing.choice import ROUTE_STRATEGY

T = TypeVar("T")


class InflightCounter:
    """Requests in flight per backend name, the least-loaded signal. (Backends themselves keep the
    `gateway_backend_inflight` gauge and count `gateway_upstream_errors_total`.)"""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def enter(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def leave(self, name: str) -> None:
        self.counts[name] -= 1


def attempt_order(route: Route, inflight: dict[str, int], rng: random.Random) -> list[str]:
    """The route's primary backends in the order to try (first is the pick), then its fallbacks."""
    names = [b.name for b in route.backends]
    if len(names) > 1:
        if route.strategy == "weighted":
            weights = [b.weight for b in route.backends]
            first = rng.choices(range(len(names)), weights=weights)[0]
        else:
            first = min(range(len(names)), key=lambda i: (inflight.get(names[i], 0), rng.random()))
        names = [names[first]] + names[:first] + names[first + 1:]
    return names + [f for f in route.fallbacks if f not in names]


def backoff_delay(route: Route, attempt: int, retry_after: float | None) -> float:
    """Seconds before the next try of the same backend: never sooner than the upstream's Retry-After."""
    delay = min(route.backoff.max_s, route.backoff.base_s * (2**attempt))
    delay *= 0.5 + random.random() / 2  # jitter, so retries from many requests do not arrive together
    return delay if retry_after is None else max(delay, retry_after)


def waits_too_long(route: Route, retry_after: float | None, elapsed: float) -> bool:
    """The upstream asked for a longer wait than the route allows (backoff.max_s, or what is left of
    timeouts.total): then it is not retried, and without a fallback the client gets its 429 and Retry-After
    at once."""
    return retry_after is not None and retry_after > min(route.backoff.max_s, route.timeouts.total - elapsed)


def next_backend_only(e: BackendError) -> bool:
    """Failures that no retry of the same backend can fix but another backend may: it shed the request (at
    capacity, or the tenant holds its share of it), or it refused the gateway's own credentials. The route's
    other backends and fallbacks are tried."""
    return e.reason in ("shed", "tenant_share") or e.status in (401, 403)


class Router:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.inflight = InflightCounter()
        self.rng = random.Random()
        self.prefix_metrics = PrefixMetrics(metrics.registry)
        self.pools: dict[tuple, PoolRouter] = {}  # prefix_aware routes' views, kept across reloads
        self._backends: BackendPool | None = None
        self._health: HealthWatch | None = None

    # --- prefix-aware pools -----------------------------------------------------------------------------

    def prepare(self, policy: Policy, pool: BackendPool) -> None:
        """Build the views of the policy's prefix_aware routes (unchanged ones keep theirs), pre-create their
        metrics and watch their backends' health. Called at start and on every reload."""
        self._backends = pool
        wanted = {_pool_key(r): r for r in policy.routes if _is_prefix_pool(r)}
        self.pools = {key: self.pools.get(key) or self._new_pool(route) for key, route in wanted.items()}
        self._watch()

    def _new_pool(self, route: Route) -> PoolRouter:
        assert route.prefix is not None
        names = [b.name for b in route.backends]
        self.prefix_metrics.prepare(names)
        return PoolRouter(names, route.prefix, self.prefix_metrics)

    def _pool_for(self, route: Route, pool: BackendPool) -> PoolRouter:
        self._backends = pool
        key = _pool_key(route)
        router = self.pools.get(key)
        if router is None:  # a route built without prepare() (tests, tools)
            router = self.pools[key] = self._new_pool(route)
            self._watch()
        return router

    def _watch(self) -> None:
        intervals = [p.options.health_check_s for p in self.pools.values()]
        if self._health is None and intervals:
            self._health = HealthWatch(min(intervals), self._check_backend, self._health_result)
        if self._health is not None:
            self._health.interval_s = min(intervals, default=self._health.interval_s)
            self._health.watch({n for p in self.pools.values() for n in p.members})

    async def _check_backend(self, name: str) -> str | None:
        assert self._backends is not None
        return await self._backends.get(name).check_ready()

    def _health_result(self, name: str, healthy: bool) -> None:
        for p in self.pools.values():
            p.set_healthy(name, healthy)

    def _mark_down(self, prefix: tuple[PoolRouter, RouteTicket | None] | None, name: str, e: BackendError) -> None:
        """A server that refuses connections leaves the choice now; its health check brings it back."""
        if prefix is not None and e.reason == "connect":
            self._health_result(name, False)

    async def close(self) -> None:
        if self._health is not None:
            await self._health.close()
            self._health = None

    # --- plans --------------------------------------------------------------------------------------------

    def _plan(
        self, route: Route, pool: BackendPool | None = None, endpoint: Endpoint = CHAT, body: dict | None = None
    ) -> tuple[list[tuple[str, int]], tuple[PoolRouter, RouteTicket | None] | None]:
        """(backend name, attempt number) pairs: the primary with its retries, each other backend once; and the
        prefix router with its ticket on prefix_aware pools."""
        prefix = None
        if body is not None and pool is not None and _is_prefix_pool(route):
            router = self._pool_for(route, pool)
            order, ticket = router.choose(endpoint, body, self.inflight.counts)
            order += [f for f in route.fallbacks if f not in order]
            prefix = (router, ticket)
        else:
            order = attempt_order(route, self.inflight.counts, self.rng)
        plan = [(order[0], a) for a in range(route.retries + 1)]
        return plan + [(name, 0) for name in order[1:]], prefix

    async def call(
        self, route: Route, pool: BackendPool, op: Callable[[Backend], Awaitable[T]], *,
        endpoint: Endpoint = CHAT, body: dict | None = None, tenant: str | None = None,
    ) -> tuple[T, str]:
        """Run `op` on backends by the route's plan until one succeeds; returns (result, backend name).
        `body` (with its `endpoint`) is the request as forwarded, for prefix-aware routes; `tenant`
        counts the request against a backend's `tenant_share`."""

        async def attempt(name: str, backend: Backend) -> T:
            self.inflight.enter(name)
            try:
                return await op(backend)
            finally:
                self.inflight.leave(name)

        result, name, prefix = await self._by_plan(route, pool, endpoint, body, tenant, attempt)
        if prefix is not None and prefix[1] is not None:
            prefix[0].answered(prefix[1], name, result.get("usage") if isinstance(result, dict) else None)
        return result, name

    def open_stream(
        self, route: Route, pool: BackendPool, op: Callable[[Backend], AsyncGenerator[dict, None]], *,
        endpoint: Endpoint = CHAT, body: dict | None = None, tenant: str | None = None,
    ) -> StreamLease:
        """A lease on a stream, opened by the route's plan when entered (`async with`): retries and fallbacks
        apply until the first chunk arrives. Leaving the block closes the stream (and so the upstream request)
        and frees the backend's in-flight slot, however it is left."""
        return StreamLease(self.inflight, lambda: self._open(route, pool, op, endpoint, body, tenant))

    async def _open(
        self, route: Route, pool: BackendPool, op: Callable[[Backend], AsyncGenerator[dict, None]],
        endpoint: Endpoint, body: dict | None, tenant: str | None,
    ) -> tuple[dict, AsyncGenerator[dict, None], AsyncGenerator[dict, None], str]:
        """(first chunk, the rest, the backend's own stream, backend name), the backend's in-flight slot held;
        nothing held on failure. The rest is the backend's stream itself, or on prefix-aware pools a wrapper
        that learns from its usage."""

        async def attempt(name: str, backend: Backend) -> tuple[dict, AsyncGenerator[dict, None]]:
            stream = op(backend)
            self.inflight.enter(name)
            try:
                return await anext(stream), stream
            except BaseException as e:
                self.inflight.leave(name)
                await stream.aclose()
                if isinstance(e, StopAsyncIteration):
                    self.metrics.upstream_errors.labels(name, "protocol").inc()
                    raise BackendError("protocol", f"backend {name} sent an empty stream", 502,
                                       retryable=True) from None
                raise

        (first, stream), name, prefix = await self._by_plan(route, pool, endpoint, body, tenant, attempt)
        if prefix is not None and prefix[1] is not None:
            return first, _learn_from_usage(prefix[0], prefix[1], name, first, stream), stream, name
        return first, stream, stream, name

    async def _by_plan(
        self, route: Route, pool: BackendPool, endpoint: Endpoint, body: dict | None, tenant: str | None,
        attempt: Callable[[str, Backend], Awaitable[T]],
    ) -> tuple[T, str, tuple[PoolRouter, RouteTicket | None] | None]:
        """The one retry / shed / fallback loop: `attempt` each (backend, try) of the route's plan until one
        succeeds; returns (its result, the backend's name, the prefix router with its ticket or None)."""
        last: BackendError | None = None
        skip: set[str] = set()  # backends not to try again in this request (shed, refused our credentials)
        began = time.monotonic()
        plan, prefix = self._plan(route, pool, endpoint, body)
        # An engine backend routes across its replicas by it; reset after, so calls this task makes later
        # (a stage's summariser, say) are outside any route again.
        token = ROUTE_STRATEGY.set(route.strategy)
        try:
            for name, n in plan:
                if name in skip:
                    continue
                if last is not None and n > 0:
                    if waits_too_long(route, last.retry_after, time.monotonic() - began):
                        continue  # no retry of this backend sooner than it asked; fallbacks, or `last` goes out
                    await asyncio.sleep(backoff_delay(route, n - 1, last.retry_after))
                try:
                    return await attempt(name, for_tenant(pool.get(name), tenant)), name, prefix
                except BackendError as e:
                    e.backend = name  # outcomes are attributed to the backend that produced them
                    self._mark_down(prefix, name, e)
                    if next_backend_only(e):
                        skip.add(name)
                    elif not e.retryable:
                        raise
                    last = e
            assert last is not None
            raise last
        finally:
            ROUTE_STRATEGY.reset(token)


class StreamLease:
    """A stream the router opened, held for one `async with` block: `first` (the first chunk), `chunks` (the
    rest) and `backend` (who answers) are set on entry. Exit closes the stream, which closes the upstream
    request at once, then frees the backend's in-flight slot: on [DONE], an early break, an error in the
    block, or a client gone (a cancelled task). Entering raises the plan's last BackendError if no backend
    opened a stream; nothing is held then."""

    __slots__ = ("_inflight", "_opener", "_stream", "first", "chunks", "backend")

    def __init__(
        self, inflight: InflightCounter,
        opener: Callable[[], Awaitable[tuple[dict, AsyncGenerator[dict, None], AsyncGenerator[dict, None], str]]],
    ) -> None:
        self._inflight = inflight
        self._opener = opener
        self._stream: AsyncGenerator[dict, None]  # the backend's own stream, under any wrapper in `chunks`
        self.first: dict
        self.chunks: AsyncGenerator[dict, None]
        self.backend: str

    async def __aenter__(self) -> StreamLease:
        self.first, self.chunks, self._stream, self.backend = await self._opener()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.chunks.aclose()
            # A wrapper never iterated (the client left before its headers went out) closes without running
            # its body, so its `finally` never closes the stream it wraps; closing a closed stream is a no-op.
            await self._stream.aclose()
        finally:  # even when a second cancellation interrupts the close
            self._inflight.leave(self.backend)


def _is_prefix_pool(route: Route) -> bool:
    return route.strategy == "prefix_aware" and route.prefix is not None and len(route.backends) > 1


def _pool_key(route: Route) -> tuple:
    return (route.model, tuple(b.name for b in route.backends), route.prefix)


async def _learn_from_usage(
    router: PoolRouter, ticket: RouteTicket, name: str, first: dict, stream: AsyncGenerator[dict, None]
) -> AsyncGenerator[dict, None]:
    """The stream as it comes; its usage (the last chunk's) corrects the prefix view once it has ended."""
    usage = first.get("usage")
    try:
        async for chunk in stream:
            if chunk.get("usage"):
                usage = chunk["usage"]
            yield chunk
    finally:
        await stream.aclose()
    router.answered(ticket, name, usage)
