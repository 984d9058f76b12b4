"""Hot reload of the policy file: polling (mtime, size, inode, then digest) and SIGHUP.

A valid new policy goes to `on_change`; an invalid one keeps the old policy, logs every error line and counts
`gateway_policy_reloads_total{result="error"}`. Polling by path (not by open file) follows editors that
write a new file and rename it over the old one.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway.config.errors import PolicyError, PolicyRefused
from gateway.config.loader import load_policy
from gateway.config.schema import Policy
from gateway.metrics import Metrics

log = logging.getLogger("gateway.config.reload")

OnChange = Callable[[Policy], Awaitable[None] | None]
FileStamp = tuple[int, int, int]  # (mtime_ns, size, inode)
_sighup_owner: PolicyWatcher | None = None
SETTLE_S = 0.05  # a file still being written changes again within this; wait for it to settle


def _stamp(path: Path) -> FileStamp | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class PolicyWatcher:
    """Watches one policy file. `current` is the policy already in use (its digest is the baseline)."""

    def __init__(
        self,
        path: str | Path,
        on_change: OnChange,
        metrics: Metrics,
        interval_s: float = 1.0,
        *,
        current: Policy | None = None,
    ) -> None:
        self.path = Path(path)
        self.on_change = on_change
        self.metrics = metrics
        self.interval_s = interval_s
        self.digest = current.digest if current is not None else None
        self._stamp: FileStamp | None = None
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._sighup_loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task] = set()
        self._missing_logged = False

    async def start(self, *, sighup: bool = True) -> None:
        """Record the file's state (loading it for a baseline if no `current` was given), start polling and,
        with sighup=True, reload on SIGHUP where this loop can take signals (see install_sighup)."""
        self._stamp = await asyncio.to_thread(_stamp, self.path)
        if self.digest is None:
            try:
                self.digest = (await asyncio.to_thread(load_policy, self.path)).digest
            except PolicyError as e:
                log.warning("policy %s is invalid at watch start; waiting for a valid version:\n%s", self.path, e)
        else:
            await self.reload_now()  # it may have changed between the caller's load and now
        self._task = asyncio.create_task(self._poll(), name=f"policy-watch:{self.path.name}")
        if sighup and not self.install_sighup():
            log.info("SIGHUP reload unavailable here (not the main thread); file polling still reloads")

    async def stop(self) -> None:
        self.remove_sighup()
        tasks = [t for t in (self._task, *self._pending) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._task = None

    def install_sighup(self) -> bool:
        """Reload on SIGHUP. False where signals cannot be handled (not the main thread, or Windows)."""
        global _sighup_owner
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            return False
        self._sighup_loop = loop
        _sighup_owner = self  # a process has one SIGHUP handler: the latest watcher takes it
        return True

    def remove_sighup(self) -> None:
        global _sighup_owner
        if self._sighup_loop is not None and _sighup_owner is self:
            self._sighup_loop.remove_signal_handler(signal.SIGHUP)
            _sighup_owner = None
        self._sighup_loop = None

    def _on_sighup(self) -> None:
        log.info("SIGHUP: reloading policy %s", self.path)
        task = asyncio.create_task(self.reload_now())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                stamp = await asyncio.to_thread(_stamp, self.path)
                if stamp is None:
                    if not self._missing_logged:  # editors may delete-then-write; keep the old policy meanwhile
                        log.warning("policy file %s is missing; keeping the current policy", self.path)
                        self._missing_logged = True
                    continue
                self._missing_logged = False
                if stamp == self._stamp:
                    continue
                await asyncio.sleep(SETTLE_S)
                if await asyncio.to_thread(_stamp, self.path) != stamp:
                    continue  # still being written: look again next tick
                await self.reload_now()
            except asyncio.CancelledError:
                raise
            except Exception:  # the watcher must outlive any one bad reload
                log.exception("policy watcher error")

    async def reload_now(self) -> bool:
        """Load the file now; apply it if valid and different. True when a new policy was applied."""
        async with self._lock:
            self._stamp = await asyncio.to_thread(_stamp, self.path)
            try:
                policy = await asyncio.to_thread(load_policy, self.path)
            except PolicyError as e:
                self.metrics.policy_reloads.labels(result="error").inc()
                log.error("policy reload failed; keeping the current policy:\n%s", e)
                return False
            if policy.digest == self.digest:
                return False
            try:
                result = self.on_change(policy)
                if inspect.isawaitable(result):
                    await result
            except PolicyRefused as e:
                self.metrics.policy_reloads.labels(result="error").inc()
                log.error("policy reload from %s refused; keeping the current policy: %s", self.path, e)
                return False
            except Exception:
                self.metrics.policy_reloads.labels(result="error").inc()
                log.exception("applying the reloaded policy %s failed; keeping the current policy", self.path)
                return False
            self.digest = policy.digest
            self.metrics.policy_reloads.labels(result="ok").inc()
            log.info("policy reloaded from %s (digest %s)", self.path, policy.digest[:12])
            return True
