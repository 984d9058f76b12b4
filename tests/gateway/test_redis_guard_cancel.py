"""RedisGuard.call loses neither a caller's cancel nor its own deadline to redis-py, on a real Redis.

On Python 3.11 redis-py writes each command under `asyncio.wait_for`, which returns instead of raising when a
cancel lands after the write finished but before wait_for resumed. Each test below lands a cancel at every
loop turn of a command in turn (a sweep of 0..N `sleep(0)` hops, deterministic for a given loop), so one of
them falls in that window.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest
import redis.asyncio as aioredis

from gateway.metrics import Metrics
from gateway.redis_client import create_redis
from gateway.redis_guard import RedisGuard, RedisUnavailable
from tests.helpers import RedisServer

HOPS = 24  # loop turns swept: a command's write, its wait_for and its reply fit well inside


@pytest.fixture
async def redis(redis_url: str):
    client = await create_redis(redis_url, "single", 0.25)  # the gateway's own client settings
    yield client
    await client.aclose()


async def hops(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def cancel_after(task: asyncio.Task, n: int) -> bool:
    """Cancel `task` n loop turns from now; True when it was still running (so a cancel was requested)."""
    await hops(n)
    return task.cancel()


async def lost_cancels(redis: aioredis.Redis, call) -> list[int]:
    """The hops at which a cancel requested of a running `call()` let it end normally."""
    lost = []
    for n in range(HOPS):
        await redis.ping()  # a connected pool connection: the sweep starts at the command, not a connect
        task = asyncio.create_task(call())
        requested = await cancel_after(task, n)
        try:
            await asyncio.wait_for(task, 10)  # bounded: a hang fails the test instead of holding it
        except asyncio.CancelledError:
            continue
        if requested:
            lost.append(n)
    return lost


async def test_a_cancel_that_redis_py_swallows_still_cancels_the_caller(redis: aioredis.Redis) -> None:
    if sys.version_info < (3, 12):  # the sweep does reach the window where redis-py loses a cancel
        assert await lost_cancels(redis, lambda: redis.get("k")) != []
    guard = RedisGuard(Metrics(), "cache", 2.0)
    assert await lost_cancels(redis, lambda: guard.call(lambda: redis.get("k"))) == []
    # a cancel is not Redis failing: nothing counted, the breaker stays closed
    assert guard.metrics.redis_errors.labels("cache")._value.get() == 0 and not guard.is_open


async def test_a_deadline_whose_cancel_redis_py_swallowed_is_a_timeout(redis: aioredis.Redis) -> None:
    # A 0 s budget against a command that answers 50 ms later: every call is past its deadline. Before, where
    # the deadline's cancel was swallowed the call waited out the BLPOP and returned None as a success
    # (resetting the breaker's failures).
    guard = RedisGuard(Metrics(), "cache", 0.0, failures_to_open=1000)
    errors: list[str] = []
    for n in range(12):
        await redis.ping()

        async def blocked(n: int = n) -> object:
            await hops(n)  # shifts the command against the deadline's fixed turn
            return await redis.blpop(["never-pushed"], timeout=0.05)

        with pytest.raises(RedisUnavailable) as caught:
            await asyncio.wait_for(guard.call(blocked), 10)
        errors.append(str(caught.value))
    if sys.version_info < (3, 12):  # from 3.12 wait_for never loses a cancel: no such window to reach
        # the sweep reached the swallowed-cancel window: a reply after the deadline, or the BLPOP cancelled again
        assert any("swallowed" in e for e in errors)
    assert guard._breakers[""].failures == len(errors)  # each one a failure, none a success
    assert guard.metrics.redis_errors.labels("cache")._value.get() == len(errors)
    assert asyncio.current_task().cancelling() == 0  # the guard took back every cancel of its own


async def test_a_deadline_whose_cancel_redis_py_swallowed_does_not_wait_out_the_socket_timeout() -> None:
    # Redis stalls (SIGSTOP: the kernel still takes the command, nobody answers). Where the deadline's cancel
    # lands in redis-py's write and is swallowed, the command goes on to read a reply that never comes: before,
    # the call waited out the client's 1 s socket timeout (so did the request behind it) instead of its budget.
    server = RedisServer().start()
    client = await create_redis(server.url, "single", 0.25)  # the gateway's settings: socket_timeout 1 s
    assert server.proc is not None
    pid = server.proc.pid
    guard = RedisGuard(Metrics(), "cache", 0.0, failures_to_open=1000)
    loop = asyncio.get_running_loop()
    took: list[float] = []
    errors: list[str] = []
    try:
        for n in range(12):
            await client.ping()  # a connected pool connection (a cancelled command drops its own)
            os.kill(pid, signal.SIGSTOP)

            async def stalled(n: int = n) -> object:
                await hops(n)  # shifts the command against the deadline's fixed turn
                return await client.get("k")

            started = loop.time()
            with pytest.raises(RedisUnavailable) as caught:
                await asyncio.wait_for(guard.call(stalled), 10)
            took.append(loop.time() - started)
            errors.append(str(caught.value))
            os.kill(pid, signal.SIGCONT)
    finally:
        os.kill(pid, signal.SIGCONT)
        await client.aclose()
        server.stop()
    if sys.version_info < (3, 12):  # the sweep reached the window where redis-py's write swallows a cancel
        assert any("cancelled again" in e for e in errors), errors
    assert max(took) < 0.5, (took, errors)  # before: ~1.0 s where the cancel was swallowed
    assert guard._breakers[""].failures == len(errors)
    assert asyncio.current_task().cancelling() == 0  # every cancel of the guard's own taken back
