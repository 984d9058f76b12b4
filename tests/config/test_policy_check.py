"""`llm-gateway policy check FILE...`: exit codes and `file:line: key: message` output, through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config.check import main

GOOD = """\
backends:
  local: {type: engine, model: smollm2-135m}
routes:
  - match: {model: "smollm2*"}
    backends: [local]
"""
BAD = """\
backends:
  local: {type: engine, model: smollm2-135m}
routes:
  - match: {model: "smollm2*"}
    backends: [lokal]
    retries: -1
"""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "check", *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )


def test_cli_valid_file_exits_0_with_one_ok_line(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    result = cli(str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: OK: 1 route(s), 1 backend(s), no API keys")


def test_cli_invalid_file_exits_1_with_file_line_key_message(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    result = cli(str(path))
    assert result.returncode == 1
    assert result.stdout.strip().splitlines() == [
        f"{path}:5: routes[0].backends[0]: unknown backend 'lokal' (did you mean 'local'?)",
        f"{path}:6: routes[0].retries: must be >= 0, got -1",
    ]


def test_cli_missing_env_var_is_an_error_and_setting_it_fixes_it(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(GOOD.replace("{type: engine, model: smollm2-135m}", "\n    type: engine\n    model: smollm2-135m\n    replicas: ${REPLICAS_X}"))
    env = {k: v for k, v in os.environ.items() if k != "REPLICAS_X"}
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "check", str(path)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == 1 and f"{path}:5: backends.local.replicas: environment variable REPLICAS_X" in result.stdout
    assert len(result.stdout.strip().splitlines()) == 1  # reported once, not again as a type error
    assert cli(str(path), env={"REPLICAS_X": "2"}).returncode == 0


def test_cli_unreadable_file_and_usage_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = cli(str(missing))
    assert result.returncode == 1 and result.stdout.startswith(f"{missing}: cannot read policy")
    assert cli().returncode == 2  # argparse: FILE is required


def test_several_files_fail_if_any_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(BAD)
    assert main([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{good}: OK" in out and f"{bad}:5: routes[0].backends[0]" in out
    assert main([str(good)]) == 0


def test_summary_counts_keys_and_hides_redis_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD + "tenants:\n  - {name: a, api_keys: [k1, k2]}\nredis: {url: 'redis://:hunter2@db:6379/0'}\n")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 tenant(s), 2 API key(s)" in out and "redis://***@db:6379/0" in out and "hunter2" not in out
