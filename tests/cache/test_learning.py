"""The semantic cache's learning: answer checks, the error budget, exploration, shared evidence.

End-to-end tests run a real gateway on a real Redis with the real embedder; the upstream is the fake OpenAI
server with scripted replies, so whether a look-alike "needs another answer" is decided by the upstream."""

from __future__ import annotations

import random

import pytest
import redis

from gateway.cache import keyspace as ks
from gateway.cache.agreement import answers_agree, facts_differ
from gateway.cache.config import parse_cache_config
from gateway.cache.keys import namespace_id
from gateway.cache.learning import (
    MIN_OBSERVED,
    Evidence,
    RouteLearning,
    band_of,
    decide,
    wrong_rate,
)
from gateway.config.errors import PolicyErrors
from tests.cache.gateway_helpers import client, policy, semantic_ready, settle, stage

STORED = "How do I reset my password?"
LOOK_ALIKE = "What are the steps to reset my password?"  # verified, below the near-repeat line


def start(fake_openai, serve_gateway, semantic: str, redis: str | None = None):
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, cache=f"{{exact: false, semantic: {semantic}}}"), redis=redis)
    semantic_ready(srv)
    return fake, srv


def entry_evidence(redis_url: str, text: str) -> Evidence:
    ns = namespace_id("team-a", "fake-model")
    r = redis.Redis.from_url(redis_url)
    try:
        for key in r.scan_iter(match=f"{ks.PREFIX}:{{{ns}}}:s:*"):
            meta = r.hget(key, "m")
            if meta is not None and text.lower().rstrip("?") in meta.decode().lower():
                lo, hi = r.hmget(key, "lo", "hi")
                return Evidence.parse(lo, hi)
    finally:
        r.close()
    raise AssertionError(f"no entry for {text!r}")


# ---- the answer check ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b", "why"), [
    ("A touchdown is worth 6 points.", "A field goal is worth 3 points.", "number"),
    ("Run git reset --soft HEAD~1 to keep your changes.", "Run git reset --hard HEAD~1 to drop them.", "identifier"),
    ("Yes, you can take it with food.", "No, you should not take it with food.", "polarity"),
    ("Ship it with USPS Priority.", "Ship it with UPS Ground.", "name"),
])
def test_answers_stating_other_facts_differ(a: str, b: str, why: str) -> None:
    assert facts_differ(a, b) == why
    assert answers_agree(a, b, None, None) == (False, why)


@pytest.mark.parametrize(("a", "b"), [
    ("There are 16 ounces in a pound.", "One pound (lb) equals 16 oz."),
    ("There are about 453.6 grams in a pound.", "One pound is roughly 454 g (453.59 g to be exact)."),
    ("$1,000 at 5% grows to about $1,628.89 after 10 years.", "At 5%, $1k grows to about $1,628.89 in 10 years."),
    ("No, you don't need a visa for 90 days.", "You can stay 90 days without a visa."),
])
def test_answers_stating_the_same_facts_agree_on_facts(a: str, b: str) -> None:
    assert facts_differ(a, b) is None


def test_the_meaning_decides_when_the_facts_do_not(embedder) -> None:
    same = embedder.encode(["Boil the eggs for seven minutes for a runny yolk.",
                            "For a soft, runny yolk, cook the eggs seven minutes in boiling water."])
    other = embedder.encode(["Boil the eggs for seven minutes for a runny yolk.",
                             "Preheat the oven and roast the chicken until golden."])
    assert answers_agree("a x", "b y", same[0], same[1])[0]
    assert not answers_agree("a x", "b y", other[0], other[1])[0]


# ---- the budget's arithmetic --------------------------------------------------------------------------------


def test_a_new_band_holds_until_enough_checked_answers_agree() -> None:
    budget = 0.01
    assert wrong_rate(0, 0, budget)[1] > budget  # nothing checked: over the budget, held
    assert wrong_rate(20, 0, budget)[1] > budget
    assert wrong_rate(MIN_OBSERVED - 1, 0, budget)[1] <= budget  # some 25-30 checks agreeing open it
    assert wrong_rate(MIN_OBSERVED - 3, 3, budget)[1] > budget  # a tenth disagreeing keeps it shut
    # Disagreement at the answer check's own false-disagree rate is not counted as wrong answers.
    assert wrong_rate(950, 50, budget)[0] < budget / 2


