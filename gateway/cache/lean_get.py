"""Cache reads pipelined on one Redis connection, for the hot path of hits: exact GETs and the HMGET of a
semantic hit's completion and evidence.

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


class _Connection(asyncio.Protocol):
    """One Redis connection and the futures waiting on its replies.

    Each connect gets its own, so callbacks of a connection abandoned mid-connect (a cancelled lookup) can
    only touch that dead connection, never the one that replaced it.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self._waiters: deque[asyncio.Future] = deque()
        self._out: list[bytes] = []  # commands queued in this loop turn, written together by _flush
        self._reader = hiredis.Reader()

    @property
    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def send(self, data: bytes) -> asyncio.Future:
        if not self.usable:
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
        if not data or not self.usable:
            self.abort(None)
            return
        try:
            self.transport.write(data)  # type: ignore[union-attr]
        except (RuntimeError, OSError) as e:  # closed underneath us (uvloop raises RuntimeError)
            self.abort(e)

    def abort(self, exc: BaseException | None) -> None:
        """Mark the connection dead, close it and fail everyone waiting on it."""
        self.lost = True
        if self.transport is not None:
            self.transport.close()
        self._fail(exc)

    def _fail(self, exc: BaseException | None) -> None:
        self._out.clear()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(RedisConnectionError(f"lean get: connection lost ({exc})"))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.lost:  # made after its connect was abandoned
            transport.close()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            if not self._waiters:
                self.abort(None)  # a reply nobody asked for: the stream is out of step
                return
            fut = self._waiters.popleft()
            if fut.done():  # its caller timed out: the reply is dropped, the order kept
                continue
            if isinstance(reply, hiredis.ReplyError):
                fut.set_exception(ResponseError(str(reply)))
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.transport = None
        self._fail(exc)


class LeanGet:
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self._kw = kwargs
        self._conn: _Connection | None = None  # set only once connected and AUTH/SELECT are out
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
        return self._conn is not None and self._conn.usable and self._connecting is None

    async def connect(self) -> None:
        """Connect now (at start-up), not inside the first lookup's few-ms budget: a connect that outlasts it
        is cancelled with the lookup, which misses (a restarted gateway's first repeat was not HIT-EXACT)."""
        if not self.connected:
            await self._connect()

    async def get(self, key: str) -> bytes | None:
        """GET key. Raises redis ConnectionError/ResponseError like redis-py, so RedisGuard treats it alike."""
        return await self._request(_command(b"GET", key.encode()))

    async def hmget(self, key: str, *fields: bytes) -> list[bytes | None]:
        """HMGET key field... (a semantic hit's completion and what was learned of it), with GET's errors."""
        return await self._request(_command(b"HMGET", key.encode(), *fields))  # type: ignore[return-value]

    async def _request(self, command: bytes) -> bytes | None:
        conn = self._conn
        if conn is None or not conn.usable:
            conn = await self._connect()
        return await conn.send(command)

    async def _connect(self) -> _Connection:
        if self._connecting is not None:  # one connect shared by everyone who arrives meanwhile
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        self._conn = None
        connecting = self._connecting = loop.create_future()
        conn = _Connection()
        try:
            kw = self._kw
            if kw["path"]:
                await loop.create_unix_connection(lambda: conn, kw["path"])
            else:
                await loop.create_connection(lambda: conn, kw["host"], kw["port"])
            if kw["password"]:
                auth = [kw["username"].encode()] if kw["username"] else []
                await conn.send(_command(b"AUTH", *auth, str(kw["password"]).encode()))
            if kw["db"]:
                await conn.send(_command(b"SELECT", str(kw["db"]).encode()))
            if not conn.usable:
                raise RedisConnectionError("connection closed while connecting")
        except BaseException as e:  # failed, cancelled or interrupted: this connection is never used
            conn.abort(e)
            error = RedisConnectionError(f"lean get: connect failed ({e!r})")
            connecting.set_exception(error)
            connecting.exception()  # retrieved: the waiters above get their own error
            if isinstance(e, Exception) and not isinstance(e, RedisConnectionError):
                raise error from e
            raise
        else:
            self._conn = conn
            connecting.set_result(conn)
            return conn
        finally:
            self._connecting = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.abort(None)
            self._conn = None
