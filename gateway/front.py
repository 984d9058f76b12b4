"""A lean HTTP/1.1 front for the gateway's listening socket: the two generation endpoints served on an
`asyncio.Protocol` with httptools' parser, every other request handed to aiohttp.

Why: an exact-cache hit costs ~345 us of CPU, 42 % of it in aiohttp's server (request object, router,
middleware chain, payload stream, response prepare), and a bare aiohttp app adds 0.33-0.37 ms at C=1 where a
Protocol on httptools adds 0.18 ms. The pipeline is the same for both servers: `handlers.envelope` around
`handlers.generate`, on a `handlers.Exchange`; only the bytes on the wire are this module's.

A connection starts here. `POST /v1/chat/completions` and `POST /v1/completions` with a Content-Length body
(or none) within `server.max_body_bytes` are served by `FrontExchange`: keep-alive, pipelining (one request at
a time, in order), `Connection: close`, HTTP/1.0, Content-Length answers, chunked SSE with flow control, the
handler cancelled when the client goes away (as aiohttp's `handler_cancellation=True`), a body that has not all
arrived within `handlers.BODY_TIMEOUT_S` of its headers answered 408 and its connection closed. Anything else
(another path or method, a chunked body, `Expect`, `Upgrade`, a body over the limit, headers near the parser limits,
malformed HTTP) is handed over at that request's headers (or parse error): aiohttp's `RequestHandler` (the
AppRunner's `web.Server` is its factory) takes the transport and is fed the raw bytes from that request on,
and owns the connection from then on. So aiohttp's own behaviour (the 400 envelope for malformed HTTP from
app.py, 413 with lingering reads, 100-continue) stays the one answer for those.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from http import HTTPStatus
from typing import Any

import httptools
from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from gateway.appkeys import GATEWAY
from gateway.handlers import BODY_TIMEOUT_S, HOT_PATHS, JSON, Exchange, body_timeout, envelope
from gateway.timers import LazyTimer

log = logging.getLogger("gateway")

_HOT = {path.encode(): (path, serve) for path, serve in HOT_PATHS.items()}
_SERVER = f"Server: {SERVER_SOFTWARE}\r\n"
_REASONS = {s.value: s.phrase for s in HTTPStatus}
# Request headers that send a request to aiohttp: noted as they are parsed, one set lookup each, so the
# headers' end checks one flag.
_HAND_OVER_HEADERS = frozenset({"transfer-encoding", "expect", "upgrade"})
# After a 408 for a body that did not come: how long what the client still sends is read and dropped before the
# connection closes, so the kernel does not reset it (unread bytes at close) over the answer before it is read.
LINGER_S = 2.0


class _HandOver(Exception):
    """Raised in a parser callback: this request is aiohttp's."""


class Headers(dict[str, str]):
    """Request headers by lower-case name (the first of a repeated one), looked up case-insensitively: all the
    pipeline asks of them, for a fraction of a multidict's cost."""

    __slots__ = ()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


def _head(version: str, status: int, headers: Any, framing: str) -> bytes:
    # One string grown in place (CPython appends to a str it holds the only reference to without copying):
    # cheaper than a generator feeding a list and a join for the handful of lines an answer has.
    head = f"HTTP/{version} {status} {_REASONS.get(status, '')}\r\n"
    for name, value in headers.items():
        head += f"{name}: {value}\r\n"
    # aiohttp's own Date, formatted once a second
    return f"{head}{framing}Date: {rfc822_formatted_time()}\r\n{_SERVER}\r\n".encode()


