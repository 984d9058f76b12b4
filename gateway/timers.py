"""One deadline timer per long-lived object, cheap to move: what the front's idle connections and the upstream
client's exchanges both need."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LazyTimer:
    """Calls `on_expire()` once the loop's time reaches `deadline`, with one TimerHandle that is rarely made
    anew. A keep-alive connection moves its deadline on every request; a `call_at` and a `cancel` each time
    cost more than the request's own timing work. So `arm` to a later time only changes `deadline`: the handle
    fires at its old time, sees the later deadline and sleeps again until it. Only an earlier deadline replaces
    the handle. `disarm` leaves the handle to fire and do nothing; `drop` cancels it (the object is done)."""

    __slots__ = ("_loop", "_on_expire", "_handle", "deadline")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_expire: Callable[[], None]) -> None:
        self._loop = loop
        self._on_expire = on_expire
        self._handle: asyncio.TimerHandle | None = None
        self.deadline: float | None = None  # loop time; None: disarmed

    def arm(self, deadline: float) -> None:
        self.deadline = deadline
        handle = self._handle
        if handle is None or handle.when() > deadline:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(deadline, self._fire)

    def disarm(self) -> None:
        self.deadline = None

    def drop(self) -> None:
        self.deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        deadline = self.deadline
        if deadline is None:
            return  # disarmed since: nothing is due
        if self._loop.time() < deadline:  # moved later since the handle was set: sleep until then
            self._handle = self._loop.call_at(deadline, self._fire)
            return
        self.deadline = None
        self._on_expire()
