"""The gateway's Redis client: one server or a Redis Cluster, behind one `redis.url`.

`redis: {mode: auto}` (the default) asks the seed node `INFO cluster`: `cluster_enabled:1` selects redis-py's
asyncio `RedisCluster`, so a plain `redis://host:port` naming any node of a cluster just works; `single` and
`cluster` force either. Every key the gateway writes carries a hash tag per namespace or tenant, so each Lua
script and multi-key command stays in one slot (keyspace.py, limits.py).

A master that dies: commands for its slots fail (they fail open upstream, as for a single Redis), each failure
asks for a slot-map refresh in the background, and once its replica is promoted the refreshed map sends those
slots there. The refresh is never run under a request's few-ms budget: a cancelled refresh would drop every
connection of the client, healthy masters included.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, SlotNotCoveredError
from redis.retry import Retry

from gateway.deadline import retrieve

log = logging.getLogger("gateway.redis")
DETECT_TIMEOUT_S = 2.0
REFRESH_EVERY_S = 0.5  # at most one background slot-map refresh per this long, however many calls fail
SCAN_COUNT = 1000
NOT_A_CLUSTER = "Cluster mode is not enabled on this node"  # redis-py's words for a standalone server


class SlotNotServed(RedisError):
    """No node of the current slot map serves a key's slot (an operator's CLUSTER DELSLOTS, a resharding left
    half-way): that key's command fails as Redis failing, which every caller fails open on or answers 503."""


class ClusterClient(RedisCluster):
    """redis-py's asyncio cluster client, plus what the gateway needs around failovers: the node that serves a
    key (for per-node circuit breakers), a rate-limited background slot-map refresh, an initialisation
    that a caller's timeout cannot cancel half-way, and an uncovered slot raised as a RedisError."""

    _init_task: asyncio.Future | None = None
    _refresh_task: asyncio.Task | None = None
    _refreshed_at: float = 0.0

    async def initialize(self, *args: Any, **kwargs: Any) -> ClusterClient:
        # redis-py re-initialises inline in whichever command comes next after a node failed. Under RedisGuard's
        # timeout that command may be cancelled mid-way, and a cancelled initialisation closes every node's
        # connections: one shared, shielded initialisation runs to its end instead.
        if not self._initialize:
            return self
        task = self._init_task
        if task is None or task.done():
            task = self._init_task = asyncio.ensure_future(super().initialize(*args, **kwargs))
            # Its waiters may all have given up (timeouts, cancels): its error is theirs, not the loop's to log.
            task.add_done_callback(retrieve)
        try:
            await asyncio.shield(task)
        except RedisClusterException as e:
            # No node answered. redis-py says so with an exception outside RedisError, which would pass every
            # caller's `except RedisError` (the guard's fail-open, the admin endpoints' 503) and end as a 500.
            raise RedisConnectionError(f"redis cluster: {e}") from e
        return self

    async def get_nodes_from_slot(self, command: str, *args: Any) -> list:
        # Where redis-py routes every keyed command, script and pipeline by the slot map. For a slot no node
        # serves it raises a bare KeyError (its get_node_from_slot catches IndexError and TypeError only) or
        # SlotNotCoveredError (not a RedisError either): both passed RedisGuard's and the admin endpoints'
        # `except RedisError` and ended as a 500. Not ConnectionError nor SlotNotCoveredError either: a
        # pipeline meeting those closes every connection of the client and sleeps 250 ms before its retry.
        try:
            return await super().get_nodes_from_slot(command, *args)
        except (KeyError, SlotNotCoveredError) as e:
            raise self._not_served(e) from e

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        # The same lookups after a MOVED redirect (a slot map re-read meanwhile without that slot), and the
        # SlotNotCoveredError redis-py re-raises once its own retries are spent.
        try:
            return await super().execute_command(*args, **kwargs)
        except (KeyError, SlotNotCoveredError) as e:
            raise self._not_served(e) from e

    def _not_served(self, e: Exception) -> SlotNotServed:
        self.refresh_soon()  # a node may serve it by now (the slots given back, or another node given them)
        detail = f"slot {e}" if isinstance(e, KeyError) else str(e)
        return SlotNotServed(f"redis cluster: a key's slot is served by no node in the current slot map ({detail})")

    def node_name(self, key: str) -> str:
        """host:port of the master that serves `key` in the current slot map ("" while it is unknown)."""
        try:
            node = self.get_node_from_key(key)
        except RedisClusterException:  # slot not covered (map being rebuilt)
            return ""
        return node.name if node is not None else ""

    def refresh_soon(self) -> None:
        """Re-read the slot map in the background (rate-limited): after a failover it points at the promoted
        replica, and keys of that master are served again."""
        now = time.monotonic()
        if now - self._refreshed_at < REFRESH_EVERY_S or (self._refresh_task and not self._refresh_task.done()):
            return
        self._refreshed_at = now
        self._refresh_task = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        if self._init_task is not None and not self._init_task.done():  # it re-reads the slot map already
            return
        try:
            await self.nodes_manager.initialize()
            if self.get_default_node() is None or self.get_default_node() not in self.get_primaries():
                self.replace_default_node()
        except (RedisError, RedisClusterException, OSError) as e:  # no node reachable yet: the next failure asks again
            log.debug("redis cluster: slot map refresh failed: %s", e)

    async def aclose(self) -> None:
        """Close, also while an initialisation is still connecting: it is ended, not left running.

        A shutdown that comes while an unreachable or slow cluster is being asked for its slot map would
        otherwise return at once (redis-py closes only an initialised client) and leave the shielded
        initialisation connecting until its socket timeout, its connections open and its error unread."""
        if self._refresh_task is not None:
            self._refresh_task.cancel()
        init = self._init_task
        if init is not None and not init.done():
            await _end(init)
        if self._initialize:  # never initialised, or the one that was ended: close what it had opened
            await self.nodes_manager.aclose()
            await self.nodes_manager.aclose("startup_nodes")
        await super().aclose()


