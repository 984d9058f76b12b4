"""The per-request arithmetic: table prices (OpenAI cached input, Anthropic's read and write rule), compression,
the judge's and exploration's costs, net savings, and what an unknown model is."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.auth import OPEN_TENANT
from gateway.config.loader import parse_policy
from gateway.context.budget import BudgetReport
from gateway.metrics import Metrics
from gateway.pipeline import CacheControl, RequestContext
from gateway.usage import ledger as usage_ledger
from gateway.usage.accounting import Accounting
from gateway.usage.ledger import Tokens
from gateway.usage.prices import PriceBook, rates_of, table_price

POLICY = """
backends: {up: {type: openai, base_url: "http://127.0.0.1:9/v1"}}
models:
  "house-*": {input_per_mtok: 1, output_per_mtok: 4}
routes:
  - {match: {model: "*"}, backends: [up]}
"""


def context(model: str) -> RequestContext:
    policy = parse_policy(POLICY)
    return RequestContext(request_id="r", endpoint="chat.completions", body={}, forward_body={}, model=model,
                          stream=False, include_usage=False, tenant=OPEN_TENANT, route=policy.routes[0], policy=policy,
                          headers={}, cache_control=CacheControl())


def accounting(policy_ctx: RequestContext) -> Accounting:
    acc = Accounting(aioredis.Redis(), Metrics(), 0.1)  # no call reaches Redis: the store only buffers
    acc.prepare(policy_ctx.policy)
    return acc


def test_table_prices_follow_each_provider_rule() -> None:
    gpt = rates_of(table_price("gpt-4o-2024-08-06"))  # type: ignore[arg-type]
    assert (gpt.input, gpt.cached_input, gpt.output) == (2.5e-6, 1.25e-6, 10e-6)
    claude = rates_of(table_price("claude-sonnet-4-5-20250929"))  # type: ignore[arg-type]
    assert claude.cached_input == pytest.approx(0.3e-6) and claude.cache_write == pytest.approx(3.75e-6)
    assert table_price("smollm2-135m") is None and table_price("no-such-model") is None
    # Anthropic usage as the backend translates it: 1,000 read, 2,000 written, 500 fresh, 100 out
    tokens = Tokens.of({"prompt_tokens": 3500, "completion_tokens": 100,
                        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 2000}})
    assert tokens.cost(claude) == pytest.approx(500 * 3e-6 + 1000 * 0.3e-6 + 2000 * 3.75e-6 + 100 * 15e-6)
    assert tokens.prefix_saving(claude) == pytest.approx(1000 * 2.7e-6)


def test_policy_globs_price_before_the_table_and_unknown_models_are_flagged() -> None:
    ctx = context("house-7b")
    assert PriceBook(ctx.policy).rates(ctx.route, "house-7b") == rates_of(ctx.policy.models["house-*"])
    acc = accounting(ctx)
    ledger = acc.settle_upstream(ctx, {"prompt_tokens": 1000, "completion_tokens": 10})
    assert ledger.spent == pytest.approx(1000e-6 + 40e-6) and not ledger.unpriced
    unknown = context("mystery")
    ledger = acc.settle_upstream(unknown, {"prompt_tokens": 1000, "completion_tokens": 10})
    assert (ledger.spent, ledger.unpriced) == (0.0, True)
    assert unknown.response_headers["X-Cost-USD"] == "spent=0.00000000; saved=0.00000000; unpriced"


def test_compression_judge_and_exploration_make_net_savings() -> None:
    ctx = context("house-7b")
    acc = accounting(ctx)
    ctx.budget_report = BudgetReport(None, None, "x", True, original=3000, total=1000)  # compression removed 2,000 prompt tokens
    usage_ledger.current.set(ctx.ledger)
    usage_ledger.charge_judge(0.0002)  # the judge, deep in the lookup, charges the request's ledger
    usage_ledger.explore(ctx.ledger)  # and the cache sent this would-be hit upstream to learn
    ledger = acc.settle_upstream(ctx, {"prompt_tokens": 1000, "completion_tokens": 10})
    call = 1000e-6 + 40e-6
    assert ledger.spent == pytest.approx(call + 0.0002)
    assert ledger.saved == {"compression": pytest.approx(2000e-6)}
    assert ledger.costs == {"judge": pytest.approx(0.0002), "exploration": pytest.approx(call)}
    assert ledger.net_saved == pytest.approx(2000e-6 - 0.0002 - call)
    assert acc.settle_upstream(ctx, {"prompt_tokens": 5}) is ledger and ledger.spent == pytest.approx(call + 0.0002)
