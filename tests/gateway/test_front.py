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
