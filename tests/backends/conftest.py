"""Fake clouds on background threads (one per module) and backends wired to them."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.backends.anthropic import AnthropicBackend
from gateway.backends.openai import OpenAIBackend
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread

API_KEY = "sk-test-key"


@pytest.fixture(scope="module")
def openai_server() -> Iterator[tuple[FakeOpenAI, ServerThread]]:
    fake = FakeOpenAI(api_key=API_KEY)
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[tuple[FakeAnthropic, ServerThread]]:
    fake = FakeAnthropic(api_key=API_KEY)
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def fake_openai(openai_server: tuple[FakeOpenAI, ServerThread]) -> FakeOpenAI:
    fake = openai_server[0]
    fake.reset()
    return fake


@pytest.fixture
def fake_anthropic(anthropic_server: tuple[FakeAnthropic, ServerThread]) -> FakeAnthropic:
    fake = anthropic_server[0]
    fake.reset()
    return fake


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
async def openai_backend(
    openai_server: tuple[FakeOpenAI, ServerThread], fake_openai: FakeOpenAI, metrics: Metrics
) -> AsyncIterator[OpenAIBackend]:
    config = BackendConfig(name="up", type="openai", base_url=openai_server[1].url + "/v1", api_key=API_KEY,
                           headers={"X-Extra": "yes"})
    backend = OpenAIBackend(config, metrics)
    await backend.start()
    yield backend
    await backend.close()


@pytest.fixture
async def anthropic_backend(
    anthropic_server: tuple[FakeAnthropic, ServerThread], fake_anthropic: FakeAnthropic, metrics: Metrics
) -> AsyncIterator[AnthropicBackend]:
    config = BackendConfig(name="claude", type="anthropic", base_url=anthropic_server[1].url, api_key=API_KEY)
    backend = AnthropicBackend(config, metrics)
    await backend.start()
    yield backend
    await backend.close()


@pytest.fixture
def stalled_port() -> Iterator[int]:
    """A port whose listen queue is full, so a connect attempt hangs until its timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(s)
    yield port
    for s in fillers:
        s.close()
    server.close()

