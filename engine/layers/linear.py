"""fp32 linear layers on CPU through oneDNN with weights pre-packed once at load time.

Measured on the 2-core x86 box (AVX2, 2 threads, SmolLM2-135M shapes, ms per call, F.linear (MKL) -> packed
oneDNN): gate_up at 32 rows 2.78 -> 1.33, qkv 0.62 -> 0.41, down 0.82 -> 0.58, the 49152x576 lm_head 51.3 ->
20.9; at 2,048 rows (prefill) 5-10 % faster too. MKL's fp32 GEMM runs small-M products on this CPU at 20-60
GFLOP/s, oneDNN's at 80-110 (MKL's own packed GEMM was no faster). At one row (single-stream decode) F.linear
is as fast or faster, and oneDNN spends first-call time on each new shape, so one-row inputs keep F.linear.
Results differ from MKL's in the last bits (a different summation order); greedy output still matches HF
transformers token for token (tests/engine/test_oracle.py runs with packing on, the default).

Decode: inputs of a few rows (up to each layer's `kernel_rows`, at most GEMV_MAX_ROWS, measured per
weight shape at load by `calibrate_kernel_rows`) go to the C kernel of `gemv.c` when the kernel library loaded. On
the AVX2 host this was written on it streams each weight row once for all rows at 14-22 GB/s, where MKL and oneDNN read weights at 5-7 GB/s
here (`python bench/gemv.py`: lm_head at one row 12.1 ms F.linear, 7.4 ms packed, 5.1 ms kernel; at 8 rows 29.2,
9.9, 8.1 ms; from 16 rows packed oneDNN is as fast or faster). On an AMD AVX-512 host oneDNN streams as fast
and wins from 3-6 rows on, hence the measurement.
"""

from __future__ import annotations

import ctypes
import logging
import time

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.cpu_kernels import GEMV_MAX_ROWS, few_rows, gemv, gemv_weight_ok
from engine.layers.quant import Int8Linear

log = logging.getLogger(__name__)

MIN_PACKED_ROWS = 2  # below this, MKL's matrix-vector product is as fast and needs no per-shape set-up
PACK_HINT_ROWS = 32  # oneDNN picks the packed layout for this many rows; every row count still works


