"""gateway/front.py on the wire: what it serves itself, what it hands to aiohttp mid-connection, and the HTTP
details a lean server must still get right. Raw sockets, since an HTTP client library hides exactly these."""

from __future__ import annotations

import socket
import time

import orjson

from tests.helpers import route, scrape, series, upstream_policy


def policy(upstream: str) -> str:
    return upstream_policy(upstream, route("fake-model") + route("cached", more="    cache: {exact: {ttl: 60}}\n"),
                           tail="\nserver: {max_body_bytes: 4096}")


class Client:
    """One raw HTTP/1.x connection: send bytes, read whole responses (Content-Length, chunked or to close)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _more(self) -> bytes:
        data = self.sock.recv(65536)
        self.buf += data
        return data

    def _until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            assert self._more(), f"closed before {sep!r}: {self.buf[:300]!r}"
        out, self.buf = self.buf.split(sep, 1)
        return out

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            assert self._more(), "closed mid-body"
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self) -> tuple[int, dict[str, str], bytes, bytes]:
        """(status, headers by lower-case name, body, status line's version)."""
        lines = self._until(b"\r\n\r\n").split(b"\r\n")
        version, status = lines[0].split(b" ")[:2]
        headers = {k.decode().lower(): v.decode() for k, v in (line.split(b": ", 1) for line in lines[1:])}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self._until(b"\r\n"), 16):
                body += self._exactly(size)
                self._exactly(2)
            self._exactly(2)
        elif "content-length" in headers:
            body = self._exactly(int(headers["content-length"]))
        else:  # to the connection's close
            while self._more():
                pass
            body, self.buf = self.buf, b""
        return int(status), headers, body, version

    def closed(self) -> bool:
        """The server closed the connection (after what was already read)."""
        return not self.buf and self.sock.recv(1) == b""

    def close(self) -> None:
        self.sock.close()


def chat(content: str, *, stream: bool = False, model: str = "fake-model", version: bytes = b"1.1",
         extra: bytes = b"") -> bytes:
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": content}], "stream": stream})
    return (b"POST /v1/chat/completions HTTP/" + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def answer(body: bytes) -> str:
    return orjson.loads(body)["choices"][0]["message"]["content"]


def test_keep_alive_mixes_front_and_aiohttp_requests(gw) -> None:
    """Chat on the front, then /v1/models hands the connection to aiohttp mid-way; it keeps serving every
    endpoint (chat too) on the same connection."""
    _, srv = gw
    c = Client(srv.url)
    try:
        for i in range(2):
            c.send(chat(f"front {i}"))
            status, headers, body, _ = c.response()
            assert status == 200 and answer(body) == f"echo: front {i}"
            assert len(headers["x-request-id"]) == 32 and headers["x-backend"] == "up" and "date" in headers
        c.send(get("/v1/models"))
        status, _, body, _ = c.response()
        assert status == 200 and "fake-model" in {m["id"] for m in orjson.loads(body)["data"]}
        c.send(chat("after the hand-over"))
        status, _, body, _ = c.response()
        assert status == 200 and answer(body) == "echo: after the hand-over"
        c.send(get("/health"))
        assert c.response()[0] == 200
    finally:
        c.close()


def test_pipelined_requests_are_answered_in_order(gw) -> None:
    """Two chats in one write, then a chat and a request for aiohttp in one write: the hand-over waits for
    the answer in flight."""
    _, srv = gw
    c = Client(srv.url)
    try:
        c.send(chat("one") + chat("two", stream=True))
        status, _, body, _ = c.response()
        assert status == 200 and answer(body) == "echo: one"
        status, headers, body, _ = c.response()
        assert status == 200 and headers["content-type"] == "text/event-stream"
        assert b"data: [DONE]" in body and b'"two"' in body
        c.send(chat("three") + get("/health"))
        assert answer(c.response()[2]) == "echo: three"
        assert orjson.loads(c.response()[2]) == {"status": "ok"}
    finally:
        c.close()


def test_chunked_body_and_expect_continue_are_served(gw) -> None:
    """Bodies the front does not frame itself go to aiohttp: chunked, and `Expect: 100-continue` (curl sends
    it for larger bodies)."""
    _, srv = gw
    body = orjson.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "chunked"}]})
    c = Client(srv.url)
    try:
        c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
        status, _, out, _ = c.response()
        assert status == 200 and answer(out) == "echo: chunked"
    finally:
        c.close()
    body = orjson.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "continue"}]})
    c = Client(srv.url)
    try:
        c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body))
        assert c._until(b"\r\n\r\n").startswith(b"HTTP/1.1 100")
        c.send(body)
        status, _, out, _ = c.response()
        assert status == 200 and answer(out) == "echo: continue"
    finally:
        c.close()


