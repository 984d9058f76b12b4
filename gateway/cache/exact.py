"""L1: the exact cache. One Redis string per canonical request, with an absolute TTL (reads never extend it)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from gateway.cache import keyspace as ks
from gateway.cache.lean_get import LeanGet
from gateway.redis_client import execute_partial

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.redis_guard import RedisGuard


@dataclass(frozen=True, slots=True)
class Stored:
    completion: dict
    stored_at: float  # unix time of the store; max-age compares against it


class ExactCache:
    def __init__(self, redis: aioredis.Redis, lookup_guard: RedisGuard, store_guard: RedisGuard) -> None:
        self._redis = redis
        self._lookup_guard = lookup_guard
        self._store_guard = store_guard
        # Lookups are the hot path of every hit: pipelined on one connection where the server allows it.
        self._lean = LeanGet.for_client(redis)
        self._read = self._lean.get if self._lean is not None else redis.get

    async def get(self, ns: str, digest: str) -> Stored | None:
        """Raises RedisUnavailable when Redis is slow or down (the caller treats it as a miss)."""
        key = ks.exact_entry(ns, digest)
        raw = await self._lookup_guard.call(self._read(key), key=key)
        if raw is None:
            return None
        doc = orjson.loads(raw)
        return Stored(completion=doc["c"], stored_at=doc["at"])

    async def connect(self) -> None:
        """Open the lookup connection now (LeanGet.connect); redis-py's pool is warmed by the caller."""
        if self._lean is not None:
            await self._lean.connect()

    def close(self) -> None:
        if self._lean is not None:
            self._lean.close()

    async def put(self, tenant: str, model: str, ns: str, digest: str, completion: dict, ttl_s: float) -> None:
        now = time.time()
        expires_at = now + ttl_s
        value = orjson.dumps({"at": now, "c": completion})

        key = ks.exact_entry(ns, digest)

        async def write() -> list:
            pipe = self._redis.pipeline(transaction=False)
            pipe.set(key, value, px=max(1, int(ttl_s * 1000)))
            pipe.zadd(ks.exact_index(ns), {digest: expires_at})
            pipe.zremrangebyscore(ks.exact_index(ns), "-inf", now)  # forget entries Redis already expired
            essential = len(pipe)
            # The namespace set is one key of its own (on a cluster, maybe on another master): a later store
            # registers the namespace if this one could not.
            pipe.sadd(ks.NAMESPACES, namespace_member(tenant, model, ns))
            return await execute_partial(pipe, essential)

        await self._store_guard.call(write, key=key)


def namespace_member(tenant: str, model: str, ns: str) -> bytes:
    return orjson.dumps([tenant, model, ns])


def parse_namespace_member(member: bytes) -> tuple[str, str, str] | None:
    """(tenant, model, namespace) of a namespace-set member (namespace_member's inverse); None for a member the
    gateway did not write, which every reader of the set (stats, purge, the semantic load) skips."""
    try:
        value = orjson.loads(member)
    except orjson.JSONDecodeError:  # not JSON, or not UTF-8
        return None
    if not isinstance(value, list) or len(value) != 3 or not all(isinstance(v, str) for v in value):
        return None
    return value[0], value[1], value[2]


def storable(completion: dict) -> bool:
    """Only complete successful answers: every choice finished, none cut by a content filter. Also the test of
    what is read back (see replayable), hence the shape checks: a choice that is not an object is no answer."""
    if completion.get("error") is not None:
        return False
    choices = completion.get("choices")
    if not choices or not isinstance(choices, list):
        return False
    return all(isinstance(c, dict) and c.get("finish_reason") and c.get("finish_reason") != "content_filter"
               for c in choices)


def replayable(value: object) -> bool:
    """Whether a completion read back from Redis (exact or semantic) is one the gateway stores: a storable answer
    whose usage, which a hit counts as tokens saved, is an object or absent. Anything else under a cache key
    (another program's value, one cut short) must be a miss: replayed, it is a 500 or an answer with no choices."""
    return isinstance(value, dict) and storable(value) and isinstance(value.get("usage"), (dict, type(None)))
