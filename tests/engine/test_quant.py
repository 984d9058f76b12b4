"""`--quantization int8`: per-channel int8 layers load, answer sensibly, and stay close to the float layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.layers.quant import Int8Linear, quantize_per_channel
from engine.serving.cli import build_parser, config_from_args


def test_int8_engine_loads_and_answers() -> None:
    engine = LLMEngine(EngineConfig(num_threads=1, quantization="int8", kv_cache_memory=16 * 2**20))
    layer = engine.runner.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, Int8Linear) and isinstance(layer.mlp.gate_up_proj, Int8Linear)
    assert isinstance(engine.runner.model.lm_head, Int8Linear)
    down = layer.mlp.down_proj  # kept float (its activations have outliers); oneDNN-packed on CPU
    assert not isinstance(down, Int8Linear) and down.weight.dtype == torch.float32
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    result = engine.generate([prompt], SamplingParams(temperature=0.0, max_tokens=16))[0]
    assert "Paris" in result.text, result.text
    assert result.outputs[0].finish_reason in ("stop", "length")


def test_int8_linear_is_close_to_float() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=True)
    q, scale = quantize_per_channel(linear.weight)
    assert q.dtype == torch.int8 and scale.shape == (48,)
    assert (q.float() * scale[:, None] - linear.weight).abs().max() <= scale.max() / 2 + 1e-6
    x = torch.randn(5, 64)
    want = linear(x)
    got = Int8Linear(linear)(x)
    assert got.shape == want.shape
    assert (got - want).abs().max() < 0.05 * want.abs().max()


def test_quantization_flag_and_validation() -> None:
    assert config_from_args(build_parser().parse_args(["--quantization", "int8"])).quantization == "int8"
    assert config_from_args(build_parser().parse_args([])).quantization == "none"
    with pytest.raises(ValueError, match="quantization"):
        EngineConfig(quantization="int4").validate()
