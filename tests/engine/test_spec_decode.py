"""Speculative decoding (n-gram prompt lookup): greedy output identical to plain decoding in every scheduling
situation, and the rejection rule keeps the sampling distribution."""

from __future__ import annotations

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.spec_decode import propose_ngram, verify

NEW_TOKENS = 32
CHATS = [
    "Repeat this list exactly, twice: apple, banana, cherry, grape, apple, banana, cherry, grape.",
    "What is the capital of France?",
    "Copy this code exactly: def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b",
    "Explain in detail how a paged KV cache works in an inference engine, step by step.",
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def spec_engine(**kw) -> LLMEngine:
    kw.setdefault("kv_cache_memory", 16 * 2**20)
    return LLMEngine(EngineConfig(num_threads=1, speculative="ngram", num_speculative_tokens=4, **kw))


@pytest.fixture(scope="module")
def plain_decoding() -> tuple[list[list[int]], list[list[int]]]:
    """The prompts and plain decoding's greedy tokens; the plain engine (a gigabyte with its packed weights)
    is dropped once they are known, not kept under every speculating engine of the module."""
    torch.set_num_threads(1)
    base = LLMEngine(EngineConfig(num_threads=1, kv_cache_memory=16 * 2**20))
    prompts = [base.tokenizer.apply_chat_template([{"role": "user", "content": c}]) for c in CHATS]
    return prompts, [r.token_ids for r in base.generate(prompts, GREEDY)]


@pytest.fixture(scope="module")
def prompts(plain_decoding) -> list[list[int]]:
    return plain_decoding[0]


@pytest.fixture(scope="module")
def reference(plain_decoding) -> list[list[int]]:
    return plain_decoding[1]


@pytest.fixture(scope="module")
def spec(prompts) -> LLMEngine:
    return spec_engine()


def _run(engine: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    return [r.token_ids for r in engine.generate(prompts, GREEDY)]


def test_propose_ngram_takes_the_latest_longest_match() -> None:
    assert propose_ngram([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], 1, 3, 2) == [7, 5]
    assert propose_ngram([1, 2, 3, 4, 2, 3], 2, 3, 4) == [4, 2, 3]
    assert propose_ngram([5, 6, 7, 8], 1, 3, 4) == []
    assert propose_ngram([4, 4], 1, 2, 3) == [4]
    assert propose_ngram([1, 2, 1, 2], 2, 2, 0) == []


def test_verify_greedy_accepts_the_matching_prefix_then_the_argmax() -> None:
    logits = torch.full((4, 6), -5.0)
    for row, best in enumerate([3, 1, 4, 2]):
        logits[row, best] = 5.0
    assert verify(logits, [3, 1, 0], GREEDY, None) == [3, 1, 4]  # third draft token wrong: corrected
    assert verify(logits, [3, 1, 4], GREEDY, None) == [3, 1, 4, 2]  # all accepted: bonus token
    assert verify(logits, [0, 1, 4], GREEDY, None) == [3]


def test_rejection_sampling_keeps_the_distribution() -> None:
    """Tiny vocabulary: whatever the draft, the first emitted token is distributed as p_0, and the second one,
    given the first was the accepted draft token, as p_1 (chi-square, p = 0.001; fixed seed)."""
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.25, 0.15, 0.1], [0.25, 0.25, 0.25, 0.25]])
    params = SamplingParams(temperature=1.0, max_tokens=4)
    gen = torch.Generator().manual_seed(1234)
    trials = 20000
    first = torch.zeros(4)
    second = torch.zeros(4)
    for _ in range(trials):
        out = verify(p.log(), [3, 0], params, gen)
        first[out[0]] += 1
        if out[0] == 3:
            second[out[1]] += 1
    chi0 = float(((first - trials * p[0]) ** 2 / (trials * p[0])).sum())
    n1 = second.sum()
    chi1 = float(((second - n1 * p[1]) ** 2 / (n1 * p[1])).sum())
    assert chi0 < 16.27 and chi1 < 16.27, (first, second)  # chi-square(3 dof) at 0.001
    assert n1 > 0.3 * trials


def test_greedy_batch_equals_plain_decoding(spec: LLMEngine, prompts, reference) -> None:
    assert _run(spec, prompts) == reference
    stats = spec.stats()
    assert stats.spec_draft_tokens > 0 and stats.spec_accepted_tokens > 0
    assert stats.num_free_blocks == stats.num_total_blocks


def test_greedy_with_prefix_hits_equals_plain(spec: LLMEngine, prompts, reference) -> None:
    _run(spec, prompts[:1])
    hits = spec.stats().prefix_cache_hits
    assert _run(spec, prompts) == reference
    assert spec.stats().prefix_cache_hits > hits


def test_greedy_with_chunked_prefill_equals_plain(prompts, reference) -> None:
    # a 24-token budget: prompts arrive in chunks beside speculating decodes, and drafts get trimmed to the budget
    chunked = spec_engine(max_num_batched_tokens=24, enable_prefix_caching=False)
    assert _run(chunked, prompts) == reference
    assert chunked.stats().spec_accepted_tokens > 0


def test_greedy_after_preemption_equals_plain(prompts, reference) -> None:
    longest = max(len(p) for p in prompts) + NEW_TOKENS + 4
    block_bytes = 2 * 30 * 3 * 64 * 4 * 16
    blocks = 2 * -(-longest // 16)
    tiny = spec_engine(kv_cache_memory=blocks * block_bytes)
    assert _run(tiny, prompts + prompts[::-1]) == reference + reference[::-1]
    stats = tiny.stats()
    assert stats.preemptions > 0 and stats.spec_accepted_tokens > 0
    assert stats.num_free_blocks == stats.num_total_blocks


def test_mixed_batch_speculating_sampling_logprobs_and_late_prefill(prompts, reference) -> None:
    """Greedy sequences speculate while a later long prompt prefills, a sampled one speculates by the
    rejection rule, and a logprobs one decodes one token a step, all in the same steps."""
    engine = spec_engine()
    engine.add_request("copy", prompts[0], GREEDY)
    engine.add_request("code", prompts[2], GREEDY)
    engine.add_request("sampled", prompts[0], SamplingParams(temperature=0.8, max_tokens=NEW_TOKENS, seed=7,
                                                             ignore_eos=True))
    engine.add_request("logprobs", prompts[1], SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, logprobs=2,
                                                              ignore_eos=True))
    tokens: dict[str, list[int]] = {}
    logprobs: list[dict] = []
    steps = 0
    while engine.has_unfinished_requests():
        steps += 1
        if steps == 3:
            engine.add_request("late", prompts[3], GREEDY)
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            logprobs.extend(out.logprobs or [])
    assert tokens["copy"] == reference[0]
    assert tokens["code"] == reference[2]
    assert tokens["late"] == reference[3]
    assert tokens["logprobs"] == reference[1]
    assert len(logprobs) == NEW_TOKENS
    assert len(tokens["sampled"]) == NEW_TOKENS
    assert engine.stats().spec_accepted_tokens > 0