class FrontExchange(Exchange):
    """A request the front serves; its answer goes straight to the connection's transport."""

    __slots__ = ("conn", "serve", "body", "version", "keep_alive", "chunked", "ended")
    writes_on_return = False  # `reply` and `write` put the answer on the transport at once

    def __init__(self, conn: FrontConnection, path: str, serve: Any, headers: Headers, content_length: int | None,
                 body: bytes, version: str, keep_alive: bool) -> None:
        super().__init__(conn.front.gateway, "POST", path, headers, content_length)
        self.conn = conn
        self.serve = serve  # handlers.HOT_PATHS[path]
        self.body = body
        self.version = version
        self.keep_alive = keep_alive
        self.chunked = False
        self.ended = False  # the whole answer is written

    async def read(self) -> bytes:
        return self.body

    def _connection(self) -> str:
        return "" if self.keep_alive else "Connection: close\r\n"

    def reply(self, status: int, body: bytes, headers: Any = None) -> None:
        self.status = str(status)
        self.ended = True
        head = {"Content-Type": JSON, **(headers or {}), "X-Request-Id": self.request_id}
        transport = self.conn.transport
        if transport is not None:  # else the client is gone; the cancellation is on its way
            transport.write(_head(self.version, status, head,
                                  f"Content-Length: {len(body)}\r\n{self._connection()}") + body)

    async def open_stream(self, headers: Any) -> None:
        # HTTP/1.0 has no chunked encoding: the body runs to the connection's close (keep_alive is off there).
        self.chunked = self.version == "1.1"
        framing = "Transfer-Encoding: chunked\r\n" if self.chunked else ""
        self.streaming = True
        self.status = "200"
        await self._send(_head(self.version, 200, headers, framing + self._connection()))

    async def write(self, data: bytes) -> None:
        if data:
            await self._send(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)

    async def write_eof(self, data: bytes = b"") -> None:
        if self.ended:
            return
        self.ended = True
        if self.chunked:
            data = (b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data)) if data else b"0\r\n\r\n"
        await self._send(data)

    async def _send(self, data: bytes) -> None:
        conn = self.conn
        transport = conn.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("Connection lost")
        transport.write(data)
        if conn.drain_waiter is not None or conn.writing_paused:
            await conn.drain()


