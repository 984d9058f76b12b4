"""RMSNorm, computed in float32 the way the reference implementation does."""

from __future__ import annotations

import ctypes

import torch
from torch import nn

from engine.layers.cpu_kernels import add_rms_norm, is_cpu_float32


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.kernels: ctypes.CDLL | None = None  # CPU float32: fused_ops.c's one-pass add + norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def add_norm(self, residual: torch.Tensor, delta: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(residual + delta, its norm). The C kernel adds in place, in one pass with the norm; delta None: the
        norm alone."""
        if self.kernels is not None and residual.dim() == 2 and is_cpu_float32(
                residual, self.weight, *([] if delta is None else [delta])):
            return residual, add_rms_norm(self.kernels, residual, delta, self.weight, self.eps)
        if delta is not None:
            residual = residual + delta
        return residual, self(residual)
