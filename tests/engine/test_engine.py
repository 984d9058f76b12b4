"""LLMEngine end to end on SmolLM2: bad input, abort, stops, seeds, logprobs, n > 1, events, stats."""

from __future__ import annotations

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    torch.set_num_threads(1)
    return LLMEngine(EngineConfig(num_threads=1, max_model_len=256, kv_cache_memory=64 * 737280))


@pytest.fixture(scope="module")
def chat(engine: LLMEngine) -> list[int]:
    return engine.tokenizer.apply_chat_template([{"role": "user", "content": "Tell me about the moon."}])


def drain(engine: LLMEngine) -> list:
    outs = []
    while engine.has_unfinished_requests():
        outs.extend(engine.step())
    return outs


def greedy(max_tokens: int = 24, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


@pytest.mark.parametrize(
    ("prompt_len", "params", "message"),
    [
        (256, SamplingParams(max_tokens=1), "context window is 256"),
        (200, SamplingParams(max_tokens=100), "exceeds the context window"),
        (0, SamplingParams(), "prompt is empty"),
        (5, SamplingParams(temperature=-1), "temperature"),
        (5, SamplingParams(top_p=0), "top_p"),
        (5, SamplingParams(max_tokens=0), "max_tokens"),
        (5, SamplingParams(n=0), "n must be"),
        (5, SamplingParams(logprobs=50), "logprobs"),
    ],
)
def test_bad_requests_raise_clear_errors_and_engine_keeps_serving(engine, chat, prompt_len, params, message) -> None:
    with pytest.raises(ValueError, match=message):
        engine.add_request("bad", [1] * prompt_len, params)
    engine.add_request("good", chat, greedy(4))
    outs = drain(engine)
    assert outs[-1].request_id == "good" and outs[-1].finished and outs[-1].num_output_tokens == 4


def test_request_bigger_than_whole_cache_is_rejected() -> None:
    small = LLMEngine(EngineConfig(num_threads=1, max_model_len=256, kv_cache_memory=4 * 737280))  # 64 tokens
    with pytest.raises(ValueError, match="needs 7 KV cache blocks but the whole cache has 4"):
        small.add_request("big", [1] * 50, greedy(50))
    small.add_request("fits", [1] * 20, greedy(20))
    assert drain(small)[-1].finish_reason == "length"


def test_unknown_token_id_and_duplicate_request_id(engine) -> None:
    with pytest.raises(ValueError, match="token ids must be in"):
        engine.add_request("x", [10**6], greedy())
    engine.add_request("dup", [1, 2, 3], greedy(2))
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("dup", [1, 2, 3], greedy(2))
    drain(engine)


def test_abort_frees_blocks_at_once_and_reports_abort(engine, chat) -> None:
    total = engine.stats().num_total_blocks
    engine.add_request("a", chat, greedy(50))
    engine.step()
    assert engine.stats().num_free_blocks < total
    engine.abort_request("a")
    assert engine.stats().num_free_blocks == total and engine.stats().running == 0
    (out,) = engine.step()
    assert out.request_id == "a" and out.finished and out.finish_reason == "abort"
    assert not engine.has_unfinished_requests()


def test_streamed_text_matches_decoded_tokens_and_eos_stops(engine) -> None:
    short = engine.tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}])
    engine.add_request("s", short, greedy(60))
    outs = drain(engine)
    tokens = [t for o in outs for t in o.new_token_ids]
    assert outs[-1].finish_reason == "stop" and tokens[-1] in engine.tokenizer.eos_token_ids
    assert "".join(o.new_text for o in outs) == engine.tokenizer.decode(tokens)
    assert all(len(o.new_token_ids) == 1 for o in outs)


def test_stop_string_across_tokens_is_trimmed(engine, chat) -> None:
    (full,) = engine.generate([chat], greedy(40, ignore_eos=True))
    text = full.text
    # A stop string that starts inside one token and ends inside another.
    pieces = [engine.tokenizer.decode([t]) for t in full.token_ids]
    boundary = len(pieces[0]) + len(pieces[1]) + len(pieces[2])
    stop = text[boundary - 2: boundary + 3]
    assert len(stop) == 5
    engine.add_request("stop", chat, greedy(40, ignore_eos=True, stop=[stop]))
    outs = drain(engine)
    streamed = "".join(o.new_text for o in outs)
    assert streamed == text[: text.index(stop)]
    assert outs[-1].finish_reason == "stop"


def test_stop_token_ids_and_max_tokens(engine, chat) -> None:
    (full,) = engine.generate([chat], greedy(12, ignore_eos=True))
    assert full.outputs[0].finish_reason == "length" and len(full.token_ids) == 12
    target = full.token_ids[5]
    first = full.token_ids.index(target)
    (stopped,) = engine.generate([chat], greedy(12, ignore_eos=True, stop_token_ids=[target]))
    assert stopped.token_ids == full.token_ids[: first + 1] and stopped.outputs[0].finish_reason == "stop"