def test_decide_serves_near_repeats_holds_over_budget_and_explores_thin_bands() -> None:
    rng = random.Random(0)
    route = RouteLearning()
    nothing = Evidence()
    assert decide(route, 0.99, nothing, 0.01, 0.0, 1.0, rng) == "serve"  # a near repeat
    assert decide(route, 0.90, nothing, 0.01, 0.0, 1.0, rng) == "hold"  # no evidence yet
    route.shared.values[f"r{band_of(0.90)}"] = MIN_OBSERVED - 1  # the band opened, but is still thin: at the cap
    assert decide(route, 0.90, nothing, 0.01, 0.0, 1.0, rng) == "explore"
    route.shared.values[f"r{band_of(0.90)}"] = 5000  # well inside the budget: the floor
    assert decide(route, 0.90, nothing, 0.01, 0.0, 1.0, rng) == "serve"
    assert decide(route, 0.90, Evidence(hi=0.92), 0.01, 0.0, 1.0, rng) == "serve"  # (skipped by the lookup)
    assert Evidence(hi=0.92).verdict(0.90) == "wrong" and Evidence(lo=0.85).verdict(0.90) == "right"


def test_policy_keys_of_the_budget() -> None:
    config = parse_cache_config({"semantic": {"max_wrong": 0.02, "explore": {"floor": 0.05, "cap": 0.3}}},
                                "routes[0].cache")
    assert config is not None and config.semantic is not None
    assert (config.semantic.max_wrong, config.semantic.explore_floor, config.semantic.explore_cap) == (0.02, 0.05, 0.3)
    off = parse_cache_config({"semantic": {"max_wrong": None, "explore": False}}, "routes[0].cache")
    assert off is not None and off.semantic is not None
    assert off.semantic.max_wrong is None and off.semantic.explore_cap == 0.0
    with pytest.raises(PolicyErrors, match="explore.cap"):
        parse_cache_config({"semantic": {"explore": {"floor": 0.5, "cap": 0.1}}}, "routes[0].cache")
    with pytest.raises(PolicyErrors, match="max_wrong"):
        parse_cache_config({"semantic": {"max_wrong": 2}}, "routes[0].cache")


# ---- through the gateway ------------------------------------------------------------------------------------


def raw_ask(srv, text: str, *, stream: bool = False, **headers: str):
    """(answer text, response headers), whole or streamed."""
    api = client(srv)
    messages = [{"role": "user", "content": text}]
    if not stream:
        raw = api.chat.completions.with_raw_response.create(model="fake-model", messages=messages,
                                                             temperature=0.7, extra_headers=headers)
        return raw.parse().choices[0].message.content, raw.headers
    with api.chat.completions.with_streaming_response.create(model="fake-model", messages=messages, stream=True,
                                                              temperature=0.7, extra_headers=headers) as resp:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in resp.parse() if chunk.choices)
        return text, resp.headers


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_wrong_answer_found_by_exploration_is_never_served_again_in_its_scope(
        fake_openai, serve_gateway, redis_url: str, stream: bool) -> None:
    explorer_fake, explorer = start(fake_openai, serve_gateway, "{threshold: 0.8, max_wrong: 0.5, "
                                    "explore: {floor: 1.0, cap: 1.0}}")
    _, server = start(fake_openai, serve_gateway, "{threshold: 0.8, max_wrong: 0.5, explore: false}")
    explorer_fake.reply = "Open Settings, then Security, and hold Reset for 10 seconds."
    raw_ask(explorer, STORED)
    settle(explorer)
    # Before anything is learned, a gateway that does not explore serves the look-alike the stored answer.
    text, headers = raw_ask(server, LOOK_ALIKE, **{"Cache-Control": "no-store"})
    assert headers["x-cache"] == "HIT-SEMANTIC" and text.startswith("Open Settings")
    # The upstream answers the look-alike otherwise: exploration sends it upstream and finds out.
    explorer_fake.reply = "Call support, then hold Reset for 30 seconds."
    text, headers = raw_ask(explorer, LOOK_ALIKE, stream=stream, **{"Cache-Control": "no-store"})
    assert headers.get("x-cache-explore") == "1" and text.startswith("Call support")
    settle(explorer)
    evidence = entry_evidence(redis_url, STORED)
    assert evidence.hi is not None and evidence.verdict(evidence.hi) == "wrong"
    # Neither gateway serves the stored answer to the look-alike again: the evidence lives in Redis.
    for srv in (server, explorer, server):
        text, headers = raw_ask(srv, LOOK_ALIKE, **{"Cache-Control": "no-store"})
        assert headers["x-cache"] == "MISS" and text.startswith("Call support")
    metrics = httpx_metrics(explorer)
    assert 'gateway_cache_semantic_learned_total{kind="explore",outcome="wrong",route="fake-model"} 1.0' in metrics


