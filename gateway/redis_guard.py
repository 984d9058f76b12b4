"""Every Redis call on the request path goes through a RedisGuard: a few-ms budget and a circuit breaker.

Callers fail open on RedisUnavailable (a cache miss, no store, no limit), so a slow or dead Redis costs a
request at most one timeout, and after repeated failures nothing at all until the breaker half-opens.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisError

from gateway.metrics import Metrics

T = TypeVar("T")
log = logging.getLogger("gateway.redis")


class RedisUnavailable(Exception):
    pass


class RedisGuard:
    """Closed: calls go through; `failures_to_open` failures in a row open it. Open: calls fail at once for
    `open_s`. Half-open (after that): one call probes Redis while the others still fail at once; the probe's
    success closes the breaker, its failure opens it again. A Redis that came back is used again within about
    `open_s` plus one call, not after another run of failures."""

    def __init__(
        self, metrics: Metrics, component: str, timeout_s: float, failures_to_open: int = 5, open_s: float = 1.0
    ) -> None:
        self.metrics = metrics
        self.component = component
        self.timeout_s = timeout_s
        self.failures_to_open = failures_to_open
        self.open_s = open_s
        self._failures = 0
        self._open_until = 0.0
        self._tripped = False  # opened and not yet closed by a successful probe
        self._probing = False

    @property
    def is_open(self) -> bool:
        return time.monotonic() < self._open_until or (self._tripped and self._probing)

    async def call(self, op: Awaitable[T] | Callable[[], Awaitable[T]]) -> T:
        if self.is_open:
            if asyncio.iscoroutine(op):
                op.close()  # never awaited: close it so no warning is raised
            raise RedisUnavailable(f"{self.component}: circuit open")
        probe = self._tripped
        self._probing = probe
        try:
            async with asyncio.timeout(self.timeout_s):  # cheaper than wait_for: no extra task per call
                result = await (op() if callable(op) else op)
        except (TimeoutError, OSError, RedisError) as e:
            self._record_failure(e, probe)
            raise RedisUnavailable(f"{self.component}: {type(e).__name__}: {e}") from e
        finally:
            if probe:
                self._probing = False
        if probe:
            self._tripped = False
            log.info("redis %s: reachable again; circuit closed", self.component)
        self._failures = 0
        return result

    def _record_failure(self, e: BaseException, probe: bool = False) -> None:
        self.metrics.redis_errors.labels(self.component).inc()
        self._failures += 1
        if probe or self._failures >= self.failures_to_open:
            self._open_until = time.monotonic() + self.open_s
            self._failures = 0
            self._tripped = True
            if not probe:
                log.warning("redis %s: %s; skipping Redis for %.1fs", self.component, e, self.open_s)

