"""Hostile input and broken upstreams: every one gets a 4xx (or 502) envelope, never a 500 or a garbled stream."""

from __future__ import annotations

import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
import orjson
import pytest
from aiohttp import web

from gateway.appkeys import GATEWAY
from gateway.config.loader import PolicyErrors, parse_policy
from gateway.request_checks import MAX_JSON_DEPTH
from tests.fakes.openai_server import sse
from tests.helpers import CHAT, ServerThread, route, sdk_client, upstream_policy


def policy(upstream: str, server: str = "") -> str:
    routes = (route("cached", more="    cache: {exact: {ttl: 600, store: always}, semantic: false}\n")
              + route("budgeted", more="    budget: {context_window: 4096, max_output_tokens: 256}\n")
              + route("fake-*"))
    return upstream_policy(upstream, routes, tail=server)


def nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth - 1):
        value = [value]
    return value


def assert_envelope(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code, err
    return err


@pytest.mark.parametrize("depth", [300, 900])
def test_deep_json_is_a_400_with_the_documented_depth(gw, depth: int) -> None:
    fake, srv = gw
    chat = {"model": "cached", "messages": [{"role": "user", "content": "x"}], "metadata_x": nested(depth)}
    emb = {"model": "fake-model", "input": "x", "extra": nested(depth)}
    for path, body in ((CHAT, chat), ("/v1/embeddings", emb)):
        raw = orjson.dumps(body) if depth < 250 else _dumps_deep(body)
        err = assert_envelope(httpx.post(srv.url + path, content=raw, headers={"Content-Type": "application/json"}),
                              400, "json_too_deep")
        assert str(MAX_JSON_DEPTH) in err["message"]
    assert fake.request_count == 0
    # Just inside the limit is served (an object and a list wrap the value: depth + 2).
    ok = {"model": "cached", "messages": [{"role": "user", "content": "x"}], "metadata_x": nested(MAX_JSON_DEPTH - 2)}
    assert httpx.post(srv.url + CHAT, json=ok).status_code == 200


def _dumps_deep(body: dict) -> bytes:
    """orjson refuses to write more than 255 levels, which is why the gateway must refuse to read them."""
    extra_key = next(k for k in body if k not in ("model", "messages", "input"))
    depth = 0
    value = body[extra_key]
    while isinstance(value, list):
        depth += 1
        value = value[0]
    rest = {k: v for k, v in body.items() if k != extra_key}
    head = orjson.dumps(rest)[:-1]
    return head + b',"' + extra_key.encode() + b'":' + b"[" * depth + b'"x"' + b"]" * depth + b"}"


def test_text_part_with_non_string_text_is_a_400(gw) -> None:
    fake, srv = gw
    for model in ("budgeted", "fake-model"):
        body = {"model": model, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}
        err = assert_envelope(httpx.post(srv.url + CHAT, json=body), 400, "invalid_type")
        assert err["param"] == "messages[0].content[0].text"
    assert fake.request_count == 0


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"tools": {"type": "function"}}, "tools", "invalid_type"),
        ({"tools": [{"type": "function", "function": {"name": 3}}]}, "tools[0].function", "invalid_type"),
        ({"tool_choice": 3}, "tool_choice", "invalid_type"),  # checked without tools too, as OpenAI does
        ({"stop": 7}, "stop", "invalid_type"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"n": "2"}, "n", "invalid_type"),
        ({"n": 0}, "n", "invalid_value"),
        ({"max_tokens": 2.5}, "max_tokens", "invalid_type"),
        ({"max_tokens": True}, "max_tokens", "invalid_type"),
        ({"temperature": "hot"}, "temperature", "invalid_type"),
        ({"temperature": 3}, "temperature", "invalid_value"),
        ({"top_p": -0.1}, "top_p", "invalid_value"),
        ({"response_format": "json"}, "response_format", "invalid_type"),
        ({"messages": [{"role": "user", "content": 12}]}, "messages[0].content", "invalid_type"),
    ],
)
def test_mistyped_openai_parameters_are_400_and_never_forwarded(gw, extra: dict, param: str, code: str) -> None:
    fake, srv = gw
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], **extra}
    err = assert_envelope(httpx.post(srv.url + CHAT, json=body), 400, code)
    assert err["param"] == param
    assert fake.request_count == 0
    with pytest.raises(openai.BadRequestError):  # the SDK sees a typed error too
        sdk_client(srv).completions.create(model="fake-model", prompt="x", max_tokens=-1)


