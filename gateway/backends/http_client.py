"""A lean pooled HTTP/1.1 client for the gateway's upstreams (the per-request cost of aiohttp's client was
most of the proxy's CPU under load).

One `asyncio.Protocol` per keep-alive connection parses responses with httptools (llhttp, in C) straight
from `data_received`: no StreamReader, no per-request response object, no header multidict. A request is
one `transport.write` of pre-built header bytes plus the body as is. `Pool` keeps idle connections LIFO
(the warmest socket first) up to `max_connections` open, queueing callers when all are busy.

Timeouts are loop timers on the connection, not `asyncio.timeout` blocks: the first-byte timer stops at the
response headers (or, for a stream, when its reader calls `first_seen`), the total timer at the end of the
body; either one fails the exchange and closes the socket.
Errors are this module's exceptions; `upstream.HTTPUpstream` maps them to `BackendError`s.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections import deque
from typing import Any

import httptools

from gateway.timers import LazyTimer

MAX_HEAD_BYTES = 64 * 1024  # status line and headers together; more is not an HTTP API answering
HIGH_WATER = 256 * 1024  # unread body bytes at which the socket stops being read (the consumer lags)
MAX_INFLATED = 64 * 1024 * 1024  # decompressed bytes one response may grow to (a gzip bomb stops here)
IDLE_S = 15.0  # an idle keep-alive connection older than this is closed, not reused (as aiohttp did)

# Request headers a configuration may not set: the client writes the framing and the Host itself, and hop-by-hop
# headers would change how the connection behaves (a second Content-Length is request smuggling).
RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive",
                              "proxy-connection", "te", "trailer", "upgrade"})


def header_problem(name: str, value: str) -> str | None:
    """Why a configured request header cannot be sent (None when it can)."""
    if not name or any(c in name for c in ":\r\n\0 \t"):
        return "is not a valid header name"
    if name.lower() in RESERVED_HEADERS:
        return "is set by the gateway itself (framing, hop-by-hop or Host) and cannot be configured"
    if any(c in value for c in "\r\n\0"):
        return "has a value with CR, LF or NUL, which HTTP cannot carry"
    return None


class HTTPClientError(Exception):
    """Base of the client's errors."""


class ConnectFailed(HTTPClientError):
    """The TCP (or TLS) connection could not be opened."""


class ConnectTimedOut(HTTPClientError):
    """Opening the connection took longer than the connect timeout."""


class Disconnected(HTTPClientError):
    """The upstream closed the connection before sending a byte of the response: a pooled connection it had
    already dropped, so the request can safely be sent once more on a fresh one."""


class BadResponse(HTTPClientError):
    """A malformed, oversized or cut response."""


