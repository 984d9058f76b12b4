"""A gateway opens its lookup connections at start-up: a connect inside the first lookup's few-ms budget was
cancelled with it, so a restarted gateway (docker compose down/up) answered its first repeat from the semantic
layer or the backend instead of the exact cache it had kept in Redis."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from gateway.cache.stage import create_stage
from gateway.config.loader import parse_policy
from gateway.metrics import Metrics
from gateway.pipeline import Resources


async def test_create_stage_opens_the_lookup_connections(redis_url: str) -> None:
    policy = parse_policy(f"""
redis: {{url: "{redis_url}"}}
backends:
  up: {{type: openai, base_url: "http://127.0.0.1:9/v1"}}
routes:
  - match: {{model: m}}
    backends: [up]
    cache: {{exact: {{ttl: 60}}}}
""", "p.yaml")
    client = aioredis.Redis.from_url(redis_url)
    resources = Resources(redis=client, metrics=Metrics(), data_dir=Path("."), get_policy=lambda: policy,
                          backends=None, http=None)  # type: ignore[arg-type]
    stage = await create_stage(resources)
    try:
        assert stage.exact._lean is not None and stage.exact._lean.connected
        assert stage.semantic._lean is not None and stage.semantic._lean.connected
    finally:
        await stage.close()
        await client.aclose()