def test_malformed_request_and_oversized_body_get_the_envelope(gw) -> None:
    _, srv = gw
    c = Client(srv.url)
    try:
        c.send(chat("fine") + b"NOT A REQUEST\r\n\r\n")
        assert answer(c.response()[2]) == "echo: fine"
        status, headers, body, _ = c.response()
        assert status == 400 and headers["content-type"].startswith("application/json")
        assert orjson.loads(body)["error"]["code"] == "bad_http_request"
        assert c.closed()
    finally:
        c.close()
    c = Client(srv.url)
    try:
        c.send(chat("x" * 5000))
        status, _, body, _ = c.response()
        assert status == 413 and orjson.loads(body)["error"]["code"] == "request_too_large"
    finally:
        c.close()
    metrics = scrape(srv)
    assert metrics[series("gateway_requests_total", route="none", backend="none", status="413")] == 1
    assert metrics[series("gateway_requests_total", route="none", backend="none", status="400")] == 1


def test_http_1_0_and_connection_close(gw) -> None:
    """HTTP/1.0: answered in 1.0, streams unchunked to the close; `Connection: close` on 1.1 is honoured."""
    _, srv = gw
    for stream in (False, True):
        c = Client(srv.url)
        try:
            c.send(chat("old", stream=stream, version=b"1.0"))
            status, headers, body, version = c.response()
            assert status == 200 and version == b"HTTP/1.0" and "transfer-encoding" not in headers
            assert (body.endswith(b"data: [DONE]\n\n") and b'"old"' in body) if stream else answer(body) == "echo: old"
            assert c.closed()
        finally:
            c.close()
    c = Client(srv.url)
    try:
        c.send(chat("bye", extra=b"Connection: close\r\n"))
        status, headers, body, _ = c.response()
        assert status == 200 and headers["connection"] == "close" and answer(body) == "echo: bye"
        assert c.closed()
    finally:
        c.close()


def test_client_gone_mid_stream_closes_the_upstream_and_counts_499(gw) -> None:
    fake, srv = gw
    fake.reply = " ".join(f"w{i}" for i in range(200))
    fake.delay_per_chunk = 0.05
    c = Client(srv.url)
    c.send(chat("x", stream=True))
    c._until(b"data: ")  # the stream is open
    c.close()
    assert fake.disconnected.wait(5), "upstream never saw the client go away"
    assert fake.streams_completed == 0
    deadline = time.monotonic() + 5
    key = series("gateway_requests_total", route="fake-model", backend="up", status="499")
    while scrape(srv).get(key) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scrape(srv).get(key) == 1



def send_until_blocked(sock: socket.socket, data: bytes) -> int:
    """Send `data` without blocking, as far as the kernel takes it; the bytes sent."""
    sock.setblocking(False)
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent:sent + (1 << 20)])
    except BlockingIOError:
        pass
    finally:
        sock.setblocking(True)
    return sent


def front_connections(srv) -> list:
    """(reading paused, bytes buffered unparsed, bytes waiting to be written) of each front connection."""
    async def look() -> list:
        return [(c.reading_paused, len(c.raw), c.transport.get_write_buffer_size() if c.transport else 0)
                for c in srv._front.connections]
    return srv.call(look())


def settled(srv) -> list:
    """The front connections' state once it stops changing (polled up to 10 s)."""
    state, deadline = front_connections(srv), time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.2)
        state, before = front_connections(srv), state
        if state == before:
            break
    return state


def test_bytes_behind_a_stream_for_aiohttp_are_not_read_until_it_ends(gw) -> None:
    """A request for aiohttp pipelined behind a long stream, with a huge body: the front stops reading until the
    stream is answered and aiohttp takes over, rather than buffer whatever the client sends."""
    fake, srv = gw
    fake.reply = " ".join(f"w{i}" for i in range(200))
    fake.delay_per_chunk = 0.05
    c = Client(srv.url)
    try:
        c.send(chat("long", stream=True) + b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        c._until(b"data: ")  # the stream is open
        send_until_blocked(c.sock, b"x" * (64 << 20))
        [(reading_paused, unparsed, _)] = settled(srv)
        assert reading_paused and unparsed < 4 << 20
    finally:
        c.close()


def test_a_client_that_pipelines_and_never_reads_is_not_answered_without_limit(gw) -> None:
    """Cached chats pipelined by a client that reads nothing: the next is answered only once the last answer
    has left, so what waits to be written stays bounded instead of growing with every request."""
    _, srv = gw
    body = orjson.dumps({"model": "cached", "n": 100, "temperature": 0, "messages": [{"role": "user", "content": "warm " * 40}]})
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body)
    c = Client(srv.url)
    try:
        c.send(request)
        status, _, answer_body, _ = c.response()
        assert status == 200 and len(answer_body) > 10_000  # n=100: each answer is large
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        send_until_blocked(c.sock, request * 2000)  # 2,000 answers: over 20 MB if all were written
        [(_, _, waiting)] = settled(srv)
        assert waiting < 4 << 20
    finally:
        c.close()


