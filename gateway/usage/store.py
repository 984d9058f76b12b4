"""Per-hour usage totals in Redis: one hash per (tenant, UTC hour), bounded retention, Redis Cluster safe.

Key `{llmgw:<tenant>}:usage:<hour>` (the tenant's hash tag, as its rate limits: one slot, so one script reads
a tenant's hours), field `["route","model","metric"]` (JSON: any route or model name is safe), integer values:
nano-dollars for money, counts for tokens and requests, so sums are exact across processes. Each hour's hash
expires RETENTION_DAYS after its hour. Tenants seen are kept in the set `llmgw:usage:tenants`.

Requests add to this process's pending totals (a dict update: nothing on the request path awaits Redis); a
background task flushes them every FLUSH_S, so /admin/usage lags other processes by at most that much. What a
flush fails to write is kept for the next one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import orjson

from gateway.limits import tenant_tag
from gateway.redis_guard import RedisGuard, RedisUnavailable

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.metrics import Metrics

log = logging.getLogger("gateway.usage")
HOUR_S = 3600
RETENTION_DAYS = 90
FLUSH_S = 1.0
TENANTS_KEY = "llmgw:usage:tenants"

# KEYS[1]: one (tenant, hour) hash; ARGV[1]: its expiry (unix seconds), then field, increment pairs.
ADD_LUA = """
for i = 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIREAT', KEYS[1], ARGV[1])
return 1
"""
# KEYS: hours of one tenant (one slot); returns each hash flattened, in order.
READ_LUA = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
"""

Counts = dict[str, int]  # field (JSON) -> increment


def hour_key(tenant: str, hour: int) -> str:
    return f"{tenant_tag(tenant)}:usage:{hour}"


class UsageStore:
    def __init__(self, redis: aioredis.Redis, metrics: Metrics, timeout_s: float) -> None:
        self.redis = redis
        self.guard = RedisGuard(metrics, "usage", timeout_s, redis=redis)
        self._add = redis.register_script(ADD_LUA)
        self._read = redis.register_script(READ_LUA)
        self._pending: dict[tuple[str, int], Counts] = defaultdict(lambda: defaultdict(int))
        self._known: set[str] = set()  # tenants this process has added to TENANTS_KEY
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()  # one flush at a time (the timer's and /admin/usage's)

    def add(self, tenant: str, route: str, model: str, figures: dict[str, int], now: float) -> None:
        """Add one request's figures (metric -> integer) to this process's pending totals."""
        pending = self._pending[(tenant, int(now // HOUR_S))]
        prefix = orjson.dumps([route, model])[:-1]  # b'["route","model"' : the metric closes the list
        for metric, value in figures.items():
            if value:
                pending[(prefix + b',"' + metric.encode() + b'"]').decode()] += value

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            try:
                await self.flush()
            except Exception:  # a bug here must not stop the accounting for the process's lifetime
                log.exception("usage flush failed")

    async def flush(self) -> None:
        async with self._lock:
            pending, self._pending = self._pending, defaultdict(lambda: defaultdict(int))
            for (tenant, hour), counts in pending.items():
                if not await self._write(tenant, hour, counts):
                    merged = self._pending[(tenant, hour)]  # kept for the next flush
                    for f, v in counts.items():
                        merged[f] += v

    async def _write(self, tenant: str, hour: int, counts: Counts) -> bool:
        key = hour_key(tenant, hour)
        expire_at = (hour + 1) * HOUR_S + RETENTION_DAYS * 86400
        args: list[Any] = [expire_at]
        for f, v in counts.items():
            args += (f, v)
        try:
            if tenant not in self._known:
                await self.guard.call(lambda: self.redis.sadd(TENANTS_KEY, tenant), key=TENANTS_KEY)
                self._known.add(tenant)
            await self.guard.call(lambda: self._add(keys=[key], args=args), key=key)
        except RedisUnavailable as e:
            log.warning("usage totals not written yet (Redis: %s); kept for the next flush", e)
            return False
        return True

    async def tenants(self) -> list[str]:
        members = await self.redis.smembers(TENANTS_KEY)
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    async def read(self, tenant: str, first_hour: int, last_hour: int) -> list[tuple[int, Counts]]:
        """(hour, counts) for each hour of [first_hour, last_hour] that has any."""
        hours = list(range(first_hour, last_hour + 1))
        if not hours:
            return []
        rows = await self._read(keys=[hour_key(tenant, h) for h in hours], args=[])
        out: list[tuple[int, Counts]] = []
        for hour, flat in zip(hours, rows, strict=True):
            if flat:
                out.append((hour, {_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}))
        return out


def _text(b: bytes | str) -> str:
    return b.decode() if isinstance(b, bytes) else b


def hours_between(since: float, until: float) -> tuple[int, int]:
    """The hours a [since, until) range touches, capped to the retention."""
    last = math.ceil(until / HOUR_S) - 1
    first = max(int(since // HOUR_S), last - RETENTION_DAYS * 24 + 1, int(time.time() // HOUR_S) - RETENTION_DAYS * 24)
    return first, last
