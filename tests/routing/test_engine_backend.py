"""Backend `type: engine` in the gateway: in-process engine (replicas: 1), its options, and errors."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gateway.backends.base import BackendError, Timeouts
from gateway.backends.engine import InProcessEngineBackend, engine_backend
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics

MODEL = "smollm2-135m"
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 6,
         "temperature": 0, "ignore_eos": True}
T = Timeouts()


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def local() -> AsyncIterator[InProcessEngineBackend]:
    config = BackendConfig(name="local", type="engine", model=MODEL,
                           options={"kv_cache_memory": "32MiB", "num_threads": 1, "max_num_seqs": 8})
    backend = engine_backend(config, Metrics())
    assert isinstance(backend, InProcessEngineBackend)
    await backend.start()
    yield backend
    await backend.close()
    assert await backend.check_ready() == "local: the engine is not running"


async def test_in_process_chat_stream_completions_and_errors(local: InProcessEngineBackend) -> None:
    assert await local.check_ready() is None
    assert await local.list_models() == [MODEL]

    whole = await local.chat(HELLO, T)
    assert whole["object"] == "chat.completion"
    assert whole["usage"]["completion_tokens"] == 6
    text = whole["choices"][0]["message"]["content"]

    chunks = [c async for c in local.chat_stream({**HELLO, "stream": True,
                                                   "stream_options": {"include_usage": True}}, T)]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == text
    assert chunks[-1]["usage"]["completion_tokens"] == 6
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the same prompt ran just before

    done = await local.completions({"model": MODEL, "prompt": "One, two,", "max_tokens": 3, "temperature": 0}, T)
    assert done["object"] == "text_completion" and done["choices"][0]["text"]
    pieces = [c async for c in local.completions_stream({"model": MODEL, "prompt": "One, two,", "max_tokens": 3,
                                                         "temperature": 0, "stream": True}, T)]
    assert "".join(c["choices"][0]["text"] for c in pieces) == done["choices"][0]["text"]

    with pytest.raises(BackendError) as bad:
        await local.chat({**HELLO, "temperature": 9}, T)
    assert (bad.value.status, bad.value.retryable, bad.value.reason) == (400, False, "status_4xx")
    assert bad.value.body["error"]["param"] == "temperature"
    assert bad.value.to_gateway_error().status == 400
    with pytest.raises(BackendError) as too_long:
        await local.chat({**HELLO, "max_tokens": 10**6}, T)
    assert too_long.value.body["error"]["code"] == "context_length_exceeded"
    with pytest.raises(BackendError) as stream_bad:
        async for _ in local.chat_stream({**HELLO, "messages": []}, T):
            pass
    assert stream_bad.value.status == 400
    with pytest.raises(BackendError) as emb:
        await local.embeddings({"model": MODEL, "input": "x"}, T)
    assert emb.value.status == 400

    rendered = local.metrics.render().decode()
    assert "engine_generation_tokens_total" in rendered  # the engine's metrics live on the gateway's registry
    # A client's mistake (the 400s above) is not an upstream fault: it stays out of the upstream-error counter.
    assert not re.search(r'gateway_upstream_errors_total\{backend="local",reason="status_4xx"\} [1-9]', rendered)


async def test_closing_a_stream_early_aborts_the_engine_request(local: InProcessEngineBackend) -> None:
    stream = local.chat_stream({**HELLO, "max_tokens": 500, "stream": True}, T)
    got = 0
    async for _ in stream:
        got += 1
        if got == 3:
            break
    await stream.aclose()
    assert local.engine is not None
    stats = local.engine.stats()
    assert (stats.running, stats.num_free_blocks) == (0, stats.num_total_blocks)


async def test_a_total_timeout_is_a_504(local: InProcessEngineBackend) -> None:
    with pytest.raises(BackendError) as info:
        await local.chat({**HELLO, "max_tokens": 500}, Timeouts(total=0.3))
    assert (info.value.status, info.value.reason) == (504, "timeout")
    assert local.engine is not None
    stats = local.engine.stats()
    assert stats.num_free_blocks == stats.num_total_blocks  # the timed-out request was aborted


async def test_a_closed_engine_backend_lets_go_of_its_engine() -> None:
    """A backend retired by a policy reload closes while the gateway and its registry live on, with the
    engine frozen by start-up's gc.freeze (never seen by the cycle collector): the engine's weights and KV
    cache must be freed by reference counting alone, whoever still holds the closed backend."""
    import gc
    import weakref

    metrics = Metrics()
    config = BackendConfig(name="local", type="engine", model=MODEL,
                           options={"kv_cache_memory": "32MiB", "num_threads": 1, "max_num_seqs": 8})
    backend = InProcessEngineBackend(config, metrics)
    await backend.start()
    assert (await backend.chat(HELLO, T))["usage"]["completion_tokens"] == 6
    assert backend.engine is not None
    gone = weakref.ref(backend.engine.engine)  # the LLMEngine: weights and KV cache
    gc.collect()
    gc.freeze()
    try:
        await backend.close()
        # before the fix: held by the registry's stats collector and by the backend's OpenAI layer
        assert gone() is None
        assert "engine_generation_tokens_total" not in metrics.render().decode()
        with pytest.raises(BackendError) as stopped:
            await backend.chat(HELLO, T)
        assert (stopped.value.status, stopped.value.body["error"]["code"]) == (503, "engine_stopped")
    finally:
        gc.unfreeze()
