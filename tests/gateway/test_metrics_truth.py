"""Metrics that tell the truth: refused requests counted, label sets there before their first event, outcomes
on the backend that produced them, stable route names, saved tokens with dedup, and /ready's degraded state."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest

from gateway.appkeys import GATEWAY
from gateway.config.loader import PolicyErrors, parse_policy
from gateway.context.budget import plan, split_conversation
from gateway.context.compress import Document
from gateway.context.config import parse_context_config
from gateway.context.tokens import tiktoken_counter
from tests.helpers import BODY, CHAT, free_port, route, scrape, series, upstream_policy


def policy(upstream: str, extra: str = "") -> str:
    routes = (route("fake-model") + route("rescued", "dead", "    fallbacks: [up]\n") + route("dead-model", "dead")
              + route("fake-*") + extra)
    tenants = "tenants:\n  - {name: team, api_keys: [k1], limits: {rpm: 1000, tpm: 100000}}\n"
    return upstream_policy(upstream, routes, dead=True, tail=tenants)


def post(srv, body: dict | bytes, key: str | None = "k1", **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if isinstance(body, bytes):
        return httpx.post(srv.url + CHAT, content=body, headers={**headers, "Content-Type": "application/json"}, **kw)
    return httpx.post(srv.url + CHAT, json=body, headers=headers, **kw)


def test_refused_requests_are_counted_as_route_none(fake_openai, serve_gateway, tmp_path) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url) + f"server: {{data_dir: '{tmp_path}', max_body_bytes: 4096}}\n")
    assert post(srv, BODY, key=None).status_code == 401
    assert post(srv, {**BODY, "model": "nope"}).status_code == 404
    assert post(srv, b"{not json").status_code == 400
    assert post(srv, {**BODY, "messages": [{"role": "user", "content": "x" * 8000}]}).status_code == 413
    assert httpx.get(srv.url + CHAT).status_code == 405
    m = scrape(srv)
    for status in ("401", "404", "400", "413", "405"):
        assert m[series("gateway_requests_total", route="none", backend="none", status=status)] == 1, status
    assert not any("/metrics" in k for k in m)  # scrapes are not traffic


def test_label_sets_exist_at_zero_before_their_first_event(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url))
    m = scrape(srv)
    for backend in ("up", "dead"):
        for reason in ("connect", "timeout", "status_429", "status_5xx", "protocol", "shed"):
            assert m[series("gateway_upstream_errors_total", backend=backend, reason=reason)] == 0
    for limit in ("rpm", "tpm"):
        assert m[series("gateway_rate_limited_total", tenant="team", limit=limit)] == 0
    for result in ("ok", "error"):
        assert m[series("gateway_policy_reloads_total", result=result)] == 0
    for component in ("limits", "cache"):
        assert m[series("gateway_redis_errors_total", component=component)] == 0
    assert m[series("gateway_tokens_total", kind="saved_by_compression")] == 0
    # A policy applied later brings its own label sets.
    gw = srv.app[GATEWAY]
    new = parse_policy(policy(up.url).replace("team", "team-b").replace("  up: {", "  up2: {type: openai, base_url: "
                                                                        f'"{up.url}/v1"}}\n  up: {{'),
                       env={})
    srv.call(gw.apply_policy(new))
    m = scrape(srv)
    assert m[series("gateway_upstream_errors_total", backend="up2", reason="connect")] == 0
    assert m[series("gateway_rate_limited_total", tenant="team-b", limit="rpm")] == 0


def test_outcomes_belong_to_the_backend_that_produced_them(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url))
    assert post(srv, {**BODY, "model": "rescued"}).headers["x-backend"] == "up"
    assert post(srv, {**BODY, "model": "dead-model"}).status_code == 502
    fake.fail_next(1, 400, body={"error": {"message": "bad temperature", "type": "invalid_request_error",
                                           "param": "temperature", "code": None}})
    assert post(srv, BODY).status_code == 400
    m = scrape(srv)
    assert m[series("gateway_requests_total", route="rescued", backend="up", status="200")] == 1
    assert m[series("gateway_requests_total", route="dead-model", backend="dead", status="502")] == 1
    assert m[series("gateway_requests_total", route="fake-model", backend="up", status="400")] == 1
    assert m[series("gateway_upstream_errors_total", backend="dead", reason="connect")] == 2
    assert m[series("gateway_upstream_errors_total", backend="up", reason="status_4xx")] == 0  # the client's


def test_routes_have_stable_names_without_glob_characters(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url, '  - match: {model: "other-*"}\n    name: others\n    backends: [up]\n'))
    assert post(srv, {**BODY, "model": "fake-model-2"}).status_code == 200
    assert post(srv, {**BODY, "model": "other-1"}).status_code == 200
    m = scrape(srv)
    assert m[series("gateway_requests_total", route="fake-_any", backend="up", status="200")] == 1
    assert m[series("gateway_requests_total", route="others", backend="up", status="200")] == 1
    assert not any('route="fake-*"' in k for k in m)
    with pytest.raises(PolicyErrors) as e:
        parse_policy(policy(up.url, '  - match: {model: x}\n    name: fake-model\n    backends: [up]\n'), env={})
    assert "duplicate route name" in str(e.value)


def test_ready_is_503_only_when_a_route_has_no_live_backend(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    text = policy(up.url).replace(route("dead-model", "dead"), "")
    srv = serve_gateway(text, redis=f"redis://127.0.0.1:{free_port()}/0")
    r = httpx.get(srv.url + "/ready", timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "degraded"
    degraded = " ".join(body["degraded"])
    assert "redis" in degraded and "route rescued" in degraded
    srv2 = serve_gateway(policy(up.url))
    r = httpx.get(srv2.url + "/ready", timeout=10)
    assert r.status_code == 503 and "route dead-model" in " ".join(r.json()["reasons"])


def test_saved_tokens_count_the_duplicates_dedup_dropped() -> None:
    counter = tiktoken_counter("o200k_base")
    config = parse_context_config({"compression": {"documents": {"dedup": True}}}, "routes[0]")
    messages = [{"role": "user", "content": "Tell me about Paris."}]
    text = "Paris is the capital of France. It has many museums. The Louvre is the largest."

    def report(docs: list[Document]):
        return plan(counter, config, 4000, 500, split_conversation(messages), docs, None, messages).report

    alone = report([Document("a", text, 0.9)])
    with_copy = report([Document("a", text, 0.9), Document("b", text, 0.5)])
    assert with_copy.documents_duplicate == 1
    assert with_copy.original > alone.original  # the copy was sent by the client...
    assert with_copy.total == alone.total  # ...but not forwarded: its tokens are saved


def test_metrics_text_is_valid_prometheus(fake_openai, serve_gateway) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    _, up = fake_openai
    srv = serve_gateway(policy(up.url))
    post(srv, BODY)
    families = {f.name for f in text_string_to_metric_families(httpx.get(srv.url + "/metrics").text)}
    assert {"gateway_requests", "gateway_upstream_errors", "gateway_rate_limited"} <= families
    assert orjson.loads(httpx.get(srv.url + "/health").content) == {"status": "ok"}


def test_a_stream_read_to_done_by_a_client_that_hangs_up_at_once_is_counted_whole(fake_openai, serve_gateway) -> None:
    """A one-shot client (curl) closes its connection the moment it reads [DONE], which cancels the request's
    task: for a tenant with a TPM limit that cancel used to land in the Redis charge after [DONE], so the
    tokens went uncounted and a complete stream was counted 499."""
    from tests.gateway.test_front import Client

    _, up = fake_openai
    srv = serve_gateway(policy(up.url))
    wanted, n = 0, 8
    for i in range(n):
        body = orjson.dumps({**BODY, "messages": [{"role": "user", "content": f"q{i}"}], "stream": True,
                             "stream_options": {"include_usage": True}})
        client = Client(srv.url)
        client.send(b"POST %b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (CHAT.encode(), len(body), body))
        while b"data: [DONE]" not in client.buf:
            assert client._more(), "stream closed before [DONE]"
        usage = [orjson.loads(line[6:])["usage"] for line in client.buf.split(b"\n")
                 if line.startswith(b"data: {") and b'"usage":{' in line]
        wanted += usage[-1]["prompt_tokens"] + usage[-1]["completion_tokens"]
        client.sock.close()
    ok = series("gateway_requests_total", route="fake-model", backend="up", status="200")
    for _ in range(100):  # the gateway notices each hang-up on its own loop: wait for the last one (bounded)
        m = scrape(srv)
        if m.get(ok) == n:
            break
        time.sleep(0.05)
    tokens = m[series("gateway_tokens_total", kind="prompt")] + m[series("gateway_tokens_total", kind="completion")]
    assert (m.get(ok), tokens) == (n, wanted)
    assert m.get(series("gateway_requests_total", route="fake-model", backend="up", status="499"), 0) == 0
