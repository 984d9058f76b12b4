"""The gateway's own upstream HTTP client against raw, scripted (often hostile) servers: framing, pooling,
flow control, TLS, and every failure leaving as a BackendError."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.backends.base import BackendError, Timeouts
from gateway.backends.http_client import BadResponse, Disconnected, TimedOut
from gateway.backends.sse import SSEEvent
from gateway.backends.upstream import HTTPUpstream
from gateway.metrics import Metrics
from tests.config.policy_text import BACKENDS, ROUTES, error_at

T = Timeouts(connect=2.0, first_byte=2.0, total=5.0)
ANSWER = b'{"id":"x","object":"chat.completion","choices":[]}'
# One scripted answer: bytes to send (then keep the connection), a list of byte pieces sent 20 ms apart
# (a None piece closes the connection there), or None to close without answering.
Script = Callable[[int, int], object]


def ok(body: bytes = ANSWER, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s" % (
        extra, len(body), body)


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def is_done(event: SSEEvent) -> bool:
    return event.data == b"[DONE]"


class RawServer:
    """Answers request `r` on connection `c` with `script(c, r)`; records the peers it served."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = self.connections
        self.connections += 1
        try:
            for r in range(1000):
                head = (await reader.readuntil(b"\r\n\r\n")).lower()
                if b"content-length:" in head:
                    await reader.readexactly(int(head.split(b"content-length:")[1].split(b"\r\n")[0]))
                self.requests += 1
                answer = self.script(conn, r)
                if answer is None:
                    break
                for piece in answer if isinstance(answer, list) else [answer]:
                    if piece is None:
                        return
                    writer.write(piece)
                    await writer.drain()
                    if isinstance(answer, list):
                        await asyncio.sleep(0.02)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def raw() -> AsyncIterator[Callable[..., object]]:
    servers: list[tuple[asyncio.Server, HTTPUpstream]] = []

    async def make(script: Script, max_connections: int = 8, scheme: str = "http",
                   ssl_server: ssl.SSLContext | None = None, ssl_client: ssl.SSLContext | None = None
                   ) -> tuple[RawServer, HTTPUpstream]:
        rs = RawServer(script)
        server = await asyncio.start_server(rs.handle, "127.0.0.1", 0, ssl=ssl_server)
        port = server.sockets[0].getsockname()[1]
        host = "localhost" if scheme == "https" else "127.0.0.1"
        up = HTTPUpstream("raw", f"{scheme}://{host}:{port}/v1", {}, max_connections, Metrics(),
                          ssl_context=ssl_client)
        servers.append((server, up))
        return rs, up

    yield make
    for server, up in servers:
        await up.close()
        server.close()


async def chat(up: HTTPUpstream, timeouts: Timeouts = T) -> dict:
    return await up.request_json("POST", "/chat/completions", b"{}", timeouts)


HOSTILE = {
    "garbage status line": b"SMTP ready\r\n\r\n",
    "headers over 64 KiB": b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n",
    "bad chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "body shorter than its length, then close": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}",
    "unknown content-encoding": b"HTTP/1.1 200 OK\r\nContent-Encoding: zstd\r\nContent-Length: 2\r\n\r\n{}",
    "gzip header on a plain body": b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!",
}