def packing_available(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


class PackedLinear(nn.Module):
    """A drop-in for a float32 nn.Linear on CPU: same `weight` parameter (ties and state_dict keep working),
    plus, when asked, oneDNN's packed copy of it for inputs of MIN_PACKED_ROWS rows or more and the C small-M
    kernel (`kernel`, the loaded library) for inputs of up to GEMV_MAX_ROWS rows."""

    def __init__(self, linear: nn.Linear, pack: bool = True, kernel: ctypes.CDLL | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self._kernel = kernel if kernel is not None and gemv_weight_ok(self.weight, self.bias) else None
        self.kernel_rows = GEMV_MAX_ROWS  # inputs of up to this many rows take the kernel (calibrate_kernel_rows)
        self._packed = None
        if pack:
            with torch.no_grad():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), PACK_HINT_ROWS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0] if x.dim() == 2 else 0
        bias = None if self.bias is None else self.bias.detach()
        if self._kernel is not None and few_rows(x, self.kernel_rows):
            return gemv(self._kernel, x.contiguous(), self.weight, bias, weight_checked=True)
        if self._packed is None or rows < MIN_PACKED_ROWS:
            return F.linear(x, self.weight, self.bias)
        return self._run_packed(x, bias)

    def _run_packed(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self._packed, bias, "none", [], "")

    def _run_kernel(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        assert self._kernel is not None
        return gemv(self._kernel, x, self.weight, bias, weight_checked=True)


def pack_linear_weights(model: nn.Module, pack: bool = True, kernel: ctypes.CDLL | None = None) -> int:
    """Replace every float32 nn.Linear of `model` with a PackedLinear (oneDNN's packed weights when `pack`, the
    small-M C kernel when `kernel` is the loaded library, which int8 layers get too); returns how many float32
    layers were replaced.

    The packing ops are torch-internal (`torch.ops.mkldnn`): a build without them, or one that refuses a shape,
    keeps the plain layers rather than failing to load the model."""
    if not pack and kernel is None:
        return 0
    if kernel is not None:  # int8 layers (quantize_model ran first) get the C kernel's int8 form for few rows
        for module in model.modules():
            if isinstance(module, Int8Linear):
                module.attach_kernel(kernel)
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.dtype == torch.float32 and child.weight.device.type == "cpu":
                try:
                    packed = PackedLinear(child, pack, kernel)
                except (AttributeError, RuntimeError) as exc:
                    log.warning("oneDNN weight packing unavailable (%s): plain float32 linears", exc)
                    if kernel is None:
                        return replaced
                    pack = False  # the C kernel needs no oneDNN: this layer and the rest keep it
                    packed = PackedLinear(child, pack, kernel)
                setattr(parent, name, packed)
                replaced += 1
    return replaced


CALIBRATION_ROWS = (2, 3, 4, 6, 8, 12)  # row counts timed; 1 row always takes the kernel (packed skips it anyway)
_calibrated: dict[tuple, dict[tuple[int, int], int]] = {}  # per process: (shapes, threads) -> rows per shape


@torch.inference_mode()
def calibrate_kernel_rows(model: nn.Module, repeats: int = 2) -> dict[tuple[int, int], int]:
    """Measure, per weight shape (N, K), up to how many rows the C kernel beats packed oneDNN, and set each
    PackedLinear's `kernel_rows` to it; returns {(N, K): rows}. Layers without both paths keep their default.

    The crossover is the host's, not the code's: on an AVX2 host the kernel won every decode shape through 12
    rows (it streams weights at 14-22 GB/s where oneDNN read 5-7); on an AMD AVX-512 host (~30 GB/s) packed
    oneDNN won from 3-6 rows on, up to 2x (lm_head at 8 rows 3.8 vs 7.8 ms): the mixed 32-request workload's
    decode steps of 4-12 rows then ran 2.03 -> 1.49 s. So each shape is timed here, at load, as a decode step
    sees it: one pass over every layer per row count and path, so each weight comes from memory, not cache
    (the model is far larger than L3); each shape's time summed over its layers, the best of `repeats`
    interleaved passes. A shape keeps the kernel up to the largest timed row count below which it never lost.
    ~0.5 s for SmolLM2-135M, once per process for the same shapes and thread count. The two paths round
    differently in the last bits; either matches HF transformers' greedy output (tests/engine/test_oracle.py)."""
    layers = [m for m in model.modules() if isinstance(m, PackedLinear) and m._kernel is not None
              and m._packed is not None]
    if not layers:
        return {}
    key = (tuple(sorted({(layer.out_features, layer.in_features) for layer in layers})), torch.get_num_threads())
    rows = _calibrated.get(key)
    if rows is None:
        rows = _calibrated[key] = _measure_crossover(layers, repeats)
        log.info("small-M kernel crossover per weight shape (N, K) -> rows: %s", rows)
    for layer in layers:
        layer.kernel_rows = rows[(layer.out_features, layer.in_features)]
    return dict(rows)


def _measure_crossover(layers: list[PackedLinear], repeats: int) -> dict[tuple[int, int], int]:
    shapes = {(layer.out_features, layer.in_features) for layer in layers}
    best: dict[tuple[tuple[int, int], int, bool], float] = {}
    generator = torch.Generator().manual_seed(0)
    for m in CALIBRATION_ROWS:
        xs = {k: torch.randn(m, k, generator=generator) for _, k in shapes}
        for _ in range(repeats):
            for use_kernel in (True, False):
                spent = dict.fromkeys(shapes, 0.0)
                for layer in layers:
                    x, bias = xs[layer.in_features], None if layer.bias is None else layer.bias.detach()
                    start = time.perf_counter()
                    _ = layer._run_kernel(x, bias) if use_kernel else layer._run_packed(x, bias)
                    spent[(layer.out_features, layer.in_features)] += time.perf_counter() - start
                for shape, seconds in spent.items():
                    slot = (shape, m, use_kernel)
                    best[slot] = min(best.get(slot, seconds), seconds)
    rows = {}
    for shape in shapes:
        keep = 1
        for m in CALIBRATION_ROWS:
            if best[(shape, m, True)] > best[(shape, m, False)]:
                break
            keep = m
        rows[shape] = keep
    return rows
