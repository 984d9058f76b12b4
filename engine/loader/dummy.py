"""Random weights for a given config, for benchmarks at sizes we cannot download."""

from __future__ import annotations

import torch

from engine.models.llama import LlamaForCausalLM


def init_dummy_weights(model: LlamaForCausalLM, seed: int = 0) -> None:
    """Small normal weights (std 0.02) and unit norms: numerically tame, reproducible per seed."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
