"""Dollars per request on a scripted workload, checked against a hand computation in the header, the metrics
and /admin/usage: a miss, an exact hit, a cached prefix, a stream, an unpriced model.

Prices (policy `models:`): priced-model $2 input, $0.50 cached input, $8 output per million tokens. The fake
upstream counts words as tokens and answers "echo: <question>"."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import ADMIN_KEY
from tests.helpers import route, scrape, sdk_client, series, upstream_policy

IN, CACHED, OUT = 2.0e-6, 0.5e-6, 8.0e-6  # USD per token
TAIL = """
tenants: [{name: team-a, api_keys: [key-a]}]
models:
  priced-model: {input_per_mtok: 2, cached_input_per_mtok: 0.5, output_per_mtok: 8}
"""


def policy(upstream: str) -> str:
    routes = route("priced-model", more="    cache: {exact: {ttl: 600}}\n") + route("mystery-model")
    return upstream_policy(upstream, routes, tail=TAIL)


def cost_header(response: httpx.Response | object) -> dict[str, float | bool]:
    raw = response.headers["X-Cost-USD"]  # type: ignore[attr-defined]
    parts = dict(p.strip().partition("=")[::2] for p in raw.split(";"))
    return {"spent": float(parts["spent"]), "saved": float(parts["saved"]), "unpriced": "unpriced" in parts}


def usage(srv, **query: str) -> dict:
    r = httpx.get(srv.url + "/admin/usage", params=query, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200, r.text
    return r.json()


def ask(client, text: str, model: str = "priced-model"):
    return client.chat.completions.with_raw_response.create(model=model, temperature=0,
                                                            messages=[{"role": "user", "content": text}])


def test_header_metrics_and_admin_usage_agree_with_a_hand_computation(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url))
    client = sdk_client(srv, "key-a")

    # 1. a miss: 6 prompt tokens, "echo: what is the capital of france" is 7 completion tokens
    miss = ask(client, "what is the capital of france")
    assert (miss.parse().usage.prompt_tokens, miss.parse().usage.completion_tokens) == (6, 7)
    spent_miss = 6 * IN + 7 * OUT
    assert cost_header(miss) == {"spent": pytest.approx(spent_miss, abs=1e-8), "saved": 0.0, "unpriced": False}

    # 2. the same again: an exact hit saves what the miss cost
    hit = ask(client, "what is the capital of france")
    assert hit.headers["X-Cache"] == "HIT-EXACT"
    assert cost_header(hit) == {"spent": 0.0, "saved": pytest.approx(spent_miss, abs=1e-8), "unpriced": False}

    # 3. a cached prefix: 4 of its 5 prompt tokens at the cached price, the discount saved
    fake.cached_tokens = 4
    prefixed = ask(client, "and the capital of spain")
    assert prefixed.parse().usage.prompt_tokens_details.cached_tokens == 4
    spent_prefixed = 1 * IN + 4 * CACHED + 6 * OUT
    saved_prefixed = 4 * (IN - CACHED)
    assert cost_header(prefixed)["spent"] == pytest.approx(spent_prefixed, abs=1e-8)
    assert cost_header(prefixed)["saved"] == pytest.approx(saved_prefixed, abs=1e-8)

    # 4. a stream (no header: its cost is known only at its end): 3 prompt tokens, 4 of output, 3 cached
    chunks = list(client.chat.completions.create(model="priced-model", stream=True,
                                                 messages=[{"role": "user", "content": "one two three"}]))
    assert chunks
    spent_stream = 0 * IN + 3 * CACHED + 4 * OUT
    saved_stream = 3 * (IN - CACHED)

    # 5. a model without a price: $0, flagged
    unknown = ask(client, "hello there", model="mystery-model")
    assert cost_header(unknown) == {"spent": 0.0, "saved": 0.0, "unpriced": True}

    spent = spent_miss + spent_prefixed + spent_stream
    report = usage(srv, tenant="team-a")
    totals = report["totals"]
    assert totals["spent_usd"] == pytest.approx(spent, abs=1e-9)
    assert totals["saved_usd"]["exact"] == pytest.approx(spent_miss, abs=1e-9)
    assert totals["saved_usd"]["prefix"] == pytest.approx(saved_prefixed + saved_stream, abs=1e-9)
    assert totals["net_saved_usd"] == pytest.approx(spent_miss + saved_prefixed + saved_stream, abs=1e-9)
    assert (totals["requests"], totals["hits"]["exact"], totals["unpriced_requests"]) == (5, 1, 1)
    assert totals["prompt_tokens"] == 6 + 5 + 3 + 2 and totals["cached_tokens"] == 4 + 3 + 2  # the unpriced one too
    assert report["routes"]["priced-model"]["spent_usd"] == pytest.approx(spent, abs=1e-9)
    assert report["routes"]["mystery-model"]["spent_usd"] == 0.0
    assert sum(h["spent_usd"] for h in report["series"]) == pytest.approx(spent, abs=1e-9)
    assert usage(srv, tenant="team-a", route="mystery-model")["totals"]["requests"] == 1

    labels = {"tenant": "team-a", "route": "priced-model", "model": "priced-model"}
    metrics = scrape(srv)
    assert metrics[series("gateway_spend_usd_total", **labels)] == pytest.approx(spent, abs=1e-9)
    assert metrics[series("gateway_saved_usd_total", layer="exact", **labels)] == pytest.approx(spent_miss, abs=1e-9)
    assert metrics[series("gateway_saved_usd_total", layer="prefix", **labels)] == pytest.approx(
        saved_prefixed + saved_stream, abs=1e-9)
    assert metrics[series("gateway_unpriced_requests_total", route="mystery-model", model="mystery-model")] == 1


def test_admin_usage_needs_the_admin_key_and_sane_times(fake_openai, serve_gateway) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url))
    assert httpx.get(srv.url + "/admin/usage", headers={"Authorization": "Bearer key-a"}).status_code == 401
    bad = httpx.get(srv.url + "/admin/usage", params={"since": "yesterday"},
                    headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"
    empty = usage(srv, since="2020-01-01T00:00:00Z", until="2020-01-02T00:00:00Z")
    assert empty["totals"]["spent_usd"] == 0 and empty["series"] == []
