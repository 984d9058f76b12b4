"""int8 weight quantisation (`--quantization int8`): per-output-channel symmetric int8 weights.

Kernel choice, measured on the 2-core x86 box (SmolLM2-135M shapes, 2 threads, microseconds per call):
fbgemm's dynamic int8 linear (`quantized::linear_dynamic`) ran a decode token's matmuls 2.2x faster than fp32
at batch 1 and 2.4x at batch 64 (the 49152x576 lm_head: 14.5 ms -> 2.4 ms), while torch's weight-only kernel
`_weight_int8pack_mm` was 3x *slower* than fp32 at batch 1 and 40x at batch 64 (no fast path on this CPU), and
bf16 weights were slower than fp32 at batch 64. So the CPU path is fbgemm's: int8 weights per channel AND
activations quantised to int8 per tensor on the fly (dynamic quantisation; `reduce_range` keeps fbgemm's
int16 accumulation pairs from saturating). Elsewhere (CUDA) the layer multiplies by the int8 weight cast to the
activation dtype and scales the output per channel: correct and 4x smaller in memory, but no speed kernel (unrun
on a GPU here).

Decode: inputs of up to GEMV_MAX_ROWS rows go, when the C kernel library loaded, to `gemv.c`'s
int8 kernel instead (`attach_kernel`, called by `pack_linear_weights`): it streams the int8 weight once for all
rows, widened to float in registers, with float32 activations, so it is both faster than fbgemm at a few rows and
exact (the dequantised weight times x, to float rounding; fbgemm also rounds activations to int8).
"""

from __future__ import annotations

import ctypes
import warnings

import torch
from torch import nn

from engine.config import QUANTIZATIONS
from engine.layers.cpu_kernels import few_rows, gemv_int8, gemv_int8_weight_ok


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight [N, K], float32 scale [N]) with weight ~= q * scale[:, None], symmetric, per output row."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Linear(nn.Module):
    """A drop-in for nn.Linear holding int8 weights (one scale per output channel)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.device = weight.device
        bias = None if linear.bias is None else linear.bias.detach().float()
        q, scale = quantize_per_channel(weight)
        self.out_dtype = weight.dtype
        if self.device.type == "cpu":
            with warnings.catch_warnings():  # torch marks quantized tensors deprecated; fbgemm is still its fastest
                warnings.simplefilter("ignore")
                qweight = torch._make_per_channel_quantized_tensor(
                    q, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0)
                self._packed = torch.ops.quantized.linear_prepack(qweight, bias)
        # on CPU kept for dequantize() and the C kernel (fbgemm holds its own packed copy)
        self.register_buffer("qweight", q, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        self.register_buffer("scale", scale, persistent=False)
        self._kernel: ctypes.CDLL | None = None

    def attach_kernel(self, lib: ctypes.CDLL) -> bool:
        """Route inputs of up to GEMV_MAX_ROWS rows to the C int8 kernel of `lib`; False where it cannot take
        this layer's weights (not CPU, or a float output dtype other than float32)."""
        if self.out_dtype == torch.float32 and gemv_int8_weight_ok(self.qweight, self.scale, self.bias):
            self._kernel = lib
        return self._kernel is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._kernel is not None and few_rows(x):
            return gemv_int8(self._kernel, x.float().contiguous(), self.qweight, self.scale, self.bias,
                             weight_checked=True)
        if self.device.type == "cpu":
            return torch.ops.quantized.linear_dynamic(x.float(), self._packed, True).to(self.out_dtype)
        # x @ (q * s)^T == (x @ q^T) * s: the scale is per output channel, so it applies after the matmul
        out = torch.nn.functional.linear(x, self.qweight.to(x.dtype)) * self.scale.to(x.dtype)
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def dequantize(self) -> torch.Tensor:
        """The float weight this layer stands for (for quality checks)."""
        return self.qweight.float() * self.scale[:, None]


# down_proj's input, silu(gate) * up, has a few channels hundreds of times larger than the rest; one int8 scale
# per token cannot hold both, and perplexity on bench/quant_quality.py's text went 11.2 -> 26.4 from that layer
# alone. It stays float (a fifth of the weights).
KEEP_FLOAT = frozenset({"down_proj"})


def fold_norm_gains(model: nn.Module) -> None:
    """Move each RMSNorm's gain into the projection it feeds (W @ (n(x) * g) == (W * g) @ n(x)): the gains
    carry the activation outliers, and int8 activations lose less without them (gate_up alone: perplexity
    +1.8 -> +0.7). Exact in float."""
    for layer in getattr(model, "layers", []):
        pairs = ((layer.input_layernorm, layer.self_attn.qkv_proj), (layer.post_attention_layernorm, layer.mlp.gate_up_proj))
        with torch.no_grad():
            for norm, linear in pairs:
                linear.weight.mul_(norm.weight.to(linear.weight.dtype)[None, :])
                norm.weight.fill_(1.0)


def quantize_model(model: nn.Module, method: str) -> int:
    """Replace the nn.Linear layers of `model` (but KEEP_FLOAT's) with their int8 form, the lm_head too (when
    tied, the embedding table keeps the float weight: a lookup reads one row). Returns the layers replaced."""
    if method == "none":
        return 0
    if method != "int8":
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {method!r}")
    fold_norm_gains(model)
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and name not in KEEP_FLOAT:
                setattr(parent, name, Int8Linear(child))
                replaced += 1
    return replaced
