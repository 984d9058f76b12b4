"""The router's stream lease frees the backend's in-flight slot however the stream ends: closed early by its
reader, failed before its first chunk, or abandoned by a client that hung up mid-stream."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.appkeys import GATEWAY
from gateway.backends.base import BackendError, Timeouts
from gateway.config.loader import parse_policy
from gateway.metrics import Metrics
from gateway.pipeline import CHAT
from gateway.routing.balancer import Router
from gateway.state import Backends
from tests.cache.gateway_helpers import until

BODY = {"model": "m", "messages": [{"role": "user", "content": "one two three four"}], "stream": True}


def policy_text(url: str) -> str:
    return (f"backends: {{up: {{type: openai, base_url: '{url}/v1', api_key: k}}}}\n"
            "routes: [{match: {model: m}, backends: [up]}]\n")


def pool_policy_text(url: str) -> str:
    """A prefix-aware pool of two servers (both the one fake), whose streams the router wraps to learn usage."""
    server = f"{{type: openai, base_url: '{url}/v1', api_key: k}}"
    return (f"backends: {{a: {server}, b: {server}}}\n"
            "routes: [{match: {model: m}, backends: [a, b], routing: {strategy: prefix_aware}}]\n")


@pytest.fixture
async def routed(fake_openai):
    fake, up = fake_openai
    policy = parse_policy(policy_text(up.url), "lease.yaml")
    metrics = Metrics()
    pool, _ = await Backends.build(policy, metrics)
    router = Router(metrics)
    yield fake, router, policy.routes[0], pool
    await router.close()
    await pool.close()


def opener(router: Router, route, pool):  # noqa: ANN001, ANN201 (test helper)
    return router.open_stream(route, pool, lambda b: b.chat_stream(BODY, Timeouts()), endpoint=CHAT, body=BODY)


async def test_a_stream_closed_early_releases_its_slot_and_the_upstream(routed) -> None:
    fake, router, route, pool = routed
    fake.reply = " ".join(f"w{i}" for i in range(100))
    fake.delay_per_chunk = 0.02
    async with opener(router, route, pool) as lease:
        assert lease.backend == "up" and router.inflight.counts["up"] == 1
        assert lease.first["object"] == "chat.completion.chunk"
    assert router.inflight.counts["up"] == 0
    assert await asyncio.to_thread(fake.disconnected.wait, 5), "the upstream stream was left open"


async def test_an_error_inside_the_block_releases_the_slot(routed) -> None:
    _, router, route, pool = routed
    with pytest.raises(RuntimeError):
        async with opener(router, route, pool):
            raise RuntimeError("the reader's own failure")
    assert router.inflight.counts["up"] == 0


@pytest.mark.parametrize("failure", ["status", "cut"])
async def test_a_failing_first_chunk_holds_nothing(routed, failure: str) -> None:
    fake, router, route, pool = routed
    if failure == "status":
        fake.fail_next(1, status=400)
    else:
        fake.cut_after = 0  # the connection closes before any event
    with pytest.raises(BackendError):
        async with opener(router, route, pool):
            pytest.fail("a stream that never opened must not enter the block")
    assert router.inflight.counts["up"] == 0


def test_a_client_gone_mid_stream_releases_the_slot(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy_text(up.url))
    fake.reply = " ".join(f"w{i}" for i in range(200))
    fake.delay_per_chunk = 0.05
    with httpx.Client(timeout=10) as h, h.stream("POST", srv.url + "/v1/chat/completions", json=BODY) as r:
        lines = r.iter_lines()
        assert any(next(lines).startswith("data: ") for _ in range(3))
        assert srv.app[GATEWAY].router.inflight.counts["up"] == 1
    assert fake.disconnected.wait(5), "the upstream never saw the client go away"
    assert until(lambda: srv.app[GATEWAY].router.inflight.counts["up"] == 0, 5.0, 0.01)


async def test_a_prefix_pool_stream_left_unread_closes_the_upstream_at_once(fake_openai) -> None:
    # The client left before the headers went out: the block is left before anyone iterates the chunks.
    fake, up = fake_openai
    fake.reply = " ".join(f"w{i}" for i in range(100))
    fake.delay_per_chunk = 0.02
    policy = parse_policy(pool_policy_text(up.url), "lease.yaml")
    metrics = Metrics()
    pool, _ = await Backends.build(policy, metrics)
    router = Router(metrics)
    opened: list = []  # held here, so no garbage collection closes the backend's stream for the lease

    def op(backend):  # noqa: ANN001, ANN202 (test helper)
        opened.append(backend.chat_stream(BODY, Timeouts()))
        return opened[-1]

    try:
        async with router.open_stream(policy.routes[0], pool, op, endpoint=CHAT, body=BODY) as lease:
            assert lease.chunks is not opened[-1], "a prefix-aware pool wraps the stream to learn its usage"
        assert opened[-1].ag_frame is None, "the backend's stream was left open behind its unstarted wrapper"
        assert router.inflight.counts[lease.backend] == 0
        assert await asyncio.to_thread(fake.disconnected.wait, 5), "the upstream stream was left open"
    finally:
        await router.close()
        await pool.close()
