"""Hugging Face directory loader: config.json + *.safetensors."""

from __future__ import annotations

import glob
import os

import orjson
import torch
from safetensors.torch import load_file

from engine.models.config import ModelConfig, from_hf_config


def read_hf_config(directory: str) -> ModelConfig:
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{directory!r} has no config.json")
    with open(path, "rb") as f:
        try:
            raw = orjson.loads(f.read())
        except orjson.JSONDecodeError as e:
            raise ValueError(f"{path}: invalid JSON: {e}") from e
    return from_hf_config(raw)


def load_hf_weights(directory: str) -> dict[str, torch.Tensor]:
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"{directory!r} has no .safetensors files")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            loaded = load_file(file)
        except Exception as e:  # safetensors raises its own error type on bad headers
            raise ValueError(f"corrupt safetensors file {file!r}: {e}") from e
        weights.update({name: t.float() for name, t in loaded.items()})
    return weights