class TimedOut(HTTPClientError):
    """A deadline passed; `phase` is "first_byte" (no headers, or no first event, yet), "total", "queue"
    (waiting for a free connection) or "connect" (opening one ate the rest of the request's time)."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


class Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time (no pipelining)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle = False
        self.idle_since = 0.0  # loop time it went idle
        self.reused = False  # it served an exchange before this one: the upstream may have dropped it meanwhile
        self.released = False
        self.status = 0
        self._header_list: list[tuple[bytes, bytes]] = []
        self._framed = False  # a Content-Length, or a Transfer-Encoding with chunked, header came
        self._encoding = b""  # the Content-Encoding header's value, lower case
        self._body: list[bytes] = []
        self._buffered = 0
        self._head_done = False
        self.complete = False
        self._error: HTTPClientError | None = None
        self._waiter: asyncio.Future | None = None
        self._got_bytes = False
        self._head_bytes = 0
        self._head_size = 0
        self._paused = False
        self._until_eof = False  # no Content-Length and not chunked: the body ends when the socket does
        self._decoder: Any = None
        self._inflated = 0  # decompressed bytes so far (-1: no compressed byte came yet)
        self._keep_alive = False
        self._bad: str | None = None  # why a callback stopped the parser
        # One timer per connection, not per exchange (see LazyTimer): keep-alive requests with the same timeouts
        # pay no call_at and no cancel each. Its deadline is the one that applies now: the first byte's, then
        # the total's; disarmed between exchanges.
        self._timer = LazyTimer(self._loop, self._expire)
        self._total_at = 0.0
        self._first_pending = False  # the first-byte deadline still applies
        self._first_until_body = False  # a stream: the first-byte deadline holds until `first_seen`

    # ---- asyncio.Protocol -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._pool._conns.add(self)

    def data_received(self, data: bytes) -> None:
        if self.idle or self.complete:
            # Bytes nobody asked for (or after the response): the connection's framing can't be trusted.
            self._close()
            return
        if self._error is not None:
            return
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadResponse("upstream switched protocols"))
            return
        except httptools.HttpParserError as e:
            self._fail(BadResponse(self._bad or f"malformed response: {e}"))
            return
        if not self._head_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._fail(BadResponse(f"response headers longer than {MAX_HEAD_BYTES} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool._conns.discard(self)
        if self.idle:
            self._pool._forget(self)
            return
        if self.complete or self._error is not None:
            return
        if self._until_eof and self._head_done and exc is None:  # a reset (exc) cuts the body: not its end
            self._finish_body()
        elif not self._got_bytes:
            self._fail(Disconnected("upstream closed the connection before answering"))
        else:
            self._fail(BadResponse("upstream closed the connection mid-response"))

    def pause_writing(self) -> None:  # request bodies are written at once; the kernel buffers them
        pass

    def resume_writing(self) -> None:
        pass

    # ---- httptools callbacks --------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:  # a second response in the same read as the first: framing can't be trusted
            self._abort("bytes after the response")
        self._header_list = []
        self._head_size = 0
        self._framed = False
        self._encoding = b""

    def on_header(self, name: bytes, value: bytes) -> None:
        # Counted here too: a head that completes within one read never reaches data_received's check.
        self._head_size += len(name) + len(value) + 4
        if self._head_size > MAX_HEAD_BYTES:
            self._abort(f"response headers longer than {MAX_HEAD_BYTES} bytes")
        self._header_list.append((name, value))
        # Only the framing headers are looked at here; the rest are decoded if someone asks (`headers`).
        if len(name) in (14, 16, 17):
            lower = name.lower()
            if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
                self._framed = True  # else (TE gzip alone, say) the body runs to the socket's end
            elif lower == b"content-encoding":
                self._encoding = value.strip().lower()

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:  # 1xx (103 Early Hints, a stray 100): informational, the real answer follows
            return
        self.status = status
        self._head_done = True
        if not self._first_until_body:
            self._first_met()
        if not self._framed:
            self._until_eof = status not in (204, 304)
        encoding = self._encoding
        if encoding and encoding != b"identity":
            if encoding in (b"gzip", b"x-gzip"):
                self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif encoding == b"deflate":
                self._decoder = zlib.decompressobj()
            else:
                self._abort(f"unsupported content-encoding {encoding.decode('latin-1')!r}")
        self._wake()

    @property
    def headers(self) -> dict[str, str]:
        """The response headers, names in lower case (the last of repeated ones)."""
        return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in self._header_list}

    def on_body(self, body: bytes) -> None:
        if self._decoder is not None:
            inflated = max(self._inflated, 0)
            try:  # output capped: past MAX_INFLATED the rest stays in unconsumed_tail
                body = self._decoder.decompress(body, MAX_INFLATED - inflated + 1)
            except zlib.error as e:
                self._abort(f"body does not decompress: {e}")
            self._inflated = inflated + len(body)
            if self._inflated > MAX_INFLATED or self._decoder.unconsumed_tail:
                self._abort(f"decompressed body over {MAX_INFLATED} bytes")
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._head_done:
            # Only now: llhttp forgets the keep-alive flags once the next message begins.
            self._keep_alive = self._parser.should_keep_alive()
            self._finish_body()

    def _abort(self, why: str) -> None:
        """Stop the parser from inside a callback; `feed_data` then raises and `data_received` reports `why`."""
        self._bad = why
        raise ValueError(why)

    # ---- the exchange -----------------------------------------------------------------------------------
    def send(self, data: bytes, first_at: float | None, total_at: float, first_until_body: bool = False) -> None:
        """Write one request; start its deadlines (loop times). `first_until_body`: the first-byte deadline
        holds past the headers until the reader calls `first_seen` (a stream's first event)."""
        assert self.transport is not None
        if self.closed:
            # Closed by the upstream after it was handed over, before this caller ran: the write would go
            # nowhere and the caller would sit out the first-byte deadline. Disconnected: the retry runs.
            if self._error is None:
                self._error = Disconnected("upstream closed the pooled connection before the request")
            self._head_done = False
            return
        self.status = 0
        self._header_list = []
        self._first_until_body = first_until_body
        self._head_done = self.complete = self._got_bytes = self._until_eof = self._keep_alive = False
        self._head_bytes = 0
        self._decoder = None
        self._inflated = -1
        self._total_at = total_at
        self._first_pending = first_at is not None and first_at < total_at
        self._timer.arm(first_at if self._first_pending else total_at)  # type: ignore[arg-type]
        self.transport.write(data)

    async def head(self) -> None:
        """Wait for the response's status line and headers."""
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read(self) -> bytes:
        """The body bytes that arrived since the last read (waiting for some); b"" once the body has ended."""
        while not self._body:
            if self._error is not None:
                raise self._error
            if self.complete:
                return b""
            await self._wait()
        return self.take()

    def take(self) -> bytes:
        """The body bytes that arrived and were not read yet, without waiting (all of it once `complete`)."""
        body = self._body
        if not body:
            return b""
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        self._buffered = 0
        if self._paused and not self.closed:
            self._paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        return data

    async def read_all(self, limit: int) -> tuple[bytes, bool]:
        """The rest of the body, at most `limit` bytes; (body, whether it was cut at the limit)."""
        parts: list[bytes] = []
        size = 0
        while True:
            data = await self.read()
            if not data:
                return b"".join(parts), False
            parts.append(data)
            size += len(data)
            if size > limit:
                return b"".join(parts)[:limit], True

    def first_seen(self) -> None:
        """The stream's first event arrived: its first-byte deadline is met."""
        self._first_met()

    def _first_met(self) -> None:
        """The first-byte deadline is met: the total one applies from now."""
        if self._first_pending:
            self._first_pending = False
            if self._timer.deadline is not None:
                self._timer.arm(self._total_at)

    @property
    def reusable(self) -> bool:
        return self.complete and self._keep_alive and not self.closed and self._error is None and not self._body

    def close(self) -> None:
        """Drop the connection (the upstream sees the client leave)."""
        self._close()

    def release(self) -> None:
        """The exchange is over: back to the pool if it ended cleanly, else closed. Once per acquire; a second
        call is ignored (a count off by one would leak or double a pool slot, or pool one socket twice)."""
        if not self.released:
            self.released = True
            self._pool.release(self)

    # ---- internals -----------------------------------------------------------------------------------
    def _finish_body(self) -> None:
        decoder = self._decoder
        if decoder is not None:
            tail = decoder.flush()
            if tail:
                self._body.append(tail)
            if not decoder.eof and self._inflated >= 0:  # compressed bytes came, but not the stream's end
                self._fail(BadResponse("compressed body is truncated"))
                return
        self.complete = True
        self._stop_timers()
        self._wake()

    def _wait(self) -> asyncio.Future:
        waiter = self._waiter = self._loop.create_future()
        return waiter

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _fail(self, error: HTTPClientError) -> None:
        if self._error is None and not self.complete:
            self._error = error
        self._close()
        self._wake()

    def _expire(self) -> None:
        if not self.complete:
            self._fail(TimedOut("first_byte" if self._first_pending else "total"))

    def _stop_timers(self) -> None:
        """The exchange's deadlines no longer apply; the timer stays for the next exchange (see LazyTimer)."""
        self._timer.disarm()

    def _close(self) -> None:
        self._timer.drop()
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


class Pool:
    """Keep-alive connections to one origin: LIFO idle list, at most `limit` open, waiters served in order."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None, limit: int) -> None:
        self.host = host
        self.port = port
        self.ssl = ssl_context
        self.limit = max(1, limit)
        self.loop = asyncio.get_running_loop()
        self._idle: list[Connection] = []
        self._open = 0  # idle, busy and connecting together
        self._waiters: deque[asyncio.Future] = deque()
        self._conns: set[Connection] = set()  # every open one, idle or busy: close() ends them all
        self._closed = False

    async def acquire(self, connect_timeout: float, limit_at: float, fresh: bool = False) -> Connection:
        """An open connection: the most recently used idle one, a new one, or the next one released; `fresh`:
        never an idle one (they are closed: one turned out dead, the others are as old).
        Raises ConnectFailed, ConnectTimedOut, or TimedOut when `limit_at` (loop time) passes first."""
        if self._closed:
            raise ConnectFailed("the backend is shutting down")
        if fresh:
            while self._idle:
                self._drop_idle(self._idle.pop())
        elif (conn := self.reuse()) is not None:
            return conn
        if self._open >= self.limit:
            handed = await self._wait_turn(limit_at)
            if handed is not None:
                handed.reused = True
                handed.released = False
                return handed
        else:
            self._open += 1
        try:
            conn = await self._connect(connect_timeout, limit_at)
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise
        if self._closed:  # closed while this one was connecting: it would outlive the pool
            conn.close()
            raise ConnectFailed("the backend is shutting down")
        # Slots freed by dropping idle connections while callers queue (rare: a queue means none was idle).
        while self._waiters and self._open < self.limit:
            self._wake_one()
        return conn

    def reuse(self) -> Connection | None:
        """The most recently used idle connection that is still fit (staler ones are closed), taken without
        awaiting: the keep-alive path of every request but the first; None when there is none."""
        idle = self._idle
        if idle:
            stale_at = self.loop.time() - IDLE_S
            while idle and idle[0].idle_since < stale_at:  # oldest first (LIFO list)
                self._drop_idle(idle.pop(0))
            while idle:
                conn = idle.pop()
                conn.idle = False
                if not conn.closed:
                    conn.reused = True
                    conn.released = False
                    return conn
                self._open -= 1
        return None

    def _drop_idle(self, conn: Connection) -> None:
        conn.idle = False
        conn.close()
        self._open -= 1

    async def _wait_turn(self, limit_at: float) -> Connection | None:
        """Queue until a connection is released (returned) or a slot frees (None: the caller connects)."""
        waiter = self.loop.create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout_at(limit_at):
                return await waiter
        except BaseException as e:
            # The deadline or a cancel can land in the same loop pass as the turn (a connection or a slot
            # handed to this waiter): pass it on, or it is lost and `_open` never comes back down.
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()
                if handed is None:
                    self._open -= 1
                    self._wake_one()
                else:
                    self.release(handed)
            elif not waiter.done():
                waiter.cancel()
            if isinstance(e, TimeoutError):
                raise TimedOut("queue") from None
            raise

    async def _connect(self, connect_timeout: float, limit_at: float) -> Connection:
        loop = self.loop
        budget = min(connect_timeout, limit_at - loop.time())
        try:
            async with asyncio.timeout(budget):
                _, conn = await loop.create_connection(
                    lambda: Connection(self), self.host, self.port, ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None)
        except TimeoutError:
            raise (ConnectTimedOut() if budget >= connect_timeout else TimedOut("connect")) from None
        except OSError as e:  # refused, unreachable, DNS (gaierror), TLS handshake (SSLError)
            raise ConnectFailed(str(e) or type(e).__name__) from None
        return conn

    def release(self, conn: Connection) -> None:
        """Back to the pool when its exchange ended cleanly, else closed; either way a waiter gets its turn."""
        if conn.reusable and not self._closed:
            conn._stop_timers()
            waiters = self._waiters
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(conn)
                    return
            conn.idle = True
            conn.idle_since = self.loop.time()
            self._idle.append(conn)
            return
        conn.close()
        self._open -= 1
        self._wake_one()

    def _forget(self, conn: Connection) -> None:
        """An idle connection the upstream closed."""
        try:
            self._idle.remove(conn)
        except ValueError:
            return
        self._open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                self._open += 1  # the slot is the waiter's now
                waiter.set_result(None)
                return

    def close(self) -> None:
        """Close every connection: idle ones, and busy ones (their exchange fails); queued callers fail."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.idle = False
            conn.close()
        self._open -= len(idle)
        for conn in list(self._conns):
            conn._fail(BadResponse("the backend is shutting down"))
        self._conns.clear()
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(ConnectFailed("the backend is shutting down"))
