"""Shared fixtures: a real Redis for the whole session (or REDIS_URL), fresh data per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.helpers import RedisServer

pytest_plugins = ["tests.rss"]

# Hypothesis: no per-example deadline (a shared 2-core CI box makes timings meaningless; speed lives in bench/).
settings.register_profile("project", deadline=None, print_blob=True)
settings.load_profile("project")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | None]:
    """The private redis-server, or None when REDIS_URL names an external one."""
    if os.environ.get("REDIS_URL"):
        yield None
        return
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer | None) -> str:
    """A Redis URL with an empty database for this test."""
    import redis

    url = os.environ.get("REDIS_URL") or redis_server.url  # type: ignore[union-attr]
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.ConnectionError as e:
        pytest.fail(f"Redis at {url} is not reachable: {e}")
    finally:
        client.close()
    return url


@pytest.fixture
def fake_openai():
    """A fake OpenAI upstream on its own thread: (fake, server); base_url = server.url + "/v1"."""
    from tests.fakes.openai_server import FakeOpenAI
    from tests.helpers import ServerThread

    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def fake_anthropic():
    """A fake Anthropic Messages API on its own thread: (fake, server); base_url = server.url."""
    from tests.fakes.anthropic_server import FakeAnthropic
    from tests.helpers import ServerThread

    fake = FakeAnthropic()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


ADMIN_KEY = "admin-key"


@pytest.fixture
def serve_gateway(redis_url: str, tmp_path):
    """serve_gateway(yaml_text, redis=URL, policy_path=FILE) -> a started gateway (a tests.helpers.ServerThread).

    Unless the YAML sets them, Redis is the test's (a 250 ms budget: the CI machine is small and shared) and the
    server section gives a private data dir and the admin key ADMIN_KEY. Stopped after the test.
    """
    from gateway.app import create_app
    from gateway.config.loader import parse_policy
    from tests.helpers import ServerThread

    started: list[ServerThread] = []

    def start(policy_yaml: str, *, redis: str | None = None, policy_path: str | None = None) -> ServerThread:
        text = policy_yaml
        if "\nredis:" not in "\n" + text:
            text += f"\nredis: {{url: '{redis or redis_url}', timeout_ms: 250}}\n"
        if "\nserver:" not in "\n" + text:
            text += f"\nserver: {{data_dir: '{tmp_path}', admin_keys: [{ADMIN_KEY}]}}\n"
        policy = parse_policy(text, "test-policy.yaml")
        srv = ServerThread(lambda: create_app(policy, policy_path=policy_path)).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def gw(fake_openai, serve_gateway, request):
    """(fake upstream, gateway) started with the test module's `policy(upstream_url)`."""
    fake, up = fake_openai
    return fake, serve_gateway(request.module.policy(up.url))
