"""Backend `type: engine` with `urls:`: replicas that already run (here one real replica on a thread and one
URL where nothing listens). The dead one never holds up start-up or takes requests; the live one is mirrored
from its /kv_events and serves chat and streams through the OpenAI-compatible client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from engine.config import EngineConfig
from engine.serving.async_engine import AsyncEngine
from engine.serving.server import create_engine_app
from gateway.backends.base import BackendError, Timeouts
from gateway.backends.engine import engine_backend
from gateway.backends.engine_remote import EngineReplicasBackend
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from gateway.pipeline import CHAT
from tests.helpers import ServerThread, free_port

MODEL = "smollm2-135m"
T = Timeouts(first_byte=120, total=300)
BODY = {"model": MODEL, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
        "messages": [{"role": "system", "content": "You are a lighthouse keeper who loves weather reports. " * 3},
                     {"role": "user", "content": "How is the sea today?"}]}


@pytest.fixture(scope="module")
def replica() -> Iterator[ServerThread]:
    engine = AsyncEngine.from_config(EngineConfig(kv_cache_memory=32 * 2**20, num_threads=1, max_num_seqs=8))
    with ServerThread(lambda: create_engine_app(engine, MODEL)) as srv:
        yield srv
    engine.shutdown()


async def test_given_urls_dead_and_alive(replica: ServerThread) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    backend = engine_backend(BackendConfig(name="pool", type="engine", model=MODEL, urls=[replica.url, dead]),
                             Metrics())
    assert isinstance(backend, EngineReplicasBackend)
    await backend.start()
    try:
        router = backend.router
        assert router is not None
        assert router.replicas[replica.url].healthy and not router.replicas[dead].healthy
        assert await backend.check_ready() is None
        assert await backend.list_models() == [MODEL]

        first = await backend.chat(BODY, T)
        assert first["usage"]["completion_tokens"] == 4
        hashes, n = backend._prompt_blocks(CHAT, BODY)
        for _ in range(400):  # the replica's stored events reach the mirror
            if router.cached_blocks(replica.url, hashes) == (n - 1) // router.block_size:
                break
            await asyncio.sleep(0.05)
        assert router.cached_blocks(replica.url, hashes) == (n - 1) // router.block_size
        again = await backend.chat(BODY, T)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == router.block_size * ((n - 1) // router.block_size)

        chunks = [c async for c in backend.chat_stream({**BODY, "stream": True}, T)]
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == \
            first["choices"][0]["message"]["content"]

        with pytest.raises(BackendError) as bad:  # the replica's own 400 comes through unchanged
            await backend.chat({**BODY, "temperature": 7}, T)
        assert (bad.value.status, bad.value.body["error"]["param"]) == (400, "temperature")
        assert all(s.inflight == 0 for s in router.replicas.values())

        router.set_healthy(replica.url, False)  # as after a connect error: nothing left to route to
        with pytest.raises(BackendError) as none_left:
            await backend.chat(BODY, T)
        assert (none_left.value.status, none_left.value.retryable) == (503, True)
        for _ in range(100):  # the health watch brings the live replica back
            if router.replicas[replica.url].healthy:
                break
            await asyncio.sleep(0.05)
        assert (await backend.chat(BODY, T))["usage"]["completion_tokens"] == 4
    finally:
        await backend.close()
