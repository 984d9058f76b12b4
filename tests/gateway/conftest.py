"""Gateway end-to-end fixtures: a fake OpenAI upstream, and gateways built from policy YAML."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gateway.app import create_app
from gateway.config.loader import parse_policy
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread


@pytest.fixture
def fake_openai() -> Iterator[tuple[FakeOpenAI, ServerThread]]:
    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def serve_gateway(redis_url: str, tmp_path) -> Iterator[Callable[..., ServerThread]]:
    """serve_gateway(yaml_text) -> a started gateway on the test's Redis; stopped after the test."""
    started: list[ServerThread] = []

    def start(policy_yaml: str, *, redis: str | None = None, policy_path: str | None = None) -> ServerThread:
        text = policy_yaml
        if "redis:" not in text:
            text += f"\nredis: {{url: '{redis or redis_url}', timeout_ms: 200}}\n"
        if "server:" not in text:
            text += f"\nserver: {{data_dir: '{tmp_path}'}}\n"
        policy = parse_policy(text, "test-policy.yaml")
        srv = ServerThread(lambda: create_app(policy, policy_path=policy_path)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
