"""Llama-architecture decoder over flattened tokens (SmolLM2, Llama 2/3, Qwen2 with qkv bias).

Parameter names follow Hugging Face's (`model.layers.N.self_attn.q_proj.weight`, ...); q/k/v and
gate/up are fused at load time (`load_weights`) so each layer runs two fewer matmuls.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.attention import (
    AttentionMetadata,
    FlashPagedAttention,
    GatherWorkspace,
    TorchPagedAttention,
)
from engine.layers.cpu_kernels import is_cpu_float32, rope_store_kv
from engine.layers.norm import RMSNorm
from engine.layers.rotary import RotaryEmbedding, apply_rotary
from engine.models.config import ModelConfig


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size, self.kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=False)
        self.attn: TorchPagedAttention | FlashPagedAttention = TorchPagedAttention(cfg.head_dim**-0.5)
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)
        self.kernels: ctypes.CDLL | None = None  # CPU float32, torch attention: fused_ops.c's rotary + KV store

    def forward(self, rope: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        fused = self.kernels is not None and is_cpu_float32(qkv)
        if fused:  # q and k rotated in place in qkv, k and v already in the cache
            assert self.kernels is not None and isinstance(self.attn, TorchPagedAttention)
            cos, sin = rope
            rope_store_kv(self.kernels, qkv, cos.view(t, -1), sin.view(t, -1), meta.slot_mapping, self.k_cache,
                          self.v_cache, self.num_heads)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        if fused:
            o = self.attn.forward(q, k, v, self.k_cache, self.v_cache, meta, kv_stored=True)
        else:
            q, k = apply_rotary(q, k, *rope)
            o = self.attn.forward(q, k, v, self.k_cache, self.v_cache, meta)
        return self.o_proj(o.reshape(t, self.q_size))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.intermediate = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(F.silu(gate).mul_(up))  # in place: one activation-sized buffer fewer


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, rope: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, meta: AttentionMetadata,
                delta: torch.Tensor | None, keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x: the residual stream, delta: the previous layer's MLP output not yet added to it (None at the first
        layer). Returns (x, this layer's MLP output): each add is left to the next norm, which fuses it.
        keep: only these rows go on past attention (the last layer: K/V of every row are written by then)."""
        x, h = self.input_layernorm.add_norm(x, delta)
        attended = self.self_attn(rope, h, meta)
        if keep is not None:
            x, attended = x.index_select(0, keep), attended.index_select(0, keep)
        x, h = self.post_attention_layernorm.add_norm(x, attended)
        return x, self.mlp(h)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig, max_positions: int) -> None:
        super().__init__()
        self.config = cfg
        self.rotary = RotaryEmbedding(cfg.head_dim, max_positions, cfg.rope_theta, cfg.rope_scaling)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @classmethod
    def create_empty(cls, cfg: ModelConfig, max_positions: int, device: torch.device) -> LlamaForCausalLM:
        """Uninitialised parameters on `device` (skips the costly random init when weights get loaded)."""
        with torch.device("meta"):
            model = cls(cfg, max_positions)
        model.to_empty(device=device)
        model.tie_weights()
        model.rotary.build_tables(device)
        return model

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                keep: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states [T, hidden] for the flattened tokens of one step; with `keep`, only those rows'
        ([len(keep), hidden], in keep's order). A prefill chunk samples from its last row at most, so the last
        layer's MLP and the final norm run for a few rows instead of thousands (~3 % of a prefill step)."""
        x = self.embed_tokens(input_ids)
        rope = self.rotary.lookup(positions, x.dtype)
        delta = None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x, delta = layer(rope, x, meta, delta, keep if i == last else None)
        return self.norm.add_norm(x, delta)[1]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()

    def bind_kv_cache(self, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor]) -> None:
        for layer, k, v in zip(self.layers, k_caches, v_caches, strict=True):
            layer.self_attn.k_cache, layer.self_attn.v_cache = k, v

    def set_attention(self, make: type[TorchPagedAttention] | type[FlashPagedAttention],
                      decode_kernel: ctypes.CDLL | None = None) -> None:
        scale = self.config.head_dim**-0.5
        if make is TorchPagedAttention:
            workspace = GatherWorkspace()  # layers run one after another, so one gather buffer serves all
            for layer in self.layers:
                layer.self_attn.attn = TorchPagedAttention(scale, workspace, decode_kernel)
            return
        for layer in self.layers:
            layer.self_attn.attn = make(scale)

    def set_cpu_kernels(self, lib: ctypes.CDLL) -> None:
        """Residual adds and norms, rotary and the KV store through the C library's fused passes (CPU, float32,
        the torch attention path)."""
        for module in self.modules():
            if isinstance(module, RMSNorm):
                module.kernels = lib
            elif isinstance(module, LlamaAttention):
                assert isinstance(module.attn, TorchPagedAttention)  # its cache layout is what the kernel writes
                module.kernels = lib

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy HF-named tensors in, fusing q/k/v and gate/up; a missing or unexpected name is an error."""
        weights = dict(weights)
        own = self.state_dict()
        for i in range(self.config.num_layers):
            p = f"model.layers.{i}."
            for suffix in ("weight", "bias"):
                names = [f"{p}self_attn.{n}_proj.{suffix}" for n in "qkv"]
                if all(n in weights for n in names):
                    weights[f"layers.{i}.self_attn.qkv_proj.{suffix}"] = torch.cat([weights.pop(n) for n in names])
            weights[f"layers.{i}.mlp.gate_up_proj.weight"] = torch.cat(
                [weights.pop(f"{p}mlp.gate_proj.weight"), weights.pop(f"{p}mlp.up_proj.weight")]
            )
        renamed = {k.removeprefix("model."): w for k, w in weights.items()}
        if self.config.tie_word_embeddings:
            renamed.pop("lm_head.weight", None)
        missing = [k for k in own if k not in renamed and not (k == "lm_head.weight" and self.config.tie_word_embeddings)]
        unexpected = [k for k in renamed if k not in own]
        if missing or unexpected:
            raise ValueError(f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        with torch.no_grad():
            for name, tensor in renamed.items():
                if own[name].shape != tensor.shape:
                    raise ValueError(f"weight {name}: shape {tuple(tensor.shape)} != expected {tuple(own[name].shape)}")
                own[name].copy_(tensor)
