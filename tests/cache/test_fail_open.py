"""The embedder failing (at load or per call) never fails a request: L2 reports it and misses, L1 still works."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import redis.asyncio as aioredis

from gateway.cache.embedder import DIM
from gateway.cache.stage import CacheStage
from gateway.cache.worker import SemanticWorker
from gateway.config.loader import parse_policy
from gateway.metrics import Metrics
from gateway.pipeline import CacheControl, RequestContext, Resources

COMPLETION = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class BrokenEncoder:
    dim = DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("embedding backend exploded")


def no_model() -> BrokenEncoder:
    raise OSError("model files missing")


async def make_stage(redis_url: str, factory) -> tuple[CacheStage, object, aioredis.Redis]:
    policy = parse_policy(f"""
redis: {{url: "{redis_url}", timeout_ms: 250}}
backends:
  up: {{type: openai, base_url: "http://127.0.0.1:9/v1"}}
routes:
  - match: {{model: m}}
    backends: [up]
    cache: {{exact: {{ttl: 60}}, semantic: {{threshold: 0.9, lookup_timeout_ms: 20000}}}}
""", "p.yaml")  # a deadline no loaded CI machine reaches: these tests count errors, not timeouts
    client = aioredis.Redis.from_url(redis_url)
    resources = Resources(redis=client, metrics=Metrics(), data_dir=Path("."), get_policy=lambda: policy,
                          backends=None, http=None)  # type: ignore[arg-type]
    stage = CacheStage(resources, worker=SemanticWorker(factory, DIM))
    return stage, policy, client


def ctx(policy, text: str, request_id: str = "r1") -> RequestContext:
    from gateway.config.schema import TenantConfig

    body = {"model": "m", "messages": [{"role": "user", "content": text}], "temperature": 0}
    return RequestContext(request_id=request_id, endpoint="chat.completions", body=body, forward_body=body,
                          model="m", stream=False, include_usage=False, tenant=TenantConfig(name="t"),
                          route=policy.routes[0], policy=policy, headers={}, cache_control=CacheControl())


async def test_model_that_cannot_load_leaves_l1_working(redis_url: str) -> None:
    stage, policy, client = await make_stage(redis_url, no_model)
    try:
        stage.start(True)
        assert not await stage.worker.wait_ready_or_load()
        first = ctx(policy, "hello")
        assert await stage.before(first) is None and first.response_headers["X-Cache"] == "MISS"
        await stage.after(first, COMPLETION)
        await stage.drain()
        second = ctx(policy, "hello", "r2")
        hit = await stage.before(second)
        assert second.response_headers["X-Cache"] == "HIT-EXACT"
        assert hit is not None and hit["id"] == "chatcmpl-r2" and hit["choices"] == COMPLETION["choices"]
        assert stage.counts[("semantic", "unavailable")] == 1
    finally:
        await stage.close()
        await client.aclose()


async def test_encoder_errors_are_misses_not_failures(redis_url: str) -> None:
    stage, policy, client = await make_stage(redis_url, BrokenEncoder)
    try:
        assert await stage.worker.wait_ready_or_load()
        # put something in the scope so the lookup really embeds
        from gateway.cache.index import EntryMeta
        from gateway.cache.keys import namespace_id, semantic_query

        c = ctx(policy, "what is up")
        q = semantic_query("t", 0, "m", "1", c.body)
        meta = EntryMeta("e", namespace_id("t", "m"), q.scope, "what is up?", 0.0, 1e12)
        await stage.worker.run(stage.worker.indexes.add, meta, np.ones(DIM, dtype=np.float32) / np.sqrt(DIM))
        assert await stage.before(c) is None
        assert c.response_headers["X-Cache"] == "MISS"
        assert stage.counts[("semantic", "error")] == 1
        await stage.after(c, COMPLETION)  # the semantic store fails in the background, quietly
        await stage.drain()
        assert stage.counts[("exact", "miss")] == 1
    finally:
        await stage.close()
        await client.aclose()
