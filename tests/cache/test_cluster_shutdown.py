"""A gateway shut down while it connects to an unreachable or frozen Redis Cluster stops at once: nothing it
started keeps connecting, and close() does not wait out a socket timeout.

"Unreachable" is a TCP server on 127.0.0.1 that accepts and never answers; "frozen" is a real cluster (one
master, one replica) whose redis-server processes are stopped with SIGSTOP: the kernel still accepts
connections, nobody answers. The frozen cluster's client gets a 60 s socket timeout, so waiting it out
would be seen (the bounded waits below are 10-30 s and fail the test instead of hanging it)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterator

import pytest
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

from gateway.cache.semantic import SemanticCache
from gateway.metrics import Metrics
from gateway.redis_client import ClusterClient, create_redis
from gateway.redis_guard import RedisGuard, RedisUnavailable
from tests.cluster.cluster import RedisCluster

BOUND_S = 10  # a wait past this is a hang: the test fails instead


class Silent:
    """Accepts connections and never answers; knows which it still holds open."""

    def __init__(self) -> None:
        self.accepted = 0
        self.open = 0
        self._changed = asyncio.Event()

    async def start(self) -> Silent:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self._changed.set()
        try:
            await reader.read()  # until the client closes
        finally:
            self.open -= 1
            self._changed.set()
            writer.close()

    async def until(self, predicate) -> None:
        async def poll() -> None:
            while not predicate():
                self._changed.clear()
                await self._changed.wait()
        await asyncio.wait_for(poll(), BOUND_S)

    async def close(self) -> None:
        self._server.close()


def initialisations() -> list[asyncio.Task]:
    """redis-py cluster initialisations still running in this loop."""
    return [t for t in asyncio.all_tasks() if not t.done() and "RedisCluster.initialize" in repr(t.get_coro())]


async def test_start_up_cancelled_while_asking_a_cluster_for_its_slot_map_stops_connecting() -> None:
    silent = await Silent().start()
    try:
        task = asyncio.create_task(create_redis(silent.url, "cluster", 0.25))
        await silent.until(lambda: silent.accepted >= 1)  # the initialisation is connected and waiting
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, BOUND_S)
        assert initialisations() == []  # before: it went on connecting in the background (1 s socket timeout)
        await silent.until(lambda: silent.open == 0)  # and its connection is closed
    finally:
        await silent.close()


async def test_an_unreachable_cluster_fails_open_and_closes_mid_initialisation(caplog) -> None:
    silent = await Silent().start()
    try:
        with caplog.at_level(logging.WARNING, "gateway.redis"):
            client = await create_redis(silent.url, "cluster", 0.25)  # before: RedisClusterException
        assert "no slot map yet" in caplog.text
        guard = RedisGuard(Metrics(), "cache", 5.0, redis=client)
        # both wait for one shared initialisation; before, each got RedisClusterException, past every caller's
        # `except RedisError` (a guarded call's fail-open, the admin purge and stats' 503)
        guarded, unguarded = await asyncio.gather(guard.call(lambda: client.get("k"), key="k"),
                                                  client.smembers("k"), return_exceptions=True)
        assert isinstance(guarded, RedisUnavailable) and isinstance(unguarded, RedisError)
        asked = silent.accepted
        init = asyncio.create_task(client.initialize())
        await silent.until(lambda: silent.accepted > asked)
        await asyncio.wait_for(client.aclose(), BOUND_S)
        assert initialisations() == []  # before: aclose() left an uninitialised client's initialisation running
        await silent.until(lambda: silent.open == 0)
        with pytest.raises(asyncio.CancelledError):
            await init
    finally:
        await silent.close()


@pytest.fixture(scope="module")
def frozen_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster(masters=1, replicas_per_master=1).start()
    yield cluster
    cluster.stop()


async def until(predicate, what: str) -> None:
    """Poll private state that has no event to wait on, for at most ~30 s."""
    for _ in range(3000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never {what}")


async def test_close_ends_a_follower_waiting_for_a_frozen_clusters_slot_map(frozen_cluster: RedisCluster, worker,
                                                                           caplog) -> None:
    # (A follower stuck connecting needs no test of its own: close() disconnecting its connection already ended
    # that, before and after; a follower waiting for the shared slot-map initialisation did not.)
    frozen_cluster.flushall()
    client = ClusterClient.from_url(frozen_cluster.url, socket_timeout=60, socket_connect_timeout=60,
                                    require_full_coverage=False, retry=Retry(NoBackoff(), 0))
    metrics = Metrics()
    cache = SemanticCache(client, RedisGuard(metrics, "cache", 2.5, redis=client),
                          RedisGuard(metrics, "cache_store", 2.5, redis=client), worker)
    pids = [node.proc.pid for node in frozen_cluster.nodes if node.proc is not None]
    try:
        cache.start()
        await asyncio.wait_for(cache.synced.wait(), 30)
        await until(lambda: cache._follow_conn is not None, "following")
        # One blocking step, so the follower cannot reconnect in between: its connection killed (it reads EOF
        # and connects again), then every node frozen.
        for node in frozen_cluster.nodes:
            node.client.client_kill_filter(_type="normal")
        client._initialize = True  # what redis-py sets after a command's ConnectionError on a node
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        # the follower waits for the client's initialisation (the shared one)
        await until(lambda: client._init_task is not None and not client._init_task.done(), "initialising")
        follower = cache._sync_task
        assert follower is not None and not follower.done()
        with caplog.at_level(logging.WARNING, "gateway.cache"):
            await asyncio.wait_for(cache.close(), BOUND_S)
        assert follower.done() and not follower.cancelled()  # ended on close()'s word
        assert "still running" not in caplog.text  # before: close() waited CLOSE_WAIT_S and left it running
        await asyncio.wait_for(client.aclose(), BOUND_S)
        assert initialisations() == []
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        await cache.close()
        await client.aclose()


async def test_cluster_mode_forced_on_a_standalone_server_stops_start_up(redis_url: str) -> None:
    """`mode: cluster` at a server that answers and is no cluster is a configuration error: start-up fails
    and says so, rather than being taken for an unreachable cluster, logged as a warning, and failed open for
    good."""
    with pytest.raises(RedisClusterException, match="is not a cluster"):
        await asyncio.wait_for(create_redis(redis_url, "cluster", 1.0), BOUND_S)
    assert initialisations() == []
