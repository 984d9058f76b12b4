"""LoopTimeout: a millisecond budget that a busy event loop's own lag does not spend."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.deadline import LoopTimeout


async def test_a_reply_that_arrived_during_a_lagging_turn_wins() -> None:
    """The loop is busy past the deadline (one long turn, as under load) and the reply lands right after it:
    asyncio.timeout would cancel the lookup in that same turn; LoopTimeout lets the reply be read first."""
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[str] = loop.create_future()

    def busy_turn() -> None:
        time.sleep(0.02)  # other requests' work: 4x the 5 ms budget
        loop.call_soon(reply.set_result, "value")

    loop.call_soon(busy_turn)
    async with LoopTimeout(0.005):
        assert await reply == "value"


async def test_a_reply_that_never_comes_times_out() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        async with LoopTimeout(0.001) as t:
            await never
    assert t.expired()


async def test_a_cancel_from_elsewhere_is_not_a_timeout() -> None:
    async def body() -> None:
        async with LoopTimeout(10):
            await asyncio.sleep(10)

    task = asyncio.ensure_future(body())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
