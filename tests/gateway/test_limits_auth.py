"""Tenant auth and Redis-backed RPM/TPM limits (real Redis)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from gateway.auth import Authenticator
from gateway.config.schema import Limits, Policy, ServerConfig, TenantConfig
from gateway.errors import GatewayError
from gateway.limits import RateLimiter
from gateway.metrics import Metrics
from gateway.redis_guard import RedisGuard
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


async def test_redis_down_limits_are_decided_by_the_process_alone() -> None:
    server = RedisServer().start()
    r = aioredis.Redis.from_url(server.url, socket_connect_timeout=0.05, socket_timeout=0.2)
    metrics = Metrics()
    limiter = RateLimiter(r, metrics, 0.05)
    tenant = TenantConfig("t", ["k"], Limits(rpm=3))
    await limiter.admit(tenant)  # Redis counts it, and so does the process
    server.stop()
    await limiter.admit(tenant)
    await limiter.admit(tenant)  # Redis is gone: the process's own count (3 of 3) admits these
    with pytest.raises(GatewayError) as e:
        await limiter.admit(tenant)  # and refuses past the limit, instead of failing open
    assert e.value.status == 429 and e.value.code == "rate_limit_exceeded"
    assert metrics.redis_errors.labels("limits")._value.get() >= 1
    fallbacks = metrics.rate_limit_fallbacks
    assert (fallbacks.labels("admitted")._value.get(), fallbacks.labels("refused")._value.get()) == (2, 1)
    tpm = TenantConfig("u", ["k2"], Limits(tpm=50))
    await limiter.admit(tpm)
    await limiter.charge_tokens(tpm, 60)  # charged locally while Redis is away
    with pytest.raises(GatewayError) as e:
        await limiter.admit(tpm)
    assert e.value.type == "tokens"
    server.start()  # same port, empty: the client reconnects by itself and Redis decides again
    limiter.guard = RedisGuard(metrics, "limits", 0.5)  # do not wait out the breaker in a test
    for _ in range(3):
        await limiter.admit(tenant)
    with pytest.raises(GatewayError):
        await limiter.admit(tenant)
    await r.aclose()
    server.stop()


def test_a_stalled_redis_limits_a_tenant_near_its_rpm_not_past_it(
    fake_openai, serve_gateway, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, up = fake_openai
    srv = serve_gateway(f"""
redis: {{url: '{redis_url}', timeout_ms: 20}}
tenants:
  - {{name: t, api_keys: [key-t], limits: {{rpm: 5}}}}
backends:
  up: {{type: openai, base_url: "{up.url}/v1"}}
routes:
  - match: {{model: m}}
    backends: [up]
""")
    admin = redis.Redis.from_url(redis_url)
    caplog.set_level(logging.WARNING, logger="gateway.limits")

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=40)) as client:
            rs = await asyncio.gather(*(client.post(
                srv.url + "/v1/chat/completions", headers={"Authorization": "Bearer key-t"},
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}) for _ in range(30)))
        return [r.status_code for r in rs]

    admin.execute_command("CLIENT", "PAUSE", 20000, "WRITE")  # Redis stalls every script: limits time out
    try:
        statuses = asyncio.run(burst())
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    assert statuses.count(200) == 5 and statuses.count(429) == 25
    local = [r for r in caplog.records if "decided by this process alone" in r.getMessage()]
    assert len(local) == 1 and local[0].levelno == logging.WARNING  # one line for the burst, not one per request
    metrics = httpx.get(srv.url + "/metrics").text
    assert 'gateway_rate_limit_fallbacks_total{result="admitted"} 5.0' in metrics
    assert 'gateway_rate_limit_fallbacks_total{result="refused"} 25.0' in metrics
