"""Overload: a burst past a backend's caps is refused at once (503 + Retry-After, or the route's fallback),
the admitted requests all complete, nothing is lost, and other routes keep answering."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from gateway.appkeys import GATEWAY
from gateway.backends.admission import Admission, TenantShareExceeded
from gateway.backends.base import BackendError
from gateway.config.loader import PolicyErrors, parse_policy
from gateway.metrics import Metrics
from tests.cache.gateway_helpers import until
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread

CHAT = "/v1/chat/completions"


@pytest.fixture
def fast():
    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


def policy(slow: str, fast: str) -> str:
    return f"""
backends:
  slow: {{type: openai, base_url: "{slow}/v1", max_inflight: 2, max_queued: 2}}
  fast: {{type: openai, base_url: "{fast}/v1"}}
routes:
  - match: {{model: slow-model}}
    backends: [slow]
  - match: {{model: rescued}}
    backends: [slow]
    fallbacks: [fast]
  - match: {{model: fast-model}}
    backends: [fast]
"""


async def flood(url: str, model: str, n: int, stream: bool = False) -> list[tuple[int, dict, str]]:
    """n concurrent requests; (status, headers, body) in the order they completed."""
    done: list[tuple[int, dict, str]] = []
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "stream": stream}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=n + 5)) as client:
        async def one() -> None:
            r = await client.post(url + CHAT, json=body)
            done.append((r.status_code, dict(r.headers), r.text))
        await asyncio.gather(*(one() for _ in range(n)))
    return done


@pytest.mark.parametrize("stream", [False, True])
async def test_a_flood_past_the_caps_is_shed_at_once_and_the_rest_completes(
    fake_openai, fast, serve_gateway, stream: bool
) -> None:
    slow_fake, slow = fake_openai
    slow_fake.delay_headers = 1.0
    srv = serve_gateway(policy(slow.url, fast[1].url))

    async def other_route() -> tuple[int, str]:
        await asyncio.sleep(0.2)  # the flood is under way
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.post(srv.url + CHAT, json={"model": "fast-model", "messages": [
                {"role": "user", "content": "still here"}]})
        return r.status_code, "other"

    results, other = await asyncio.gather(flood(srv.url, "slow-model", 20, stream), other_route())
    statuses = [s for s, _, _ in results]
    assert len(results) == 20  # nothing lost
    assert statuses.count(200) == 4 and statuses.count(503) == 16  # 2 in flight + 2 queued admitted
    first_ok = statuses.index(200)
    assert all(s == 503 for s in statuses[:first_ok]) and first_ok == 16  # every refusal came before any answer
    for status, headers, text in results:
        if status == 503:
            assert headers["retry-after"] == "1" and '"code":"shed"' in text.replace(" ", "")
        else:
            assert "echo: hello" in text or "echo:" in text
    assert other == (200, "other")
    assert slow_fake.request_count == 4  # the shed requests never reached the upstream
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(srv.url + "/metrics")).text
    assert 'gateway_upstream_errors_total{backend="slow",reason="shed"} 16.0' in metrics
    assert 'gateway_backend_queued{backend="slow"} 0.0' in metrics


async def test_shed_requests_go_to_the_fallback(fake_openai, fast, serve_gateway) -> None:
    slow_fake, slow = fake_openai
    slow_fake.delay_headers = 0.5
    srv = serve_gateway(policy(slow.url, fast[1].url))
    results = await flood(srv.url, "rescued", 12)
    assert [s for s, _, _ in results] == [200] * 12
    backends = [h["x-backend"] for _, h, _ in results]
    assert backends.count("slow") == 4 and backends.count("fast") == 8


def test_caps_policy_keys() -> None:
    base = "routes: [{match: {model: m}, backends: [b]}]\n"
    p = parse_policy("backends: {b: {type: engine, model: smollm2-135m, replicas: 2}}\n" + base)
    assert (p.backends["b"].max_inflight, p.backends["b"].max_queued) == (128, 512)  # engine defaults
    p = parse_policy("backends: {b: {type: openai, base_url: 'http://x/v1'}}\n" + base)
    assert p.backends["b"].max_inflight is None  # clouds: no cap unless asked
    p = parse_policy("backends: {b: {type: engine, model: smollm2-135m, max_inflight: 0}}\n" + base)
    assert p.backends["b"].max_inflight is None
    with pytest.raises(PolicyErrors) as e:
        parse_policy("backends: {b: {type: openai, base_url: 'http://x/v1', max_queued: 5}}\n" + base)
    assert e.value.errors[0].path == "backends.b.max_queued"


def test_a_primary_that_refuses_our_credentials_falls_back(fake_openai, fast, serve_gateway) -> None:
    up_fake, up = fake_openai
    srv = serve_gateway(policy(up.url, fast[1].url).replace("    backends: [slow]\n    fallbacks: [fast]",
                                                             "    backends: [slow]\n    retries: 2\n"
                                                             "    fallbacks: [fast]"))
    up_fake.fail_next(1, 401)
    r = httpx.post(srv.url + CHAT, json={"model": "rescued", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200 and r.headers["x-backend"] == "fast"
    assert up_fake.request_count == 1  # not retried: the same credentials would be refused again
    up_fake.fail_next(1, 403)
    r = httpx.post(srv.url + CHAT, json={"model": "slow-model", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_auth_error"  # no fallback there


def test_a_stream_cut_before_its_usage_is_still_charged_to_the_tenant(fake_openai, serve_gateway) -> None:
    up_fake, up = fake_openai
    srv = serve_gateway(policy(up.url, up.url) + "\ntenants:\n  - {name: t, api_keys: [k], limits: {tpm: 40}}\n")
    up_fake.reply = " ".join(f"word{i}" for i in range(60))
    up_fake.cut_after = 50  # the upstream drops the connection before the last chunks and the usage
    headers = {"Authorization": "Bearer k"}
    body = {"model": "fast-model", "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.stream("POST", srv.url + CHAT, json=body, headers=headers, timeout=30) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert '"error"' in events[-1]
    up_fake.cut_after = None
    r = httpx.post(srv.url + CHAT, json={**body, "stream": False}, headers=headers, timeout=30)
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"  # the estimate counted



def test_a_stream_the_client_leaves_is_still_charged_to_the_tenant(fake_openai, serve_gateway) -> None:
    up_fake, up = fake_openai
    srv = serve_gateway(policy(up.url, up.url) + "\ntenants:\n  - {name: t, api_keys: [k], limits: {tpm: 40}}\n")
    assert srv.app is not None
    inflight = srv.app[GATEWAY].router.inflight.counts
    up_fake.reply = " ".join(f"word{i}" for i in range(200))
    up_fake.delay_per_chunk = 0.01
    headers = {"Authorization": "Bearer k"}
    body = {"model": "fast-model", "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.stream("POST", srv.url + CHAT, json=body, headers=headers, timeout=30) as r:
        for n, _ in enumerate(r.iter_lines()):
            if n == 100:  # about 50 content chunks seen: more than the tenant's whole TPM
                break
    assert until(lambda: inflight.get("fast") == 0, 10)  # the gateway noticed and finished the request
    up_fake.delay_per_chunk = 0
    r = httpx.post(srv.url + CHAT, json={**body, "stream": False}, headers=headers, timeout=30)
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"  # the estimate counted

SHARED = """
tenants:
  - {name: a, api_keys: [key-a]}
  - {name: b, api_keys: [key-b]}
