"""`llm-gateway serve` as users run it: several workers on one port, the embedded Redis, reload, shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.helpers import free_port


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"gateway exited with {proc.returncode}: {proc.stderr.read().decode()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("gateway did not start")


@pytest.fixture
def policy_file(tmp_path: Path, fake_openai) -> Path:
    _, up = fake_openai
    path = tmp_path / "policy.yaml"
    path.write_text(f"""
redis: {{url: embedded}}
server: {{data_dir: "{tmp_path / 'data'}"}}
tenants:
  - {{name: team, api_keys: [team-key], limits: {{rpm: 6}}}}
backends:
  up: {{type: openai, base_url: "{up.url}/v1"}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
""")
    return path


def serve(policy: Path, port: int, workers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--policy", str(policy), "--port", str(port),
         "--workers", str(workers), "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def test_workers_share_limits_through_embedded_redis_and_stop_cleanly(policy_file: Path, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = serve(policy_file, port, workers=2)
    try:
        wait_ready(url, proc)
        socket_path = tmp_path / "data" / "redis" / "redis.sock"
        assert socket_path.exists()  # the embedded redis-server runs on a unix socket in the data dir
        client = openai.OpenAI(base_url=url + "/v1", api_key="team-key", max_retries=0)
        statuses = []
        for i in range(10):  # new connections each time, so the kernel spreads them over both workers
            with httpx.Client() as h:
                r = h.post(url + "/v1/chat/completions", headers={"Authorization": "Bearer team-key"},
                           json={"model": "fake-model", "messages": [{"role": "user", "content": f"n{i}"}]})
                statuses.append(r.status_code)
        assert statuses.count(200) == 6 and statuses.count(429) == 4, statuses  # one limit across processes
        assert client.models.list().data[0].id == "fake-model"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0
    time.sleep(0.5)
    assert not (tmp_path / "data" / "redis" / "redis.sock").exists() or not _redis_alive(tmp_path)
    assert (tmp_path / "data" / "redis" / "appendonly.aof").exists() or any((tmp_path / "data" / "redis").glob("appendonly*"))


def _redis_alive(tmp_path: Path) -> bool:
    import socket

    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(os.fspath(tmp_path / "data" / "redis" / "redis.sock"))
            return True
    except OSError:
        return False


def test_policy_reload_on_file_change_and_sighup(policy_file: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = serve(policy_file, port, workers=1)
    try:
        wait_ready(url, proc)
        body = {"model": "renamed-model", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Authorization": "Bearer team-key"}
        assert httpx.post(url + "/v1/chat/completions", json=body, headers=headers).status_code == 404
        policy_file.write_text(policy_file.read_text().replace("model: fake-model", "model: renamed-model"))
        os.kill(proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while httpx.post(url + "/v1/chat/completions", json=body, headers=headers).status_code != 200:
            assert time.monotonic() < deadline, "new policy never applied"
            time.sleep(0.2)
        policy_file.write_text("routes: [this is not valid")  # a broken file keeps the running policy
        os.kill(proc.pid, signal.SIGHUP)
        time.sleep(1.5)
        assert httpx.post(url + "/v1/chat/completions", json=body, headers=headers).status_code == 200
        metrics = httpx.get(url + "/metrics").text
        assert 'gateway_policy_reloads_total{result="error"}' in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_bad_policy_fails_start_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("backends:\n  up: {type: openai}\nroutes:\n  - match: {model: x}\n    backends: [nope]\n")
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--policy", str(path), "--port",
                           str(free_port())], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "bad.yaml:" in proc.stderr and "nope" in proc.stderr


def test_a_gateway_leaves_the_embedded_redis_to_serve(policy_file: Path) -> None:
    # one owner: `llm-gateway serve` starts the embedded server for all its workers; a Gateway built on the
    # policy as written (no redis_url from the CLI) says so instead of starting a second one
    from gateway.app import create_app
    from gateway.config.loader import load_policy

    with pytest.raises(ValueError, match="llm-gateway serve"):
        create_app(load_policy(policy_file))
