"""Budgets across gateway processes: a policy with a tiny daily budget, a second gateway as its own process
(`llm-gateway serve`), and the check that both refuse the tenant once its budget is spent."""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import ADMIN_KEY
from tests.helpers import free_port

# Each question below costs 6 * $2 + 7 * $8 per million tokens = $0.000068; two pass the $0.0001 budget.
QUESTION = "what is the capital of france"
COST = 6 * 2e-6 + 7 * 8e-6


def budget_policy(upstream: str, redis_url: str, data_dir: Path) -> str:
    return f"""
redis: {{url: "{redis_url}", timeout_ms: 250}}
server: {{data_dir: "{data_dir}", admin_keys: [{ADMIN_KEY}]}}
tenants:
  - {{name: team-a, api_keys: [key-a], limits: {{usd_per_day: 0.0001, usd_per_month: 100}}}}
  - {{name: team-b, api_keys: [key-b]}}
models:
  priced-model: {{input_per_mtok: 2, output_per_mtok: 8}}
backends:
  up: {{type: openai, base_url: "{upstream}/v1"}}
routes:
  - {{match: {{model: priced-model}}, backends: [up]}}
"""


def serve_process(policy_text: str, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """`llm-gateway serve` on the policy, in its own process; ready when it answers /health."""
    path = tmp_path / "budget-policy.yaml"
    path.write_text(policy_text)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--policy", str(path), "--port", str(port),
                             "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("the second gateway did not start")


def ask(url: str, key: str = "key-a") -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=30,
                      json={"model": "priced-model", "messages": [{"role": "user", "content": QUESTION}]})


def assert_budget_holds_across(first: str, second: str) -> None:
    """Two answers (one from each gateway) spend the budget; then both refuse with 429 budget_exceeded."""
    for url in (first, second):
        r = ask(url)
        assert r.status_code == 200, r.text
        assert float(r.headers["X-Cost-USD"].split(";")[0].split("=")[1]) == round(COST, 8)
    now = time.time()
    midnight = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    to_midnight = (midnight + dt.timedelta(days=1)).timestamp() - now
    for url in (first, second, first):
        r = ask(url)
        assert r.status_code == 429, r.text
        error = r.json()["error"]
        assert (error["code"], error["type"]) == ("budget_exceeded", "insufficient_quota")
        assert abs(int(r.headers["Retry-After"]) - math.ceil(to_midnight)) <= 5
    assert ask(second, "key-b").status_code == 200  # another tenant is not touched
