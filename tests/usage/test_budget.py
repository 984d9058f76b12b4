"""Dollar budgets on one Redis: two gateway processes refuse a tenant once its daily budget is spent, and a
stream whose client hangs up is charged all the same."""

from __future__ import annotations

import datetime as dt
import signal
import time

import httpx
import orjson
import pytest
import redis

from tests.helpers import scrape, series
from tests.usage.budget_helpers import assert_budget_holds_across, budget_policy, serve_process


def test_two_processes_refuse_a_tenant_over_its_daily_budget(fake_openai, serve_gateway, redis_url, tmp_path) -> None:
    _, up = fake_openai
    text = budget_policy(up.url, redis_url, tmp_path)
    proc, other = serve_process(text, tmp_path)
    try:
        local = serve_gateway(text)
        assert_budget_holds_across(local.url, other)
        metrics = scrape(local)
        assert metrics[series("gateway_budget_exceeded_total", tenant="team-a", window="day")] >= 1
        assert metrics[series("gateway_budget_used_ratio", tenant="team-a", window="day")] >= 0.68
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def day_spend(redis_url: str) -> int:
    day = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    with redis.Redis.from_url(redis_url) as r:
        return int(r.get(f"{{llmgw:team-a}}:usd:d:{day}") or 0)


def test_a_stream_cut_by_its_client_is_charged(fake_openai, serve_gateway, redis_url, tmp_path) -> None:
    fake, up = fake_openai
    fake.delay_per_chunk = 0.3
    srv = serve_gateway(budget_policy(up.url, redis_url, tmp_path))
    messages = [{"role": "user", "content": "tell me a long story about the sea"}]
    with httpx.stream("POST", srv.url + "/v1/chat/completions", headers={"Authorization": "Bearer key-a"},
                      json={"model": "priced-model", "stream": True, "messages": messages}, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # the first event: then the client hangs up
    assert fake.disconnected.wait(10), "the upstream stream was not closed"
    deadline = time.monotonic() + 10
    while day_spend(redis_url) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    # an estimate: ~4 bytes of prompt JSON per token, a token per content chunk relayed
    prompt_only = len(orjson.dumps(messages)) // 4 * 2e-6
    assert day_spend(redis_url) >= round(prompt_only * 1e9)
    assert day_spend(redis_url) <= round((prompt_only + 10 * 8e-6) * 1e9)


@pytest.mark.parametrize("limit", ["usd_per_day: 0", "usd_per_day: -1", "usd_per_month: cheap"])
def test_budgets_are_validated(limit: str) -> None:
    from gateway.config.errors import PolicyErrors
    from gateway.config.loader import parse_policy

    text = f"""tenants: [{{name: t, api_keys: [k], limits: {{{limit}}}}}]
backends: {{up: {{type: openai, base_url: "http://127.0.0.1:9/v1"}}}}
routes: [{{match: {{model: m}}, backends: [up]}}]
"""
    with pytest.raises(PolicyErrors, match="limits.usd_per_"):
        parse_policy(text)
