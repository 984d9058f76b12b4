"""Security of the operator's side: reloads that would open a keyed gateway, what tenants learn about upstream
failures, and who may read /ready and /metrics."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import openai
import pytest

from gateway.appkeys import GATEWAY
from gateway.config.loader import PolicyErrors, parse_policy
from gateway.config.reload import PolicyWatcher
from tests.conftest import ADMIN_KEY
from tests.helpers import BODY, CHAT, free_port, route, scrape, sdk_client, series, upstream_policy


def backends(upstream: str, routes: str = route("fake-model") + route("dead-model", "dead")) -> str:
    return upstream_policy(upstream, routes, dead=True)


KEYED = "\ntenants:\n  - {name: team, api_keys: [k1]}\n"


def metric(srv, name: str, **labels: str) -> float:
    return scrape(srv, ADMIN_KEY).get(series(name, **labels), 0.0)


def test_reload_that_drops_every_key_is_refused_unless_the_policy_says_open(
    fake_openai, serve_gateway, redis_url: str, tmp_path: Path, caplog
) -> None:
    _, up = fake_openai
    srv = serve_gateway(backends(up.url) + KEYED)
    gw = srv.app[GATEWAY]
    path = tmp_path / "policy.yaml"
    tail = f"redis: {{url: '{redis_url}'}}\nserver: {{data_dir: '{tmp_path}', admin_keys: [{ADMIN_KEY}]}}\n"
    path.write_text(backends(up.url) + tail)  # the tenants section is gone
    watcher = PolicyWatcher(path, gw.apply_policy, gw.metrics, current=gw.snapshot.policy)
    with caplog.at_level(logging.ERROR, logger="gateway.config.reload"):
        assert srv.call(watcher.reload_now()) is False
    assert "refused" in caplog.text and "auth: {open: true}" in caplog.text
    assert metric(srv, "gateway_policy_reloads_total", result="error") == 1
    assert httpx.post(srv.url + CHAT, json=BODY).status_code == 401  # still keyed
    path.write_text(backends(up.url) + tail + "auth: {open: true}\n")
    assert srv.call(watcher.reload_now()) is True
    assert httpx.post(srv.url + CHAT, json=BODY).status_code == 200
    # Open by policy, keys can come back at any time.
    path.write_text(backends(up.url) + tail + KEYED)
    assert srv.call(watcher.reload_now()) is True
    assert httpx.post(srv.url + CHAT, json=BODY).status_code == 401


def test_auth_open_with_keys_is_a_policy_error(tmp_path: Path) -> None:
    text = "backends: {b: {type: openai, base_url: 'http://x/v1'}}\nroutes: [{match: {model: m}, backends: [b]}]\n"
    with pytest.raises(PolicyErrors) as e:
        parse_policy(text + KEYED + "auth: {open: true}\n")
    assert e.value.errors[0].path == "auth.open"
    with pytest.raises(PolicyErrors) as e:
        parse_policy(text + "auth: {open: yes please}\n")
    assert e.value.errors[0].path == "auth.open"
    assert parse_policy(text + "auth: {open: true}\n").auth_open


def test_tenants_get_generic_upstream_errors_with_the_request_id(fake_openai, serve_gateway, caplog) -> None:
    fake, up = fake_openai
    srv = serve_gateway(backends(up.url))
    with caplog.at_level(logging.WARNING, logger="gateway"):
        r = httpx.post(srv.url + CHAT, json={**BODY, "model": "dead-model"}, headers={"X-Request-Id": "rid-1"})
        assert r.status_code == 502
        message = r.json()["error"]["message"]
        assert "127.0.0.1" not in message and "http" not in message and "rid-1" in message
        fake.fail_next(1, 500, body=b"<html><body>internal host db-7.corp failed</body></html>",
                       content_type="text/html")
        r = httpx.post(srv.url + CHAT, json=BODY, headers={"X-Request-Id": "rid-2"})
        assert r.status_code == 500
        message = r.json()["error"]["message"]
        assert "db-7" not in message and "html" not in message and "rid-2" in message
        with httpx.stream("POST", srv.url + CHAT, json={**BODY, "model": "dead-model", "stream": True}) as s:
            assert s.status_code == 502 and "127.0.0.1" not in s.read().decode()
    # The operator's log has the details, under the same request ids.
    assert "rid-1" in caplog.text and "127.0.0.1" in caplog.text
    assert "rid-2" in caplog.text and "db-7.corp" in caplog.text
    # A client's own mistake, explained by the upstream in JSON, still reaches the client.
    fake.fail_next(1, 400, body={"error": {"message": "bad temperature", "type": "invalid_request_error",
                                           "param": "temperature", "code": None}})
    with pytest.raises(openai.BadRequestError) as e:
        sdk_client(srv).chat.completions.create(**BODY)
    assert e.value.body["message"] == "bad temperature"


@pytest.mark.parametrize("mode", ["admin", "key"])
def test_ready_and_metrics_behind_a_key(fake_openai, serve_gateway, tmp_path: Path, mode: str) -> None:
    _, up = fake_openai
    ops = "{auth: admin}" if mode == "admin" else "{auth: key, keys: [scraper]}"
    srv = serve_gateway(backends(up.url, route("fake-model"))
                        + f"server: {{data_dir: '{tmp_path}', admin_keys: [{ADMIN_KEY}], ops: {ops}}}\n")
    for path in ("/ready", "/metrics"):
        assert httpx.get(srv.url + path).status_code == 401
        assert httpx.get(srv.url + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(srv.url + path, headers={"Authorization": f"Bearer {ADMIN_KEY}"}).status_code == 200
        scraper = httpx.get(srv.url + path, headers={"Authorization": "Bearer scraper"}).status_code
        assert scraper == (200 if mode == "key" else 401)
    assert httpx.get(srv.url + "/health").status_code == 200  # liveness stays open


def test_ready_and_metrics_on_their_own_listener(fake_openai, serve_gateway, tmp_path: Path) -> None:
    _, up = fake_openai
    port = free_port()
    srv = serve_gateway(backends(up.url, route("fake-model"))
                        + f"server: {{data_dir: '{tmp_path}', ops: {{host: 127.0.0.1, port: {port}}}}}\n")
    assert httpx.post(srv.url + CHAT, json=BODY).status_code == 200
    assert httpx.get(srv.url + "/metrics").status_code == 404
    assert httpx.get(srv.url + "/ready").status_code == 404
    ops = f"http://127.0.0.1:{port}"
    assert "gateway_requests_total" in httpx.get(ops + "/metrics").text
    assert httpx.get(ops + "/ready").status_code == 200
    assert httpx.post(ops + CHAT, json=BODY).status_code == 404  # and no API there


def test_ops_policy_errors() -> None:
    text = "backends: {b: {type: openai, base_url: 'http://x/v1'}}\nroutes: [{match: {model: m}, backends: [b]}]\n"
    for server, path in (("{ops: {auth: admin}}", "server.ops.auth"), ("{ops: {auth: key}}", "server.ops.keys"),
                         ("{ops: {auth: nobody}}", "server.ops.auth"), ("{ops: {host: 0.0.0.0}}", "server.ops.port")):
        with pytest.raises(PolicyErrors) as e:
            parse_policy(text + f"server: {server}\n")
        assert e.value.errors[0].path == path, (server, e.value)


def test_retrieve_model(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    srv = serve_gateway(backends(up.url, route("fake-model") + route("dead-model", "dead") + route("fake-*")))
    c = sdk_client(srv)
    model = c.models.retrieve("fake-model")
    assert model.id == "fake-model" and model.owned_by == "up"
    assert c.models.retrieve("fake-model-2").id == "fake-model-2"  # listed by the glob route's backend
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("no-such-model")
