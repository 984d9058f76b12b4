"""Shared fixtures: a real Redis for the whole session (or REDIS_URL), fresh data per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.helpers import RedisServer

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
