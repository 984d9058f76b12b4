"""The dashboard and alerts against a real Prometheus: it scrapes a gateway serving an engine route and a cache
route, a traffic mix goes through, and every dashboard expression is evaluated through the HTTP API (valid and
non-empty: a zero counts). Grafana has no Debian package, so its JSON is checked for datasource and variables.

Prometheus comes from the Debian package `prometheus` (.ci/run installs it when missing)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "llm-gateway.json"
ALERTS = ROOT / "dashboards" / "alerts.yml"
# What Grafana would put in for its built-ins here (1 s scrapes; a wide window: scrapes may lag on a busy box).
GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "5s", "__range": "5m"}
# Skipped only outside CI: .ci/run installs Prometheus, so under CI a missing binary is a failure, not a skip.
needs_prometheus = pytest.mark.skipif(
    not os.environ.get("CI") and (shutil.which("prometheus") is None or shutil.which("promtool") is None),
    reason="Debian package `prometheus` not installed (.ci/run installs it)")


def dashboard_exprs() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", []) if t.get("expr")]


def test_grafana_json_datasource_and_variables() -> None:
    d = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in d["panels"]:
        if panel.get("type") == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            for var in re.findall(r"\$\{?(\w+)", target["expr"]):
                assert var in GRAFANA_BUILTINS or var in variables, (panel["title"], var)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"]: p for p in d["panels"]}
    assert all("4.." not in t["expr"] for t in titles["Error ratio (5xx)"]["targets"])


@needs_prometheus
def test_alert_rules_pass_promtool_unit_tests() -> None:
    check = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=ALERTS.parent, capture_output=True,
                           text=True)
    assert tests.returncode == 0, tests.stdout + tests.stderr


POLICY = """
tenants:
  - {{name: main, api_keys: [k-main]}}
  - {{name: limited, api_keys: [k-limited], limits: {{rpm: 2}}}}
backends:
  local:
    type: engine
    model: smollm2-135m
    options: {{kv_cache_memory: 32MiB, num_threads: 1, max_num_seqs: 4}}
  up: {{type: openai, base_url: "{upstream}/v1"}}
  dead: {{type: openai, base_url: "http://127.0.0.1:{dead}/v1"}}
routes:
  - match: {{model: smollm2-135m}}
    backends: [local]
    cache: {{exact: {{ttl: 600, store: always}}, semantic: false}}
  - match: {{model: fake-model}}
    backends: [up]
    cache: {{exact: {{ttl: 600, store: always}}, semantic: {{threshold: 0.9}}}}
    budget: {{context_window: 4096, max_output_tokens: 256}}
  - match: {{model: dead-model}}
    backends: [dead]
"""


def traffic(url: str) -> None:
    """A realistic mix: engine and cloud routes, streams and not, cache hits, a limited tenant, errors."""
    main = {"Authorization": "Bearer k-main"}
    with httpx.Client(timeout=120, headers=main) as c:
        for i in range(3):
            for _ in range(2):  # the second is an exact-cache hit
                body = {"model": "smollm2-135m", "max_tokens": 4, "temperature": 0,
                        "messages": [{"role": "system", "content": "You are terse. " * 8},
                                     {"role": "user", "content": f"Name colour {i}."}]}
                assert c.post(url + "/v1/chat/completions", json=body).status_code == 200
                with c.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True,
                                                                           "max_tokens": 4 + i}) as r:
                    assert r.status_code == 200 and list(r.iter_lines())
        for i in range(4):
            body = {"model": "fake-model", "messages": [{"role": "user", "content": f"hello {i % 2}"}],
                    "stream": i % 2 == 0, "temperature": 0}
            assert c.post(url + "/v1/chat/completions", json=body).status_code == 200
        assert c.post(url + "/v1/chat/completions", json={"model": "dead-model", "messages": [
            {"role": "user", "content": "x"}]}).status_code == 502
        assert c.post(url + "/v1/chat/completions", json={"model": "nope", "messages": [
            {"role": "user", "content": "x"}]}).status_code == 404
    limited = [httpx.post(url + "/v1/chat/completions", headers={"Authorization": "Bearer k-limited"}, timeout=30,
                          json={"model": "fake-model", "messages": [{"role": "user", "content": "y"}]}).status_code
               for _ in range(3)]
    assert limited == [200, 200, 429]


@needs_prometheus
def test_every_dashboard_expression_has_data_in_a_real_prometheus(fake_openai, serve_gateway, tmp_path) -> None:
    _, up = fake_openai
    srv = serve_gateway(POLICY.format(upstream=up.url, dead=free_port()))
    port = free_port()
    config = tmp_path / "prometheus.yml"
    target = srv.url.removeprefix("http://")
    config.write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ["{ALERTS}"]
scrape_configs:
  - job_name: gateway
    static_configs: [{{targets: ["{target}"]}}]
""")
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    api = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: httpx.get(api + "/-/ready").status_code == 200, "prometheus ready")
        _wait(lambda: bool(query(api, 'up{job="gateway"} == 1')), "the first scrape")  # a baseline before traffic
        traffic(srv.url)
        done = time.time()

        def scraped_after_traffic() -> bool:
            r = query(api, 'timestamp(up{job="gateway"})')
            scrapes = query(api, 'count_over_time(up{job="gateway"}[1m])')
            return bool(r) and float(r[0]["value"][1]) > done + 3 and float(scrapes[0]["value"][1]) >= 4

        _wait(scraped_after_traffic, "scrapes after the traffic", tries=1200)
        empty = []
        for title, expr in dashboard_exprs():
            for var, value in GRAFANA_BUILTINS.items():
                expr = expr.replace("$" + var, value)
            if not query(api, expr):
                empty.append(f"{title}: {expr}")
        assert not empty, "expressions with no data:\n" + "\n".join(empty)
        assert float(query(api, "sum(increase(gateway_requests_total[5m]))")[0]["value"][1]) > 0  # the mix counted
        rules = httpx.get(api + "/api/v1/rules").json()["data"]["groups"]
        assert {r["name"] for g in rules for r in g["rules"]} >= {"Gateway5xxRatioHigh", "EngineKVCacheFull"}
        assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    finally:
        prom.terminate()
        prom.wait(10)


def query(api: str, expr: str) -> list:
    r = httpx.get(api + "/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _wait(cond, what: str, tries: int = 600) -> None:
    for _ in range(tries):
        try:
            if cond():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")
