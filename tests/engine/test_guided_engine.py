"""Constrained decoding inside the engine's step loop: a mixed batch (different grammars and none) in
one step, prefix-cache hits, chunked prefill and preemption by recompute, all greedy on SmolLM2."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.guided import GuidedSpec

BLOCK_BYTES = 737_280  # SmolLM2-135M, fp32, 16-token blocks
YES_NO = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
          "additionalProperties": False}
DIGIT_FLAG = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                               "ok": {"type": "boolean"},
                                               "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
              "required": ["n", "ok", "tags"], "additionalProperties": False}
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"],
        "additionalProperties": False}


def greedy(max_tokens: int, guided: GuidedSpec | None = None) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, guided=guided)


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return LLMEngine(EngineConfig(num_threads=1, max_model_len=256, kv_cache_memory=64 * BLOCK_BYTES))


def chat(engine: LLMEngine, text: str) -> list[int]:
    return engine.tokenizer.apply_chat_template([{"role": "user", "content": text}])


def check(spec: GuidedSpec, text: str) -> None:
    if spec.kind == "json_schema":
        jsonschema.validate(json.loads(text), json.loads(spec.payload))
    elif spec.kind == "regex":
        assert re.fullmatch(spec.payload, text), text
    else:
        assert text in json.loads(spec.payload)


CONSTRAINED = [
    ("Is water wet? Answer in JSON.", GuidedSpec.json_schema(YES_NO), 16),
    ("Give a digit, a flag and tags as JSON.", GuidedSpec.json_schema(DIGIT_FLAG), 30),
    ("Name a three-digit number.", GuidedSpec("regex", "[0-9]{3}"), 6),
    ("Pick a colour.", GuidedSpec.choice(["red", "green", "blue"]), 4),
]
FREE = ["Say hello.", "Count to three.", "What is 2+2?", "Name a fruit."]


def test_mixed_batch_of_eight_in_one_step(engine: LLMEngine) -> None:
    prompts = [chat(engine, t) for t, _, _ in CONSTRAINED] + [chat(engine, t) for t in FREE]
    params = [greedy(n, spec) for _, spec, n in CONSTRAINED] + [greedy(8) for _ in FREE]
    for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
        engine.add_request(f"mix-{i}", p, sp)
    first = engine.step()  # every prompt fits the token budget: all eight prefill and sample together
    assert sorted(o.request_id for o in first) == sorted(f"mix-{i}" for i in range(8))
    assert all(len(o.new_token_ids) == 1 for o in first)
    texts = {o.request_id: o.new_text for o in first}
    finish = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            texts[o.request_id] += o.new_text
            if o.finished:
                finish[o.request_id] = o.finish_reason
    for i, (_, spec, _) in enumerate(CONSTRAINED):
        assert finish[f"mix-{i}"] == "stop", texts[f"mix-{i}"]
        check(spec, texts[f"mix-{i}"])
    # the free rows of the mixed batch are untouched by the masks: same text as each alone
    alone = engine.generate(prompts[4:], [greedy(8) for _ in FREE])
    assert [texts[f"mix-{i}"] for i in range(4, 8)] == [r.outputs[0].text for r in alone]


def test_grammar_with_prefix_hit(engine: LLMEngine) -> None:
    system = "You are a careful assistant who answers in JSON. " * 6  # several full blocks to share
    prompt = engine.tokenizer.apply_chat_template([{"role": "system", "content": system},
                                                   {"role": "user", "content": "Give a digit, a flag and tags."}])
    spec = GuidedSpec.json_schema(DIGIT_FLAG)
    cold = engine.generate([prompt], greedy(30, spec))[0]
    warm = engine.generate([prompt], greedy(30, spec))[0]
    assert cold.num_cached_tokens == 0 and warm.num_cached_tokens >= 32
    assert warm.outputs[0].text == cold.outputs[0].text
    check(spec, warm.outputs[0].text)
    # another grammar on the same cached prefix starts from its own initial state
    other = engine.generate([prompt], greedy(16, GuidedSpec.json_schema(YES_NO)))[0]
    assert other.num_cached_tokens >= 32
    check(GuidedSpec.json_schema(YES_NO), other.outputs[0].text)


def test_grammar_with_chunked_prefill_and_preemption(engine: LLMEngine) -> None:
    """A cache of 7 blocks for four ~4-5-block requests forces preemption by recompute; 16-token budgets
    chunk every prompt. Each matcher keeps its state across recompute (the tokens are kept)."""
    small = LLMEngine(EngineConfig(num_threads=1, max_model_len=256, kv_cache_memory=7 * BLOCK_BYTES,
                                   max_num_batched_tokens=16))
    cases = [("Give a digit, a flag and tags as JSON.", GuidedSpec.json_schema(DIGIT_FLAG), 30),
             ("Where is the Eiffel tower? JSON please.", GuidedSpec.json_schema(CITY), 20),
             ("Is water wet? Answer in JSON.", GuidedSpec.json_schema(DIGIT_FLAG), 30),
             ("Describe a cat in JSON.", GuidedSpec.json_schema(DIGIT_FLAG), 30)]
    prompts = [chat(engine, t) for t, _, _ in cases]
    params = [greedy(n, spec) for _, spec, n in cases]
    results = small.generate(prompts, params)
    assert small.stats().preemptions > 0
    reference = engine.generate(prompts, params)  # a roomy cache, no preemption, whole-prompt prefill
    for (_, spec, _), got, ref in zip(cases, results, reference, strict=True):
        assert got.outputs[0].finish_reason == "stop"
        check(spec, got.outputs[0].text)
        assert got.outputs[0].text == ref.outputs[0].text


def test_compiled_grammars_are_cached(engine: LLMEngine) -> None:
    runtime = engine.grammar_runtime()
    before = runtime.compilations
    for _ in range(3):
        runtime.compile(GuidedSpec.json_schema(YES_NO))
    assert runtime.compilations - before <= 1
    with pytest.raises(ValueError, match="currency"):
        runtime.compile(GuidedSpec.json_schema({"type": "currency"}))
