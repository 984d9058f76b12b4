"""The gateway as an OpenAI-compatible proxy, driven by the official openai SDK against a fake upstream."""

from __future__ import annotations

import time

import httpx
import openai
import orjson
import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread, free_port
from tests.helpers import sdk_client as client


def policy(upstream: str, *, extra_route: str = "", retries: int = 0, fallbacks: str = "[]", timeouts: str = "") -> str:
    return f"""
backends:
  up: {{type: openai, base_url: "{upstream}/v1", api_key: sk-upstream}}
  down: {{type: openai, base_url: "http://127.0.0.1:{free_port()}/v1"}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
    retries: {retries}
    backoff: {{base_s: 0.01, max_s: 0.05}}
    fallbacks: {fallbacks}
    {timeouts}
  - match: {{model: "fake-*"}}
    backends: [up]
{extra_route}
"""


def test_chat_non_streaming(gw) -> None:
    fake, srv = gw
    raw = client(srv).chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": "hello there"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: hello there"
    assert completion.usage.total_tokens > 0
    assert raw.headers["x-backend"] == "up"
    assert len(raw.headers["x-request-id"]) >= 16
    assert fake.last.headers["Authorization"] == "Bearer sk-upstream"  # the backend's key, not the client's


def test_chat_streaming_with_and_without_usage(gw) -> None:
    _, srv = gw
    c = client(srv)
    chunks = list(c.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "one two three"}], stream=True,
        stream_options={"include_usage": True},
    ))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "echo: one two three"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    plain = list(c.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "one two"}], stream=True
    ))
    assert all(ch.usage is None for ch in plain)  # the gateway asked for usage upstream but does not leak it
    assert plain[-1].choices[0].finish_reason == "stop"


async def test_async_client_streams(gw) -> None:
    _, srv = gw
    c = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
    stream = await c.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "async works"}], stream=True
    )
    text = "".join([ch.choices[0].delta.content or "" async for ch in stream])
    assert text == "echo: async works"
    await c.close()


def test_unknown_fields_tools_and_params_pass_through(gw) -> None:
    fake, srv = gw
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    completion = client(srv).chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "find it"}], tools=tools, tool_choice="auto",
        response_format={"type": "text"}, n=1, logprobs=True, top_logprobs=2, seed=7,
        extra_body={"vendor_flag": {"nested": [1, 2]}, "top_k": 5},
    )
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.choices[0].message.tool_calls[0].function.name == "lookup"
    sent = fake.last.body
    for key, value in {"tools": tools, "tool_choice": "auto", "response_format": {"type": "text"}, "logprobs": True,
                       "top_logprobs": 2, "seed": 7, "vendor_flag": {"nested": [1, 2]}, "top_k": 5}.items():
        assert sent[key] == value


