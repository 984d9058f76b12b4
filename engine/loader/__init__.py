"""Weight loaders: GGUF files, Hugging Face directories, and random (dummy) weights."""

from __future__ import annotations

import os
from functools import lru_cache

import torch

from engine.models.config import ModelConfig


def read_model_config(path: str) -> ModelConfig:
    """The architecture stored at `path` (a .gguf file or an HF directory), without loading weights."""
    if path.endswith(".gguf"):
        from engine.loader.gguf import open_gguf, read_gguf_config

        return read_gguf_config(open_gguf(path))
    from engine.loader.hf import read_hf_config

    return read_hf_config(path)


def load_weights(path: str) -> dict[str, torch.Tensor]:
    """Float32 tensors under Hugging Face parameter names.

    The last checkpoint loaded is kept (read-only use: the model copies from it), so several engines in
    one process (in-process replicas, tests) dequantise it once.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"model path {path!r} does not exist")
    stat = os.stat(path)
    return _load_cached(os.path.abspath(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=1)
def _load_cached(path: str, mtime_ns: int, size: int) -> dict[str, torch.Tensor]:
    if path.endswith(".gguf"):
        from engine.loader.gguf import load_gguf_weights

        return load_gguf_weights(path)
    from engine.loader.hf import load_hf_weights

    return load_hf_weights(path)