"""


async def test_a_tenant_past_its_share_gets_429_while_another_still_gets_in(
    fake_openai, fast, serve_gateway
) -> None:
    slow_fake, slow = fake_openai
    slow_fake.delay_headers = 1.0
    # A share of 0.5 of 2 slots and 2 queue places: one slot and one queue place per tenant.
    srv = serve_gateway(policy(slow.url, fast[1].url).replace("max_queued: 2}", "max_queued: 2, tenant_share: 0.5}")
                        + SHARED)

    async def send(key: str, n: int, after: float = 0.0) -> list[object]:
        await asyncio.sleep(after)
        client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0)
        try:
            return await asyncio.gather(*(client.chat.completions.create(
                model="slow-model", messages=[{"role": "user", "content": "hello"}]) for _ in range(n)),
                return_exceptions=True)
        finally:
            await client.close()

    hog, other = await asyncio.gather(send("key-a", 6), send("key-b", 2, after=0.2))
    refused = [r for r in hog if isinstance(r, openai.RateLimitError)]
    assert len(refused) == 4 and len(hog) == 6  # nothing lost: two answered, four refused
    assert all(r.choices[0].message.content == "echo: hello" for r in hog if not isinstance(r, Exception))
    for e in refused:
        assert e.response.headers["retry-after"] == "1"
        assert e.body["type"] == "requests" and e.body["code"] == "rate_limit_exceeded"
    assert [r.choices[0].message.content for r in other] == ["echo: hello"] * 2  # type: ignore[union-attr]
    assert slow_fake.request_count == 4
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(srv.url + "/metrics")).text
    assert 'gateway_upstream_errors_total{backend="slow",reason="tenant_share"} 4.0' in metrics
    assert 'gateway_upstream_errors_total{backend="slow",reason="shed"} 0.0' in metrics


async def test_a_queued_request_of_a_tenant_at_its_share_waits_for_its_own_tenant() -> None:
    adm = Admission("b", 2, 2, Metrics(), tenant_share=0.5)
    await adm.acquire(5, "a")
    a2 = asyncio.create_task(adm.acquire(5, "a"))  # a holds its one slot: this waits although a slot is free
    await asyncio.sleep(0)
    assert not a2.done() and adm.inflight == 1
    with pytest.raises(TenantShareExceeded) as e:
        await adm.acquire(5, "a")  # a's slot and queue place are taken
    assert e.value.status == 429 and e.value.retryable
    await adm.acquire(5, "b")  # b takes the free slot at once, ahead of a's waiter
    b2 = asyncio.create_task(adm.acquire(5, "b"))
    await asyncio.sleep(0)
    with pytest.raises(BackendError) as shed:
        await adm.acquire(5, "c")  # within c's share, but the backend's queue is full
    assert shed.value.reason == "shed" and shed.value.status == 503
    adm.release("b")  # b's slot goes to b's waiter, the first that may run (a is still at its share)
    await asyncio.sleep(0)
    assert b2.done() and not a2.done()
    adm.release("a")
    await asyncio.sleep(0)
    assert a2.done() and adm.inflight == 2 and adm.tenant_queued == {}
    adm.release("a")
    adm.release("b")
    assert adm.inflight == 0 and adm.tenant_inflight == {}



async def test_a_waiter_cancelled_before_it_ran_is_skipped_when_a_slot_frees() -> None:
    adm = Admission("b", 1, 2, Metrics())
    await adm.acquire(5)
    gone = asyncio.create_task(adm.acquire(5))  # its client goes away while it waits
    kept = asyncio.create_task(adm.acquire(5))
    await asyncio.sleep(0)
    gone.cancel()  # cancelled, but its task has not run yet to take itself off the queue
    adm.release()  # the slot must go to the waiter still there, not raise on the cancelled one
    await asyncio.sleep(0)
    assert kept.done() and kept.exception() is None and gone.cancelled()
    assert adm.inflight == 1 and not adm._waiters
    adm.release()
    assert adm.inflight == 0

def test_tenant_share_policy_key() -> None:
    base = "routes: [{match: {model: m}, backends: [b]}]\n"
    p = parse_policy("backends: {b: {type: engine, model: smollm2-135m}}\n" + base)
    assert p.backends["b"].tenant_share == 1.0  # default: no per-tenant cap
    p = parse_policy("backends: {b: {type: engine, model: smollm2-135m, tenant_share: 0.25}}\n" + base)
    assert p.backends["b"].tenant_share == 0.25
    for value in ("0", "1.5", "half"):
        with pytest.raises(PolicyErrors) as e:
            parse_policy(f"backends: {{b: {{type: engine, model: smollm2-135m, tenant_share: {value}}}}}\n" + base)
        assert e.value.errors[0].path == "backends.b.tenant_share"
    with pytest.raises(PolicyErrors) as e:
        parse_policy("backends: {b: {type: openai, base_url: 'http://x/v1', tenant_share: 0.5}}\n" + base)
    assert e.value.errors[0].path == "backends.b.tenant_share" and "max_inflight" in e.value.errors[0].message