def test_completions_embeddings_and_models(gw) -> None:
    _, srv = gw
    c = client(srv)
    comp = c.completions.create(model="fake-model", prompt="say hi", max_tokens=5)
    assert comp.choices[0].text
    stream_text = "".join(ch.choices[0].text for ch in c.completions.create(model="fake-model", prompt="a b", stream=True)
                          if ch.choices)
    assert stream_text
    emb = c.embeddings.create(model="fake-model", input=["x", "y"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0
    ids = {m.id for m in c.models.list()}
    assert {"fake-model", "fake-model-2"} <= ids  # exact route name + what the glob route's backend lists


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400, "missing_required_parameter"),
        (b'{"model": "fake-model"}', 400, "missing_required_parameter"),
        (b'{"model": 5, "messages": []}', 400, "invalid_type"),
        (b'{"model": "fake-model", "messages": "hi"}', 400, "invalid_type"),
        (b'{"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400,
         "invalid_type"),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, "model_not_found"),
    ],
)
def test_bad_requests_get_openai_envelopes(gw, raw: bytes, status: int, code: str) -> None:
    _, srv = gw
    r = httpx.post(srv.url + "/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == code and err["message"] and set(err) == {"message", "type", "param", "code"}


def test_sdk_raises_typed_errors(gw) -> None:
    _, srv = gw
    with pytest.raises(openai.NotFoundError) as e:
        client(srv).chat.completions.create(model="missing-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.code == "model_not_found"


def test_oversized_body_is_413(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    text = policy(up.url) + "\nserver: {max_body_bytes: 2048}\n"
    srv = serve_gateway(text)
    big = "x" * 5000
    with pytest.raises(openai.APIStatusError) as e:
        client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": big}])
    assert e.value.status_code == 413
    # a chunked body with no Content-Length is refused too
    def gen():
        yield orjson.dumps({"model": "fake-model", "messages": [{"role": "user", "content": big}]})
    r = httpx.post(srv.url + "/v1/chat/completions", content=gen(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_upstream_4xx_passes_through(gw) -> None:
    fake, srv = gw
    fake.fail_next(1, status=400, body=orjson.dumps({"error": {"message": "bad temperature", "type":
                                                               "invalid_request_error", "param": "temperature",
                                                               "code": "invalid_value"}}))
    with pytest.raises(openai.BadRequestError) as e:
        client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.body["message"] == "bad temperature" and e.value.body["param"] == "temperature"


def test_retries_then_success(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, retries=2))
    fake.fail_next(2, status=503)
    completion = client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "ok"}])
    assert completion.choices[0].message.content == "echo: ok"
    assert fake.request_count == 3


def test_fallback_after_unreachable_primary(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    text = policy(up.url, extra_route="""  - match: {model: via-fallback}
    backends: [down]
    retries: 1
    backoff: {base_s: 0.01, max_s: 0.02}
    fallbacks: [up]
""")
    srv = serve_gateway(text)
    raw = client(srv).chat.completions.with_raw_response.create(
        model="via-fallback", messages=[{"role": "user", "content": "rescued"}]
    )
    assert raw.headers["x-backend"] == "up"
    assert raw.parse().choices[0].message.content == "echo: rescued"


def test_unreachable_after_retries_and_fallbacks_is_502(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    text = policy(up.url, extra_route="""  - match: {model: dead}
    backends: [down]
    retries: 2
    backoff: {base_s: 0.01, max_s: 0.02}
""")
    srv = serve_gateway(text)
    with pytest.raises(openai.APIStatusError) as e:
        client(srv).chat.completions.create(model="dead", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 502
    with pytest.raises(openai.APIStatusError) as e:  # streaming fails the same way before any byte is sent
        client(srv).chat.completions.create(model="dead", messages=[{"role": "user", "content": "x"}], stream=True)
    assert e.value.status_code == 502


def test_upstream_timeout_is_504(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, timeouts="timeouts: {connect: 1, first_byte: 0.2, total: 5}"))
    fake.delay_headers = 1.0
    with pytest.raises(openai.APIStatusError) as e:
        client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 504
    assert e.value.body["code"] == "upstream_timeout"


def test_client_disconnect_mid_stream_closes_upstream(gw) -> None:
    fake, srv = gw
    fake.reply = " ".join(f"w{i}" for i in range(200))
    fake.delay_per_chunk = 0.05
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.Client(timeout=10) as h, h.stream("POST", srv.url + "/v1/chat/completions", json=body) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(3)]
        assert any(line.startswith("data: ") for line in got)
        gone_at = time.monotonic()
    assert fake.disconnected.wait(5), "upstream never saw the client go away"
    assert time.monotonic() - gone_at < 1.0
    assert fake.streams_completed == 0


def test_mid_stream_upstream_error_is_reported_in_band(gw) -> None:
    fake, srv = gw
    fake.reply = "a b c d e f"
    fake.cut_after = 3
    with pytest.raises(openai.APIError):  # the SDK raises on the in-band error event
        list(client(srv).chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "x"}], stream=True))
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=30) as r:
        assert r.headers["x-request-id"]
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] != "data: [DONE]"
    assert orjson.loads(events[-1][6:])["error"]["type"] == "upstream_error"


def test_health_ready_metrics(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url))
    assert httpx.get(srv.url + "/health").json() == {"status": "ok"}
    ready = httpx.get(srv.url + "/ready")
    # the `down` backend is in no route, so the gateway is ready
    assert ready.status_code == 200, ready.text
    client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    text = httpx.get(srv.url + "/metrics").text
    for name in ["gateway_requests_total", "gateway_request_duration_seconds", "gateway_ttft_seconds",
                 "gateway_tokens_total", "gateway_backend_inflight", "gateway_upstream_errors_total",
                 "gateway_cache_lookups_total"]:
        assert name in text
    assert 'gateway_requests_total{backend="up",route="fake-model",status="200"} 1.0' in text


def test_ready_is_503_with_reasons(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url, extra_route="  - match: {model: dead}\n    backends: [down]\n"),
                        redis=f"redis://127.0.0.1:{free_port()}/0")
    r = httpx.get(srv.url + "/ready", timeout=10)
    assert r.status_code == 503
    assert "route dead" in " ".join(r.json()["reasons"])
    assert "redis" in " ".join(r.json()["degraded"])  # Redis down alone is degraded: limits and caches fail open


