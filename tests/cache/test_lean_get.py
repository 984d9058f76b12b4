"""The exact cache's pipelined GET on a real Redis: replies matched in order (even past a caller that gave up),
error replies raised as redis-py does, a dropped connection replaced on the next GET."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gateway.cache.lean_get import LeanGet


def test_many_gets_in_flight_get_their_own_values(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    sync.mset({f"k{i}": f"v{i}" for i in range(200)})
    sync.lpush("a-list", "x")  # GET on a list is an error reply

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_url)
        lean = LeanGet.for_client(client)
        assert lean is not None
        try:
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
        finally:
            lean.close()
            await client.aclose()

    asyncio.run(main())
    sync.close()


def test_tls_clients_keep_redis_py() -> None:
    assert LeanGet.for_client(aioredis.Redis.from_url("rediss://127.0.0.1:1")) is None


def test_hmget_reads_fields_in_order_with_gets(redis_url: str) -> None:
    """A semantic hit's read (HMGET of its completion and evidence) shares the pipelined connection with GETs."""
    sync = redis.Redis.from_url(redis_url)
    sync.hset("entry", mapping={"c": b"completion", "v": b"vector"})
    sync.set("plain", "value")

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_url)
        lean = LeanGet.for_client(client)
        assert lean is not None
        try:
            values = await asyncio.gather(lean.hmget("entry", b"c"), lean.get("plain"), lean.hmget("entry", b"m"),
                                          lean.hmget("gone", b"c"), lean.hmget("entry", b"v", b"c"))
            assert values == [[b"completion"], b"value", [None], [None], [b"vector", b"completion"]]
            with pytest.raises(ResponseError):
                await lean.hmget("plain", b"c")  # wrong type: an error reply, as redis-py raises it
        finally:
            lean.close()
            await client.aclose()

    asyncio.run(main())
    sync.close()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_connect_cancelled_at_any_moment_never_leaves_a_dead_connection(redis_url: str, loop_kind: str) -> None:
    """A client that hangs up while the first connection is being made cancels the lookup inside connect;
    whatever moment that lands on (before, during or after the transport is made, before AUTH/SELECT went
    out), the next lookup must reach Redis, or the exact cache would be off for good."""
    import uvloop

    sync = redis.Redis.from_url(redis_url)
    sync.set("k", "v")
    sync.close()
    stuck: list[str] = []

    async def trial(turns: int, pause: float) -> None:
        client = aioredis.Redis.from_url(redis_url)
        lean = LeanGet.for_client(client)
        assert lean is not None
        try:
            first = asyncio.ensure_future(lean.get("k"))
            for _ in range(turns):
                await asyncio.sleep(0)
            if pause:
                await asyncio.sleep(pause)
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            for _ in range(3):
                await asyncio.sleep(0)
            try:
                value = await asyncio.wait_for(lean.get("k"), 2)
            except Exception as e:  # noqa: BLE001 - any failure is the defect under test
                stuck.append(f"turns={turns} pause={pause}: {e!r}")
                return
            if value != b"v":
                stuck.append(f"turns={turns} pause={pause}: {value!r}")
        finally:
            lean.close()
            await client.aclose()

    async def main() -> None:
        for turns in range(12):
            for pause in (0.0, 0.0002, 0.0005, 0.001, 0.002):
                await trial(turns, pause)

    if loop_kind == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())
    assert stuck == []
