"""The summariser on its own: chained cache keys, batching of long histories, and failing open on Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.backends.base import Backend
from gateway.backends.openai import OpenAIBackend
from gateway.config.schema import BackendConfig
from gateway.context.metrics import context_metrics
from gateway.context.summarize import BATCH_CHARS, Summarizer, SummaryRequest, batches, chain_keys
from gateway.metrics import Metrics
from gateway.redis_guard import RedisGuard
from tests.helpers import free_port


class Pool:
    def __init__(self, backends: dict[str, Backend]) -> None:
        self.backends = backends

    def get(self, name: str) -> Backend:
        return self.backends[name]

    def names(self) -> list[str]:
        return list(self.backends)


def turns(n: int, size: int = 10) -> list[list[dict]]:
    return [[{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * size}] for i in range(n)]


def request(units: list[list[dict]], tenant: str = "t") -> SummaryRequest:
    return SummaryRequest(tenant, "summ", "m", units, 100, 5.0, 60)


def test_chain_keys_share_the_prefix_of_a_growing_conversation() -> None:
    short, long = chain_keys(request(turns(5))), chain_keys(request(turns(8)))
    assert long[:5] == short
    assert chain_keys(request(turns(5), tenant="other"))[0] != short[0]
    edited = turns(5)
    edited[2][0]["content"] += "!"
    assert chain_keys(request(edited))[:2] == short[:2] and chain_keys(request(edited))[2:] != short[2:]
    tags = {key.split("{", 1)[1].split("}", 1)[0] for key in long}
    assert len(tags) == 1  # one Redis Cluster slot for the whole chain


def test_long_histories_are_folded_in_batches() -> None:
    units = turns(40, size=BATCH_CHARS // 50)
    ranges = batches(units, 3)
    assert ranges[0][0] == 3 and ranges[-1][1] == 40 and len(ranges) > 1
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))


async def test_redis_down_still_summarises(fake_openai) -> None:
    fake, srv = fake_openai
    fake.reply = "short summary"
    metrics = Metrics()
    backend = OpenAIBackend(BackendConfig(name="summ", type="openai", base_url=srv.url + "/v1", api_key="k"), metrics)
    await backend.start()
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.05)
    try:
        summarizer = Summarizer(Pool({"summ": backend}), dead, RedisGuard(metrics, "context", 0.2), context_metrics(metrics))
        result = await summarizer.summarize(request(turns(4)))
        assert (result.text, result.result) == ("short summary", "miss")
        assert fake.request_count == 1
        assert metrics.registry.get_sample_value("gateway_redis_errors_total", {"component": "context"}) >= 1
        unknown = await summarizer.summarize(SummaryRequest("t", "nope", "m", turns(4), 100, 5.0, 60))
        assert (unknown.text, unknown.result) == (None, "error")
    finally:
        await backend.close()
        await dead.aclose()
