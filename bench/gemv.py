"""Micro-benchmark: the C small-M kernel (`engine/layers/gemv.c`) against torch's F.linear (MKL) and
oneDNN's packed linear, SmolLM2-135M's decode shapes, float32, rows M = 1..32.

    flock /tmp/cpu.lock taskset -c 0,1 python bench/gemv.py [--threads 2] [--rows 1,2,4,8,16,32]

Prints one markdown table: microseconds per call (median of --repeat timed loops) and the weight bytes streamed
per second by the kernel (each call reads W once). The weights of all shapes together exceed the L3 cache, so
every call is timed as in a decode step: copies of each shape are cycled, each call finding its W evicted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine.layers.cpu_kernels import gemv, load_library  # noqa: E402

# (name, N, K) of SmolLM2-135M: fused qkv, o_proj, fused gate/up, down_proj, the tied lm_head
SHAPES = [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 3072, 576), ("down", 576, 1536), ("lm_head", 49152, 576)]
# distinct weights per shape, so one pass over them (>= 64 MB) overflows the 32 MB L3, as the 540 MB model does
COPY_BYTES = 64 << 20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", default="1,2,4,8,16,32")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lib = load_library()
    if lib is None:
        print("C kernels unavailable (no compiler?)")
        return 1
    torch.manual_seed(0)
    weights = {name: [torch.randn(n, k) / k**0.5 for _ in range(-(-COPY_BYTES // (n * k * 4)))]
               for name, n, k in SHAPES}
    packed = {name: [torch.ops.mkldnn._reorder_linear_weight(w, 32) for w in ws] for name, ws in weights.items()}
    print(f"threads {args.threads}; us per call (median of {args.repeat}); GB/s = weight bytes / kernel time")
    print("| shape (N x K) | M | F.linear | oneDNN packed | C kernel | kernel GB/s | best |")
    print("|---|---|---|---|---|---|---|")
    for name, n, k in SHAPES:
        for m in map(int, args.rows.split(",")):
            x = torch.randn(m, k)
            out = torch.empty(m, n)
            ref = F.linear(x, weights[name][0])
            got = gemv(lib, x, weights[name][0], out=out)
            err = (got - ref).abs().max().item() / ref.abs().max().item()
            assert err < 1e-5, (name, m, err)
            runs = {
                "F.linear": lambda w, pw, x=x: F.linear(x, w),
                "packed": lambda w, pw, x=x: torch.ops.mkldnn._linear_pointwise(x, pw, None, "none", [], ""),
                "kernel": lambda w, pw, x=x, out=out: gemv(lib, x, w, out=out),
            }
            pairs = list(zip(weights[name], packed[name], strict=True))
            passes = max(1, 64 // len(pairs))  # about 64 calls a sample
            us = {}
            for label, fn in runs.items():
                fn(*pairs[0])  # oneDNN's first call per shape sets up
                samples = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    for _ in range(passes):
                        for w, pw in pairs:
                            fn(w, pw)
                    samples.append((time.perf_counter() - t0) / (passes * len(pairs)))
                us[label] = statistics.median(samples) * 1e6
            best = min(us, key=us.get)
            gbs = n * k * 4 / us["kernel"] / 1e3
            print(f"| {name} ({n} x {k}) | {m} | {us['F.linear']:.0f} | {us['packed']:.0f} | {us['kernel']:.0f} "
                  f"| {gbs:.1f} | {best} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
