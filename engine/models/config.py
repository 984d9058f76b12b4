"""Architecture hyperparameters of a Llama-family decoder (Llama 2/3, SmolLM2, Qwen2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class ModelConfig:
    vocab_size: int = 49152
    hidden_size: int = 576
    intermediate_size: int = 1536
    num_layers: int = 30
    num_heads: int = 9
    num_kv_heads: int = 3
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "linear"|"yarn"|"llama3", "factor": ..., ...}
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    attention_bias: bool = False  # Qwen2-style bias on q/k/v

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")

    def updated(self, overrides: dict | None) -> ModelConfig:
        """A copy with `overrides` applied; unknown keys are an error, not silently dropped."""
        if not overrides:
            return self
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown model config keys {sorted(unknown)}; known: {sorted(known)}")
        merged = asdict(self) | overrides
        if "hidden_size" in overrides and "head_dim" not in overrides:
            merged["head_dim"] = merged["hidden_size"] // merged["num_heads"]
        return ModelConfig(**merged)

    def kv_bytes_per_token(self, dtype_size: int) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_size


def from_hf_config(raw: dict) -> ModelConfig:
    """ModelConfig from a Hugging Face config.json (LlamaConfig / Qwen2Config keys)."""
    arch = (raw.get("architectures") or ["LlamaForCausalLM"])[0]
    supported = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
    if arch not in supported:
        raise ValueError(f"unsupported architecture {arch!r}; supported: {supported}")
    heads = raw["num_attention_heads"]
    rope_scaling = raw.get("rope_scaling") or raw.get("rope_parameters")
    theta = raw.get("rope_theta") or (rope_scaling or {}).get("rope_theta") or 10000.0
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) in (None, "default"):
        rope_scaling = None
    return ModelConfig(
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        rope_theta=float(theta),
        rope_scaling=rope_scaling,
        max_position_embeddings=raw.get("max_position_embeddings", 2048),
        tie_word_embeddings=raw.get("tie_word_embeddings", False),
        attention_bias=raw.get("attention_bias", arch == "Qwen2ForCausalLM"),
    )
