"""`llm-gateway engine`: argument parsing, clear start-up errors, and a real replica served end to end."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from engine.serving.cli import build_parser, config_from_args, main, parse_size
from tests.helpers import free_port


@pytest.mark.parametrize(("text", "expected"), [
    ("536870912", 536870912), ("512MiB", 512 * 2**20), ("0.5GiB", 2**29), ("2GB", 2 * 10**9),
    ("64k", 64_000), ("1e9", 10**9), (" 16 mib ", 16 * 2**20),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "12XB", "-5MiB", "0", "MiB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_flags_reach_the_engine_config() -> None:
    args = build_parser().parse_args([
        "--model", "smollm2-135m", "--device", "cpu", "--load-format", "dummy", "--kv-cache-memory", "64MiB",
        "--max-num-seqs", "8", "--max-num-batched-tokens", "512", "--max-model-len", "1024", "--no-prefix-caching"])
    config = config_from_args(args)
    assert (config.device, config.load_format, config.kv_cache_memory) == ("cpu", "dummy", 64 * 2**20)
    assert (config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len) == (8, 512, 1024)
    assert config.enable_prefix_caching is False
    assert config.enable_chunked_prefill is True


@pytest.mark.parametrize("argv", [
    ["--kv-cache-memory", "lots"], ["--device", "tpu"], ["--load-format", "pickle"], ["--max-num-seqs", "0"],
    ["--port", "http"],
])
def test_bad_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize(("model", "message"), [
    ("no-such-model", "unknown model"),
    ("/nonexistent/dir/model.gguf", "does not exist"),
    ("CORRUPT", "corrupt"),
])
def test_unusable_models_fail_clearly(model: str, message: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    if model == "CORRUPT":
        model = str(tmp_path / "broken.gguf")
        Path(model).write_bytes(b"GGUF\x03\x00\x00\x00" + os.urandom(64))
    assert main(["--model", model, "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-gateway engine: error:")
    assert message in err


def test_replica_serves_and_stops_on_sigterm() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "engine", "--port", str(port), "--kv-cache-memory", "24MiB",
         "--num-threads", "1", "--max-num-seqs", "4"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(1200):  # model loading on a shared CPU: wait for health, not for a fixed time
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.25)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        answer = client.chat.completions.create(model="smollm2-135m", max_tokens=4, temperature=0,
                                                messages=[{"role": "user", "content": "Hi"}])
        assert answer.choices[0].message.content
        assert [m.id for m in client.models.list().data] == ["smollm2-135m"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