async def detect_cluster(url: str, timeout_s: float = DETECT_TIMEOUT_S) -> bool | None:
    """Whether the server at `url` runs in cluster mode (`INFO cluster`); None when it cannot be asked."""
    probe = aioredis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        info = await asyncio.wait_for(probe.info("cluster"), timeout_s)
    except (RedisError, OSError, TimeoutError) as e:
        log.warning("redis at %s: cannot tell whether it is a cluster (%s: %s); assuming a single server "
                    "(set `redis: {mode: cluster}` if it is one)", _safe(url), type(e).__name__, e)
        return None
    finally:
        await probe.aclose()
    return int(info.get("cluster_enabled", 0)) == 1


async def create_redis(url: str, mode: str, timeout_s: float) -> aioredis.Redis:
    """The client for `url` in `mode` (auto detects from the seed node). Typed as redis.asyncio.Redis: the
    cluster client speaks the same commands for keys in one slot, which is all the gateway sends."""
    cluster = mode == "cluster" or (mode == "auto" and await detect_cluster(url) is True)
    common: dict[str, Any] = {"socket_connect_timeout": max(timeout_s, 0.05), "socket_timeout": 1.0}
    if not cluster:
        return aioredis.Redis.from_url(url, health_check_interval=30, **common)
    log.info("redis at %s is a cluster: using the cluster client", _safe(url))
    client = ClusterClient.from_url(
        url,
        # The healthy masters keep serving while one master's slots wait for its replica's promotion.
        require_full_coverage=False,
        # One quick retry after a refresh; RedisGuard bounds the whole call anyway, and the breakers (not
        # redis-py's backoff) decide when a failing node is tried again.
        retry=Retry(NoBackoff(), 1),
        **common,
    )
    try:  # the slot map now, so the first requests' breakers already know their nodes
        await asyncio.wait_for(client.initialize(), DETECT_TIMEOUT_S)
    # commands initialise it later; the gateway serves meanwhile (an unreachable cluster: RedisClusterException)
    except (RedisError, RedisClusterException, OSError, TimeoutError) as e:
        if NOT_A_CLUSTER in str(e):
            # A server that answered and is no cluster: `mode: cluster` is a configuration error, not an
            # outage to fail open on (every command would re-run an initialisation that can never succeed).
            await client.aclose()
            raise RedisClusterException(
                f"redis at {_safe(url)} is not a cluster ({NOT_A_CLUSTER!r}): set `redis: {{mode: auto}}` or "
                "`standalone`, or point `redis.url` at a cluster node") from e
        log.warning("redis cluster at %s: no slot map yet (%s: %s)", _safe(url), type(e).__name__, e)
    except BaseException:  # cancelled: the gateway is shutting down while it connects, so stop connecting
        await client.aclose()
        raise
    return client  # type: ignore[return-value]


async def _end(task: asyncio.Future, turns: int = 100) -> None:
    """Cancel `task` and wait until it has ended (at most `turns` tries of 10 ms). The cancel is repeated: on
    Python 3.11 redis-py's write under asyncio.wait_for can swallow one (see LoopTimeout.__aexit__), and
    the next lands in the read that follows, which passes it on."""
    for _ in range(turns):
        task.cancel()
        done, _pending = await asyncio.wait({task}, timeout=0.01)
        if done:
            return
    log.warning("redis cluster: an initialisation did not end on cancel; not waiting for it")


async def scan_masters(redis: Any, match: str) -> AsyncIterator[bytes]:
    """Every key matching `match` on every master (SCAN on each, never KEYS); one server is one master."""
    if isinstance(redis, ClusterClient):
        await redis.initialize()
        for node in redis.get_primaries():
            cursor = 0
            while True:
                # redis-py answers a targeted SCAN as ({node name: next cursor}, keys)
                cursors, keys = await redis.execute_command(
                    "SCAN", cursor, "MATCH", match, "COUNT", SCAN_COUNT, target_nodes=node)
                cursor = int(cursors[node.name])
                for key in keys:
                    yield key
                if cursor == 0:
                    break
        return
    async for key in redis.scan_iter(match=match, count=SCAN_COUNT):
        yield key


def _safe(url: str) -> str:
    """The URL without a password, for logs."""
    head, sep, tail = url.rpartition("@")
    return f"{head.split('//')[0]}//***@{tail}" if sep else url


async def execute_partial(pipe: Any, essential: int) -> list:
    """Run a non-transactional pipeline whose first `essential` commands write the entry itself: an error
    there raises. Errors of the later commands (shared keys, such as the namespace set or the events stream,
    that a cluster keeps on another master) stay in the result, so a dead master elsewhere does not turn a
    store on a healthy one into a failure (nor open that one's breaker)."""
    results = await pipe.execute(raise_on_error=False)
    for result in results[:essential]:
        if isinstance(result, Exception):
            raise result
    return results
