"""GGUF loader: llama.cpp metadata -> ModelConfig, tensors dequantised with the `gguf` package."""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from engine.loader.gguf_file import GGUFFile
from engine.models.config import ModelConfig

SUPPORTED_TYPES = {
    GGMLQuantizationType.F32, GGMLQuantizationType.F16,
    GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1,
}
SUPPORTED_ARCHS = ("llama", "qwen2")

# GGUF tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.").
LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def open_gguf(path: str) -> GGUFFile:
    """A reader, or ValueError naming the file when it is not a readable GGUF.

    Parsing the metadata (tens of thousands of vocabulary strings) takes seconds, and the tokenizer,
    config and weights all need it, so the last reader is kept, keyed on the file's identity.
    """
    stat = os.stat(path)
    return _open_cached(os.path.abspath(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=1)
def _open_cached(path: str, mtime_ns: int, size: int) -> GGUFFile:
    try:
        return GGUFFile(path)
    except FileNotFoundError:
        raise
    except Exception as e:  # the reader raises ValueError, struct/IndexError, mmap errors on bad files
        raise ValueError(f"corrupt or unreadable GGUF file {path!r}: {e}") from e


def field_value(reader: GGUFFile, key: str, default: object = None) -> object:
    return reader.fields.get(key, default)


def read_gguf_config(reader: GGUFFile) -> ModelConfig:
    arch = field_value(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported GGUF architecture {arch!r}; supported: {SUPPORTED_ARCHS}")

    def get(key: str, default: object = None) -> object:
        value = field_value(reader, f"{arch}.{key}", default)
        if value is None:
            raise ValueError(f"GGUF metadata lacks {arch}.{key}")
        return value

    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    vocab = int(get("vocab_size", len(tokens) if tokens else 0) or 0)
    names = {t.name for t in reader.tensors}
    scaling = None
    kind = field_value(reader, f"{arch}.rope.scaling.type")
    if kind and kind != "none":
        scaling = {"rope_type": kind, "factor": float(get("rope.scaling.factor"))}
        original = field_value(reader, f"{arch}.rope.scaling.original_context_length")
        if original:
            scaling["original_max_position_embeddings"] = int(original)
    return ModelConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("attention.key_length", hidden // heads)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        max_position_embeddings=int(get("context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias="blk.0.attn_q.bias" in names,
    )


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's convert-time permutation of Q/K rows (interleaved -> half-split rotary pairs)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(gguf_name: str) -> str | None:
    base, _, kind = gguf_name.rpartition(".")
    if base.startswith("blk."):
        _, layer, part = base.split(".", 2)
        mapped = LAYER_NAMES.get(part)
        return None if mapped is None else f"model.layers.{layer}.{mapped}.{kind}"
    mapped = GLOBAL_NAMES.get(base)
    return None if mapped is None else f"{mapped}.{kind}"


def load_gguf_weights(path: str) -> dict[str, torch.Tensor]:
    reader = open_gguf(path)
    cfg = read_gguf_config(reader)
    permute = field_value(reader, "general.architecture") == "llama"
    weights: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            raise ValueError(f"GGUF tensor {tensor.name!r} is not supported by the llama loader")
        if tensor.tensor_type not in SUPPORTED_TYPES:
            supported = sorted(t.name for t in SUPPORTED_TYPES)
            raise ValueError(
                f"unsupported GGUF quantization type {tensor.tensor_type.name} for tensor {tensor.name!r}; "
                f"supported: {supported}"
            )
        shape = tuple(int(d) for d in reversed(tensor.shape))
        try:
            array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(shape)
        except ValueError as e:
            raise ValueError(f"corrupt GGUF tensor {tensor.name!r} in {path!r}: {e}") from e
        if permute and name.endswith(("q_proj.weight", "q_proj.bias")):
            array = unpermute_rope_rows(array, cfg.num_heads)
        elif permute and name.endswith(("k_proj.weight", "k_proj.bias")):
            array = unpermute_rope_rows(array, cfg.num_kv_heads)
        weights[name] = torch.from_numpy(np.ascontiguousarray(array))
    return weights
