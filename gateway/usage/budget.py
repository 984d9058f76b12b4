"""Per-tenant dollar budgets (`limits: {usd_per_day, usd_per_month}`), enforced in Redis across processes.

Spend is kept in integer nano-dollars under the tenant's hash tag (`{llmgw:<tenant>}:usd:d:<YYYYMMDD>` and
`:usd:m:<YYYYMM>`, UTC windows; the same slot as its rate limits, so one script reads or charges both on a
Redis Cluster). A request is admitted while the spend of each window is under its budget; the request that
crosses it is served and charged (its cost is known only at its end), every later one gets 429
`budget_exceeded` with Retry-After at the window's end. Spend is charged when a request ends, a stream whether
its client stayed or not. `gateway_budget_used_ratio{tenant,window}` is the last spend this process saw against
the budget (the alert warns at 0.8).

Redis slow or down fails open (logged, counted in gateway_redis_errors_total{component="budget"}): a budget is
about money over a day, not a burst, and what this process spends meanwhile is still charged when Redis is back
only if the charge itself got through.
"""

from __future__ import annotations

import calendar
import datetime as dt
import logging
import math
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge

from gateway.errors import GatewayError
from gateway.limits import tenant_tag
from gateway.redis_guard import RedisGuard, RedisUnavailable
from gateway.usage.ledger import NANO

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.config.schema import Policy, TenantConfig
    from gateway.metrics import Metrics

log = logging.getLogger("gateway.usage")
WINDOWS = ("day", "month")

# KEYS: day, month spend; ARGV: day limit, month limit (nano-USD, 0 = none). Returns the first window spent out.
ADMIT_LUA = """
for i = 1, 2 do
  local limit = tonumber(ARGV[i])
  if limit > 0 and tonumber(redis.call('GET', KEYS[i]) or '0') >= limit then return i end
end
return 0
"""
# KEYS: day, month spend; ARGV: nano-USD, day ttl, month ttl. Returns both totals.
CHARGE_LUA = """
local d = redis.call('INCRBY', KEYS[1], ARGV[1])
if d == tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
local m = redis.call('INCRBY', KEYS[2], ARGV[1])
if m == tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return {d, m}
"""


def windows(now: float) -> tuple[str, str, float, float]:
    """(day suffix, month suffix, seconds to the day's end, seconds to the month's end), UTC."""
    t = dt.datetime.fromtimestamp(now, dt.UTC)
    day_end = dt.datetime(t.year, t.month, t.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
    days = calendar.monthrange(t.year, t.month)[1]
    month_end = dt.datetime(t.year, t.month, 1, tzinfo=dt.UTC) + dt.timedelta(days=days)
    return f"{t:%Y%m%d}", f"{t:%Y%m}", day_end.timestamp() - now, month_end.timestamp() - now


class BudgetMetrics:
    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.used = Gauge("gateway_budget_used_ratio", "Spend against the tenant's budget in the current window",
                          ["tenant", "window"], registry=r)
        self.refused = Counter("gateway_budget_exceeded", "Requests refused because a tenant's budget was spent",
                               ["tenant", "window"], registry=r)

    def prepare(self, policy: Policy) -> None:
        for tenant in policy.tenants:
            for window, limit in zip(WINDOWS, (tenant.limits.usd_per_day, tenant.limits.usd_per_month), strict=True):
                if limit:
                    self.used.labels(tenant.name, window)
                    self.refused.labels(tenant.name, window)


class Budgets:
    def __init__(self, redis: aioredis.Redis, metrics: Metrics, timeout_s: float) -> None:
        self.guard = RedisGuard(metrics, "budget", timeout_s, redis=redis)
        self.metrics = BudgetMetrics(metrics)
        self._admit = redis.register_script(ADMIT_LUA)
        self._charge = redis.register_script(CHARGE_LUA)

    @staticmethod
    def _keys(tenant: str, day: str, month: str) -> list[str]:
        tag = tenant_tag(tenant)
        return [f"{tag}:usd:d:{day}", f"{tag}:usd:m:{month}"]

    @staticmethod
    def _limits(tenant: TenantConfig) -> list[int]:
        return [round((x or 0) * NANO) for x in (tenant.limits.usd_per_day, tenant.limits.usd_per_month)]

    async def admit(self, tenant: TenantConfig, now: float) -> None:
        day, month, to_day_end, to_month_end = windows(now)
        keys = self._keys(tenant.name, day, month)
        try:
            spent_out = int(await self.guard.call(
                lambda: self._admit(keys=keys, args=self._limits(tenant)), key=keys[0]))
        except RedisUnavailable as e:
            log.warning("budget of tenant %s not checked (Redis: %s); admitted", tenant.name, e)
            return
        if spent_out:
            window = WINDOWS[spent_out - 1]
            self.metrics.refused.labels(tenant.name, window).inc()
            raise exceeded(tenant, window, to_day_end if window == "day" else to_month_end)

    async def charge(self, tenant: TenantConfig, usd: float, now: float) -> None:
        nano = round(usd * NANO)
        if nano <= 0:
            return
        day, month, to_day_end, to_month_end = windows(now)
        keys = self._keys(tenant.name, day, month)
        ttls = [math.ceil(to_day_end) + 3600, math.ceil(to_month_end) + 3600]
        try:
            totals = await self.guard.call(lambda: self._charge(keys=keys, args=[nano, *ttls]), key=keys[0])
        except RedisUnavailable as e:
            log.warning("spend of tenant %s not charged (Redis: %s): $%.6f", tenant.name, e, usd)
            return
        for window, total, limit in zip(WINDOWS, totals, self._limits(tenant), strict=True):
            if limit:
                self.metrics.used.labels(tenant.name, window).set(int(total) / limit)


def exceeded(tenant: TenantConfig, window: str, remaining_s: float) -> GatewayError:
    limit = tenant.limits.usd_per_day if window == "day" else tenant.limits.usd_per_month
    return GatewayError(
        429,
        f"Budget reached for tenant '{tenant.name}': ${limit:g} per {window} (UTC). Retry after the {window} ends.",
        "insufficient_quota",
        "budget_exceeded",
        headers={"Retry-After": str(max(1, math.ceil(remaining_s)))},
    )
