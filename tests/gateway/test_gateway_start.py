"""Gateway.start() that does not finish (cancelled by a shutdown during start-up, or a step that fails) closes
what it had built: the Redis client first of all, whose connections and tasks otherwise outlive the gateway.

Connections are counted at a private real redis-server (CLIENT LIST), so what is seen is what Redis sees.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest
import redis

import gateway.gateway as gateway_module
from gateway.config.loader import parse_policy
from gateway.gateway import Gateway
from tests.helpers import RedisServer, free_port

BOUND_S = 10


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer().start()
    yield s
    s.stop()


def connections(server: RedisServer) -> int:
    """Clients connected to the server, this probe's own connection not counted."""
    with redis.Redis(port=server.port) as probe:
        return len(probe.client_list()) - 1


async def settled(server: RedisServer, expected: int) -> int:
    """The connection count once it reaches `expected` (a closed socket takes Redis a moment), or after ~2 s."""
    for _ in range(200):
        n = connections(server)
        if n == expected:
            return n
        await asyncio.sleep(0.01)
    return connections(server)


def gateway(server: RedisServer, tmp_path) -> Gateway:
    policy = parse_policy(f"""
backends:
  up: {{type: openai, base_url: "http://127.0.0.1:{free_port()}/v1"}}
routes:
  - match: {{model: m}}
    backends: [up]
    cache: {{exact: {{ttl: 60}}}}
redis: {{url: "{server.url}", timeout_ms: 250}}
server: {{data_dir: "{tmp_path}"}}
""", "p.yaml")
    return Gateway(policy)


@pytest.mark.parametrize("step", ["backends", "context stage"])
@pytest.mark.parametrize("ending", ["cancelled", "failed"])
async def test_a_start_that_does_not_finish_closes_the_redis_client(server: RedisServer, tmp_path, monkeypatch,
                                                                    step: str, ending: str) -> None:
    before = connections(server)
    reached = asyncio.Event()
    release = asyncio.Event()

    async def blocked(*args: object, **kwargs: object) -> object:
        reached.set()  # the Redis client exists and has connected (start-up's ping)
        if ending == "failed":
            raise RuntimeError(f"{step} could not be built")
        await release.wait()  # never set: start-up hangs here until cancelled
        raise AssertionError("not reached")

    if step == "backends":
        monkeypatch.setattr(gateway_module.Backends, "build", blocked)
    else:
        import gateway.context.stage as context_stage
        monkeypatch.setattr(context_stage, "create_stage", blocked)
    gw = gateway(server, tmp_path)
    task = asyncio.create_task(gw.start())
    await asyncio.wait_for(reached.wait(), BOUND_S)
    assert connections(server) > before
    if ending == "cancelled":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, BOUND_S)
    else:
        with pytest.raises(RuntimeError, match="could not be built"):
            await asyncio.wait_for(task, BOUND_S)
    assert await settled(server, before) == before  # before the fix: the start-up ping's connection stayed open
    if step == "context stage":  # the cache stage built before it was closed too
        assert gw.cache.worker._closed


async def test_what_start_froze_is_collected_once_the_gateway_closes(server: RedisServer, tmp_path) -> None:
    """start() freezes everything alive (gc.freeze), so request garbage is collected cheaply; close must hand
    it back. Frozen objects in cycles are never collected: each gateway a process closed (the suite's, or an
    embedder's) kept its objects, an in-process engine's gigabyte of weights among them, for good."""

    class Node:  # an object in a reference cycle, alive while the gateway starts (as its own objects are)
        def __init__(self) -> None:
            self.me = self

    node = Node()
    gone = weakref.ref(node)
    gw = gateway(server, tmp_path)
    await gw.start()
    try:
        assert gc.get_freeze_count() > 0
    finally:
        await gw.close()
    del node
    gc.collect()
    assert gone() is None  # before the fix: frozen, never collected
