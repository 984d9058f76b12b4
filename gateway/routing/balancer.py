"""Which backend answers: weighted or least-loaded choice, retries with exponential backoff, then fallbacks.

A `prefix_aware` route picks among its backends like `least_loaded`; prefix awareness lives inside an engine
backend, which routes across its own replicas by their KV blocks (gateway/routing/prefix.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from gateway.backends.base import Backend, BackendError, BackendPool
from gateway.config.schema import Route
from gateway.metrics import Metrics

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
    capacity), or it refused the gateway's own credentials. The route's other backends and fallbacks are tried."""
    return e.reason == "shed" or e.status in (401, 403)


class Router:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.inflight = InflightCounter()
        self.rng = random.Random()

    def _plan(self, route: Route) -> list[tuple[str, int]]:
        """(backend name, attempt number) pairs: the primary with its retries, each other backend once."""
        order = attempt_order(route, self.inflight.counts, self.rng)
        plan = [(order[0], a) for a in range(route.retries + 1)]
        return plan + [(name, 0) for name in order[1:]]

    async def call(
        self, route: Route, pool: BackendPool, op: Callable[[Backend], Awaitable[T]]
    ) -> tuple[T, str]:
        """Run `op` on backends by the route's plan until one succeeds; returns (result, backend name)."""
        last: BackendError | None = None
        skip: set[str] = set()  # backends not to try again in this request (shed, refused our credentials)
        began = time.monotonic()
        for name, attempt in self._plan(route):
            if name in skip:
                continue
            if last is not None and attempt > 0:
                if waits_too_long(route, last.retry_after, time.monotonic() - began):
                    continue  # no retry of this backend sooner than it asked; fallbacks, or `last` goes out
                await asyncio.sleep(backoff_delay(route, attempt - 1, last.retry_after))
            self.inflight.enter(name)
            try:
                return await op(pool.get(name)), name
            except BackendError as e:
                e.backend = name  # outcomes are attributed to the backend that produced them
                if next_backend_only(e):
                    skip.add(name)
                elif not e.retryable:
                    raise
                last = e
            finally:
                self.inflight.leave(name)
        assert last is not None
        raise last

    async def open_stream(
        self, route: Route, pool: BackendPool, op: Callable[[Backend], AsyncIterator[dict]]
    ) -> tuple[dict, AsyncIterator[dict], str]:
        """Open a stream by the route's plan: retries and fallbacks apply until the first chunk arrives.

        Returns (first chunk, the rest of the iterator, backend name). The caller must `aclose()` the iterator
        and call `self.inflight.leave(name)` when done.
        """
        last: BackendError | None = None
        skip: set[str] = set()  # backends not to try again in this request (shed, refused our credentials)
        began = time.monotonic()
        for name, attempt in self._plan(route):
            if name in skip:
                continue
            if last is not None and attempt > 0:
                if waits_too_long(route, last.retry_after, time.monotonic() - began):
                    continue  # no retry of this backend sooner than it asked; fallbacks, or `last` goes out
                await asyncio.sleep(backoff_delay(route, attempt - 1, last.retry_after))
            stream = op(pool.get(name))
            self.inflight.enter(name)
            try:
                first = await anext(stream)
            except StopAsyncIteration:
                self.inflight.leave(name)
                await stream.aclose()  # type: ignore[attr-defined]
                last = BackendError("protocol", f"backend {name} sent an empty stream", 502, retryable=True)
                last.backend = name
                self.metrics.upstream_errors.labels(name, "protocol").inc()
                continue
            except BackendError as e:
                e.backend = name  # outcomes are attributed to the backend that produced them
                self.inflight.leave(name)
                await stream.aclose()  # type: ignore[attr-defined]
                if next_backend_only(e):
                    skip.add(name)
                elif not e.retryable:
                    raise
                last = e
                continue
            except BaseException:
                self.inflight.leave(name)
                await stream.aclose()  # type: ignore[attr-defined]
                raise
            return first, stream, name
        assert last is not None
        raise last
