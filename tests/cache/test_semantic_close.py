"""SemanticCache.close() is bounded: a background task that does not end on cancel must not hold shutdown."""

from __future__ import annotations

import asyncio

from gateway.cache.semantic import cancel_and_wait


async def test_a_task_that_outlives_its_cancel_is_left_behind_not_awaited_forever() -> None:
    stuck_forever = asyncio.get_running_loop().create_future()

    async def swallows_cancel() -> None:  # what a cancelled XREAD stuck in its connection clean-up looks like
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
