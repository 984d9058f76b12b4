"""Context end-to-end fixtures: fake clouds, and gateways built from policy YAML on the test's Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gateway.app import create_app
from gateway.config.loader import parse_policy
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread


@pytest.fixture
def upstream() -> Iterator[tuple[FakeOpenAI, ServerThread]]:
    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def summarizer_upstream() -> Iterator[tuple[FakeOpenAI, ServerThread]]:
    fake = FakeOpenAI()
    fake.reply = "The user and the assistant discussed topics one to many; facts were exchanged."
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def anthropic_upstream() -> Iterator[tuple[FakeAnthropic, ServerThread]]:
    fake = FakeAnthropic()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def serve_gateway(redis_url: str, tmp_path) -> Iterator[Callable[[str], ServerThread]]:
    """serve_gateway(yaml_text) -> a started gateway on the test's Redis; stopped after the test."""
    started: list[ServerThread] = []

    def start(policy_yaml: str) -> ServerThread:
        text = policy_yaml + f"\nredis: {{url: '{redis_url}', timeout_ms: 200}}\nserver: {{data_dir: '{tmp_path}'}}\n"
        policy = parse_policy(text, "context-test-policy.yaml")
        srv = ServerThread(lambda: create_app(policy)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