# ---- the body's deadline -------------------------------------------------------------------------------------

DEADLINE_S = 0.5  # the tests' body deadline (60 s by default)


def short_deadline(srv, monkeypatch) -> None:
    """Both servers' body deadline cut to DEADLINE_S: the front's own, and aiohttp's for handed-over requests."""
    import gateway.handlers

    srv._front.body_timeout = DEADLINE_S
    monkeypatch.setattr(gateway.handlers, "BODY_TIMEOUT_S", DEADLINE_S)


def assert_408(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status == 408, body
    assert headers["content-type"] == "application/json" and len(headers["x-request-id"]) == 32
    error = orjson.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"
    assert f"{DEADLINE_S:g} seconds" in error["message"] and error["param"] is None


def late(content: str) -> tuple[bytes, bytes]:
    """A chat request cut in two: its headers with the body's first bytes, and the rest of the body."""
    whole = chat(content)
    cut = whole.index(b"\r\n\r\n") + 10
    return whole[:cut], whole[cut:]


def test_a_body_that_stalls_is_answered_408_and_the_connection_closed(gw, monkeypatch) -> None:
    _, srv = gw
    short_deadline(srv, monkeypatch)
    head, _ = late("never finished")
    c = Client(srv.url)
    try:
        c.sock.settimeout(5)  # before: nothing came, ever (recv timed out here)
        started = time.monotonic()
        c.send(head)
        status, headers, body, _ = c.response()
        assert DEADLINE_S <= time.monotonic() - started < DEADLINE_S + 2
        assert_408(status, headers, body)
        assert headers["connection"] == "close"
        assert c.closed()
    finally:
        c.close()
    assert scrape(srv)[series("gateway_requests_total", route="none", backend="none", status="408")] == 1
    assert settled(srv) == []  # the connection is gone on the gateway's side too


def test_a_trickled_body_gets_a_total_deadline_not_an_idle_one(gw, monkeypatch) -> None:
    _, srv = gw
    short_deadline(srv, monkeypatch)
    head, rest = late("one byte at a time")
    c = Client(srv.url)
    try:
        c.send(head)
        started = time.monotonic()
        c.sock.settimeout(0.1)
        for byte in rest[:-1]:  # a byte every 0.1 s: never idle for the deadline, never whole either
            try:
                c.send(bytes([byte]))
            except OSError:  # the gateway shut its side after the 408: what was sent meanwhile was dropped
                break
            try:
                if c._more():
                    break
            except TimeoutError:
                pass
            assert time.monotonic() - started < DEADLINE_S + 3, "no answer while the body trickled"
        c.sock.settimeout(5)
        assert_408(*c.response()[:3])
    finally:
        c.close()


def test_a_body_that_comes_whole_in_time_is_served(gw, monkeypatch) -> None:
    """The deadline counts from the headers to the body's last byte; a pause shorter than it costs nothing."""
    _, srv = gw
    short_deadline(srv, monkeypatch)
    head, rest = late("in time")
    c = Client(srv.url)
    try:
        for _ in range(2):  # and the connection is kept alive after it
            c.send(head)
            time.sleep(DEADLINE_S / 5)
            c.send(rest)
            status, _, body, _ = c.response()
            assert status == 200 and answer(body) == "echo: in time"
        time.sleep(DEADLINE_S * 2)  # idle between requests: the header timeout's (15 s), not the body's
        c.send(chat("still open"))
        assert answer(c.response()[2]) == "echo: still open"
    finally:
        c.close()


def test_a_late_body_behind_a_request_in_flight_is_answered_after_it(gw, monkeypatch) -> None:
    fake, srv = gw
    short_deadline(srv, monkeypatch)
    fake.delay_headers = DEADLINE_S * 3  # the first answer is still in flight when the second's deadline passes
    head, _ = late("second, never finished")
    c = Client(srv.url)
    try:
        c.send(chat("first") + head)
        status, _, body, _ = c.response()
        assert status == 200 and answer(body) == "echo: first"
        assert_408(*c.response()[:3])
        assert c.closed()
    finally:
        c.close()


def test_a_chunked_body_that_stalls_on_aiohttps_server_is_answered_408(gw, monkeypatch) -> None:
    """A chunked body is aiohttp's to read (handed over): the same deadline holds there."""
    _, srv = gw
    short_deadline(srv, monkeypatch)
    c = Client(srv.url)
    try:
        c.sock.settimeout(5)  # before: the handler waited for the rest of the body for ever
        c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"mod\r\n")
        status, headers, body, _ = c.response()
        assert_408(status, headers, body)
        assert headers["connection"] == "close"
    finally:
        c.close()