def test_embeddings_input_types(gw) -> None:
    _, srv = gw
    assert_envelope(httpx.post(srv.url + "/v1/embeddings", json={"model": "fake-model", "input": [1, "a"]}), 400,
                    "invalid_type")
    assert httpx.post(srv.url + "/v1/embeddings", json={"model": "fake-model", "input": [[1, 2], [3]]}).status_code \
        == 200


def raw_http(url: str, request: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes (anything httpx would refuse to send) and read until the server closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def chat_request(body: dict, headers: bytes = b"") -> bytes:
    raw = orjson.dumps(body)
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + headers + b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)


@pytest.mark.parametrize("stream", [False, True])
def test_hostile_request_ids_are_replaced_and_cache_hits_stay_well_formed(gw, stream: bool) -> None:
    _, srv = gw
    body = {"model": "cached", "messages": [{"role": "user", "content": "hit me"}], "temperature": 0}
    assert httpx.post(srv.url + CHAT, json=body).status_code == 200  # stored
    body["stream"] = stream
    for bad in (b"\xff\xfe\xfa-not-utf8", b"a b\tc", b"x" * 300):
        out = raw_http(srv.url, chat_request(body, b"X-Request-Id: " + bad + b"\r\n"))
        assert out.count(b"HTTP/1.1 ") == 1, out[:400]
        head, _, payload = out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"X-Cache: HIT-EXACT" in head
        rid = next(line for line in head.split(b"\r\n") if line.lower().startswith(b"x-request-id:"))
        assert bad not in rid and len(rid.split(b": ")[1]) == 32
        assert (b"data: [DONE]" in payload) if stream else (b'"choices"' in payload)
    ok = httpx.post(srv.url + CHAT, json=body, headers={"X-Request-Id": "trace-123.abc"})
    assert ok.headers["x-request-id"] == "trace-123.abc"


async def _bad_usage(request: web.Request) -> web.StreamResponse:
    """An upstream whose usage counts are strings."""
    body = await request.json()
    if body.get("stream"):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                              "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"},
                                           "finish_reason": "stop"}]}))
        await resp.write(sse({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                              "choices": [], "usage": {"prompt_tokens": "3", "completion_tokens": "1"}}))
        await resp.write(b"data: [DONE]\n\n")
        return resp
    return web.json_response({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                           "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": "3", "completion_tokens": "1", "total_tokens": "4"}})


def test_upstream_usage_with_string_counts_is_a_protocol_502_and_nothing_is_stored(serve_gateway) -> None:
    def make() -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", _bad_usage)
        return app

    with ServerThread(make) as up:
        srv = serve_gateway(policy(up.url))
        body = {"model": "cached", "messages": [{"role": "user", "content": "usage?"}], "temperature": 0}
        for _ in range(2):  # the second is not a cache hit: the malformed answer was never stored
            err = assert_envelope(httpx.post(srv.url + CHAT, json=body), 502, "protocol")
            assert "request id" in err["message"]  # the details (which field) are in the log
        with httpx.stream("POST", srv.url + CHAT, json={**body, "stream": True}, timeout=30) as r:
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert r.status_code == 200 and orjson.loads(events[-1][6:])["error"]["code"] == "protocol"
        metrics = httpx.get(srv.url + "/metrics").text
        assert 'gateway_upstream_errors_total{backend="up",reason="protocol"} 3.0' in metrics


def test_a_bug_after_the_headers_ends_the_stream_in_band(gw, monkeypatch) -> None:
    """An exception from the gateway's own code mid-stream is an internal error, reported in-band on the
    stream that is already open (one status line), and not counted as an upstream fault."""
    from gateway import handlers

    _, srv = gw

    class Broken(handlers.StreamAssembler):
        def add(self, chunk: dict) -> None:
            if self.chunks == 2:
                raise KeyError("our own bug")
            super().add(chunk)

    monkeypatch.setattr(handlers, "StreamAssembler", Broken)
    out = raw_http(srv.url, chat_request({"model": "fake-model", "stream": True,
                                          "messages": [{"role": "user", "content": "a b c d"}]}))
    assert out.count(b"HTTP/1.1 ") == 1
    events = [line for line in out.split(b"\n") if line.startswith(b"data: ")]
    assert orjson.loads(events[-1][6:])["error"]["code"] == "internal_error"
    assert 'gateway_upstream_errors_total{backend="up",reason="protocol"} 0.0' in httpx.get(srv.url + "/metrics").text


def test_over_long_and_too_many_headers_get_the_envelope(gw) -> None:
    _, srv = gw
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}]}
    for extra in (b"X-Big: " + b"a" * 20000 + b"\r\n", b"".join(b"X-H%d: v\r\n" % i for i in range(200))):
        out = raw_http(srv.url, chat_request(body, extra))
        head, _, payload = out.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == b"400", head  # the parser gave up, so aiohttp answers as HTTP/1.0
        assert b"application/json" in head
        assert orjson.loads(payload)["error"]["code"] == "headers_too_large"
    assert 'route="none",status="400"' in httpx.get(srv.url + "/metrics").text


