"""Per-tenant RPM and TPM limits in Redis, correct across gateway processes and Redis Cluster slots.

One fixed 60 s window per limit. Both counters of a tenant share the hash tag `{llmgw:<tenant>}` so the Lua
script touches one slot. A request is admitted when its RPM count stays within the limit and the tokens already
spent this window are under the TPM limit; tokens are charged after the response from its usage. Redis down
or slow fails open (a metric and a log line), never the request.
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


class RateLimiter:
    def __init__(self, redis: aioredis.Redis, metrics: Metrics, timeout_s: float) -> None:
        self.redis = redis
        self.metrics = metrics
        self.guard = RedisGuard(metrics, "limits", timeout_s)
        self._admit = redis.register_script(ADMIT_LUA)
        self._charge = redis.register_script(CHARGE_LUA)

    @staticmethod
    def _keys(tenant: str, now: float) -> tuple[str, str, float]:
        window = int(now // WINDOW_S)
        tag = f"{{llmgw:{tenant}}}"
        return f"{tag}:rpm:{window}", f"{tag}:tpm:{window}", (window + 1) * WINDOW_S - now

    async def admit(self, tenant: TenantConfig) -> None:
        limits = tenant.limits
        if not limits.rpm and not limits.tpm:
            return
        now = time.time()
        rpm_key, tpm_key, remaining = self._keys(tenant.name, now)
        try:
            admitted, which = await self.guard.call(
                lambda: self._admit(keys=[rpm_key, tpm_key], args=[limits.rpm or 0, limits.tpm or 0, WINDOW_S + 1])
            )
        except RedisUnavailable as e:
            log.warning("rate limits skipped (fail open): %s", e)
            return
        if int(admitted) == 1:
            return
        which = which.decode() if isinstance(which, bytes) else str(which)
        self.metrics.rate_limited.labels(tenant.name, which).inc()
        limit = limits.rpm if which == "rpm" else limits.tpm
        unit = "requests" if which == "rpm" else "tokens"
        raise GatewayError(
            429,
            f"Rate limit reached for tenant '{tenant.name}': {limit} {unit} per minute. Retry after the window resets.",
            "requests" if which == "rpm" else "tokens",
            "rate_limit_exceeded",
            headers={"Retry-After": str(max(1, math.ceil(remaining)))},
        )

    async def charge_tokens(self, tenant: TenantConfig, tokens: int) -> None:
        if not tenant.limits.tpm or tokens <= 0:
            return
        _, tpm_key, _ = self._keys(tenant.name, time.time())
        try:
            await self.guard.call(lambda: self._charge(keys=[tpm_key], args=[tokens, WINDOW_S + 1]))
        except RedisUnavailable as e:
            log.warning("token charge skipped (fail open): %s", e)
