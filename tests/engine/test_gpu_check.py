"""`bench/gpu_check.py --device cpu --quick` passes on this machine and prints one JSON line."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gpu_check_quick_on_cpu_passes() -> None:
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--device", "cpu", "--quick",
                           "--threads", "1"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    report = orjson.loads(lines[0])
    assert proc.returncode == 0, report
    assert report["ok"] and report["failures"] == []
    assert report["greedy_fp32"]["equal"] and report["prefix_hits"]["equal"]
    assert report["prefix_hits"]["hit_tokens"] > 0
    assert report["speculative"]["equal"] and report["speculative"]["draft_tokens"] > 0
    assert report["cuda_graphs"] == "skipped: CPU"
    assert report["throughput_tok_s"]["batch_1"] > 0 and report["throughput_tok_s"]["batch_64"] > 0