def httpx_metrics(srv) -> str:
    import httpx

    return httpx.get(srv.url + "/metrics", timeout=30).text


def test_the_budget_holds_look_alikes_until_checked_answers_show_them_safe(fake_openai, serve_gateway) -> None:
    fake, srv = start(fake_openai, serve_gateway, "{threshold: 0.8, explore: false}")  # max_wrong 0.01
    countries = ["France", "Spain", "Italy", "Germany", "Poland", "Norway", "Sweden", "Greece", "Egypt", "Peru",
                 "Chile", "Kenya", "Japan", "India", "Canada", "Mexico", "Brazil", "Turkey", "Iran", "Cuba",
                 "Ireland", "Austria", "Belgium", "Denmark", "Finland", "Hungary", "Portugal", "Romania",
                 "Nigeria", "Morocco", "Vietnam", "Thailand", "Nepal", "Mongolia", "Bolivia", "Ecuador",
                 "Uruguay", "Iceland", "Latvia", "Estonia", "Croatia", "Serbia", "Ghana", "Senegal", "Jordan"]
    served_at: list[int] = []
    for i, country in enumerate(countries):
        fake.reply = f"The capital of {country} is its largest city."  # both questions get this answer
        raw_ask(srv, f"What is the capital of {country}?")
        settle(srv)
        _, headers = raw_ask(srv, f"tell me the capital of {country}", **{"Cache-Control": "no-store"})
        settle(srv)
        if headers["x-cache"] == "HIT-SEMANTIC":
            served_at.append(i)
    stats = stage(srv).learner.stats({"fake-model": 0.01})["fake-model"]
    # Nothing was served before some 25 checked answers agreed; once they had, look-alikes were served.
    assert served_at and served_at[0] >= 20 and len(served_at) >= len(countries) - served_at[0] - 3
    assert stats["observed"] >= 20 and stats["disagreed"] == 0
    assert stats["wrong_bound"] <= 0.01


def test_the_budget_stays_shut_when_checked_answers_disagree(fake_openai, serve_gateway) -> None:
    fake, srv = start(fake_openai, serve_gateway, "{threshold: 0.8, explore: false}")
    for i, country in enumerate(["France", "Spain", "Italy", "Germany", "Poland", "Norway", "Sweden", "Greece",
                                 "Egypt", "Peru", "Chile", "Kenya", "Japan", "India", "Canada", "Mexico"]):
        fake.reply = f"The capital of {country} is {i + 1} hours away by train."
        raw_ask(srv, f"What is the capital of {country}?")
        settle(srv)
        fake.reply = f"It is {i + 40} kilometres from the coast."  # the upstream says: another answer
        _, headers = raw_ask(srv, f"tell me the capital of {country}", **{"Cache-Control": "no-store"})
        settle(srv)
        assert headers["x-cache"] == "MISS"
    stats = stage(srv).learner.stats({"fake-model": 0.01})["fake-model"]
    assert stats["disagreed"] >= 10 and stats["wrong_bound"] > 0.01


def test_stats_report_the_learning_per_route(fake_openai, serve_gateway) -> None:
    fake, srv = start(fake_openai, serve_gateway, "{threshold: 0.8}")  # the defaults: max_wrong 0.01
    raw_ask(srv, STORED)
    settle(srv)
    import httpx

    stats = httpx.get(srv.url + "/admin/cache/stats", headers={"Authorization": "Bearer admin-key"}, timeout=30).json()
    learning = stats["learning"]["fake-model"]
    assert learning["max_wrong"] == 0.01 and {"explored", "served", "observed", "wrong_estimate", "wrong_bound",
                                              "bands"} <= set(learning)
