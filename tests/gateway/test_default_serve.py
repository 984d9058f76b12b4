"""The first README command: `llm-gateway serve` with no policy serves SmolLM2 from the bundled engine, with
the embedded Redis and both cache layers, and the cache survives a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tests.gateway.test_serve import wait_ready
from tests.helpers import free_port


def start(home: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["HOME"] = str(home)  # the default data dir is ~/.local/share/llm-gateway
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--log-level", "WARNING"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def ask(url: str) -> tuple[str, str]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="any", max_retries=0, timeout=120)
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2-135m", messages=[{"role": "user", "content": "Name one colour."}], max_tokens=8, temperature=0
    )
    return raw.parse().choices[0].message.content or "", raw.headers["x-cache"]


def test_default_serve_answers_and_keeps_its_cache_across_restart(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(tmp_path, port)
    try:
        wait_ready(url, proc, timeout=180)
        text, cache = ask(url)
        assert text and cache == "MISS"
        assert ask(url) == (text, "HIT-EXACT")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    data = tmp_path / ".local" / "share" / "llm-gateway" / "redis"
    assert data.is_dir() and any(data.iterdir())  # the embedded Redis kept its files in the data dir
    proc = start(tmp_path, port)
    try:
        wait_ready(url, proc, timeout=180)
        assert ask(url) == (text, "HIT-EXACT")  # served from the persisted cache, no engine call
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def test_default_policy_takes_its_data_dir_from_llm_gateway_data_else_the_users_home(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    from gateway.cli import default_policy_path
    from gateway.config.loader import load_policy

    monkeypatch.setenv("LLM_GATEWAY_DATA", str(tmp_path / "data"))
    assert load_policy(default_policy_path()).server.data_dir == tmp_path / "data"
    monkeypatch.delenv("LLM_GATEWAY_DATA")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # read when the policy loads, not when Python started
    assert load_policy(default_policy_path()).server.data_dir == tmp_path / "home" / ".local/share/llm-gateway"


def test_serve_starts_the_embedded_redis_under_llm_gateway_data(tmp_path: Path, monkeypatch) -> None:
    from gateway import cli

    workers: list[str] = []
    monkeypatch.setattr(cli, "run_worker", lambda path, watch, redis_url, *a, **k: workers.append(redis_url))
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("LLM_GATEWAY_DATA", str(tmp_path / "data"))
    assert cli.serve(cli.build_parser().parse_args(["serve"])) == 0
    assert workers == [f"unix://{tmp_path / 'data' / 'redis' / 'redis.sock'}"]
    assert (tmp_path / "data" / "redis" / "redis.log").exists()


def test_embedded_redis_never_uses_another_users_dir(tmp_path: Path, monkeypatch) -> None:
    from gateway import embedded_redis

    monkeypatch.setattr(embedded_redis.os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    redis = embedded_redis.EmbeddedRedis(tmp_path)
    with pytest.raises(RuntimeError, match="belongs to another user.*LLM_GATEWAY_DATA"):
        redis.start()
    assert redis.proc is None
