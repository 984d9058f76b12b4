"""Per-backend admission: at most `max_inflight` requests in flight, at most `max_queued` waiting for a slot,
and everything beyond that refused at once (a `shed` BackendError: 503 with Retry-After, or the route's
fallback), so a burst past capacity never becomes an unbounded queue that slows every request down.

`tenant_share` < 1 also keeps one tenant from taking a backend over: a tenant holds at most
max(1, floor(share x max_inflight)) of its slots and floor(share x max_queued) of its queue places; a request
beyond that is refused with a 429 (`TenantShareExceeded`) while other tenants still get in, and a queued
request of a tenant at its in-flight share waits for one of that tenant's own requests to end.

A `GatedBackend` wraps a backend and takes a slot around each call; a stream holds its slot until it is closed.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from gateway.backends.base import Backend, BackendError, Timeouts
from gateway.errors import GatewayError
from gateway.metrics import Metrics

T = TypeVar("T")
SHED_RETRY_AFTER_S = 1.0
# Engine backends are capped by default: a bundled engine runs up to 64 sequences per replica (max_num_seqs);
# a few batches' worth may wait, more would only make every request slower.
ENGINE_INFLIGHT_PER_REPLICA = 64
ENGINE_QUEUED_PER_REPLICA = 256


class TenantShareExceeded(BackendError):
    """A tenant asked for more of a backend than its `tenant_share`: the tenant's own 429, like a rate limit
    (OpenAI's `requests` type, `rate_limit_exceeded`), not an upstream failure."""

    def __init__(self, backend: str, tenant: str, inflight: int, queued: int) -> None:
        super().__init__(
            "tenant_share", f"Tenant '{tenant}' has {inflight} requests in flight and {queued} queued at backend "
            f"{backend}, its share of that backend; retry shortly.", 429, retryable=True,
            retry_after=SHED_RETRY_AFTER_S,
        )

    def to_gateway_error(self, request_id: str | None = None) -> GatewayError:
        ref = f" (request id {request_id})" if request_id else ""
        return GatewayError(429, self.message + ref, "requests", "rate_limit_exceeded",
                            headers={"Retry-After": str(max(1, round(self.retry_after or SHED_RETRY_AFTER_S)))})


class Admission:
    def __init__(
        self, name: str, max_inflight: int, max_queued: int, metrics: Metrics, tenant_share: float = 1.0
    ) -> None:
        self.name = name
        self.max_inflight = max_inflight
        self.max_queued = max_queued
        self.inflight = 0
        self._waiters: deque[tuple[asyncio.Future[None], str | None]] = deque()
        self._queued = metrics.backend_queued.labels(name)
        self._metrics = metrics
        # (slots, queue places) one tenant may hold; None when tenants are not told apart (share 1).
        self.tenant_caps: tuple[int, int] | None = None
        if tenant_share < 1:
            self.tenant_caps = (max(1, math.floor(tenant_share * max_inflight)), math.floor(tenant_share * max_queued))
        self.tenant_inflight: dict[str, int] = {}
        self.tenant_queued: dict[str, int] = {}

    def _shed(self) -> BackendError:
        self._metrics.upstream_errors.labels(self.name, "shed").inc()
        return BackendError(
            "shed", f"Backend {self.name} is at capacity ({self.max_inflight} in flight, {self.max_queued} "
            "queued); retry shortly.", 503, retryable=True, retry_after=SHED_RETRY_AFTER_S,
        )

    def _may_run(self, tenant: str | None) -> bool:
        """Whether a request of `tenant` may take a free slot: always, unless its tenant holds its share."""
        caps = self.tenant_caps
        return caps is None or tenant is None or self.tenant_inflight.get(tenant, 0) < caps[0]

    async def acquire(self, wait_s: float, tenant: str | None = None) -> None:
        counted = tenant if self.tenant_caps is not None else None  # tenants are tracked only under a share
        if counted is not None:
            assert self.tenant_caps is not None
            running, waiting = self.tenant_inflight.get(counted, 0), self.tenant_queued.get(counted, 0)
            if running + waiting >= sum(self.tenant_caps):
                self._metrics.upstream_errors.labels(self.name, "tenant_share").inc()
                raise TenantShareExceeded(self.name, counted, running, waiting)
        # A free slot is taken at once: queued requests never see one free unless their tenant is at its share
        # (release() hands a slot straight to the first waiter that may run).
        if self.inflight < self.max_inflight and self._may_run(counted):
            self.inflight += 1
            _add(self.tenant_inflight, counted, 1)
            return
        if len(self._waiters) >= self.max_queued:
            raise self._shed()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (fut, counted)
        self._waiters.append(entry)
        _add(self.tenant_queued, counted, 1)
        self._queued.inc()
        try:
            async with asyncio.timeout(wait_s):
                await fut  # release() hands its slot over by resolving this
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release(counted)  # the slot arrived as we gave up: pass it on
            else:
                fut.cancel()
                self._waiters.remove(entry)
                _add(self.tenant_queued, counted, -1)
            raise
        finally:
            self._queued.dec()

    def release(self, tenant: str | None = None) -> None:
        counted = tenant if self.tenant_caps is not None else None
        _add(self.tenant_inflight, counted, -1)
        for i, (fut, waiter) in enumerate(self._waiters):
            # A waiter cancelled (timed out, client gone) stays listed until its task runs again and removes
            # itself: its future is done, and handing it the slot would raise and leak the slot.
            if not fut.done() and self._may_run(waiter):
                del self._waiters[i]  # the slot goes straight to this waiter; inflight is unchanged
                _add(self.tenant_queued, waiter, -1)
                _add(self.tenant_inflight, waiter, 1)
                fut.set_result(None)
                return
        self.inflight -= 1


def _add(counts: dict[str, int], tenant: str | None, n: int) -> None:
    """Per-tenant counts; a tenant at zero leaves the dict, so it never grows with tenants long gone."""
    if tenant is None:
        return
    value = counts.get(tenant, 0) + n
    if value:
        counts[tenant] = value
    else:
        counts.pop(tenant, None)


class GatedBackend:
    """A backend behind an Admission. Everything other than the request methods is the backend's own.
    `for_tenant` gives the view whose calls count against that tenant's share."""

    def __init__(self, backend: Backend, admission: Admission, tenant: str | None = None) -> None:
        self._backend = backend
        self.admission = admission
        self.name = backend.name
        self.tenant = tenant

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._backend, attr)

    def for_tenant(self, tenant: str) -> GatedBackend:
        if self.admission.tenant_caps is None:
            return self  # no share to count against: the one shared view will do
        return GatedBackend(self._backend, self.admission, tenant)

    async def _call(self, timeouts: Timeouts, op: Callable[[], Awaitable[T]]) -> T:
        await self._slot(timeouts)
        try:
            return await op()
        finally:
            self.admission.release(self.tenant)

    async def _slot(self, timeouts: Timeouts) -> None:
        try:
            await self.admission.acquire(timeouts.first_byte, self.tenant)
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
            self.admission.release(self.tenant)

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


def gate(
    backend: Backend, max_inflight: int | None, max_queued: int | None, metrics: Metrics, tenant_share: float = 1.0
) -> Backend:
    """The backend behind its caps, or as it is when it has none."""
    if max_inflight is None:
        return backend
    admission = Admission(backend.name, max_inflight, max_queued or 0, metrics, tenant_share)
    return GatedBackend(backend, admission)  # type: ignore[return-value]


def for_tenant(backend: Backend, tenant: str | None) -> Backend:
    """The backend as a tenant's request uses it: counted against the tenant's share when its backend has one."""
    if tenant is None or not isinstance(backend, GatedBackend):
        return backend
    return backend.for_tenant(tenant)  # type: ignore[return-value]