class FrontConnection(asyncio.Protocol):
    """One client connection until (if ever) it is handed to aiohttp."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.loop = front.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        # Bytes received from the start of the request being parsed: a served request is cut off its front
        # once complete, so on a hand-over this is exactly that request onward.
        self.raw = bytearray()
        self.pending: deque[FrontExchange] = deque()  # parsed, waiting for the one in flight (pipelining)
        self.task: asyncio.Task | None = None
        self.handing_over = False  # parsing stopped: the rest is aiohttp's once the requests before it are done
        self.refused = False  # a body came too late: parsing stopped, the connection closes after the 408
        self.closing = False  # shutting down: close once the request in flight is answered
        self.writing_paused = False
        self.reading_paused = False
        self.drain_waiter: asyncio.Future | None = None
        # When an idle connection closes, or when a request whose headers came must have its whole body
        # (`_expire`); disarmed while a request is in flight.
        self.timer = LazyTimer(self.loop, self._expire)
        self.max_line, self.max_field, self.max_headers = front.max_line, front.max_field, front.max_headers
        self._reset_request()

    def _reset_request(self) -> None:
        self.url = b""
        self.headers = Headers()
        self.n_headers = 0
        self.odd = False  # a header that aiohttp must handle came (_HAND_OVER_HEADERS)
        self.body_parts: list[bytes] = []
        # Known at the headers: the endpoint, where this request's bytes end in `raw`, and its framing.
        self.hot: tuple[str, Any] = ("", None)
        self.request_end = 0
        self.content_length = 0
        self.version = "1.1"
        self.keep_alive = True

    # ---- asyncio.Protocol ----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.front.connections.add(self)
        self._arm_timer()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # read and dropped until the connection closes
        self.raw += data
        if self.handing_over:
            return
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as e:
            # _HandOver from a callback, malformed HTTP, an upgrade: aiohttp's to answer.
            if isinstance(e, httptools.HttpParserCallbackError) and not isinstance(e.__context__, _HandOver):
                log.error("front: a parser callback failed; aiohttp takes the connection", exc_info=e.__context__)
            self.handing_over = True
            self.timer.drop()
            if self.task is None:
                self._hand_over()
            elif not self.reading_paused and self.transport is not None:
                # aiohttp takes over once the request in flight is answered; until then read no further, or a
                # client could pile up any amount of bytes here behind a long stream.
                self.reading_paused = True
                self.transport.pause_reading()
            return
        if self.pending and not self.reading_paused and self.transport is not None:
            self.reading_paused = True  # a request is waiting behind the one in flight: read no further
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.front.connections.discard(self)
        self.timer.drop()
        self.pending.clear()
        if self.task is not None:
            self.task.cancel()  # as aiohttp's handler_cancellation: an open upstream stream is closed
        waiter = self.drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("Connection lost"))

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        waiter = self.drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        if self.transport is None:
            raise ConnectionResetError("Connection lost")
        if not self.writing_paused:
            return
        waiter = self.drain_waiter = self.loop.create_future()
        try:
            await waiter
        finally:
            self.drain_waiter = None

    # ---- httptools callbacks -------------------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > self.max_line:
            raise _HandOver  # near the parser's limits: aiohttp's limits and its 400 envelope decide

    def on_header(self, name: bytes, value: bytes) -> None:
        self.n_headers += 1
        if self.n_headers > self.max_headers or len(name) + len(value) + 2 > self.max_field:
            raise _HandOver
        key = name.decode("latin-1").lower()
        if key in _HAND_OVER_HEADERS:
            self.odd = True
        dict.setdefault(self.headers, key, value.decode("utf-8", "surrogateescape"))

    def on_headers_complete(self) -> None:
        parser, headers = self.parser, self.headers
        hot = _HOT.get(self.url.partition(b"?")[0])
        version = parser.get_http_version()
        if hot is None or self.odd or parser.get_method() != b"POST" or version not in ("1.1", "1.0"):
            raise _HandOver
        length = dict.get(headers, "content-length")
        content_length = int(length) if length is not None else 0  # llhttp checked it is all digits
        if content_length > self.front.gateway.snapshot.policy.server.max_body_bytes:
            raise _HandOver  # aiohttp answers the 413 and reads the body away before closing (no reset)
        raw = self.raw
        start = 0
        while raw.startswith(b"\r\n", start):  # blank lines before a request are allowed
            start += 2
        head_end = raw.find(b"\r\n\r\n", start)
        if head_end < 0 or not raw.startswith(b"POST ", start):
            raise _HandOver  # bare-LF lines or some such: not worth framing by hand
        self.hot = hot
        self.request_end = head_end + 4 + content_length
        self.content_length = content_length
        self.version = version
        self.keep_alive = version == "1.1" and parser.should_keep_alive()
        if content_length:  # the body must follow within the deadline, however it trickles (on_message_complete)
            self.timer.arm(self.loop.time() + self.front.body_timeout)
        else:
            self.timer.disarm()

    def on_body(self, body: bytes) -> None:
        self.body_parts.append(body)

    def on_message_complete(self) -> None:
        self.timer.disarm()  # the body's deadline, if it had one
        parts = self.body_parts
        path, serve = self.hot
        ex = FrontExchange(self, path, serve, self.headers, self.content_length,
                           parts[0] if len(parts) == 1 else b"".join(parts), self.version, self.keep_alive)
        del self.raw[:self.request_end]
        self._reset_request()
        if self.task is None:
            self._start(ex)
        else:
            self.pending.append(ex)

    # ---- requests ------------------------------------------------------------------------------------------
    def _start(self, ex: FrontExchange) -> None:
        self.task = self.loop.create_task(self._serve(ex))

    async def _serve(self, ex: FrontExchange) -> None:
        try:
            await envelope(ex, ex.serve)
            if self.writing_paused:
                # A client that pipelines and does not read: answer the next request (or read on) only once this
                # answer has left, so the transport's buffer stays bounded, as aiohttp's write_eof() drains.
                await self.drain()
        except (asyncio.CancelledError, ConnectionResetError):  # the client went away (the envelope counted 499)
            if self.transport is not None:
                self.transport.close()
            return
        except Exception:  # the envelope answers every error; this is a bug in the front itself
            log.exception("front: request %s failed outside the envelope", ex.request_id)
            ex.keep_alive = False
        self.task = None
        transport = self.transport
        if transport is None:
            return
        if self.refused and not self.pending:  # the 408 went out: shut the write side, drop what still comes
            if transport.can_write_eof():
                transport.write_eof()
            self.timer.arm(self.loop.time() + LINGER_S)
            return
        if not ex.ended or not ex.keep_alive or self.closing:
            transport.close()
            return
        if self.pending:
            return self._start(self.pending.popleft())
        if self.handing_over:
            return self._hand_over()
        if self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()
        self._arm_timer()

    def _hand_over(self) -> None:
        """aiohttp's RequestHandler takes the transport and the bytes from the current request on."""
        transport = self.transport
        if transport is None:
            return
        self.front.connections.discard(self)
        self.transport = None
        handler = self.front.runner.server()  # type: ignore[misc]  # web.Server: a RequestHandler factory
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self.reading_paused:
            transport.resume_reading()
        data = bytes(self.raw)
        self.raw.clear()
        if data:
            handler.data_received(data)

    # ---- idle connections ----------------------------------------------------------------------------------
    def _arm_timer(self) -> None:
        """aiohttp's keep-alive rule: a connection whose next request's headers have not all arrived within
        `server.header_timeout_s` (counted from the connection's start or its last answer) is closed. (A request
        whose headers came while the last one was in flight keeps its body's deadline.)"""
        if self.hot[1] is None:
            self.timer.arm(self.loop.time() + self.front.header_timeout)

    def _expire(self) -> None:
        if self.hot[1] is not None and not self.refused:
            return self._body_late()
        if self.task is None and self.transport is not None:
            self.transport.close()

    def _body_late(self) -> None:
        """A request's headers came and its whole body has not within the deadline: answer 408 (after the
        requests before it, in order) and close. Nothing more is parsed; what the client still sends is read and
        dropped, so it cannot fill the buffers, and the 408 is not lost to a reset."""
        transport = self.transport
        if transport is None:
            return
        path, _ = self.hot
        ex = FrontExchange(self, path, _late_body, self.headers, self.content_length, b"", self.version, False)
        self.refused = True
        self.raw.clear()
        self._reset_request()
        if self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()
        if self.task is None:
            self._start(ex)
        else:
            self.pending.append(ex)

    def shutdown(self) -> None:
        """Stop serving: close now if idle, else once the request in flight is answered."""
        self.closing = True
        self.pending.clear()
        if self.task is None and self.transport is not None:
            self.transport.close()


