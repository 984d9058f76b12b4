"""Per-backend admission: at most `max_inflight` requests in flight, at most `max_queued` waiting for a slot,
and everything beyond that refused at once (a `shed` BackendError: 503 with Retry-After, or the route's
fallback), so a burst past capacity never becomes an unbounded queue that slows every request down.

A `GatedBackend` wraps a backend and takes a slot around each call; a stream holds its slot until it is closed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from gateway.backends.base import Backend, BackendError, Timeouts
from gateway.metrics import Metrics

T = TypeVar("T")
SHED_RETRY_AFTER_S = 1.0
# Engine backends are capped by default: a bundled engine runs up to 64 sequences per replica (max_num_seqs);
# a few batches' worth may wait, more would only make every request slower.
ENGINE_INFLIGHT_PER_REPLICA = 64
ENGINE_QUEUED_PER_REPLICA = 256


class Admission:
    def __init__(self, name: str, max_inflight: int, max_queued: int, metrics: Metrics) -> None:
        self.name = name
        self.max_inflight = max_inflight
        self.max_queued = max_queued
        self.inflight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._queued = metrics.backend_queued.labels(name)
        self._metrics = metrics

    def _shed(self) -> BackendError:
        self._metrics.upstream_errors.labels(self.name, "shed").inc()
        return BackendError(
            "shed", f"Backend {self.name} is at capacity ({self.max_inflight} in flight, {self.max_queued} "
            "queued); retry shortly.", 503, retryable=True, retry_after=SHED_RETRY_AFTER_S,
        )

    async def acquire(self, wait_s: float) -> None:
        if self.inflight < self.max_inflight and not self._waiters:
            self.inflight += 1
            return
        if len(self._waiters) >= self.max_queued:
            raise self._shed()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._queued.inc()
        try:
            async with asyncio.timeout(wait_s):
                await fut  # release() hands its slot over by resolving this
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot arrived as we gave up: pass it on
            else:
                fut.cancel()
            raise
        finally:
            self._queued.dec()
            if fut in self._waiters:
                self._waiters.remove(fut)

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot goes straight to the next waiter; inflight is unchanged
                return
        self.inflight -= 1


class GatedBackend:
    """A backend behind an Admission. Everything other than the request methods is the backend's own."""

    def __init__(self, backend: Backend, admission: Admission) -> None:
        self._backend = backend
        self.admission = admission
        self.name = backend.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._backend, attr)

    async def _call(self, timeouts: Timeouts, op: Callable[[], Awaitable[T]]) -> T:
        await self._slot(timeouts)
        try:
            return await op()
        finally:
            self.admission.release()

    async def _slot(self, timeouts: Timeouts) -> None:
        try:
            await self.admission.acquire(timeouts.first_byte)
        except TimeoutError:
            raise BackendError("timeout", f"no slot on backend {self.name} within {timeouts.first_byte}s", 504,
                               retryable=True) from None

    async def _stream(self, timeouts: Timeouts, open_: Callable[[], AsyncIterator[dict]]) -> AsyncIterator[dict]:
        await self._slot(timeouts)
        try:
            async with aclosing(open_()) as stream:  # type: ignore[type-var]
                async for chunk in stream:
                    yield chunk
        finally:
            self.admission.release()

    async def chat(self, body: dict, timeouts: Timeouts) -> dict:
        return await self._call(timeouts, lambda: self._backend.chat(body, timeouts))

    async def completions(self, body: dict, timeouts: Timeouts) -> dict:
        return await self._call(timeouts, lambda: self._backend.completions(body, timeouts))

    async def embeddings(self, body: dict, timeouts: Timeouts) -> dict:
        return await self._call(timeouts, lambda: self._backend.embeddings(body, timeouts))

    def chat_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        return self._stream(timeouts, lambda: self._backend.chat_stream(body, timeouts))

    def completions_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        return self._stream(timeouts, lambda: self._backend.completions_stream(body, timeouts))


def gate(backend: Backend, max_inflight: int | None, max_queued: int | None, metrics: Metrics) -> Backend:
    """The backend behind its caps, or as it is when it has none."""
    if max_inflight is None:
        return backend
    return GatedBackend(backend, Admission(backend.name, max_inflight, max_queued or 0, metrics))  # type: ignore[return-value]
