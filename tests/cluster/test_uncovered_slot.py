"""A Redis Cluster slot that no node serves (an operator's CLUSTER DELSLOTS, a resharding half-done) is a Redis
failure like any other: a cache miss, a skipped store, a limit decided locally, a 503 from the admin endpoints;
never a 500.

redis-py looks a key's slot up in its slot map with `slots_cache[slot]` and catches only IndexError and
TypeError, so an uncovered slot raised a bare KeyError out of every command, pipeline and script: past
RedisGuard's fail-open and the admin endpoints' `except RedisError`, into the envelope's 500.

The cluster here is the module's own (one master, one replica): its slots are taken away and given back per test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import httpx
import pytest
from redis.crc import key_slot
from redis.exceptions import RedisError

from gateway.cache import keyspace as ks
from gateway.cache.keys import namespace_id
from gateway.metrics import Metrics
from gateway.redis_client import ClusterClient, create_redis, execute_partial
from gateway.redis_guard import RedisGuard, RedisUnavailable
from tests.cache.gateway_helpers import admin
from tests.cluster.cluster import RedisCluster

MODEL = "fake-model"
TENANT = "capped"


@pytest.fixture(scope="module")
def small_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster(masters=1, replicas_per_master=1).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def uncover(small_cluster: RedisCluster) -> Iterator[Callable[..., None]]:
    """uncover(*keys): no node serves the slots of these keys until the test ends."""
    small_cluster.flushall()
    master = small_cluster.nodes[0]
    taken: set[int] = set()

    def take(*keys: str) -> None:
        slots = {key_slot(k.encode()) for k in keys} - taken
        master.client.execute_command("CLUSTER", "DELSLOTS", *slots)
        taken.update(slots)

    yield take
    if taken:
        master.client.execute_command("CLUSTER", "ADDSLOTS", *taken)


async def test_a_key_in_a_slot_no_node_serves_is_a_redis_error(small_cluster: RedisCluster, uncover) -> None:
    key, other = "{lost}:k", "{kept}:k"
    assert key_slot(key.encode()) != key_slot(other.encode())
    uncover(key)
    client = await create_redis(small_cluster.url, "auto", 0.25)
    try:
        assert isinstance(client, ClusterClient)
        guard = RedisGuard(Metrics(), "cache", 1.0, redis=client)
        # Before: KeyError from each of these (a guarded lookup's too: it passed the guard's fail-open).
        with pytest.raises(RedisUnavailable, match="served by no node"):
            await guard.call(lambda: client.get(key), key=key)
        with pytest.raises(RedisError):  # what the admin endpoints and every unguarded caller catch
            await client.smembers(key)
        with pytest.raises(RedisError):
            await client.register_script("return 1")(keys=[key])
        pipe = client.pipeline(transaction=False)
        pipe.set(key, b"v")
        with pytest.raises(RedisError):
            await execute_partial(pipe, 1)
        # Slots a node serves go on being served by the same client.
        await client.set(other, b"v")
        assert await guard.call(lambda: client.get(other), key=other) == b"v"
    finally:
        await client.aclose()


def test_a_gateway_whose_keys_lie_in_uncovered_slots_answers_and_its_admin_says_503(
        small_cluster: RedisCluster, uncover, fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    # The tenant's limit counters, its cache namespace, and the namespace set the admin endpoints read.
    uncover(f"{{llmgw:{TENANT}}}:rpm:0", ks.exact_index(namespace_id(TENANT, MODEL)), ks.NAMESPACES)
    srv = serve_gateway(f"""
tenants:
  - {{name: {TENANT}, api_keys: [key-capped], limits: {{rpm: 100, tpm: 100000}}}}
backends:
  up: {{type: openai, base_url: "{up.url}/v1", api_key: sk-up}}
routes:
  - match: {{model: {MODEL}}}
    backends: [up]
    cache: {{exact: {{ttl: 600}}}}
""", redis=small_cluster.url)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "temperature": 0}
    for _ in range(2):  # a lookup, a store and a TPM charge each time: every one fails open
        r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer key-capped"},
                       timeout=30)
        assert r.status_code == 200, r.text  # before: 500 (KeyError from the limiter's admit)
        assert r.headers["X-Cache"] == "MISS"
        assert r.json()["choices"][0]["message"]["content"] == "echo: hello"
    for method, path in (("GET", "/admin/cache/stats"), ("DELETE", "/admin/cache")):
        r = admin(srv, method, path)
        assert r.status_code == 503, r.text  # before: 500
        assert r.json()["error"]["code"] == "cache_unavailable"
    counted = [line for line in httpx.get(srv.url + "/metrics", timeout=10).text.splitlines()
               if line.startswith("gateway_requests_total{") and 'status="500"' in line]
    assert counted and all(line.endswith(" 0.0") for line in counted), counted


async def test_admin_paths_catch_what_redis_py_raises_outside_redis_error(small_cluster: RedisCluster, uncover,
                                                                          monkeypatch) -> None:
    """SlotNotCoveredError (and every RedisClusterException) is no RedisError: stats and purge said 500."""
    from redis.exceptions import SlotNotCoveredError

    from gateway.cache.stage import CacheStage
    from gateway.errors import GatewayError

    stage = CacheStage.__new__(CacheStage)  # only the admin paths are exercised: they need the client alone
    client = await create_redis(small_cluster.url, "auto", 0.25)
    try:
        stage._redis = client

        async def uncovered(*args: object, **kwargs: object) -> None:
            raise SlotNotCoveredError('Slot "1" is not covered by the cluster.')

        monkeypatch.setattr(client, "smembers", uncovered)
        for call in (stage.stats(), stage.purge(None, None)):
            with pytest.raises(GatewayError) as caught:
                await asyncio.wait_for(call, 10)
            assert caught.value.status == 503
    finally:
        await client.aclose()

