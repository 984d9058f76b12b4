"""The cache's pipelined GET/HGET on a real Redis: replies matched in order (even past a caller that gave up),
error replies raised as redis-py does, a dropped or stalled connection replaced."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from gateway.cache.lean_get import LeanGet


@contextlib.asynccontextmanager
async def lean_on(redis_url: str) -> AsyncIterator[LeanGet]:
    client = aioredis.Redis.from_url(redis_url)
    lean = LeanGet.for_client(client)
    assert lean is not None
    try:
        yield lean
    finally:
        lean.close()
        await client.aclose()


def test_many_gets_in_flight_get_their_own_values(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    sync.mset({f"k{i}": f"v{i}" for i in range(200)})
    sync.lpush("a-list", "x")  # GET on a list is an error reply

    async def main() -> None:
        async with lean_on(redis_url) as lean:
            await lean.get("k0")  # connected
            slow = asyncio.ensure_future(lean.get("k0"))
            await asyncio.sleep(0)  # sent ...
            slow.cancel()  # ... and given up: its reply still arrives and must not go to the next caller
            values = await asyncio.gather(*(lean.get(f"k{i}") for i in range(1, 200)), lean.get("missing"))
            assert values == [f"v{i}".encode() for i in range(1, 200)] + [None]
            with pytest.raises(ResponseError):
                await lean.get("a-list")
            assert await lean.get("k7") == b"v7"
            sync.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # drop the connection
            await asyncio.sleep(0.05)
            assert await lean.get("k8") == b"v8"  # the loss was noticed and the next GET reconnects

    asyncio.run(main())
    sync.close()


def test_tls_clients_keep_redis_py() -> None:
    assert LeanGet.for_client(aioredis.Redis.from_url("rediss://127.0.0.1:1")) is None


def test_hget_reads_a_field_in_order_with_gets(redis_url: str) -> None:
    """A semantic hit's completion read (HGET) shares the pipelined connection with exact GETs (the stage hands
    the exact cache's LeanGet to the semantic cache)."""
    sync = redis.Redis.from_url(redis_url)
    sync.hset("entry", mapping={"c": b"completion", "v": b"vector"})
    sync.set("plain", "value")

    async def main() -> None:
        async with lean_on(redis_url) as lean:
            values = await asyncio.gather(lean.hget("entry", b"c"), lean.get("plain"), lean.hget("entry", b"m"),
                                          lean.hget("gone", b"c"), lean.hget("entry", b"v"))
            assert values == [b"completion", b"value", None, None, b"vector"]
            with pytest.raises(ResponseError):
                await lean.hget("plain", b"c")  # wrong type: an error reply, as redis-py raises it

    asyncio.run(main())
    sync.close()


def test_a_stalled_connection_is_replaced_after_a_timeout(redis_url: str) -> None:
    """A reply given up on that does not come (Redis paused) drops the connection: a lookup queued behind it
    fails (a miss) instead of waiting out the stall, and the next lookup connects anew."""
    admin = redis.Redis.from_url(redis_url)
    admin.set("k", "v")

    async def main() -> None:
        async with lean_on(redis_url) as lean:
            assert await lean.get("k") == b"v"
            stalled = lean._conn
            admin.execute_command("CLIENT", "PAUSE", 5000, "ALL")
            try:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(lean.get("k"), 0.02)
                behind = asyncio.ensure_future(lean.get("k"))  # pipelined behind the reply that does not come
                with pytest.raises(RedisConnectionError):
                    await behind  # failed when the stalled connection was dropped, long before the pause ends
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
            assert await lean.get("k") == b"v"
            assert lean._conn is not stalled

    asyncio.run(main())
    admin.close()
