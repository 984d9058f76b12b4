"""Cache test fixtures: the real embedding model (once per session), a fake OpenAI upstream, gateways."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gateway.cache.embedder import MiniLMEmbedder, shared_embedder
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread


@pytest.fixture(scope="session")
def embedder() -> MiniLMEmbedder:
    return shared_embedder()


@pytest.fixture
def fake_openai() -> Iterator[tuple[FakeOpenAI, ServerThread]]:
    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def serve_gateway(redis_url: str, tmp_path) -> Iterator[Callable[..., ServerThread]]:
    """serve_gateway(yaml_text, redis=url) -> a started gateway; stopped after the test."""
    from gateway.app import create_app
    from gateway.config.loader import parse_policy

    started: list[ServerThread] = []

    def start(policy_yaml: str, *, redis: str | None = None) -> ServerThread:
        text = policy_yaml + f"\nredis: {{url: '{redis or redis_url}', timeout_ms: 250}}\n"
        text += f"\nserver: {{data_dir: '{tmp_path}', admin_keys: [admin-key]}}\n"
        policy = parse_policy(text, "cache-test-policy.yaml")
        srv = ServerThread(lambda: create_app(policy)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
