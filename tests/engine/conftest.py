"""Engine server fixtures: one small in-process AsyncEngine per module, served by its OpenAI app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.server import create_engine_app
from tests.helpers import ServerThread

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def engine() -> Iterator[AsyncEngine]:
    eng = AsyncEngine.from_config(EngineConfig(kv_cache_memory=48 * 2**20, num_threads=1, max_num_seqs=16))
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def server(engine: AsyncEngine) -> Iterator[ServerThread]:
    with ServerThread(lambda: create_engine_app(engine, MODEL)) as srv:
        yield srv
