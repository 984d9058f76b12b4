"""One pooled keep-alive HTTP client per upstream: timeouts, error mapping, and SSE streams that close at once.

Shared by the OpenAI-compatible and Anthropic backends. Every failure leaves here as a `BackendError` with a
metric reason (connect, timeout, status_429, status_4xx, status_5xx, protocol) and is counted once in
`gateway_upstream_errors_total{backend,reason}`; requests in flight are tracked in `gateway_backend_inflight`.
"""

from __future__ import annotations

import asyncio
import email.utils
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from urllib.parse import urlsplit

import orjson

from gateway.backends.base import BackendError, Timeouts
from gateway.backends.http_client import (
    BadResponse,
    ConnectFailed,
    Connection,
    ConnectTimedOut,
    Disconnected,
    HTTPClientError,
    Pool,
    TimedOut,
    header_problem,
)
from gateway.backends.sse import SSEEvent, SSEParser, SSEProtocolError
from gateway.errors import error_body
from gateway.metrics import Metrics

DRAIN_S = 1.0  # after the terminal event, wait this long for the body's end before dropping the connection
READY_TIMEOUTS = Timeouts(connect=2.0, first_byte=3.0, total=3.0)
ERROR_BODY_LIMIT = 1 << 20  # read at most this much of an error body
MAX_BODY = 64 * 1024 * 1024  # a JSON answer larger than this is not an answer: protocol error
ERROR_BODY_S = 5.0  # ... for at most this long: a 429 whose body hangs must not hold the caller for `total`
USER_AGENT = "llm-gateway"


def parse_retry_after(headers: object) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date); None if absent."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    ms = get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = get("retry-after")  # lower case: the client's header dict is; aiohttp's multidict doesn't care
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def openai_error_envelope(status: int, raw: bytes) -> dict:
    """The upstream's error body as OpenAI's envelope: kept when it already is one, rebuilt otherwise
    (FastAPI `{"detail": ...}`, TGI `{"error": "text"}`, HTML from a proxy, an empty body)."""
    parsed: object = None
    try:
        parsed = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        parsed = None
    kind = "invalid_request_error" if status < 500 else "upstream_error"
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict) and "message" in err:
            return {"error": {"message": str(err.get("message")), "type": err.get("type") or kind,
                              "param": err.get("param"), "code": err.get("code")}}
        for key in ("error", "detail", "message"):
            value = parsed.get(key)
            if isinstance(value, str) and value:
                return error_body(value, kind)
            if value is not None and key == "detail":
                return error_body(orjson.dumps(value).decode(), kind)
    # Not JSON: an HTML page from a proxy, say. Its text stays out of the envelope (clients may see the
    # envelope's message); _status_error puts a preview in the logged message.
    return error_body(f"upstream answered HTTP {status}", kind)


