"""Peak memory of the test run: the pytest process and its whole process tree, sampled in a thread; freed
memory handed back to the system between test modules.

`.ci/run` prints the summary line; the per-test growth table names what holds memory when the peak climbs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import threading

import psutil
import pytest

_MIB = 1024 * 1024
_libc_name = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_libc_name) if _libc_name and hasattr(ctypes.CDLL(_libc_name), "malloc_trim") else None  # glibc only


class RssWatch:
    """Samples RSS every `interval` s; `tree` sums pytest and every descendant (gateways, engines, redis)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.proc = psutil.Process()
        self.interval = interval
        self.peak_self = 0
        self.peak_tree = 0
        self.peak_test = ""
        self.current = ""
        self.growth: list[tuple[int, str]] = []
        self._module: object = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sample()

    def _tree_rss(self) -> tuple[int, int]:
        own = self.proc.memory_info().rss
        total = own
        for child in self.proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                continue
        return own, total

    def sample(self) -> None:
        own, total = self._tree_rss()
        self.peak_self = max(self.peak_self, own)
        if total > self.peak_tree:
            self.peak_tree = total
            self.peak_test = self.current

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except psutil.Error:
                continue

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # Between modules, hand freed memory back: torch's large temporaries leave glibc's heaps fragmented,
        # and the next module's engine would otherwise be stacked on top of the last one's free pages.
        if item.module is not self._module:
            self._module = item.module
            gc.collect()
            if _LIBC is not None:
                _LIBC.malloc_trim(0)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        self.current = item.nodeid
        before = self.proc.memory_info().rss
        yield
        self.growth.append((self.proc.memory_info().rss - before, item.nodeid))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        self.stop()
        top = sorted(self.growth, reverse=True)[: int(os.environ.get("RSS_TOP", "5"))]
        terminalreporter.write_line("largest growth of the pytest process's RSS, per test (setup to teardown):")
        for delta, nodeid in top:
            terminalreporter.write_line(f"  {delta / _MIB:+8.0f} MiB  {nodeid}")
        terminalreporter.write_line(
            f"peak RSS: {self.peak_tree / _MIB:.0f} MiB process tree, {self.peak_self / _MIB:.0f} MiB pytest "
            f"(tree peak during {self.peak_test or 'collection'})"
        )


def pytest_configure(config: pytest.Config) -> None:
    watch = RssWatch()
    config.pluginmanager.register(watch, "rss-watch")
    watch.start()
