"""A timeout for millisecond budgets that does not count the event loop's own lag against the awaited call.

`asyncio.timeout(0.005)` measures wall time. On a busy gateway one turn of the loop (every ready callback of
every request in flight) can take longer than 5 ms, so a Redis reply that sits in the socket buffer after
0.1 ms is still "late": the timer fires in the same turn the reply would have been read, the lookup becomes a
miss, five of those open the breaker, and the cache switches itself off exactly when the gateway is busiest.

`LoopTimeout` fires only once the delay has passed *and* the loop has polled for I/O a few more times since: a
reply that had arrived is read (and wins) first, while a Redis that really is slow or gone still fails within
the delay plus a few turns. Semantics otherwise follow `asyncio.timeout`: the body is cancelled and the
context raises TimeoutError; a cancellation from elsewhere passes through untouched.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

# Turns of the loop granted after the delay: one for the poll that reads a reply already in the buffer, one
# for the callbacks it queued, one so the awaiting task's wake-up (queued by those) runs before the cancel.
GRACE_TURNS = 3
# Least time between two cancels into a body that outlives them (a tiny budget must not spin the loop).
RECANCEL_MIN_S = 0.001


class LoopTimeout:
    __slots__ = ("_delay", "_loop", "_task", "_handle", "_sent", "_cancelling")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._sent = 0  # cancels this deadline sent into the body

    async def __aenter__(self) -> LoopTimeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("LoopTimeout must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.Handle = self._loop.call_later(self._delay, self._turn, GRACE_TURNS)
        return self

    def _turn(self, left: int) -> None:
        # Each call_soon hop lands in the next turn of the loop, after that turn's I/O poll.
        if left:
            self._handle = self._loop.call_soon(self._turn, left - 1)
            return
        self._sent += 1
        self._task.cancel()
        # Still inside the body another delay from now: the cancel was swallowed (see __aexit__) and the body
        # waits for a reply that may never come, up to redis-py's socket timeout (1 s, where the budget is
        # milliseconds). Cancel again, as often as it takes: a cancel that was delivered ends the body within
        # a turn, so this fires only for one that was lost.
        self._handle = self._loop.call_later(max(self._delay, RECANCEL_MIN_S), self._turn, GRACE_TURNS)

    def expired(self) -> bool:
        return self._sent > 0

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._handle.cancel()
        task = self._task
        for _ in range(self._sent):  # take back every cancel of this deadline's own
            task.uncancel()
        if self._sent and task.cancelling() <= self._cancelling and exc_type is asyncio.CancelledError:
            if self._sent > 1:
                raise TimeoutError("deadline passed (cancelled again: its first cancel was swallowed inside the "
                                   "awaited call)") from exc
            raise TimeoutError from exc
        if exc_type is None:
            # The body returned although a cancel was sent into it: on Python 3.11 redis-py writes each command
            # under `asyncio.wait_for`, which returns the write's result instead of raising when a cancel lands
            # after the write finished but before wait_for resumed (the cause of semantic.py's follower hang,
            # see SemanticCache.close); the command then reads its reply as if nothing happened. Answer as the
            # delivered cancel would have been: a caller's cancel (still counted by the task, never
            # uncancelled) raises CancelledError, so a request whose client has gone does not go on; this
            # deadline's own raises TimeoutError, so a reply that came only after it is a failure, not a
            # success that resets a breaker while Redis is slow.
            if task.cancelling() > self._cancelling:
                raise asyncio.CancelledError
            if self._sent:
                raise TimeoutError("reply after the deadline (its cancel was swallowed inside the awaited call)")


def retrieve(fut: asyncio.Future) -> None:
    """A done callback for a future nobody may await any more (abandoned after a timeout, a cancel, or a
    client that left): read its outcome, so its error is not logged as never retrieved."""
    if not fut.cancelled():
        fut.exception()
