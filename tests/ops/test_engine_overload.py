"""The engine server's --max-waiting-requests: a full waiting list answers 503 at once and /ready says so."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from engine.config import EngineConfig
from engine.serving.async_engine import AsyncEngine
from engine.serving.server import create_engine_app
from tests.helpers import ServerThread

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    engine = AsyncEngine.from_config(EngineConfig(kv_cache_memory=32 * 2**20, num_threads=1, max_num_seqs=1))
    with ServerThread(lambda: create_engine_app(engine, MODEL, max_waiting_requests=1)) as srv:
        yield srv
    engine.shutdown()


def body(stream: bool, max_tokens: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Count."}], "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": stream}


def test_full_waiting_list_is_a_503_and_not_ready(server: ServerThread) -> None:
    assert httpx.get(server.url + "/ready").status_code == 200
    with httpx.Client(timeout=120) as client, client.stream(
            "POST", server.url + "/v1/chat/completions", json=body(True, 200)) as running:
        lines = running.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # running: the one sequence slot
        waiting: list[int] = []
        t = threading.Thread(target=lambda: waiting.append(
            httpx.post(server.url + "/v1/chat/completions", json=body(False, 2), timeout=120).status_code))
        t.start()
        for _ in range(2000):  # until the second request is in (it waits for the running one)
            if httpx.get(server.url + "/ready").status_code == 503:
                break
        ready = httpx.get(server.url + "/ready")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "engine_overloaded"
        refused = httpx.post(server.url + "/v1/chat/completions", json=body(False, 2), timeout=30)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "engine_overloaded"
    t.join(120)  # closing the stream freed the slot: the waiting request runs and completes
    assert waiting == [200]
    assert httpx.get(server.url + "/ready").status_code == 200
