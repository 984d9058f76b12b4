"""`bench/gpu_check.py --device cpu --quick` passes on this machine and prints one JSON line.

Run in-process with the package's HF model (`hf_model`, the same `bench.engine.load_hf` the script calls): a
subprocess would import torch and transformers and load and dequantise the GGUF again, half of this test's time.
Everything after the load (HF generation, the engines, every check and the report) is the script's own code.
"""

from __future__ import annotations

import orjson
import pytest
import torch

from bench import gpu_check


def test_gpu_check_quick_on_cpu_passes(hf_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gpu_check, "load_hf", lambda: hf_model)
    rc = gpu_check.main(["--device", "cpu", "--quick", "--threads", "1"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out
    report = orjson.loads(lines[0])
    assert rc == 0, report
    assert report["ok"] and report["failures"] == []
    assert report["greedy_fp32"]["equal"] and report["prefix_hits"]["equal"]
    assert report["prefix_hits"]["hit_tokens"] > 0
    assert report["speculative"]["equal"] and report["speculative"]["draft_tokens"] > 0
    assert report["cuda_graphs"] == "skipped: CPU"
    assert report["throughput_tok_s"]["batch_1"] > 0 and report["throughput_tok_s"]["batch_64"] > 0