@pytest.mark.parametrize("answer", HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_answers_are_protocol_errors(raw, answer: bytes) -> None:
    rs, up = await raw(lambda c, r: [answer, None] if b"Content-Length: 100" in answer else answer)
    with pytest.raises(BackendError) as e:
        await chat(up)
    assert (e.value.reason, e.value.status) == ("protocol", 502)


async def test_header_drip_hits_first_byte_and_body_drip_hits_total(raw) -> None:
    drip = [b"HTTP/1.1 200 OK\r\n"] + [b"X-A: b\r\n"] * 100
    rs, up = await raw(lambda c, r: drip)
    with pytest.raises(BackendError) as e:
        await chat(up, Timeouts(connect=1, first_byte=0.2, total=5))
    assert (e.value.reason, e.value.status) == ("timeout", 504) and "headers" in e.value.message
    body_drip = [b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"] + [b" "] * 100
    rs.script = lambda c, r: body_drip
    with pytest.raises(BackendError) as e:
        await chat(up, Timeouts(connect=1, first_byte=5, total=0.3))
    assert e.value.reason == "timeout" and "total" in e.value.message


async def test_deadlines_are_each_exchanges_own_on_a_reused_connection(raw) -> None:
    """The connection's one timer, set for an earlier exchange, neither cuts a later one with longer timeouts
    nor lets a later one with a shorter deadline run past it."""
    slow = [b"HTTP/1.1 200 OK\r\n"] + [b"X-A: b\r\n"] * 20 + [b"Content-Length: 2\r\n\r\n{}"]  # ~0.4 s
    rs, up = await raw(lambda c, r: [ok(), slow, ok(), slow][r])
    short, long = Timeouts(connect=1, first_byte=0.2, total=0.3), Timeouts(connect=1, first_byte=5, total=10)
    assert await chat(up, short) == orjson.loads(ANSWER)
    assert await chat(up, long) == {}  # past the first exchange's deadlines
    assert await chat(up, long) == orjson.loads(ANSWER)
    with pytest.raises(BackendError) as e:
        await chat(up, short)  # its first-byte deadline comes before the timer the long one left
    assert e.value.reason == "timeout" and "headers" in e.value.message
    assert rs.connections == 1


async def test_framings_that_are_fine(raw) -> None:
    """Close-delimited, chunked, gzip, and an informational 103 before the answer all read back the same."""
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + ANSWER,  # ends with the socket
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(ANSWER[:10], ANSWER[10:]),
        ok(gzip.compress(ANSWER), b"Content-Encoding: gzip\r\n"),
        b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + ok(),
    ]
    rs, up = await raw(lambda c, r: None if c >= len(answers) else [answers[c], None] if c == 0 else answers[c])
    for _ in answers:
        assert (await chat(up))["id"] == "x"
        up._pool.close()  # type: ignore[union-attr]  # next answer on a fresh connection
        up._pool = None
    assert rs.connections == len(answers)


async def test_stale_pooled_connection_is_retried_once_on_a_fresh_one(raw) -> None:
    # Connection 0 answers once and then drops the next request unanswered (it had timed the socket out).
    rs, up = await raw(lambda c, r: None if (c, r) == (0, 1) else ok())
    assert (await chat(up))["id"] == "x"
    assert (await chat(up))["id"] == "x"
    assert (rs.connections, rs.requests) == (2, 3)


async def test_pool_limit_queues_callers_and_reuses_connections(raw) -> None:
    rs, up = await raw(lambda c, r: [ok()], max_connections=2)
    answers = await asyncio.gather(*(chat(up) for _ in range(6)))
    assert all(a["id"] == "x" for a in answers)
    assert rs.connections == 2 and rs.requests == 6


async def test_queued_caller_times_out_and_leaves_the_pool_usable(raw) -> None:
    rs, up = await raw(lambda c, r: [b"", b"", b"", ok()] if r == 0 else ok(), max_connections=1)
    slow = asyncio.create_task(up.request_json("POST", "/chat/completions", b"{}", T))
    await asyncio.sleep(0)
    with pytest.raises(BackendError) as e:
        await chat(up, Timeouts(connect=1, first_byte=0.01, total=5))
    assert e.value.reason == "timeout" and "free connection (max_connections=1)" in e.value.message
    assert (await slow)["id"] == "x" and (await chat(up))["id"] == "x"
    assert rs.connections == 1


async def test_stream_reads_through_flow_control_and_reuses_the_connection(raw) -> None:
    """A stream far larger than the client's buffer, read slowly: the socket is paused and resumed, every
    event arrives in order, and after [DONE] the connection goes back to the pool."""
    events = [b"data: " + orjson.dumps({"i": i, "pad": "x" * 1000}) + b"\n\n" for i in range(1500)]
    body = SSE_HEAD + chunked(*events, b"data: [DONE]\n\n")
    rs, up = await raw(lambda c, r: body)
    got: list[SSEEvent] = []
    async for batch in up.stream_batches("/chat/completions", b"{}", T, is_done):
        if not got:
            await asyncio.sleep(0.05)  # the consumer lags: the client must stop reading, not buffer it all
        got.extend(batch)
    assert [orjson.loads(e.data)["i"] for e in got[:-1]] == list(range(1500)) and got[-1].data == b"[DONE]"
    assert (await chat_after_stream(up, rs)) == 1


async def chat_after_stream(up: HTTPUpstream, rs: RawServer) -> int:
    rs.script = lambda c, r: ok()
    await chat(up)
    return rs.connections


async def test_cut_chunked_stream_after_an_event_is_a_non_retryable_protocol_error(raw) -> None:
    first = b'data: {"a":1}\n\n'
    rs, up = await raw(lambda c, r: [SSE_HEAD + b"%x\r\n%s\r\n" % (len(first), first), b"zz\r\n"])
    got = []
    with pytest.raises(BackendError) as e:
        async for batch in up.stream_batches("/chat/completions", b"{}", T, is_done):
            got.extend(batch)
    assert len(got) == 1 and (e.value.reason, e.value.retryable) == ("protocol", False)


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_https_with_sni_and_verification(raw, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    seen_sni: list[str | None] = []
    server_ctx.sni_callback = lambda sock, name, ctx: seen_sni.append(name)
    trusting = ssl.create_default_context(cafile=str(cert))
    rs, up = await raw(lambda c, r: ok(), scheme="https", ssl_server=server_ctx, ssl_client=trusting)
    assert (await chat(up))["id"] == "x" and (await chat(up))["id"] == "x"
    assert seen_sni == ["localhost"] and rs.connections == 1
    # The default context does not trust a self-signed certificate: a connect error, not a 500.
    _, untrusting = await raw(lambda c, r: ok(), scheme="https", ssl_server=server_ctx)
    with pytest.raises(BackendError) as e:
        await chat(untrusting)
    assert (e.value.reason, e.value.retryable) == ("connect", True)


async def test_turn_handed_as_the_queue_deadline_fires_is_passed_on(raw) -> None:
    """A slot freed for a queued caller in the same loop pass as its deadline: the caller times out, and the
    slot goes back (not leaked: `_open` drops to 0 and the next caller connects)."""
    rs, up = await raw(lambda c, r: ok(), max_connections=1)
    await up.start()
    pool = up._pool
    assert pool is not None
    conn = await pool.acquire(1.0, pool.loop.time() + 5)
    # A deadline already past: the timeout's callback is queued (call_soon) as the waiter parks ...
    queued = asyncio.create_task(pool.acquire(1.0, pool.loop.time() - 1))
    await asyncio.sleep(0)
    pool.release(conn)  # ... and this hands it the slot before that callback runs
    with pytest.raises(TimedOut) as e:
        await queued
    assert e.value.phase == "queue" and pool._open == 0
    (await pool.acquire(1.0, pool.loop.time() + 5)).release()


async def test_cancel_while_draining_after_the_terminal_event_releases_once(raw) -> None:
    """[DONE] came but the body's end does not: the consumer is cancelled while the stream drains. The
    connection is closed and its slot given back once (a second release drove `_open` below zero)."""
    rs, up = await raw(lambda c, r: SSE_HEAD + b"e\r\ndata: [DONE]\n\n\r\n")  # no terminating chunk
    batches = up.stream_batches("/chat/completions", b"{}", T, is_done)
    assert [e.data for e in await batches.__anext__()] == [b"[DONE]"]
    draining = asyncio.ensure_future(batches.__anext__())
    for _ in range(3):
        await asyncio.sleep(0)  # into _drain, waiting for body bytes that never come
    draining.cancel()
    with pytest.raises(asyncio.CancelledError):
        await draining
    assert up._pool is not None and up._pool._open == 0


async def test_connection_closed_before_its_request_is_disconnected_not_a_timeout(raw) -> None:
    """A connection the upstream closed after it was handed over: the send fails at once with Disconnected
    (the stale-connection retry runs), instead of waiting out the first-byte deadline."""
    rs, up = await raw(lambda c, r: ok())
    await up.start()
    pool = up._pool
    assert pool is not None
    conn = await pool.acquire(1.0, pool.loop.time() + 5)
    conn.close()
    conn.send(b"GET / HTTP/1.1\r\n\r\n", pool.loop.time() + 5, pool.loop.time() + 5)
    with pytest.raises(Disconnected):
        await conn.head()
    conn.release()
    conn.release()  # idempotent
    assert pool._open == 0


async def test_fresh_connection_dropped_is_not_retried_and_retry_skips_idle_ones(raw) -> None:
    # A new connection dropped mid-request: the upstream may have acted on it; no second POST.
    rs, up = await raw(lambda c, r: None if c == 0 else ok())
    with pytest.raises(BackendError) as e:
        await chat(up)
    assert e.value.reason == "connect" and rs.requests == 1
    # Two idle connections, both dropped by the upstream: the retry opens a new one, not the other idle one.
    rs2, up2 = await raw(lambda c, r: None if r == 1 and c < 2 else ok(), max_connections=2)
    await asyncio.gather(chat(up2), chat(up2))
    assert rs2.connections == 2
    assert (await chat(up2))["id"] == "x" and rs2.connections == 3


async def test_idle_connection_older_than_the_keep_alive_limit_is_not_reused(raw) -> None:
    rs, up = await raw(lambda c, r: ok())
    await chat(up)
    assert up._pool is not None
    up._pool._idle[0].idle_since -= 60  # as if it sat idle a minute
    await chat(up)
    assert rs.connections == 2 and up._pool._open == 1


async def test_second_response_in_the_same_read_closes_the_connection(raw) -> None:
    rs, up = await raw(lambda c, r: ok() + ok(b'{"id":"y"}'))
    assert (await chat(up))["id"] == "x"  # the first body alone, not both run together
    assert (await chat(up))["id"] == "x" and rs.connections == 2


MORE_HOSTILE = {
    # Valid JSON either way: only the missing gzip trailer, or the size, makes these errors.
    "gzip cut short": ok(gzip.compress(ANSWER)[:-8], b"Content-Encoding: gzip\r\n"),
    "gzip bomb": ok(gzip.compress(b'{"id":"x","pad":"' + b"a" * (65 << 20) + b'"}'), b"Content-Encoding: gzip\r\n"),
}


@pytest.mark.parametrize("answer", MORE_HOSTILE.values(), ids=MORE_HOSTILE.keys())
async def test_more_hostile_answers_are_protocol_errors(raw, answer: bytes) -> None:
    rs, up = await raw(lambda c, r: answer)
    with pytest.raises(BackendError) as e:
        await chat(up)
    assert (e.value.reason, e.value.status) == ("protocol", 502)


async def test_transfer_encoding_without_chunked_is_a_body_to_the_end_of_the_socket(raw) -> None:
    rs, up = await raw(lambda c, r: [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n" + ANSWER, None])
    assert (await chat(up))["id"] == "x"


async def test_redirect_is_a_non_retryable_error_naming_the_location(raw) -> None:
    rs, up = await raw(lambda c, r: b"HTTP/1.1 301 Moved\r\nLocation: https://elsewhere/v1\r\nContent-Length: 0\r\n\r\n")
    with pytest.raises(BackendError) as e:
        await chat(up)
    assert (e.value.reason, e.value.status, e.value.retryable) == ("protocol", 502, False)
    assert "https://elsewhere/v1" in e.value.message


async def test_reset_during_a_close_delimited_body_is_not_its_end(raw) -> None:
    rs, up = await raw(lambda c, r: b"HTTP/1.1 200 OK\r\n\r\n{\"id\":")
    await up.start()
    pool = up._pool
    assert pool is not None
    conn = await pool.acquire(1.0, pool.loop.time() + 5)
    conn.send(b"GET / HTTP/1.1\r\n\r\n", pool.loop.time() + 5, pool.loop.time() + 5)
    await conn.head()
    conn.connection_lost(ConnectionResetError())
    with pytest.raises(BadResponse):
        await conn.read_all(1000)
    conn.release()


async def test_pool_close_fails_busy_exchanges_and_queued_callers(raw) -> None:
    got = asyncio.Event()

    def script(c: int, r: int) -> object:
        got.set()  # the upstream has the request: the exchange is in flight
        return [b"HTTP/1.1 200 OK\r\n"]  # headers that never end

    rs, up = await raw(script, max_connections=1)
    busy = asyncio.ensure_future(chat(up))
    await got.wait()
    queued = asyncio.ensure_future(chat(up))
    await asyncio.sleep(0)
    await up.close()
    for task in (busy, queued):
        with pytest.raises(BackendError) as e:
            await task
        assert e.value.status == 502


def test_configured_headers_merge_case_insensitively_and_reserved_ones_are_refused() -> None:
    up = HTTPUpstream("h", "http://127.0.0.1:1/v1", {"content-type": "text/plain", "X-Key": "k\n"}, 1, Metrics())
    head = up._static_head.lower()
    assert head.count(b"content-type:") == 1 and b"content-type: text/plain\r\n" in head and b"x-key: k\r\n" in head
    for bad in ({"Content-Length": "5"}, {"host": "evil"}, {"Transfer-Encoding": "chunked"}, {"X-A": "a\r\nB: c"}):
        with pytest.raises(ValueError):
            HTTPUpstream("h", "http://127.0.0.1:1/v1", bad, 1, Metrics())


@pytest.mark.parametrize("header", ["Content-Length: '5'", "host: evil", "Connection: close", '"X-A": "a\\r\\nB: c"'])
def test_policy_refuses_headers_the_client_cannot_send(header: str) -> None:
    text = BACKENDS + f"  up: {{type: openai, base_url: 'http://x:1', headers: {{{header}}}}}   # <-\n" + ROUTES
    name = header.split(":")[0].strip('"')
    assert "header " in error_at(text, f"backends.up.headers.{name}").message
