"""Loaders: GGUF quant types and Q/K un-permutation, bad files, HF directories vs transformers (Llama, Qwen2)."""

from __future__ import annotations

import os
from dataclasses import replace

import gguf
import numpy as np
import orjson
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.config import resolve_model_path
from engine.layers.attention import AttentionMetadata, PrefillChunk, TorchPagedAttention
from engine.loader.gguf import load_gguf_weights, open_gguf, read_gguf_config
from engine.models.config import ModelConfig
from engine.models.llama import LlamaForCausalLM
from engine.tokenizer import Tokenizer

TINY = ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                   num_kv_heads=2, head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                   max_position_embeddings=128, tie_word_embeddings=False)
GGUF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, f, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    w = {"model.embed_tokens.weight": (cfg.vocab_size, h), "model.norm.weight": (h,), "lm_head.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        w |= {p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
              p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
              p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h), p + "mlp.down_proj.weight": (h, f),
              p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
    return {k: (rng.standard_normal(s) * (0.2 if len(s) == 2 else 0.1) + (1.0 if len(s) == 1 else 0.0)).astype(np.float32)
            for k, s in w.items()}


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """What llama.cpp's converter does to Q/K rows (so the loader has something to undo)."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: str, cfg: ModelConfig, weights: dict[str, np.ndarray], types: dict[str, Q]) -> None:
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(cfg.num_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_heads)
    writer.add_head_count_kv(cfg.num_kv_heads)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    inverse = {v: k for k, v in GGUF_NAMES.items()}
    for name, array in weights.items():
        if name.startswith("model.layers."):
            _, _, layer, rest = name.split(".", 3)
            module = rest.rsplit(".", 1)[0]
            gname = f"blk.{layer}.{inverse[module]}.weight"
            if module.endswith("q_proj"):
                array = llama_cpp_permute(array, cfg.num_heads)
            elif module.endswith("k_proj"):
                array = llama_cpp_permute(array, cfg.num_kv_heads)
        else:
            gname = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                     "lm_head.weight": "output.weight"}[name]
        qtype = types.get(gname.split(".")[-2] if gname.startswith("blk.") else gname.split(".")[0], Q.F32)
        if array.ndim == 1 or qtype == Q.F32:
            writer.add_tensor(gname, array)
        elif qtype == Q.F16:
            writer.add_tensor(gname, array.astype(np.float16))
        else:
            writer.add_tensor(gname, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def our_logits(model: LlamaForCausalLM, ids: list[int]) -> torch.Tensor:
    """One prefill through the paged path, logits for every position."""
    cfg, t, bs = model.config, len(ids), 16
    nb = -(-t // bs)
    k = torch.zeros(cfg.num_layers, *TorchPagedAttention.kv_cache_shape(nb, bs, cfg.num_kv_heads, cfg.head_dim))
    model.bind_kv_cache(list(k.unbind(0)), list(torch.zeros_like(k).unbind(0)))
    meta = AttentionMetadata(torch.arange(t), 0, torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                             [PrefillChunk(0, t, t, torch.arange(nb))])
    with torch.inference_mode():
        return model.compute_logits(model(torch.tensor(ids), torch.arange(t), meta))


def build_ours(cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> LlamaForCausalLM:
    model = LlamaForCausalLM.create_empty(cfg, cfg.max_position_embeddings, torch.device("cpu"))
    model.load_weights(weights)
    return model.eval()


def test_f32_gguf_round_trips_exactly_including_qk_permutation(tmp_path) -> None:
    weights = random_weights(TINY)
    path = str(tmp_path / "tiny.gguf")
    write_gguf(path, TINY, weights, {})
    assert read_gguf_config(open_gguf(path)) == replace(TINY, rms_norm_eps=float(np.float32(TINY.rms_norm_eps)))
    loaded = load_gguf_weights(path)
    assert set(loaded) == set(weights)
    for name, array in weights.items():
        assert torch.equal(loaded[name], torch.from_numpy(array)), name


@pytest.mark.parametrize(("qtype", "tolerance"), [(Q.F16, 2e-3), (Q.Q8_0, 2e-2), (Q.Q4_0, 0.2), (Q.Q4_1, 0.2)])
def test_quantized_gguf_dequantizes_close_to_the_original(tmp_path, qtype: Q, tolerance: float) -> None:
    weights = random_weights(TINY, seed=1)
    path = str(tmp_path / f"tiny-{qtype.name}.gguf")
    kinds = ("token_embd", "output", *GGUF_NAMES)
    write_gguf(path, TINY, weights, dict.fromkeys(kinds, qtype))
    loaded = load_gguf_weights(path)
    for name, array in weights.items():
        ref = torch.from_numpy(array)
        error = (loaded[name] - ref).abs().max().item()
        assert error <= tolerance * ref.abs().max().item(), (name, error)


def test_model_matches_transformers_llama_logits(tmp_path) -> None:
    from transformers import LlamaConfig
    from transformers import LlamaForCausalLM as HFLlama

    weights = random_weights(TINY, seed=2)
    path = str(tmp_path / "tiny.gguf")
    write_gguf(path, TINY, weights, {})
    ours = build_ours(TINY, load_gguf_weights(path))
    hf = HFLlama(LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                             max_position_embeddings=128, tie_word_embeddings=False)).eval()
    hf.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=True)
    ids = list(range(3, 40))
    with torch.inference_mode():
        expected = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(our_logits(ours, ids), expected, atol=1e-4, rtol=1e-4)


def test_unsupported_quant_type_is_a_clear_error(tmp_path) -> None:
    # A file whose attn_v holds raw Q4_K bytes (a k-quant the loader does not dequantise).
    bad = str(tmp_path / "bad.gguf")
    writer = gguf.GGUFWriter(bad, "llama")
    for key, value in [("add_block_count", 1), ("add_embedding_length", 256), ("add_feed_forward_length", 256),
                       ("add_head_count", 4), ("add_context_length", 64)]:
        getattr(writer, key)(value)
    q4k_bytes = np.zeros((256, 144), dtype=np.uint8)  # one Q4_K super-block (144 bytes) per 256-wide row
    writer.add_tensor("blk.0.attn_v.weight", q4k_bytes, raw_dtype=Q.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"unsupported GGUF quantization type Q4_K .*blk\.0\.attn_v\.weight"):
        load_gguf_weights(bad)


def test_corrupt_and_missing_files_are_clear_errors(tmp_path) -> None:
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="corrupt or unreadable GGUF"):
        load_gguf_weights(str(garbage))
    real = resolve_model_path("smollm2-135m")
    truncated = tmp_path / "truncated.gguf"
    with open(real, "rb") as f:
        truncated.write_bytes(f.read(4096))
    with pytest.raises(ValueError, match="corrupt"):
        LLMEngine(EngineConfig(model=str(truncated)))
    with pytest.raises(FileNotFoundError):
        LLMEngine(EngineConfig(model=str(tmp_path / "missing.gguf")))


def write_hf_dir(directory: str, hf_model, tokenizer: Tokenizer) -> None:
    hf_model.save_pretrained(directory)
    tokenizer.backend.save(os.path.join(directory, "tokenizer.json"))
    config = {"eos_token": tokenizer.special_tokens["eos_token"], "bos_token": tokenizer.special_tokens["bos_token"],
              "chat_template": tokenizer.chat_template}
    with open(os.path.join(directory, "tokenizer_config.json"), "wb") as f:
        f.write(orjson.dumps(config))


@pytest.mark.parametrize("arch", ["llama-yarn", "qwen2"])
def test_hf_directory_engine_matches_transformers_generate(tmp_path, arch: str) -> None:
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    if arch == "qwen2":
        hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, rope_theta=10000.0))
    else:
        rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, rope_parameters=rope))
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 or arch == "qwen2" else None
    hf.eval()
    tokenizer = Tokenizer.from_model_path(resolve_model_path("smollm2-135m"))
    write_hf_dir(str(tmp_path), hf, tokenizer)
    engine = LLMEngine(EngineConfig(model=str(tmp_path), num_threads=1, kv_cache_memory=2**20))
    if arch == "qwen2":
        assert engine.model_config.attention_bias and not engine.model_config.tie_word_embeddings
    else:
        assert engine.model_config.rope_scaling["rope_type"] == "yarn"
    ids = tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 8)  # longer than the original 64
    with torch.inference_mode():
        expected = hf.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False, eos_token_id=None,
                               pad_token_id=0)[0, len(ids):].tolist()
    (result,) = engine.generate([ids], SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    assert result.token_ids == expected
