"""LoopTimeout and a body that swallows its cancel (as redis-py's write under 3.11's wait_for can) and then waits
for something that does not come: the deadline cancels again, instead of leaving the wait to whatever bounds it
(redis-py's 1 s socket timeout). Independent of the Python version, unlike the sweep on a real Redis."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.deadline import LoopTimeout


async def swallow_then_wait(never: asyncio.Future) -> None:
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        pass  # swallowed, and the task's cancel count is left raised, as asyncio.wait_for on 3.11 leaves it
    await never


async def test_a_swallowed_deadline_cancel_is_sent_again() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def guarded() -> int:
        async with LoopTimeout(0.01):
            await swallow_then_wait(never)
        return 0

    async def caught() -> int:
        try:
            await guarded()
        except TimeoutError as e:
            assert "cancelled again" in str(e)
        return asyncio.current_task().cancelling()  # what the deadline left of its own cancels

    started = time.monotonic()
    # before: the body waited on `never` for good (this bound's TimeoutError, without the deadline's words)
    assert await asyncio.wait_for(caught(), 5) == 0
    assert time.monotonic() - started < 1.0  # two budgets and a few turns


async def test_a_callers_cancel_during_a_swallowed_deadline_is_still_the_callers() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    entered = asyncio.Event()

    async def guarded() -> None:
        async with LoopTimeout(0.05):
            entered.set()
            await swallow_then_wait(never)

    task = asyncio.create_task(guarded())
    await entered.wait()
    await asyncio.sleep(0.08)  # the deadline's cancel has been swallowed: the body waits on `never`
    task.cancel()  # the caller's own (a client that went away)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