def test_redis_down_never_fails_a_request(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    text = policy(up.url) + "\ntenants:\n  - {name: t, api_keys: [k1], limits: {rpm: 100}}\n"
    srv = serve_gateway(text, redis=f"redis://127.0.0.1:{free_port()}/0")
    for _ in range(3):
        c = client(srv, key="k1").chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
        assert c.choices[0].message.content == "echo: x"


def test_tenant_keys_and_rate_limit(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    text = policy(up.url) + "\ntenants:\n  - {name: t, api_keys: [k1], limits: {rpm: 2}}\n"
    srv = serve_gateway(text)
    with pytest.raises(openai.AuthenticationError):
        client(srv, key="wrong").chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    c = client(srv, key="k1")
    for _ in range(2):
        c.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    assert int(e.value.response.headers["retry-after"]) >= 1


def test_unknown_path_and_method(gw) -> None:
    _, srv = gw
    r = httpx.get(srv.url + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(srv.url + "/v1/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_fake_upstream_is_what_we_think() -> None:
    """Guard for the other tests: the fake's echo reply is what they assert on."""
    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as up:
        r = httpx.post(up.url + "/v1/chat/completions",
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.json()["choices"][0]["message"]["content"] == "echo: hi"


def test_inflight_request_finishes_on_its_policy_across_reload(fake_openai, serve_gateway) -> None:
    import threading

    from gateway.appkeys import GATEWAY
    from gateway.config.loader import parse_policy

    fake, up = fake_openai
    srv = serve_gateway(policy(up.url))
    fake.reply = " ".join(f"w{i}" for i in range(20))
    fake.delay_per_chunk = 0.05
    texts: list[str] = []

    def stream() -> None:
        chunks = client(srv).chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "x"}], stream=True)
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))

    t = threading.Thread(target=stream)
    t.start()
    assert fake.disconnected.wait(0.3) is False  # the stream is under way
    gw = srv.app[GATEWAY]
    other = FakeOpenAI()
    with ServerThread(lambda: other.app) as up2:
        new = parse_policy(f"""
redis: {{url: "redis://127.0.0.1:1"}}
backends:
  up: {{type: openai, base_url: "{up2.url}/v1"}}
routes:
  - match: {{model: other-model}}
    backends: [up]
""")
        srv.call(gw.apply_policy(new))
        t.join(10)
        assert texts == [fake.reply]  # finished on the old route and backend
        with pytest.raises(openai.NotFoundError):
            client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
        assert client(srv).chat.completions.create(
            model="other-model", messages=[{"role": "user", "content": "y"}]).choices[0].message.content == "echo: y"
        assert other.request_count == 1


def test_upstream_429_after_retries_keeps_retry_after(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, retries=1))
    fake.fail_next(2, status=429, retry_after="7")
    with pytest.raises(openai.RateLimitError) as e:
        client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.response.headers["retry-after"] == "7"
    assert fake.request_count == 1  # 7 s is more than the route's backoff allows: answered at once, not retried


def test_upstream_auth_failure_is_the_gateways_502_not_the_clients_401(gw) -> None:
    fake, srv = gw
    fake.fail_next(1, status=401, body=orjson.dumps({"error": {
        "message": "Incorrect API key provided: sk-up****", "type": "invalid_request_error", "param": None,
        "code": "invalid_api_key"}}))
    with pytest.raises(openai.APIStatusError) as e:
        client(srv).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 502 and e.value.body["code"] == "upstream_auth_error"
    assert "sk-up" not in str(e.value.body)


def test_malformed_upstream_chunk_ends_the_stream_with_an_in_band_error(gw) -> None:
    fake, srv = gw
    fake.reply = "one two three"
    original = fake._chat_stream

    async def bad_stream(request, body, answer):
        from aiohttp import web
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, '
                         b'"delta": {"role": "assistant", "content": "ok"}, "finish_reason": null}]}\n\n')
        await resp.write(b'data: {"id": "x", "object": "chat.completion.chunk", "choices": ["not an object"]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    fake._chat_stream = bad_stream
    try:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "stream": True}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=30) as r:
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert r.status_code == 200
        assert orjson.loads(events[-1][6:])["error"]["code"] == "protocol"
    finally:
        fake._chat_stream = original
