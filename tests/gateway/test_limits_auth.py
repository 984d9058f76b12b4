"""Tenant auth and Redis-backed RPM/TPM limits (real Redis)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.auth import Authenticator
from gateway.config.schema import Limits, Policy, ServerConfig, TenantConfig
from gateway.errors import GatewayError
from gateway.limits import RateLimiter
from gateway.metrics import Metrics
from tests.helpers import RedisServer


def policy_with(tenants: list[TenantConfig], admin: list[str] | None = None) -> Policy:
    return Policy(routes=[], backends={}, tenants=tenants, server=ServerConfig(admin_keys=admin or []))


def test_keys_map_to_tenants_and_bad_keys_are_401() -> None:
    auth = Authenticator(policy_with([TenantConfig("a", ["key-a1", "key-a2"]), TenantConfig("b", ["key-b"])]))
    assert not auth.open
    assert auth.tenant_for("Bearer key-a2").name == "a"
    assert auth.tenant_for("bearer key-b").name == "b"
    for header, code in [(None, "missing_api_key"), ("Basic abc", "missing_api_key"), ("Bearer nope", "invalid_api_key")]:
        with pytest.raises(GatewayError) as e:
            auth.tenant_for(header)
        assert e.value.status == 401 and e.value.code == code
        assert "nope" not in e.value.message  # the key is never echoed


def test_open_gateway_is_one_tenant() -> None:
    auth = Authenticator(policy_with([]))
    assert auth.open and auth.tenant_for(None).name == auth.tenant_for("Bearer x").name == "default"


def test_admin_key() -> None:
    auth = Authenticator(policy_with([], admin=["root"]))
    auth.check_admin("Bearer root")
    with pytest.raises(GatewayError) as e:
        auth.check_admin("Bearer nope")
    assert e.value.status == 401
    with pytest.raises(GatewayError) as e:
        Authenticator(policy_with([])).check_admin("Bearer root")
    assert e.value.status == 403


async def test_rpm_limit_shared_by_two_limiters(redis_url: str) -> None:
    tenant = TenantConfig("t", ["k"], Limits(rpm=3))
    r1, r2 = aioredis.Redis.from_url(redis_url), aioredis.Redis.from_url(redis_url)
    a, b = RateLimiter(r1, Metrics(), 0.5), RateLimiter(r2, Metrics(), 0.5)  # two "processes"
    await a.admit(tenant)
    await b.admit(tenant)
    await a.admit(tenant)
    with pytest.raises(GatewayError) as e:
        await b.admit(tenant)
    assert e.value.status == 429 and e.value.code == "rate_limit_exceeded"
    assert 1 <= int(e.value.headers["Retry-After"]) <= 61
    await a.admit(TenantConfig("other", ["k2"], Limits(rpm=3)))  # another tenant is not affected
    await r1.aclose()
    await r2.aclose()


async def test_tpm_limit_charges_after_response(redis_url: str) -> None:
    tenant = TenantConfig("t", ["k"], Limits(tpm=100))
    r = aioredis.Redis.from_url(redis_url)
    limiter = RateLimiter(r, Metrics(), 0.5)
    await limiter.admit(tenant)
    await limiter.charge_tokens(tenant, 60)
    await limiter.admit(tenant)  # 60 < 100 still admitted
    await limiter.charge_tokens(tenant, 60)
    with pytest.raises(GatewayError) as e:
        await limiter.admit(tenant)
    assert e.value.status == 429 and e.value.type == "tokens"
    await r.aclose()


async def test_redis_down_fails_open() -> None:
    server = RedisServer().start()
    r = aioredis.Redis.from_url(server.url, socket_connect_timeout=0.05, socket_timeout=0.2)
    metrics = Metrics()
    limiter = RateLimiter(r, metrics, 0.05)
    tenant = TenantConfig("t", ["k"], Limits(rpm=1))
    await limiter.admit(tenant)
    server.stop()
    for _ in range(3):
        await limiter.admit(tenant)  # would be over the limit, but Redis is gone: admitted
    assert metrics.redis_errors.labels("limits")._value.get() >= 1
    server.start()  # same port: the client reconnects by itself
    with pytest.raises(GatewayError):
        for _ in range(3):
            await limiter.admit(tenant)
            limiter.guard._open_until = 0  # do not wait out the breaker in a test
    await r.aclose()
    server.stop()
