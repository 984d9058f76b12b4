"""fp32 linear layers on CPU through oneDNN with weights pre-packed once at load time.

Measured on the 2-core x86 box (AVX2, 2 threads, SmolLM2-135M shapes, ms per call, F.linear (MKL) -> packed
oneDNN): gate_up at 32 rows 2.78 -> 1.33, qkv 0.62 -> 0.41, down 0.82 -> 0.58, the 49152x576 lm_head 51.3 ->
20.9; at 2,048 rows (prefill) 5-10 % faster too. MKL's fp32 GEMM runs small-M products on this CPU at 20-60
GFLOP/s, oneDNN's at 80-110 (MKL's own packed GEMM was no faster). At one row (single-stream decode) F.linear
is as fast or faster, and oneDNN spends first-call time on each new shape, so one-row inputs keep F.linear.
Results differ from MKL's in the last bits (a different summation order); greedy output still matches HF
transformers token for token (tests/engine/test_oracle.py runs with packing on, the default).

Decode (issue 12): inputs of up to GEMV_MAX_ROWS rows go to the C kernel of `gemv.c` when the kernel library
loaded: it streams each weight row once for all rows at 14-22 GB/s, where MKL and oneDNN read weights at 5-7 GB/s
here (`python bench/gemv.py`: lm_head at one row 12.1 ms F.linear, 7.4 ms packed, 5.1 ms kernel; at 8 rows 29.2,
9.9, 8.1 ms; from 16 rows packed oneDNN is as fast or faster).
"""

from __future__ import annotations

import ctypes
import logging

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.cpu_kernels import few_rows, gemv, gemv_weight_ok
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
        self._packed = None
        if pack:
            with torch.no_grad():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), PACK_HINT_ROWS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0] if x.dim() == 2 else 0
        bias = None if self.bias is None else self.bias.detach()
        if self._kernel is not None and few_rows(x):
            return gemv(self._kernel, x.contiguous(), self.weight, bias, weight_checked=True)
        if self._packed is None or rows < MIN_PACKED_ROWS:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self._packed, bias, "none", [], "")


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
