"""AsyncEngine: the step loop on its own thread, async streams per request, abort frees blocks at once,
one request's error never stops the loop, KV events mirror exactly what the engine holds."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from engine.block_manager import hash_prompt_blocks
from engine.config import EngineConfig
from engine.sampling_params import SamplingParams
from engine.serving.async_engine import AsyncEngine, EngineStepError, EngineStoppedError

KV_BYTES = 48 * 2**20  # a small cache: ~65 blocks of 16 tokens for SmolLM2-135M


@pytest.fixture(scope="module")
def engine() -> Iterator[AsyncEngine]:
    eng = AsyncEngine.from_config(EngineConfig(kv_cache_memory=KV_BYTES, num_threads=1, max_num_seqs=16))
    eng.start()
    yield eng
    eng.shutdown()
    assert not eng.is_running


def greedy(max_tokens: int, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)  # type: ignore[arg-type]


def prompt_ids(engine: AsyncEngine, text: str) -> list[int]:
    return engine.tokenizer.apply_chat_template([{"role": "user", "content": text}])


async def collect(engine: AsyncEngine, rid: str, ids: list[int], params: SamplingParams) -> tuple[list[int], str]:
    tokens: list[int] = []
    text = []
    async for out in engine.generate(rid, ids, params):
        tokens += out.new_token_ids
        text.append(out.new_text)
    return tokens, "".join(text)


async def wait_idle(engine: AsyncEngine) -> None:
    """Until the loop has nothing running (a condition, not a timing assertion)."""
    for _ in range(400):
        s = engine.stats()
        if s.running == 0 and s.waiting == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"engine never went idle: {engine.stats()}")


def all_blocks_free(engine: AsyncEngine) -> bool:
    s = engine.stats()
    return s.num_free_blocks == s.num_total_blocks


async def test_concurrent_requests_match_one_at_a_time(engine: AsyncEngine) -> None:
    prompts = [prompt_ids(engine, t) for t in ("Name a colour.", "What is 2+2?", "Say hello in French.",
                                               "Write one word about the sea.")]
    alone = [await collect(engine, f"alone-{i}", p, greedy(12, ignore_eos=True)) for i, p in enumerate(prompts)]
    together = await asyncio.gather(*(collect(engine, f"together-{i}", p, greedy(12, ignore_eos=True))
                                      for i, p in enumerate(prompts)))
    assert [t for t, _ in together] == [t for t, _ in alone]
    assert all(len(t) == 12 for t, _ in together)
    assert [s for _, s in together] == [engine.tokenizer.decode(t) for t, _ in alone]
    await wait_idle(engine)
    assert all_blocks_free(engine)


async def test_closing_the_stream_aborts_and_frees_blocks_at_once(engine: AsyncEngine) -> None:
    ids = prompt_ids(engine, "Tell me a long story about a lighthouse keeper.")
    stream = await engine.add_request("abort-me", ids, greedy(400, ignore_eos=True))
    seen = 0
    async for out in stream:
        seen += len(out.new_token_ids)
        if seen >= 3:
            break
    assert not all_blocks_free(engine)
    await stream.aclose()  # returns once the engine freed the request's blocks
    assert all_blocks_free(engine)
    assert engine.stats().running == 0


async def test_cancelled_consumer_aborts_its_request(engine: AsyncEngine) -> None:
    ids = prompt_ids(engine, "Count slowly from one to one hundred.")
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.generate("cancel-me", ids, greedy(400, ignore_eos=True)):
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_idle(engine)
    assert all_blocks_free(engine)


async def test_rejected_request_raises_and_others_keep_going(engine: AsyncEngine) -> None:
    good = asyncio.create_task(collect(engine, "good", prompt_ids(engine, "Hi"), greedy(8, ignore_eos=True)))
    too_long = [1] * (engine.max_model_len + 5)
    with pytest.raises(ValueError):
        await engine.add_request("too-long", too_long, greedy(4))
    beyond_cache = [1] * min(engine.max_model_len - 10, engine.stats().num_total_blocks * 16 + 32)
    with pytest.raises(ValueError):
        await engine.add_request("beyond-cache", beyond_cache, greedy(4))
    tokens, _ = await good
    assert len(tokens) == 8


async def test_duplicate_request_id_is_refused(engine: AsyncEngine) -> None:
    ids = prompt_ids(engine, "Hello there")
    stream = await engine.add_request("dup", ids, greedy(50, ignore_eos=True))
    with pytest.raises(ValueError, match="already in flight"):
        await engine.add_request("dup", ids, greedy(5))
    await stream.aclose()
    assert all_blocks_free(engine)


async def test_n_choices_each_finish(engine: AsyncEngine) -> None:
    params = SamplingParams(temperature=0.8, seed=7, max_tokens=6, ignore_eos=True, n=3)
    finished: dict[int, int] = {}
    counts: dict[int, int] = {}
    async for out in engine.generate("n3", prompt_ids(engine, "Pick a number."), params):
        counts[out.index] = counts.get(out.index, 0) + len(out.new_token_ids)
        if out.finished:
            finished[out.index] = out.num_output_tokens
    assert finished == {0: 6, 1: 6, 2: 6}
    assert counts == {0: 6, 1: 6, 2: 6}
    await wait_idle(engine)
    assert all_blocks_free(engine)


async def test_a_failing_step_fails_its_requests_but_not_the_loop(engine: AsyncEngine, monkeypatch) -> None:
    real_step = engine.engine.step
    calls = {"n": 0}

    def flaky_step():  # the third step blows up once, as a model bug would
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom")
        return real_step()

    monkeypatch.setattr(engine.engine, "step", flaky_step)
    with pytest.raises(EngineStepError, match="boom"):
        await collect(engine, "victim", prompt_ids(engine, "Hello"), greedy(20, ignore_eos=True))
    assert all_blocks_free(engine)
    tokens, _ = await collect(engine, "survivor", prompt_ids(engine, "Hello again"), greedy(5, ignore_eos=True))
    assert len(tokens) == 5
    assert engine.is_running


async def test_kv_events_mirror_the_engine(engine: AsyncEngine) -> None:
    sub = engine.subscribe_kv_events()
    mirror = set(sub.snapshot)
    assert mirror == engine.held_block_hashes()
    ids = prompt_ids(engine, "Summarise the plot of a film about a robot who learns to paint. " * 3)
    assert len(ids) > 48
    await collect(engine, "kv", ids, greedy(4, ignore_eos=True))
    await wait_idle(engine)
    expected_full = hash_prompt_blocks(ids, engine.block_size)[: (len(ids) - 1) // engine.block_size]
    while True:  # apply everything the engine published so far
        try:
            event = await asyncio.wait_for(sub.get(), 0.5)
        except TimeoutError:
            break
        assert event is not None
        if event["type"] == "stored":
            mirror.update(event["block_hashes"])
        else:
            mirror.difference_update(event["block_hashes"])
    sub.close()
    assert mirror == engine.held_block_hashes()
    assert set(expected_full) <= mirror  # the prompt's full blocks are held under the router's hashes


async def test_no_blocks_leak_after_many_requests(engine: AsyncEngine) -> None:
    texts = [f"Question {i}: what is {i} times {i + 1}?" for i in range(40)]
    results = await asyncio.gather(*(
        collect(engine, f"leak-{i}", prompt_ids(engine, t), greedy(3 + i % 5, ignore_eos=True))
        for i, t in enumerate(texts)))
    assert [len(t) for t, _ in results] == [3 + i % 5 for i in range(40)]
    await wait_idle(engine)
    assert all_blocks_free(engine)


async def test_shutdown_ends_streams_and_refuses_new_work() -> None:
    small = AsyncEngine.from_config(EngineConfig(load_format="dummy", dummy_config={"num_layers": 2},
                                                 kv_cache_memory=8 * 2**20, num_threads=1))
    stream = await small.add_request("long", list(range(100, 140)), greedy(300, ignore_eos=True))
    sub = small.subscribe_kv_events()
    first = await stream.__anext__()
    assert first.new_token_ids
    await asyncio.get_running_loop().run_in_executor(None, small.shutdown)
    assert not small.is_running
    with pytest.raises(EngineStoppedError):
        async for _ in stream:
            pass
    while (event := await asyncio.wait_for(sub.get(), 10)) is not None:
        assert event["type"] in ("stored", "removed")
    with pytest.raises(EngineStoppedError):
        await small.add_request("late", [100, 101], greedy(2))
    stats = small.stats()
    assert stats.num_free_blocks == stats.num_total_blocks
