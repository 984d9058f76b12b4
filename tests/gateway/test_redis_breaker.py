"""The Redis circuit breaker half-opens: one probe after `open_s`, closed again by its success."""

from __future__ import annotations

import asyncio

import pytest

from gateway.metrics import Metrics
from gateway.redis_guard import RedisGuard, RedisUnavailable


async def test_half_open_probe_closes_or_reopens_the_breaker() -> None:
    guard = RedisGuard(Metrics(), "cache", timeout_s=1.0, failures_to_open=3, open_s=0.05)
    redis_up = False
    calls = 0

    async def op() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        if not redis_up:
            raise ConnectionError("down")
        return "ok"

    for _ in range(3):
        with pytest.raises(RedisUnavailable):
            await guard.call(op)
    assert guard.is_open and calls == 3
    with pytest.raises(RedisUnavailable, match="circuit open"):
        await guard.call(op)
    assert calls == 3  # refused without touching Redis
    await asyncio.sleep(guard.open_s * 2)  # past the open period
    with pytest.raises(RedisUnavailable):  # the probe fails: open again at once, not after 3 more failures
        await guard.call(op)
    assert guard.is_open and calls == 4
    redis_up = True
    await asyncio.sleep(guard.open_s * 2)  # past the open period
    probe = asyncio.create_task(guard.call(op))
    await asyncio.sleep(0)
    with pytest.raises(RedisUnavailable, match="circuit open"):  # one probe at a time
        await guard.call(op)
    assert await probe == "ok"
    assert not guard.is_open
    assert [await guard.call(op) for _ in range(3)] == ["ok"] * 3