def test_seed_is_reproducible_whatever_the_batch(engine, chat) -> None:
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=7, max_tokens=16, ignore_eos=True)
    (alone,) = engine.generate([chat], params)
    other = SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True)
    batched = engine.generate([[1, 2, 3, 4, 5], chat, list(range(40, 70))], [other, params, other])
    assert batched[1].token_ids == alone.token_ids
    (reseeded,) = engine.generate([chat], SamplingParams(temperature=1.0, seed=8, max_tokens=16, ignore_eos=True))
    assert reseeded.token_ids != alone.token_ids


def test_logprobs_are_sorted_and_contain_the_greedy_choice(engine, chat) -> None:
    (res,) = engine.generate([chat], greedy(6, logprobs=3))
    logprobs = res.outputs[0].logprobs
    assert logprobs is not None and len(logprobs) == 6
    for token, entry in zip(res.token_ids, logprobs, strict=True):
        top = entry["top_logprobs"]
        assert entry["token_id"] == token and top[0][0] == token and len(top) == 3
        assert entry["logprob"] == pytest.approx(top[0][1]) and entry["logprob"] <= 0
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        assert entry["token"] == engine.tokenizer.decode([token], skip_special_tokens=False)


def test_n_choices_share_the_prompt_blocks(engine) -> None:
    prompt = engine.tokenizer.encode("A list of the largest cities in Europe, with their population: " * 3)
    params = SamplingParams(temperature=1.0, seed=3, n=3, max_tokens=8, ignore_eos=True)
    engine.block_manager.reset_prefix_cache()
    engine.add_request("n", prompt, params)
    outs = drain(engine)
    finals = {o.index: o for o in outs if o.finished}
    assert sorted(finals) == [0, 1, 2]
    full_blocks = (len(prompt) - 1) // 16 * 16
    assert finals[0].num_cached_tokens == 0
    assert finals[1].num_cached_tokens == finals[2].num_cached_tokens == full_blocks > 0
    texts = {i: "".join(o.new_text for o in outs if o.index == i) for i in range(3)}
    assert len(set(texts.values())) > 1  # different seeds per choice


def test_kv_events_and_stats(engine, chat) -> None:
    engine.drain_kv_events()
    before = engine.stats()
    engine.generate([chat], greedy(20, ignore_eos=True))
    events = engine.drain_kv_events()
    stored = [h for e in events if e.kind == "stored" for h in e.block_hashes]
    assert len(stored) >= len(chat) // 16 or before.prefix_cache_hits > 0
    after = engine.stats()
    assert after.prompt_tokens - before.prompt_tokens == len(chat)
    assert after.generation_tokens - before.generation_tokens == 20
    assert after.running == after.waiting == 0 and after.kv_cache_usage_ratio == 0.0
    assert after.num_free_blocks == after.num_total_blocks == 64


def test_generate_accepts_text_prompts(engine) -> None:
    (res,) = engine.generate(["The capital of France is"], greedy(5))
    assert res.prompt_token_ids == engine.tokenizer.encode("The capital of France is")
    assert "Paris" in res.text


def test_dummy_weights_of_a_given_config() -> None:
    config = EngineConfig(load_format="dummy", num_threads=1, max_model_len=128, kv_cache_memory=2**20,
                          dummy_config={"num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2,
                                        "intermediate_size": 128})
    first, second = LLMEngine(config), LLMEngine(config)
    assert first.model_config.num_layers == 2 and first.model_config.head_dim == 16
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    a, b = first.generate([[5, 6, 7]], params), second.generate([[5, 6, 7]], params)
    assert len(a[0].token_ids) == 8 and a[0].token_ids == b[0].token_ids  # reproducible random weights
    with pytest.raises(ValueError, match="unknown model config keys"):
        LLMEngine(EngineConfig(load_format="dummy", dummy_config={"layers": 2}))


def test_bfloat16_runs() -> None:
    config = EngineConfig(load_format="dummy", dtype="bfloat16", num_threads=1, max_model_len=128,
                          kv_cache_memory=2**20, dummy_config={"num_layers": 1, "hidden_size": 64, "num_heads": 4,
                                                               "num_kv_heads": 4, "intermediate_size": 64})
    (result,) = LLMEngine(config).generate([[1, 2, 3, 4]], SamplingParams(temperature=0.7, seed=1, max_tokens=4))
    assert len(result.token_ids) == 4


def test_generate_with_one_bad_prompt_leaves_nothing_queued(engine, chat) -> None:
    with pytest.raises(ValueError, match="context window"):
        engine.generate([chat, [1] * 300], greedy(4))
    assert not engine.has_unfinished_requests()
    assert engine.stats().num_free_blocks == engine.stats().num_total_blocks
