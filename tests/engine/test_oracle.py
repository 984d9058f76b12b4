"""Correctness oracle: greedy output is token-for-token HF transformers' generate on the same GGUF.

The reference comes from the package's HF model (`hf_model`, tests/engine/conftest.py), once per machine: its
tokens are kept on disk between runs (`oracle_cache`). The engine is checked plain (a batch of mixed lengths),
with prefix-cache hits, with chunked prefill, and after preemption and recompute in a tiny KV cache.
"""

from __future__ import annotations

import os

import orjson
import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from tests.engine.conftest import oracle_cache

NEW_TOKENS = 64
CHATS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain in detail how a paged KV cache works in an inference engine, step by step.",
    "List three fruits.",
    "Tell me a story about a robot who learns to paint, with a surprising ending.",
]
TEXTS = [
    "The history of the Roman Empire",
    "def fibonacci(n):",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old woodcutter who",
]


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    torch.set_num_threads(1)
    # 96 MiB: the batch and its cached prefixes fit with room to spare; the default 256 MiB adds to the peak
    return LLMEngine(EngineConfig(num_threads=1, kv_cache_memory=96 * 2**20))


@pytest.fixture(scope="module")
def prompts(engine: LLMEngine) -> list[list[int]]:
    chats = [engine.tokenizer.apply_chat_template([{"role": "user", "content": c}]) for c in CHATS]
    return chats + [engine.tokenizer.encode(t) for t in TEXTS]


@pytest.fixture(scope="module")
def reference(request: pytest.FixtureRequest, prompts: list[list[int]]) -> list[list[int]]:
    """HF greedy continuations, one prompt at a time (no padding), EOS not stopping generation.

    Generating them takes HF about 45 s on the CI machine (plus loading the model), so they are kept on disk,
    keyed by all they depend on; the first run on a machine (or after any upgrade) computes them.
    """
    path = oracle_cache("hf-oracle", NEW_TOKENS, prompts).with_suffix(".json")
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        pass
    hf_model: torch.nn.Module = request.getfixturevalue("hf_model")
    outs = []
    with torch.inference_mode():
        for ids in prompts:
            x = torch.tensor([ids])
            y = hf_model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS,
                                  min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
            outs.append(y[0, len(ids):].tolist())
    try:  # written whole, then renamed: a run killed mid-write leaves no half file to read
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps(outs))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: computed again next time
    return outs


GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _run(engine: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    return [r.token_ids for r in engine.generate(prompts, GREEDY)]


def test_prompts_cover_mixed_lengths(prompts: list[list[int]]) -> None:
    lengths = sorted(len(p) for p in prompts)
    assert lengths[0] < 16 < lengths[-1] and len(set(lengths)) >= 6


def test_batch_of_mixed_lengths_matches_hf(engine: LLMEngine, prompts, reference) -> None:
    engine.block_manager.reset_prefix_cache()
    assert _run(engine, prompts) == reference


def test_prefix_cache_hits_match_hf(engine: LLMEngine, prompts, reference) -> None:
    # Make sure something is cached (also when this test runs alone): a prefill caches the prompt's blocks.
    engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=1))
    hits_before = engine.stats().prefix_cache_hits
    results = engine.generate(prompts, GREEDY)
    assert engine.stats().prefix_cache_hits > hits_before
    assert any(r.num_cached_tokens > 0 for r in results)
    assert [r.token_ids for r in results] == reference


def test_chunked_prefill_matches_hf(prompts, reference) -> None:
    chunked = LLMEngine(EngineConfig(num_threads=1, max_num_batched_tokens=24, enable_prefix_caching=False,
                                     kv_cache_memory=96 * 2**20))
    assert _run(chunked, prompts) == reference


def test_preemption_and_recompute_match_hf(prompts, reference) -> None:
    longest = max(len(p) for p in prompts) + NEW_TOKENS
    block_bytes = 2 * 30 * 3 * 64 * 4 * 16
    blocks = 2 * -(-longest // 16)  # room for about two long sequences: the batch of 8 must preempt
    tiny = LLMEngine(EngineConfig(num_threads=1, kv_cache_memory=blocks * block_bytes))
    assert tiny.stats().num_total_blocks == blocks
    assert _run(tiny, prompts) == reference
    stats = tiny.stats()
    assert stats.preemptions > 0
    assert stats.num_free_blocks == stats.num_total_blocks


def test_plain_torch_path_matches_hf(prompts, reference) -> None:
    """Without the C kernels (decode attention, fused add + norm) and without packed oneDNN weights: the
    pure-torch path a machine without a compiler or oneDNN runs."""
    plain = LLMEngine(EngineConfig(num_threads=1, c_kernels=False, pack_weights=False, kv_cache_memory=64 * 2**20))
    assert plain.runner.decode_kernel is None
    assert _run(plain, prompts[:3]) == reference[:3]
