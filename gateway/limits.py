"""Per-tenant RPM and TPM limits in Redis, correct across gateway processes and Redis Cluster slots.

One fixed 60 s window per limit. Both counters of a tenant share the hash tag `{llmgw:<tenant>}` so the Lua
script touches one slot. A request is admitted when its RPM count stays within the limit and the tokens already
spent this window are under the TPM limit; tokens are charged after the response from its usage.

Redis slow or down never fails the request, and never lets a tenant far past its limit either: each process
also counts what it admitted and charged itself in the same window, and while a check against Redis times out
(or its breaker is open) that local count decides, by the same limits. A tenant then gets at most its limit per
window from each gateway process (plus what Redis had admitted elsewhere before it stalled). Each local decision
is counted (`gateway_rate_limit_fallbacks_total{result}`); the WARNING about them is logged at most every
LOG_EVERY_S seconds, not per request.
"""

from __future__ import annotations

import logging
import math
import time

import redis.asyncio as aioredis

from gateway.config.schema import TenantConfig
from gateway.errors import GatewayError
from gateway.metrics import Metrics
from gateway.redis_guard import RedisGuard, RedisUnavailable

log = logging.getLogger("gateway.limits")
WINDOW_S = 60
LOG_EVERY_S = 10.0  # at most one WARNING per this many seconds about local decisions (a stalled Redis is per request)

# KEYS[1] rpm counter, KEYS[2] tpm counter; ARGV: rpm limit (0 = none), tpm limit (0 = none), window ttl.
# Returns {admitted (1/0), which limit refused ("rpm"/"tpm"/"")}.
ADMIT_LUA = """
local rpm_limit = tonumber(ARGV[1])
local tpm_limit = tonumber(ARGV[2])
if tpm_limit > 0 then
  local used = tonumber(redis.call('GET', KEYS[2]) or '0')
  if used >= tpm_limit then return {0, 'tpm'} end
end
if rpm_limit > 0 then
  local n = redis.call('INCR', KEYS[1])
  if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
  if n > rpm_limit then return {0, 'rpm'} end
end
return {1, ''}
"""

CHARGE_LUA = """
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return n
"""



def tenant_tag(tenant: str) -> str:
    """The hash tag of a tenant's keys: its rate limits, budgets and usage share one Redis Cluster slot."""
    return f"{{llmgw:{tenant}}}"

class LocalWindow:
    """One tenant's requests admitted and tokens charged by this process in one window."""

    __slots__ = ("window", "requests", "tokens")

    def __init__(self, window: int) -> None:
        self.window = window
        self.requests = 0
        self.tokens = 0


class RateLimiter:
    def __init__(self, redis: aioredis.Redis, metrics: Metrics, timeout_s: float) -> None:
        self.redis = redis
        self.metrics = metrics
        self.guard = RedisGuard(metrics, "limits", timeout_s, redis=redis)  # per master on a Redis Cluster
        self._admit = redis.register_script(ADMIT_LUA)
        self._charge = redis.register_script(CHARGE_LUA)
        self._local: dict[str, LocalWindow] = {}  # tenant -> this process's count in the current window
        self._fallback_admitted = metrics.rate_limit_fallbacks.labels("admitted")
        self._fallback_refused = metrics.rate_limit_fallbacks.labels("refused")
        self._unlogged = 0  # local decisions since the last WARNING
        self._next_log = 0.0

    @staticmethod
    def _keys(tenant: str, now: float) -> tuple[str, str, float]:
        window = int(now // WINDOW_S)
        tag = tenant_tag(tenant)
        return f"{tag}:rpm:{window}", f"{tag}:tpm:{window}", (window + 1) * WINDOW_S - now

    def _window(self, tenant: str, now: float) -> LocalWindow:
        window = int(now // WINDOW_S)
        local = self._local.get(tenant)
        if local is None or local.window != window:
            local = self._local[tenant] = LocalWindow(window)
        return local

    async def admit(self, tenant: TenantConfig) -> None:
        limits = tenant.limits
        if not limits.rpm and not limits.tpm:
            return
        now = time.time()
        rpm_key, tpm_key, remaining = self._keys(tenant.name, now)
        local = self._window(tenant.name, now)
        try:
            admitted, which = await self.guard.call(
                lambda: self._admit(keys=[rpm_key, tpm_key], args=[limits.rpm or 0, limits.tpm or 0, WINDOW_S + 1]),
                key=rpm_key,
            )
        except RedisUnavailable as e:
            self._log_local(e)
            if limits.tpm and local.tokens >= limits.tpm:
                which = "tpm"
            elif limits.rpm and local.requests >= limits.rpm:
                which = "rpm"
            else:
                local.requests += 1
                self._fallback_admitted.inc()
                return
            self._fallback_refused.inc()
            raise self._refused(tenant, which, remaining) from None
        if int(admitted) == 1:
            local.requests += 1
            return
        raise self._refused(tenant, which.decode() if isinstance(which, bytes) else str(which), remaining)

    def _refused(self, tenant: TenantConfig, which: str, remaining: float) -> GatewayError:
        self.metrics.rate_limited.labels(tenant.name, which).inc()
        limit = tenant.limits.rpm if which == "rpm" else tenant.limits.tpm
        unit = "requests" if which == "rpm" else "tokens"
        return GatewayError(
            429,
            f"Rate limit reached for tenant '{tenant.name}': {limit} {unit} per minute. Retry after the window resets.",
            unit,
            "rate_limit_exceeded",
            headers={"Retry-After": str(max(1, math.ceil(remaining)))},
        )

    def _log_local(self, e: RedisUnavailable) -> None:
        self._unlogged += 1
        now = time.monotonic()
        if now >= self._next_log:
            log.warning("rate limits decided by this process alone (Redis slow or down: %s); %d such decisions "
                        "since the last warning", e, self._unlogged)
            self._unlogged = 0
            self._next_log = now + LOG_EVERY_S

    async def charge_tokens(self, tenant: TenantConfig, tokens: int) -> None:
        if not tenant.limits.tpm or tokens <= 0:
            return
        now = time.time()
        self._window(tenant.name, now).tokens += tokens  # what a local decision will go by if Redis stalls
        _, tpm_key, _ = self._keys(tenant.name, now)
        try:
            await self.guard.call(lambda: self._charge(keys=[tpm_key], args=[tokens, WINDOW_S + 1]), key=tpm_key)
        except RedisUnavailable as e:
            self._log_local(e)
