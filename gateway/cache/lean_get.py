"""Cache reads pipelined on one Redis connection, for the hot path of hits: exact GETs and the HGET of a
semantic hit's completion.

A redis-py asyncio GET costs tens of microseconds of Python (pool checkout, command packing, parser, retry
wrapper, release). Under load on one core that is a large share of an exact hit, and it queues: a lookup that
waits behind the loop for more than the few-ms budget becomes a miss, and five of those open the breaker, so a
busy gateway stops answering from the cache exactly when it should. Here every GET is one preformatted write
on a single shared connection (RESP replies arrive in order, so a FIFO of futures matches them) and one
hiredis parse. A lookup whose caller gave up (timeout) still consumes its reply, so order is never lost.

Only plain TCP or unix-socket Redis (standalone, with optional AUTH and db) is served this way; anything else
(TLS, Cluster, Sentinel) keeps redis-py (`LeanGet.for_client` returns None).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError


def _command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


class LeanGet(asyncio.Protocol):
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self._kw = kwargs
        self._transport: asyncio.Transport | None = None
        self._waiters: deque[asyncio.Future] = deque()
        self._out: list[bytes] = []  # commands queued in this loop turn, written together by _flush
        self._reader = hiredis.Reader()
        self._connecting: asyncio.Future | None = None

    @classmethod
    def for_client(cls, redis: Any) -> LeanGet | None:
        """A LeanGet on the same server as `redis` (a redis-py asyncio client), or None where it cannot be."""
        pool = getattr(redis, "connection_pool", None)
        if not isinstance(redis, Redis) or pool is None:
            return None
        kind = pool.connection_class
        if kind is not Connection and kind is not UnixDomainSocketConnection:  # TLS and others keep redis-py
            return None
        kw = pool.connection_kwargs
        return cls({"path": kw.get("path"), "host": kw.get("host", "127.0.0.1"), "port": kw.get("port", 6379),
                    "username": kw.get("username"), "password": kw.get("password"), "db": kw.get("db") or 0})

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing() and self._connecting is None

    async def connect(self) -> None:
        """Connect now (at start-up), not inside the first lookup's few-ms budget: a connect that outlasts it
        is cancelled with the lookup, which misses (a restarted gateway's first repeat was not HIT-EXACT)."""
        if not self.connected:
            await self._connect()

    async def get(self, key: str) -> bytes | None:
        """GET key. Raises redis ConnectionError/ResponseError like redis-py, so RedisGuard treats it alike."""
        return await self._request(_command(b"GET", key.encode()))

    async def hget(self, key: str, field: bytes) -> bytes | None:
        """HGET key field (a semantic hit's completion), with GET's errors."""
        return await self._request(_command(b"HGET", key.encode(), field))

    async def _request(self, command: bytes) -> bytes | None:
        if self._transport is None or self._connecting is not None:  # not before AUTH/SELECT went out
            await self._connect()
        return await self._send(command)

    def _send(self, data: bytes) -> asyncio.Future:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RedisConnectionError("lean get: connection lost")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append(fut)
        # One socket write per loop turn for every GET queued in it: a write is a syscall, and under load
        # dozens of lookups start in the same turn. The order of `_waiters` is the order of `_out`.
        self._out.append(data)
        if len(self._out) == 1:
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        data = b"".join(self._out)
        self._out.clear()
        transport = self._transport
        if not data or transport is None or transport.is_closing():
            return  # connection_lost fails every waiter, these included
        transport.write(data)

    async def _connect(self) -> None:
        if self._connecting is not None:  # one connect shared by everyone who arrives meanwhile
            await asyncio.shield(self._connecting)
            return
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            kw = self._kw
            if kw["path"]:
                await loop.create_unix_connection(lambda: self, kw["path"])
            else:
                await loop.create_connection(lambda: self, kw["host"], kw["port"])
            if kw["password"]:
                auth = [kw["username"].encode()] if kw["username"] else []
                await self._send(_command(b"AUTH", *auth, str(kw["password"]).encode()))
            if kw["db"]:
                await self._send(_command(b"SELECT", str(kw["db"]).encode()))
            self._connecting.set_result(None)
        except Exception as e:
            if self._transport is not None:
                self._transport.close()
            self._connecting.set_exception(RedisConnectionError(f"lean get: {e}"))
            self._connecting.exception()  # retrieved: the waiters above get their own error
            raise RedisConnectionError(f"lean get: {e}") from e
        except BaseException as e:  # cancelled (or interrupted): the waiters fail, this one re-raises as it was
            if self._transport is not None:
                self._transport.close()
            self._connecting.set_exception(RedisConnectionError(f"lean get: connect interrupted ({e!r})"))
            self._connecting.exception()
            raise
        finally:
            self._connecting = None

    # ---- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            fut = self._waiters.popleft()
            if fut.done():  # its caller timed out: the reply is dropped, the order kept
                continue
            if isinstance(reply, hiredis.ReplyError):
                fut.set_exception(ResponseError(str(reply)))
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._out.clear()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(RedisConnectionError(f"lean get: connection lost ({exc})"))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
