"""Redis killed mid-run: requests are still answered by the backend; the cache resumes once Redis is back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cache.gateway_helpers import ask, semantic_ready, settle, until
from tests.cache.gateway_helpers import policy as cache_policy
from tests.helpers import RedisServer


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


def test_requests_survive_a_dead_redis_and_the_cache_resumes(fake_openai, serve_gateway, own_redis) -> None:
    fake, up = fake_openai
    srv = serve_gateway(cache_policy(up.url), redis=own_redis.url)
    semantic_ready(srv)
    ask(srv, "survive this")
    settle(srv)
    assert ask(srv, "survive this")[1]["x-cache"] == "HIT-EXACT"

    own_redis.stop()
    for i in range(8):  # past the breaker's failure count: later lookups skip Redis at once
        completion, headers = ask(srv, f"while redis is down {i}")
        assert completion.choices[0].message.content == f"echo: while redis is down {i}"
        assert headers["x-cache"] == "MISS" and headers["x-backend"] == "up"
    settle(srv)  # failed background stores end quietly

    own_redis.start()  # same port, empty data
    attempts = iter(range(1000))

    def exact_hit_again() -> bool:
        # a fresh prompt per attempt: a store that met a stale pooled connection is simply lost (fail open)
        prompt = f"after the restart, attempt {next(attempts)}"
        ask(srv, prompt)
        return ask(srv, prompt)[1]["x-cache"] == "HIT-EXACT"

    assert until(exact_hit_again, 30, 0.5)

    def semantic_hit_again() -> bool:
        n = next(attempts)
        ask(srv, f"How do I water a cactus, attempt {n}?")
        settle(srv)
        return ask(srv, f"how do i water a cactus, attempt {n}")[1]["x-cache"] == "HIT-SEMANTIC"

    assert until(semantic_hit_again, 30, 0.5)