class HTTPUpstream:
    """The HTTP side of a backend. `envelope` turns an upstream error body into OpenAI's envelope.
    `ssl_context` overrides the default TLS verification for an https base URL (a private CA, say)."""

    def __init__(
        self,
        name: str,
        base_url: str,
        headers: dict[str, str],
        max_connections: int,
        metrics: Metrics,
        envelope: Callable[[int, bytes], dict] = openai_error_envelope,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"backend {name}: base_url must be an http(s) URL with a host, not {base_url!r}")
        self._tls = scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path
        host = f"[{self._host}]" if ":" in self._host else self._host
        if parts.port is not None and parts.port != (443 if self._tls else 80):
            host = f"{host}:{parts.port}"
        # Values stripped: outer whitespace means nothing in HTTP, and a key read from a file often ends in "\n".
        # The policy loader rejects these already; checked again for backends built another way.
        configured = {k: str(v).strip() for k, v in headers.items()}
        for key, value in configured.items():
            if (problem := header_problem(key, value)) is not None:
                raise ValueError(f"backend {name}: header {key!r} {problem}")
        # Merged by lower-cased name: a configured `content-type` replaces the default, not a second line.
        all_headers = {"Host": host, "User-Agent": USER_AGENT, "Accept": "*/*", "Accept-Encoding": "identity",
                       "Content-Type": "application/json"}
        for key, value in configured.items():
            for default in [d for d in all_headers if d.lower() == key.lower()]:
                del all_headers[default]
            all_headers[key] = value
        # Every header line but Content-Length, written once: a request is this plus the length and the body.
        self._static_head = "".join(f"{k}: {v}\r\n" for k, v in all_headers.items()).encode("latin-1")
        self._heads: dict[tuple[str, str], bytes] = {}
        self._max_connections = max_connections
        self._ssl = ssl_context
        self._pool: Pool | None = None
        self._inflight = metrics.inflight(name)
        self._metrics = metrics
        self._envelope = envelope

    async def start(self) -> None:
        if self._pool is None:
            ctx = (self._ssl or ssl.create_default_context()) if self._tls else None
            self._pool = Pool(self._host, self._port, ctx, self._max_connections)

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def fail(self, err: BackendError) -> BackendError:
        """Count an error in the metrics (client mistakes excepted); returns it for `raise`."""
        self._metrics.count_upstream_error(self.name, err.reason, err.status)
        return err

    async def request_json(
        self, method: str, path: str, payload: bytes | None, timeouts: Timeouts, track: bool = True
    ) -> dict:
        """One request whose answer is JSON. `track=False` (readiness probes) skips the metrics."""
        if track:
            self._inflight.inc()
        try:
            conn = await self._open(method, path, payload, timeouts, track)
            try:
                # Usually the whole body came with the headers: taken as is, no reader to await.
                raw = conn.take() if conn.complete else await self._read_body(conn)
            except TimedOut:
                raise self._tracked(track, self._timeout(f"total timeout of {timeouts.total}s", True)) from None
            except HTTPClientError as e:
                raise self._tracked(track, BackendError("protocol", f"reading the upstream body failed: {e}",
                                                        502, retryable=True)) from None
            finally:
                conn.release()
            try:
                answer = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise self._tracked(track, BackendError("protocol", "upstream answered with invalid JSON",
                                                        502)) from None
            if not isinstance(answer, dict):
                raise self._tracked(track, BackendError("protocol", "upstream answered JSON that is not an "
                                                        "object", 502))
            return answer
        finally:
            if track:
                self._inflight.dec()

    @staticmethod
    async def _read_body(conn: Connection) -> bytes:
        first = await conn.read()  # usually the whole body, already parsed in the same read as the headers
        if not first:
            return first
        rest = await conn.read()
        if not rest:
            return first
        parts = [first, rest]
        size = len(first) + len(rest)
        while data := await conn.read():
            parts.append(data)
            size += len(data)
            if size > MAX_BODY:
                conn.close()
                raise BadResponse(f"response body over {MAX_BODY} bytes")
        return b"".join(parts)

    async def list_models(self, path: str, fallback: list[str]) -> list[str]:
        """Model ids from an OpenAI-style `GET {path}` list; `fallback` when the upstream cannot say."""
        try:
            answer = await self.request_json("GET", path, None, READY_TIMEOUTS, track=False)
        except BackendError:
            return list(fallback)
        data = answer.get("data")
        if not isinstance(data, list):
            return list(fallback)
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]

    async def check_ready(self, path: str) -> str | None:
        """None when the upstream answers `GET {path}` (a 4xx other than 401/403 counts: some servers, older
        TGI among them, have no such path), else a short reason."""
        try:
            await self.request_json("GET", path, None, READY_TIMEOUTS, track=False)
        except BackendError as e:
            if e.status in (401, 403):
                return f"{self.name}: upstream rejected the credentials ({e.status})"
            if e.reason == "status_4xx":
                return None
            return f"{self.name}: {e.message}"
        return None

    async def stream_events(
        self, path: str, payload: bytes, timeouts: Timeouts, is_terminal: Callable[[SSEEvent], bool]
    ) -> AsyncIterator[SSEEvent]:
        """`stream_batches`, one event at a time."""
        batches = self.stream_batches(path, payload, timeouts, is_terminal)
        async with aclosing(batches):
            async for batch in batches:
                for event in batch:
                    yield event

    async def stream_batches(
        self, path: str, payload: bytes, timeouts: Timeouts, is_terminal: Callable[[SSEEvent], bool]
    ) -> AsyncIterator[list[SSEEvent]]:
        """POST and yield the SSE events of each upstream read as they arrive (one list per read, so a
        consumer pays one generator step per read, not per event), the terminal one included; then end.

        The first event must come within `first_byte` of the start. Ending before the terminal event raises
        BackendError("protocol"). Closing this iterator early closes the upstream connection at once, so the
        upstream sees the client go away; a stream read to its end gives its connection back to the pool.
        """
        self._inflight.inc()
        conn: Connection | None = None
        yielded = False
        try:
            parser = SSEParser()
            conn = await self._open("POST", path, payload, timeouts, True, stream=True)
            pending = await self._next_events(conn, parser, timeouts, yielded)
            conn.first_seen()
            while pending:
                for i, event in enumerate(pending):
                    if is_terminal(event):
                        yielded = True
                        yield pending[:i + 1]
                        # Handed over first: a cancel inside _drain (which releases it) must not release it twice.
                        drained, conn = conn, None
                        await self._drain(drained)
                        return
                yielded = True
                yield pending
                pending = await self._next_events(conn, parser, timeouts, yielded)
            raise self.fail(BackendError("protocol", "upstream closed the stream before it finished", 502,
                                         retryable=not yielded))
        except SSEProtocolError as e:
            raise self.fail(BackendError("protocol", str(e), 502, retryable=not yielded)) from None
        finally:
            if conn is not None:
                conn.release()  # unfinished, so it closes: the upstream sees the client leave
            self._inflight.dec()

    async def _next_events(
        self, conn: Connection, parser: SSEParser, timeouts: Timeouts, yielded: bool
    ) -> list[SSEEvent]:
        """Read until at least one event is complete; [] at end of body."""
        while True:
            try:
                chunk = await conn.read()
            except TimedOut as e:
                if e.phase == "first_byte":
                    raise self.fail(self._timeout(f"no first event within {timeouts.first_byte}s", True)) from None
                raise self.fail(self._timeout(f"total timeout of {timeouts.total}s", not yielded)) from None
            except HTTPClientError as e:
                raise self.fail(BackendError("protocol", f"upstream stream was cut: {e}", 502,
                                             retryable=not yielded)) from None
            if not chunk:
                return []
            events = parser.feed(chunk)
            if events:
                return events

    @staticmethod
    async def _drain(conn: Connection) -> None:
        """Read the body's end so the keep-alive connection can be reused; drop it if that stalls."""
        try:
            if conn.complete:  # the usual case: the end came in the same read as the terminal event
                while await conn.read():
                    pass
            else:
                async with asyncio.timeout(DRAIN_S):
                    while await conn.read():
                        pass
        except (TimeoutError, HTTPClientError):
            pass
        finally:
            conn.release()

    def _request_bytes(self, method: str, path: str, payload: bytes | None) -> bytes:
        head = self._heads.get((method, path))
        if head is None:
            target = (self._prefix + path).encode("latin-1")
            head = self._heads[(method, path)] = method.encode() + b" " + target + b" HTTP/1.1\r\n" + self._static_head
        if payload is None:
            return head + b"\r\n"
        return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(payload), payload)

    async def _open(
        self, method: str, path: str, payload: bytes | None, timeouts: Timeouts, track: bool, stream: bool = False
    ) -> Connection:
        """Send the request and wait for a 2xx response's headers, within first_byte (for a `stream`, that
        deadline runs on to its first event: the reader calls `first_seen`). Error statuses are read and raised
        as BackendError."""
        if self._pool is None:
            await self.start()
        pool = self._pool
        assert pool is not None
        data = self._request_bytes(method, path, payload)
        now = pool.loop.time()
        total_at = now + timeouts.total
        first_at = now + timeouts.first_byte
        limit_at = min(first_at, total_at)
        url = self.base_url + path
        for attempt in (1, 2):
            try:
                # A kept-alive idle connection is taken without awaiting; else one is opened or waited for.
                conn = (attempt == 1 and pool.reuse()) or await pool.acquire(timeouts.connect, limit_at,
                                                                             fresh=attempt == 2)
            except ConnectTimedOut:
                raise self._tracked(track, self._timeout(f"connect timeout of {timeouts.connect}s to {url}",
                                                         True)) from None
            except ConnectFailed as e:
                raise self._tracked(track, BackendError("connect", f"cannot connect to {url}: {e}", 502,
                                                        retryable=True)) from None
            except TimedOut as e:
                # Queued for a slot, or connecting, past the request's deadline: say so, not "no headers".
                what = (f"waited for a free connection (max_connections={self._max_connections})"
                        if e.phase == "queue" else "opening a connection")
                deadline = (f"first_byte {timeouts.first_byte}s" if first_at < total_at
                            else f"total {timeouts.total}s")
                raise self._tracked(track, self._timeout(f"{what} past the {deadline} deadline", True)) from None
            conn.send(data, first_at, total_at, stream)
            try:
                await conn.head()
            except Disconnected as e:
                conn.release()
                # A pooled keep-alive connection the upstream had already closed: one try on a fresh one. Not
                # on a fresh connection: the upstream may have died processing the request (a POST sent twice).
                if attempt == 2 or not conn.reused:
                    raise self._tracked(track, BackendError("connect", f"upstream {url} dropped the "
                                                            f"connection: {e}", 502, retryable=True)) from None
                continue
            except TimedOut as e:
                conn.release()
                raise self._tracked(track, self._head_timeout(e.phase == "first_byte", stream, timeouts)) from None
            except BadResponse as e:
                conn.release()
                raise self._tracked(track, BackendError("protocol", f"request to {url} failed: {e}", 502,
                                                        retryable=True)) from None
            except BaseException:  # cancelled (the caller's own deadline, a client gone): drop the socket
                conn.release()
                raise
            if conn.status >= 300:  # a redirect is not followed: the base_url is wrong
                raise self._tracked(track, await self._status_error(conn, f"{method} {url}"))
            return conn
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _head_timeout(self, first_byte: bool, stream: bool, timeouts: Timeouts) -> BackendError:
        if first_byte:
            return self._timeout(f"no {'first event' if stream else 'response headers'} within "
                                 f"{timeouts.first_byte}s", True)
        return self._timeout(f"total timeout of {timeouts.total}s", True)

    async def _status_error(self, conn: Connection, what: str) -> BackendError:
        status = conn.status
        try:
            async with asyncio.timeout(ERROR_BODY_S):
                raw, _ = await conn.read_all(ERROR_BODY_LIMIT)
        except (TimeoutError, HTTPClientError):
            raw = b""
        finally:
            conn.release()  # a body cut at the limit, or not read to its end, closes the connection
        body = self._envelope(status, raw)
        preview = raw[:500].decode("utf-8", "replace").strip()
        # For the log only (tenants get a generic message): which URL, and what the upstream said.
        message = f"{what} answered HTTP {status}: {preview or '(empty body)'}"
        if status < 400:
            location = conn.headers.get("location")
            return BackendError("protocol", f"{message} (redirect to {location!r}: is the base_url right?)", 502,
                                False)
        retry_after = parse_retry_after(conn.headers)
        if status == 429:
            return BackendError("status_429", message, 429, True, body, retry_after)
        if status >= 500:  # Anthropic's 529 (overloaded_error) stays a 529, its type kept in `body`
            return BackendError("status_5xx", message, status, True, body, retry_after)
        return BackendError("status_4xx", message, status, False, body)

    def _timeout(self, what: str, retryable: bool) -> BackendError:
        return BackendError("timeout", f"upstream {self.name}: {what}", 504, retryable=retryable)

    def _tracked(self, track: bool, err: BackendError) -> BackendError:
        return self.fail(err) if track else err
