"""SemanticCache.close() ends its background work, the events follower included, and is bounded should a task
still not end. Real Redis and the real MiniLM worker."""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

from gateway.cache import keyspace as ks
from gateway.cache.semantic import SemanticCache, _stream_events, cancel_and_wait
from gateway.cache.worker import SemanticWorker
from gateway.metrics import Metrics
from gateway.redis_client import create_redis
from gateway.redis_guard import RedisGuard


async def test_a_task_that_outlives_its_cancel_is_left_behind_not_awaited_forever() -> None:
    stuck_forever = asyncio.get_running_loop().create_future()

    async def swallows_cancel() -> None:  # a task that does not end on cancel
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await stuck_forever

    async def ends_on_cancel() -> None:
        await asyncio.sleep(3600)

    async def failed() -> None:
        raise ValueError("an error nobody retrieved")

    stuck, clean, broken = (asyncio.create_task(c()) for c in (swallows_cancel, ends_on_cancel, failed))
    await asyncio.sleep(0)
    left = await cancel_and_wait([stuck, clean, broken], wait_s=0.2)
    assert left == {stuck}
    assert clean.cancelled() and broken.done()
    stuck_forever.set_result(None)  # let it end so the loop closes cleanly
    await asyncio.gather(stuck, return_exceptions=True)
    assert await cancel_and_wait([], wait_s=0.2) == set()


async def following(redis: aioredis.Redis, worker: SemanticWorker) -> SemanticCache:
    """A cache as the gateway builds it, its start-up load done and its follower started."""
    metrics = Metrics()
    cache = SemanticCache(redis, RedisGuard(metrics, "cache", 2.5), RedisGuard(metrics, "cache_store", 2.5), worker)
    cache.start()
    await cache.synced.wait()
    return cache


async def blocked_xreads(redis: aioredis.Redis, until: int | None = None) -> int:
    """Clients the server has blocked in XREAD; with `until`, polled (up to 10 s) until there are that many."""
    for _ in range(2000):
        count = sum(1 for c in await redis.client_list() if c["cmd"] == "xread" and "b" in c["flags"])
        if until is None or count == until:
            break
        await asyncio.sleep(0.005)
    return count


async def test_close_ends_a_follower_blocked_in_xread_by_itself(redis_url: str, worker, caplog) -> None:
    redis = await create_redis(redis_url, "single", 0.25)  # the gateway's own client settings
    try:
        cache = await following(redis, worker)
        assert await blocked_xreads(redis, until=1) == 1  # the server holds the follower's XREAD
        follower = cache._sync_task
        assert follower is not None
        with caplog.at_level(logging.WARNING, "gateway.cache"):
            await cache.close()
        assert follower.done()  # nothing left behind
        assert not follower.cancelled() and follower.exception() is None  # ended on close()'s word, not a cancel
        assert cache._follow_conn is None
        assert "still running" not in caplog.text
        assert await blocked_xreads(redis, until=0) == 0  # its connection is gone too
    finally:
        await redis.aclose()


async def test_close_in_the_window_that_lost_a_cancel_leaves_nothing_behind(redis_url: str, worker,
                                                                          monkeypatch, caplog) -> None:
    """A close() that must not hang at teardown. redis-py writes each command in a task of its own under
    `asyncio.wait_for`; on Python 3.11 a cancel that lands after that write finished, but before wait_for
    resumed, is lost (wait_for returns the write's result), so a close() that only cancelled the follower
    would leave it reading on for good. Here close() starts exactly there: right after the follower's XREAD
    is written."""
    from redis.asyncio.connection import AbstractConnection

    redis = await create_redis(redis_url, "single", 0.25)
    cache = await following(redis, worker)
    closing: list[asyncio.Task] = []
    started = asyncio.Event()
    write = AbstractConnection._send_packed_command

    async def write_then_close(conn: AbstractConnection, command) -> None:
        await write(conn, command)
        if not closing and any(b"XREAD" in bytes(part) for part in command):
            # scheduled before wait_for's wake-up, which is scheduled when this write task returns
            closing.append(asyncio.ensure_future(cache.close()))
            started.set()

    try:
        with caplog.at_level(logging.WARNING, "gateway.cache"):
            monkeypatch.setattr(AbstractConnection, "_send_packed_command", write_then_close)
            await redis.xadd(ks.EVENTS, {"op": "purge", "ns": "nobody"})  # wakes the follower: it reads again
            await started.wait()
            await closing[0]
            monkeypatch.undo()
        follower = cache._sync_task
        assert follower is not None and follower.done()
        assert "still running" not in caplog.text
    finally:
        await cache.close()
        await redis.aclose()


async def test_close_at_any_turn_after_an_event_leaves_nothing_behind(redis_url: str, worker, caplog) -> None:
    """close() coming 0..23 loop turns after a store's event woke the follower (as a gateway's teardown after
    its last answer does): the follower is applying the event, sending its next XREAD, or blocked in it."""
    redis = await create_redis(redis_url, "single", 0.25)
    try:
        with caplog.at_level(logging.WARNING, "gateway.cache"):
            for turns in range(24):
                cache = await following(redis, worker)
                await redis.xadd(ks.EVENTS, {"op": "purge", "ns": f"nobody-{turns}"})  # applied on the worker
                for _ in range(turns):
                    await asyncio.sleep(0)
                follower = cache._sync_task
                await cache.close()
                assert follower is not None and follower.done(), f"follower left running, closed {turns} turns in"
        assert "still running" not in caplog.text
        assert await blocked_xreads(redis, until=0) == 0
    finally:
        await redis.aclose()


def test_an_entry_read_without_fields_still_moves_the_follower_past_it() -> None:
    reply = [[b"events", [[b"1-0", []], [b"2-0", [b"op", b"purge", b"ns", b"n"]]]]]
    assert [(i, f) for i, f in _stream_events(reply)] == [(b"1-0", {}), (b"2-0", {"op": b"purge", "ns": b"n"})]
    assert _stream_events(None) == []


async def test_the_start_up_load_stops_once_close_has_begun(redis_url: str, worker) -> None:
    """close() sets the flag before it cancels: a load whose cancel was lost reads no further chunk."""
    import time

    import orjson

    redis = await create_redis(redis_url, "single", 0.25)
    try:
        await redis.sadd(ks.NAMESPACES, orjson.dumps(["tenant", "model", "ns-load-stop"]))
        await redis.zadd(ks.semantic_index("ns-load-stop"), {"e1": time.time() + 100})
        metrics = Metrics()
        cache = SemanticCache(redis, RedisGuard(metrics, "cache", 2.5), RedisGuard(metrics, "cache_store", 2.5),
                              worker)
        pipelines: list[object] = []
        make_pipeline = redis.pipeline

        def counted(*args, **kwargs):
            pipelines.append(args)
            return make_pipeline(*args, **kwargs)

        redis.pipeline = counted  # type: ignore[method-assign]
        await cache._load_all()
        assert len(pipelines) == 1  # the namespace's chunk is read while open
        cache._stop.set()
        await cache._load_all()
        assert len(pipelines) == 1  # and not once closing
    finally:
        await redis.aclose()
