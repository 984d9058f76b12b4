"""Hot reload: file edits (in place and by rename), SIGHUP, and an invalid file keeping the old policy."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from gateway.config.loader import load_policy
from gateway.config.reload import PolicyWatcher
from gateway.config.schema import Policy
from gateway.metrics import Metrics

POLICY = """\
backends:
  local: {type: engine, model: smollm2-135m}
routes:
  - match: {model: "smollm2*"}
    backends: [local]
    retries: RETRIES
"""


def write(path: Path, retries: int | str) -> None:
    path.write_text(POLICY.replace("RETRIES", str(retries)))


def reloads(metrics: Metrics, result: str) -> float:
    return metrics.registry.get_sample_value("gateway_policy_reloads_total", {"result": result}) or 0.0


class Recorder:
    """on_change target: keeps every policy it is given and wakes waiters."""

    def __init__(self) -> None:
        self.policies: list[Policy] = []
        self.changed = asyncio.Event()

    async def __call__(self, policy: Policy) -> None:
        self.policies.append(policy)
        self.changed.set()

    async def next(self) -> Policy:
        await asyncio.wait_for(self.changed.wait(), 10)  # a guard against hanging, not a timing assertion
        self.changed.clear()
        return self.policies[-1]


async def until(condition, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    write(path, 1)
    return path


async def test_file_edit_in_place_reloads(policy_file: Path) -> None:
    metrics, rec = Metrics(), Recorder()
    watcher = PolicyWatcher(policy_file, rec, metrics, interval_s=0.02, current=load_policy(policy_file))
    await watcher.start()
    try:
        write(policy_file, 3)
        new = await rec.next()
        assert new.routes[0].retries == 3 and watcher.digest == new.digest
        assert reloads(metrics, "ok") == 1 and reloads(metrics, "error") == 0
    finally:
        await watcher.stop()


async def test_editor_style_replace_by_rename_reloads(policy_file: Path) -> None:
    metrics, rec = Metrics(), Recorder()
    watcher = PolicyWatcher(policy_file, rec, metrics, interval_s=0.02)
    await watcher.start()
    try:
        tmp = policy_file.with_suffix(".yaml.swp")
        write(tmp, 4)
        os.replace(tmp, policy_file)
        assert (await rec.next()).routes[0].retries == 4
    finally:
        await watcher.stop()


async def test_invalid_file_keeps_old_policy_counts_error_then_recovers(
    policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics, rec = Metrics(), Recorder()
    old = load_policy(policy_file)
    watcher = PolicyWatcher(policy_file, rec, metrics, interval_s=0.02, current=old)
    await watcher.start()
    try:
        write(policy_file, -2)
        await until(lambda: reloads(metrics, "error") == 1, "error counted")
        assert rec.policies == [] and watcher.digest == old.digest
        assert "policy.yaml:6: routes[0].retries: must be >= 0, got -2" in caplog.text
        write(policy_file, 5)
        assert (await rec.next()).routes[0].retries == 5
        assert reloads(metrics, "ok") == 1 and reloads(metrics, "error") == 1
    finally:
        await watcher.stop()


async def test_unchanged_content_does_not_call_on_change(policy_file: Path) -> None:
    metrics, rec = Metrics(), Recorder()
    watcher = PolicyWatcher(policy_file, rec, metrics, interval_s=3600, current=load_policy(policy_file))
    await watcher.start()
    try:
        os.utime(policy_file, ns=(1, 1))  # stamp differs, content does not
        assert await watcher.reload_now() is False
        assert rec.policies == [] and reloads(metrics, "ok") == 0
    finally:
        await watcher.stop()


async def test_sighup_reloads(policy_file: Path) -> None:
    metrics, rec = Metrics(), Recorder()
    watcher = PolicyWatcher(policy_file, rec, metrics, interval_s=3600, current=load_policy(policy_file))
    await watcher.start(sighup=False)
    assert watcher.install_sighup(), "SIGHUP handler must install in the main thread's loop"
    try:
        write(policy_file, 7)  # polling is an hour away: only the signal can pick this up
        os.kill(os.getpid(), signal.SIGHUP)
        assert (await rec.next()).routes[0].retries == 7
    finally:
        await watcher.stop()


async def test_sync_callback_and_failing_callback(policy_file: Path) -> None:
    metrics = Metrics()
    seen: list[Policy] = []

    def apply(policy: Policy) -> None:
        if policy.routes[0].retries == 9:
            raise RuntimeError("cannot build backends")
        seen.append(policy)

    watcher = PolicyWatcher(policy_file, apply, metrics, interval_s=3600, current=load_policy(policy_file))
    await watcher.start()
    try:
        write(policy_file, 9)
        assert await watcher.reload_now() is False and reloads(metrics, "error") == 1
        write(policy_file, 2)
        assert await watcher.reload_now() is True and seen[-1].routes[0].retries == 2
    finally:
        await watcher.stop()


async def test_missing_file_keeps_policy_until_it_returns(policy_file: Path) -> None:
    metrics, rec = Metrics(), Recorder()
    watcher = PolicyWatcher(policy_file, rec, metrics, interval_s=0.02, current=load_policy(policy_file))
    await watcher.start()
    try:
        await asyncio.to_thread(policy_file.unlink)
        await asyncio.sleep(0.1)  # several polls see no file; none may count as a failed reload
        assert reloads(metrics, "error") == 0 and rec.policies == []
        write(policy_file, 6)
        assert (await rec.next()).routes[0].retries == 6
    finally:
        await watcher.stop()


async def test_start_installs_sighup_by_default_and_stop_removes_it(policy_file: Path) -> None:
    metrics, rec = Metrics(), Recorder()
    watcher = PolicyWatcher(policy_file, rec, metrics, interval_s=3600, current=load_policy(policy_file))
    await watcher.start()
    try:
        write(policy_file, 8)
        os.kill(os.getpid(), signal.SIGHUP)
        assert (await rec.next()).routes[0].retries == 8
    finally:
        await watcher.stop()
    loop = asyncio.get_running_loop()
    assert loop.remove_signal_handler(signal.SIGHUP) is False  # nothing left installed


async def test_symlink_swap_reloads(tmp_path: Path) -> None:
    """Kubernetes ConfigMap volumes update by re-pointing a symlink; the watcher follows the link."""
    first, second, link = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "policy.yaml"
    write(first, 1)
    write(second, 2)
    link.symlink_to(first)
    metrics, rec = Metrics(), Recorder()
    watcher = PolicyWatcher(link, rec, metrics, interval_s=0.02, current=load_policy(link))
    await watcher.start(sighup=False)
    try:
        tmp_link = tmp_path / "policy.yaml.new"
        tmp_link.symlink_to(second)
        os.replace(tmp_link, link)
        assert (await rec.next()).routes[0].retries == 2
    finally:
        await watcher.stop()
