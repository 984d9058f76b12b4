"""A whole (non-streamed) answer's tokens are charged to its tenant's TPM in Redis even when the client hangs up
once the answer has come from the backend, before it is sent: while the cache stores it, or while the charge
itself is on its way to Redis; and a stream whose client hangs up while its usage is being charged, before
[DONE], is charged that usage, not the estimate its `finally` charges for a stream cut short.

Before, the hang-up cancelled the request's task wherever it was: in the charge's Redis call, which then never
ran, or before the charge, which was skipped; the tokens counted only in this process's fallback window, so a
tenant could spend past its TPM limit across gateway processes through requests it abandons."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import orjson
import pytest
import redis

from gateway.appkeys import GATEWAY
from tests.gateway.test_front import Client
from tests.helpers import BODY, CHAT, route, scrape, upstream_policy

TENANT = "team"


def policy(upstream: str) -> str:
    tenants = f"tenants:\n  - {{name: {TENANT}, api_keys: [k1], limits: {{rpm: 1000, tpm: 1000000}}}}\n"
    return upstream_policy(upstream, route("fake-model"), tail=tenants)


def charged(redis_url: str) -> int:
    """The tenant's TPM counters in Redis, every window summed."""
    with redis.Redis.from_url(redis_url) as r:
        return sum(int(r.get(k) or 0) for k in r.scan_iter(match=f"{{llmgw:{TENANT}}}:tpm:*"))


@pytest.mark.parametrize("phase", ["charge", "cache store", "stream's charge"])
def test_a_client_that_hangs_up_after_the_answer_came_is_charged_its_tokens(
        fake_openai, serve_gateway, redis_url: str, phase: str) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url))
    gw = srv.app[GATEWAY]
    gw.limiter.guard.timeout_s = 30.0  # the held charge must not run into the limits' Redis budget on a slow box
    reached = threading.Event()  # the request's task is in the phase
    release = asyncio.Event()  # (set on the gateway's loop) the hang-up was counted: the phase may go on

    async def held() -> None:
        if reached.is_set():
            return  # only the first call is held (a stream's estimate after it goes straight through)
        reached.set()
        await release.wait()  # a Redis reply still on its way

    async def go_on() -> None:
        release.set()

    if phase != "cache store":
        real_charge = gw.limiter._charge

        async def slow_charge(**kwargs: object) -> object:
            await held()
            return await real_charge(**kwargs)

        gw.limiter._charge = slow_charge
    else:
        real_after = gw.cache.after

        async def slow_after(ctx: object, completion: dict) -> None:
            await held()
            await real_after(ctx, completion)

        gw.cache.after = slow_after

    stream = {"stream": True, "stream_options": {"include_usage": True}} if phase == "stream's charge" else {}
    body = orjson.dumps({**BODY, "messages": [{"role": "user", "content": "charge me"}], **stream})
    client = Client(srv.url)
    client.send(b"POST %b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (CHAT.encode(), len(body), body))
    assert reached.wait(10)
    client.close()  # hangs up before the answer is sent
    deadline = time.monotonic() + 10
    while sum(v for k, v in scrape(srv).items() if k.startswith("gateway_requests_total{") and 'status="499"' in k) != 1:
        assert time.monotonic() < deadline, "the hang-up was never counted"  # the request's task was cancelled
        time.sleep(0.02)
    srv.call(go_on())
    # What the fake upstream answers this body with (it is deterministic): the answer the client never read.
    plain = orjson.dumps({**orjson.loads(body), "stream": False, "stream_options": None})
    usage = httpx.post(up.url + "/v1/chat/completions", content=plain, timeout=10).json()["usage"]
    expected = usage["prompt_tokens"] + usage["completion_tokens"]
    assert expected > 0
    deadline = time.monotonic() + 10
    # before: 0 for good; for the stream its estimate, 15 (the charge cancelled, the `finally` charging that)
    while charged(redis_url) != expected:
        assert time.monotonic() < deadline, f"charged {charged(redis_url)} of {expected} tokens"
        time.sleep(0.02)

