"""Cache reads pipelined on one Redis connection, for the hot path of hits: exact GETs and the HGET of a
semantic hit's completion.

A redis-py asyncio GET costs tens of microseconds of Python (pool checkout, command packing, parser, retry
wrapper, release). Under load on one core that is a large share of an exact hit, and it queues: a lookup that
waits behind the loop for more than the few-ms budget becomes a miss, and five of those open the breaker, so a
busy gateway stops answering from the cache exactly when it should. Here every GET is one preformatted write
on a single shared connection (RESP replies arrive in order, so a FIFO of futures matches them) and one
hiredis parse.

A lookup whose caller gave up (timeout, client gone) leaves its reply due on the connection; its successors'
replies still match, since the reply is consumed and dropped when it comes. If it has not come STALL_S later,
the server is paused or cut off: the connection is dropped (redis-py likewise discards a connection whose read
was cancelled), the replies still due fail (misses), and the next lookup connects anew, so a probe after the
breaker half-opens does not queue behind the dead socket. Not at once: a client that disconnects mid-lookup
cancels it too, and dropping the shared connection then would fail every lookup in flight on a healthy Redis
(five failures open the breaker).

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

STALL_S = 0.1  # a reply given up on and still due this long after: the connection is stalled, replace it
CONNECT_TIMEOUT_S = 1.0  # connect plus AUTH/SELECT, when the client sets no socket_connect_timeout


def _command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


class _Connection(asyncio.Protocol):
    """One connection's state. A replaced connection's late callbacks (connection_lost) touch only its own
    waiters, never those of the connection that replaced it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiters: deque[asyncio.Future] = deque()
        self._out: list[bytes] = []  # commands queued in this loop turn, written together by _flush
        self._reader = hiredis.Reader()
        self._watch: asyncio.TimerHandle | None = None

    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, data: bytes) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiters.append(fut)
        # One socket write per loop turn for every GET queued in it: a write is a syscall, and under load
        # dozens of lookups start in the same turn. The order of `waiters` is the order of `_out`.
        self._out.append(data)
        if len(self._out) == 1:
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        data = b"".join(self._out)
        self._out.clear()
        if data and self.usable():
            self.transport.write(data)  # type: ignore[union-attr]
        # else: the connection was dropped, which failed every waiter, these included

    def abandoned(self, fut: asyncio.Future) -> None:
        """Its caller gave up on `fut` (still due): drop the connection if the reply has not come STALL_S later.
        One watch at a time: replies come in order, so the oldest abandoned one tells for those after it."""
        if self._watch is None and self.transport is not None:
            self._watch = asyncio.get_running_loop().call_later(STALL_S, self._check, fut)

    def _check(self, fut: asyncio.Future) -> None:
        # Timers run after the I/O poll of their loop turn: a reply already in the socket was read first.
        self._watch = None
        if fut in self.waiters:
            self.drop(RedisConnectionError(f"lean get: no reply in {STALL_S}s; connection replaced"))
        elif (later := next((w for w in self.waiters if w.cancelled()), None)) is not None:
            self.abandoned(later)

    def drop(self, error: Exception) -> None:
        """Abort the socket (nothing more is read from it) and fail every reply still due."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        transport, self.transport = self.transport, None
        self._out.clear()
        if transport is not None:
            transport.abort()
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(error)

    # ---- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            fut = self.waiters.popleft()
            if fut.done():  # its caller was cancelled as the reply arrived: dropped, the order kept
                continue
            if isinstance(reply, hiredis.ReplyError):
                fut.set_exception(ResponseError(str(reply)))
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.drop(RedisConnectionError(f"lean get: connection lost ({exc})"))


class LeanGet:
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self._kw = kwargs
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None

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
                    "username": kw.get("username"), "password": kw.get("password"), "db": kw.get("db") or 0,
                    "connect_timeout": kw.get("socket_connect_timeout") or CONNECT_TIMEOUT_S})

    async def get(self, key: str) -> bytes | None:
        """GET key. Raises redis ConnectionError/ResponseError like redis-py, so RedisGuard treats it alike."""
        return await self._request(_command(b"GET", key.encode()))

    async def hget(self, key: str, field: bytes) -> bytes | None:
        """HGET key field (a semantic hit's completion), with GET's errors."""
        return await self._request(_command(b"HGET", key.encode(), field))

    async def _request(self, command: bytes) -> bytes | None:
        conn = self._conn
        if conn is None or not conn.usable() or self._connecting is not None:  # not before AUTH/SELECT went out
            conn = await self._connect()
        fut = conn.send(command)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut in conn.waiters:  # given up with the reply still due: slow, stalled or gone?
                conn.abandoned(fut)
            raise

    async def _connect(self) -> _Connection:
        if self._connecting is not None:  # one connect shared by everyone who arrives meanwhile
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        connecting = self._connecting = loop.create_future()
        conn = _Connection()
        kw = self._kw
        try:
            async with asyncio.timeout(kw["connect_timeout"]):  # a handshake, not a lookup: wall time is right
                if kw["path"]:
                    await loop.create_unix_connection(lambda: conn, kw["path"])
                else:
                    await loop.create_connection(lambda: conn, kw["host"], kw["port"])
                if kw["password"]:
                    auth = [kw["username"].encode()] if kw["username"] else []
                    await conn.send(_command(b"AUTH", *auth, str(kw["password"]).encode()))
                if kw["db"]:
                    await conn.send(_command(b"SELECT", str(kw["db"]).encode()))
            self._conn = conn
            connecting.set_result(conn)
            return conn
        except Exception as e:
            error = RedisConnectionError(f"lean get: {type(e).__name__}: {e}")
            conn.drop(error)
            connecting.set_exception(error)
            connecting.exception()  # retrieved: the waiters above get their own error
            raise error from e
        except BaseException as e:  # cancelled (or interrupted): the waiters fail, this one re-raises as it was
            conn.drop(RedisConnectionError(f"lean get: connect interrupted ({e!r})"))
            connecting.set_exception(RedisConnectionError(f"lean get: connect interrupted ({e!r})"))
            connecting.exception()
            raise
        finally:
            self._connecting = None

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.drop(RedisConnectionError("lean get: closed"))