def test_connections_whose_headers_never_finish_are_closed(fake_openai, serve_gateway, tmp_path) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url, f"server: {{data_dir: '{tmp_path}', header_timeout_s: 0.3}}"))
    host, port = srv.url.removeprefix("http://").split(":")
    socks = [socket.create_connection((host, int(port)), timeout=20) for _ in range(20)]
    try:
        for s in socks:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        closed = 0
        for s in socks:
            try:
                closed += s.recv(1024) == b""  # closed by the server, with no response
            except TimeoutError:
                pass
        assert closed == len(socks)
    finally:
        for s in socks:
            s.close()
    time.sleep(0)  # the gateway still serves
    assert httpx.post(srv.url + CHAT, json={"model": "fake-model", "messages": [{"role": "user", "content": "x"}]},
                      timeout=10).status_code == 200


def test_idle_keep_alive_connections_close_after_their_last_answer(fake_openai, serve_gateway, tmp_path) -> None:
    """The idle timer counts from each answer: a connection kept busy past header_timeout_s is served (its
    first timer, from the connection's start, finds it re-armed), then closed once idle."""
    _, up = fake_openai
    srv = serve_gateway(policy(up.url, f"server: {{data_dir: '{tmp_path}', header_timeout_s: 0.3}}"))
    host, port = srv.url.removeprefix("http://").split(":")
    request = chat_request({"model": "fake-model", "messages": [{"role": "user", "content": "x"}]})
    request = request.replace(b"Connection: close\r\n", b"")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        for _ in range(4):  # 0.6 s of traffic: past the first timer's time
            s.sendall(request)
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                answer += s.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
            time.sleep(0.15)
        assert s.recv(1024) == b""  # idle: closed by the server, with no response


def test_too_many_messages_is_a_400_before_any_stage_walks_them(gw, monkeypatch) -> None:
    """100,000 messages (2.4 MB) once held the event loop for a second in cache keys and token counts."""
    fake, srv = gw
    gateway = srv.app[GATEWAY]
    entered: list[str] = []
    for stage in gateway.stages:
        monkeypatch.setattr(stage, "before", _spy(stage.before, entered))
    many = [{"role": "user", "content": f"m{i}"} for i in range(100_000)]
    for model in ("cached", "budgeted"):
        err = assert_envelope(httpx.post(srv.url + CHAT, json={"model": model, "messages": many}), 400,
                              "array_above_max_length")
        assert err["param"] == "messages" and "maximum length 2048" in err["message"], err
    batches = (("/v1/completions", "prompt", ["p"] * 2049), ("/v1/embeddings", "input", ["i"] * 2049))
    for path, param, items in batches:
        err = assert_envelope(httpx.post(srv.url + path, json={"model": "fake-model", param: items}), 400,
                              "array_above_max_length")
        assert err["param"] == param
    assert entered == [] and fake.request_count == 0
    assert httpx.get(srv.url + "/health").status_code == 200
    # At the limit it is served; a long list of token ids is one prompt, not a batch.
    assert httpx.post(srv.url + CHAT, json={"model": "cached", "messages": many[:2048]}).status_code == 200
    assert entered and fake.request_count == 1
    tokens = {"model": "fake-model", "prompt": list(range(3000)), "max_tokens": 1}
    assert httpx.post(srv.url + "/v1/completions", json=tokens).status_code == 200


def _spy(before: Callable[[Any], Awaitable[Any]], entered: list[str]) -> Callable[[Any], Awaitable[Any]]:
    async def spy(ctx: Any) -> Any:
        entered.append(ctx.request_id)
        return await before(ctx)
    return spy


def test_max_messages_comes_from_the_policy(fake_openai, serve_gateway, tmp_path) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url, f"server: {{data_dir: '{tmp_path}', max_messages: 3}}"))
    messages = [{"role": "user", "content": "x"}] * 4
    err = assert_envelope(httpx.post(srv.url + CHAT, json={"model": "fake-model", "messages": messages}), 400,
                          "array_above_max_length")
    assert "maximum length 3," in err["message"]
    assert httpx.post(srv.url + CHAT, json={"model": "fake-model", "messages": messages[:3]}).status_code == 200
    with pytest.raises(PolicyErrors, match=r"server\.max_messages"):
        parse_policy(policy(up.url, "server: {max_messages: 0}"), "p.yaml")