async def _late_body(ex: FrontExchange) -> None:
    """The request of a body that did not arrive in time: the envelope answers the 408 (and counts it)."""
    raise body_timeout(ex.conn.front.body_timeout)


class Front:
    """The listening socket's server: `await Front(runner).start(host, port)` (or `sock=`), then
    `await front.close(grace)` before `runner.cleanup()`. `runner` is an AppRunner already set up for the
    gateway's app (create_app), so the Gateway is started and aiohttp is ready for what is handed over."""

    def __init__(self, runner: web.AppRunner) -> None:
        self.runner = runner
        self.gateway = runner.app[GATEWAY]
        server = self.gateway.snapshot.policy.server
        # The limits aiohttp's parser has for this app (create_app's handler_args): a request near them is
        # handed over, so aiohttp refuses it exactly as before.
        self.max_line = self.max_field = server.max_header_bytes
        self.max_headers = server.max_headers
        self.header_timeout = server.header_timeout_s
        self.body_timeout = BODY_TIMEOUT_S
        self.connections: set[FrontConnection] = set()
        self.server: asyncio.Server | None = None
        self.loop = asyncio.get_running_loop()

    async def start(self, host: str | None = None, port: int | None = None, *, sock: Any = None) -> None:
        self.server = await self.loop.create_server(lambda: FrontConnection(self), host, port, sock=sock,
                                                    reuse_address=sock is None)

    async def close(self, grace: float) -> None:
        """Stop accepting; idle connections close now, busy ones after their answer, within `grace` seconds
        (then their handlers are cancelled), as aiohttp's own shutdown treats its connections."""
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.shutdown()
        busy = [c.task for c in self.connections if c.task is not None]
        if busy:
            await asyncio.wait(busy, timeout=grace)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()  # its handler is cancelled (connection_lost)
        busy = [t for t in busy if not t.done()]
        if busy:  # let the cancelled ones run their clean-up (the stream closed, the tenant charged) first
            await asyncio.wait(busy, timeout=1.0)
