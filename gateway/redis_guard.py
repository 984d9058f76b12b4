"""Every Redis call on the request path goes through a RedisGuard: a few-ms budget and a circuit breaker.

Callers fail open on RedisUnavailable (a cache miss, no store, no limit), so a slow or dead Redis costs a
request at most one timeout, and after repeated failures nothing at all until the breaker half-opens.

On a Redis Cluster there is one breaker per master: a call names its key, the key names its node in the
current slot map, and a dead master opens only its own breaker, so keys on the healthy masters keep being
served. Failures also ask the cluster client to refresh its slot map, which is how a promoted replica takes
the dead master's keys (redis_client.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import RedisClusterException, RedisError

from gateway.deadline import LoopTimeout
from gateway.metrics import Metrics
from gateway.redis_client import ClusterClient

T = TypeVar("T")
log = logging.getLogger("gateway.redis")


class RedisUnavailable(Exception):
    pass


class _Breaker:
    """The state of one node's breaker."""

    __slots__ = ("failures", "open_until", "tripped", "probing")

    def __init__(self) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.tripped = False  # opened and not yet closed by a successful probe
        self.probing = False

    def is_open(self) -> bool:
        return time.monotonic() < self.open_until or (self.tripped and self.probing)


class RedisGuard:
    """Closed: calls go through; `failures_to_open` failures in a row open it. Open: calls fail at once for
    `open_s`. Half-open (after that): one call probes Redis while the others still fail at once; the probe's
    success closes the breaker, its failure opens it again. A Redis that came back is used again within about
    `open_s` plus one call, not after another run of failures.

    With `redis` a cluster client, calls that pass `key=` get the breaker of the master serving that key;
    calls without a key (and every call on a single server) share one breaker."""

    def __init__(
        self, metrics: Metrics, component: str, timeout_s: float, failures_to_open: int = 5, open_s: float = 1.0,
        *, redis: Any = None,
    ) -> None:
        self.metrics = metrics
        self.component = component
        self.timeout_s = timeout_s
        self.failures_to_open = failures_to_open
        self.open_s = open_s
        self._cluster = redis if isinstance(redis, ClusterClient) else None
        self._breakers: dict[str, _Breaker] = {"": _Breaker()}

    @property
    def is_open(self) -> bool:
        """Whether any node's breaker is open (on a single server: whether its breaker is)."""
        return any(b.is_open() for b in self._breakers.values())

    def _breaker(self, key: str | None) -> tuple[str, _Breaker]:
        if self._cluster is None or key is None:
            return "", self._breakers[""]
        node = self._cluster.node_name(key)
        breaker = self._breakers.get(node)
        if breaker is None:
            breaker = self._breakers[node] = _Breaker()
        return node, breaker

    async def call(self, op: Awaitable[T] | Callable[[], Awaitable[T]], *, key: str | None = None) -> T:
        node, breaker = self._breaker(key)
        if breaker.is_open():
            if asyncio.iscoroutine(op):
                op.close()  # never awaited: close it so no warning is raised
            if self._cluster is not None:
                self._cluster.refresh_soon()  # the slots may have moved to a promoted replica since it opened
            raise RedisUnavailable(f"{self.component}{_at(node)}: circuit open")
        probe = breaker.tripped
        breaker.probing = probe
        try:
            # Not asyncio.timeout: a busy loop's own lag must not turn a reply already received into a failure;
            # and a cancel redis-py swallowed is still answered (see LoopTimeout.__aexit__).
            async with LoopTimeout(self.timeout_s):
                result = await (op() if callable(op) else op)
        # RedisClusterException: a cluster none of whose nodes answers its initialisation (not a RedisError)
        except (TimeoutError, OSError, RedisError, RedisClusterException) as e:
            self._record_failure(node, breaker, e, probe)
            raise RedisUnavailable(f"{self.component}{_at(node)}: {type(e).__name__}: {e}") from e
        finally:
            if probe:
                breaker.probing = False
        if probe:
            breaker.tripped = False
            log.info("redis %s%s: reachable again; circuit closed", self.component, _at(node))
        breaker.failures = 0
        return result

    def _record_failure(self, node: str, breaker: _Breaker, e: BaseException, probe: bool = False) -> None:
        self.metrics.redis_errors.labels(self.component).inc()
        if self._cluster is not None:
            self._cluster.refresh_soon()  # a failover moves slots: learn where they went
        breaker.failures += 1
        if probe or breaker.failures >= self.failures_to_open:
            breaker.open_until = time.monotonic() + self.open_s
            breaker.failures = 0
            breaker.tripped = True
            if not probe:
                log.warning("redis %s%s: %s; skipping Redis for %.1fs", self.component, _at(node), e, self.open_s)


def _at(node: str) -> str:
    return f" at {node}" if node else ""

