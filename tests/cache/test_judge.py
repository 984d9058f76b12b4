"""The judge stage: candidates under the route's threshold are asked to a scripted judge upstream.

Real embedder, real FAISS, real Redis, openai SDK as client; the judge is a second fake OpenAI server whose
replies the tests script ("yes", "no", logprobs, slow, failing).
"""

from __future__ import annotations

import math

import pytest

from gateway.config.errors import PolicyError
from gateway.config.loader import parse_policy
from tests.cache.gateway_helpers import admin, ask, semantic_ready, settle
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread

STORED = "How long is the warranty on this laptop?"
REWORDED = "For how many years am I covered if my laptop breaks?"
JUDGE = "{backend: judge, model: small-judge, timeout_ms: 800, min_confidence: 0.9, threshold: 0.3}"


def judged_policy(upstream: str, judge_url: str, judge: str = JUDGE) -> str:
    return f"""
tenants:
  - {{name: team-a, api_keys: [key-a]}}
backends:
  up: {{type: openai, base_url: "{upstream}/v1", api_key: sk-up}}
  judge: {{type: openai, base_url: "{judge_url}/v1", api_key: sk-judge}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
    cache: {{exact: {{ttl: 60}}, semantic: {{threshold: 0.99, ttl: 60, verify: false, max_wrong: null, judge: {judge}}}}}
"""


@pytest.fixture
def judge_fake():
    fake = FakeOpenAI()
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.fixture
def gw(fake_openai, judge_fake, serve_gateway):
    fake, up = fake_openai
    judge, judge_srv = judge_fake
    srv = serve_gateway(judged_policy(up.url, judge_srv.url))
    semantic_ready(srv)
    ask(srv, STORED)
    settle(srv)
    return fake, judge, srv


def judge_calls(srv, result: str) -> float:
    text = admin(srv, "GET", "/metrics").text
    line = f'gateway_cache_judge_calls_total{{result="{result}"}} '
    return float(next(x for x in text.splitlines() if x.startswith(line)).split()[-1])


def test_judge_yes_serves_the_cached_answer_and_a_repeat_uses_the_cached_verdict(gw) -> None:
    fake, judge, srv = gw
    judge.reply = "Yes"
    completion, headers = ask(srv, REWORDED)
    assert headers["x-cache"] == "HIT-SEMANTIC"
    assert completion.choices[0].message.content == f"echo: {STORED}"
    assert 0.3 <= float(headers["x-cache-similarity"]) < 0.99
    assert fake.request_count == 1 and judge.request_count == 1
    sent = judge.last.body
    assert sent["model"] == "small-judge" and sent["max_tokens"] == 1 and sent["temperature"] == 0
    assert sent["logprobs"] is True
    asked = sent["messages"][-1]["content"]
    # the texts as the cache holds them: in near-repeat form (normalize.py), e.g. without the question mark
    assert STORED.rstrip("?") in asked and REWORDED.rstrip("?") in asked and "same answer" in asked
    assert judge_calls(srv, "yes") == 1

    completion, headers = ask(srv, REWORDED)  # the verdict is cached in Redis: no second judge call
    assert headers["x-cache"] == "HIT-SEMANTIC" and completion.choices[0].message.content == f"echo: {STORED}"
    assert judge.request_count == 1
    assert judge_calls(srv, "cached") == 1
    metrics = admin(srv, "GET", "/metrics").text
    assert 'gateway_cache_judge_tokens_total{kind="prompt"}' in metrics
    assert 'gateway_cache_judge_calls_total{result="timeout"} 0.0' in metrics


def test_judge_no_is_a_miss_answered_by_the_backend(gw) -> None:
    fake, judge, srv = gw
    judge.reply = "No."
    completion, headers = ask(srv, "How long does shipping take for this laptop?")
    assert headers["x-cache"] == "MISS"
    assert completion.choices[0].message.content == "echo: How long does shipping take for this laptop?"
    assert judge.request_count == 1 and fake.request_count == 2
    assert judge_calls(srv, "no") == 1


def test_a_slow_judge_is_a_miss_counted_as_timeout(gw) -> None:
    fake, judge, srv = gw
    judge.reply = "yes"
    judge.delay_headers = 3.0  # past the judge's 800 ms
    completion, headers = ask(srv, REWORDED)
    assert headers["x-cache"] == "MISS"
    assert completion.choices[0].message.content == f"echo: {REWORDED}"
    assert judge_calls(srv, "timeout") == 1 and judge_calls(srv, "yes") == 0


def test_a_failing_judge_is_a_miss_counted_as_error(gw) -> None:
    fake, judge, srv = gw
    judge.reply = "yes"
    judge.fail_next(1, status=500)
    assert ask(srv, REWORDED)[1]["x-cache"] == "MISS"
    assert judge_calls(srv, "error") == 1


def test_logprobs_give_the_confidence(gw) -> None:
    fake, judge, srv = gw
    judge.reply = "Yes"
    judge.top_logprobs = [("Yes", math.log(0.6)), ("No", math.log(0.4))]
    no_store = {"Cache-Control": "no-store"}
    assert ask(srv, REWORDED, headers=no_store)[1]["x-cache"] == "MISS"  # P(yes) 0.6 < min_confidence 0.9
    assert judge_calls(srv, "unsure") == 1
    judge.top_logprobs = [("Yes", math.log(0.93)), (" yes", math.log(0.03)), ("No", math.log(0.04))]
    other = "If my laptop stops working, how many years does the guarantee last?"
    completion, headers = ask(srv, other, headers=no_store)
    assert headers["x-cache"] == "HIT-SEMANTIC" and completion.choices[0].message.content == f"echo: {STORED}"
    assert judge_calls(srv, "yes") == 1


def test_candidates_at_the_route_threshold_are_served_without_the_judge(gw) -> None:
    fake, judge, srv = gw
    judge.reply = "No"
    completion, headers = ask(srv, "how long is the warranty on this laptop")
    assert headers["x-cache"] == "HIT-SEMANTIC" and completion.choices[0].message.content == f"echo: {STORED}"
    assert judge.request_count == 0


def test_verdicts_are_per_scope(fake_openai, judge_fake, serve_gateway) -> None:
    fake, up = fake_openai
    judge, judge_srv = judge_fake
    text = judged_policy(up.url, judge_srv.url).replace("api_keys: [key-a]}", "api_keys: [key-a]}\n  - {name: team-b, api_keys: [key-b]}")
    srv = serve_gateway(text)
    semantic_ready(srv)
    judge.reply = "yes"
    for key in ("key-a", "key-b"):
        ask(srv, STORED, key=key)
        settle(srv)
        assert ask(srv, REWORDED, key=key, headers={"Cache-Control": "no-store"})[1]["x-cache"] == "HIT-SEMANTIC"
    assert judge.request_count == 2  # team-b's pair is its own: team-a's verdict is not reused across tenants


@pytest.mark.parametrize(("judge", "path", "message"), [
    ("{backend: jugde, model: m}", "routes[0].cache.semantic.judge.backend", "did you mean 'judge'"),
    ("{backend: judge, model: m, min_confidense: 0.5}", "routes[0].cache.semantic.judge.min_confidense",
     "did you mean 'min_confidence'"),
    ("{backend: judge}", "routes[0].cache.semantic.judge.model", "required"),
    ("{backend: judge, model: m, threshold: 0.995}", "routes[0].cache.semantic.judge.threshold", "at most"),
    ("{backend: judge, model: m, timeout_ms: 0}", "routes[0].cache.semantic.judge.timeout_ms", "must be in (0, 60000]"),
])
def test_judge_settings_are_checked_by_policy_check(judge: str, path: str, message: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy(judged_policy("http://127.0.0.1:9", "http://127.0.0.1:10", judge), "p.yaml")
    errors = getattr(e.value, "errors", [e.value])
    assert any(err.path == path and message in err.message for err in errors), [str(x) for x in errors]
    assert all(err.line is not None for err in errors)


async def test_the_judge_alone_reads_text_replies_and_drops_refused_logprobs(judge_fake) -> None:
    """The same Judge as a library (calibration uses it so): a real OpenAI backend against the scripted fake."""
    from gateway.backends import build_backend
    from gateway.cache.config import JudgeConfig
    from gateway.cache.judge import Judge
    from gateway.config.schema import BackendConfig
    from gateway.metrics import Metrics

    fake, srv = judge_fake
    backend = build_backend(BackendConfig(name="judge", type="openai", base_url=srv.url + "/v1"), Metrics())
    await backend.start()
    try:
        judge = Judge(JudgeConfig(backend="judge", model="small-judge"), lambda: backend)
        fake.reply = "Yes."
        verdict = await judge.same_answer("How long is the warranty?", "How many years am I covered?")
        assert (verdict.same, verdict.confidence, verdict.result, verdict.cached) == (True, 1.0, "yes", False)
        assert verdict.prompt_tokens > 0 and verdict.completion_tokens == 1
        fake.reply = "Maybe, it depends"
        verdict = await judge.same_answer("Is it safe?", "Is it legal?")
        assert not verdict.same and verdict.result == "unsure"
        fake.reply = "no"
        fake.fail_next(1, status=400)  # a server that refuses logprobs: asked again without them, and from then on
        verdict = await judge.same_answer("Is 3 greater than 5?", "Is 5 greater than 3?")
        assert not verdict.same and verdict.result == "no"
        assert "logprobs" not in fake.last.body
        await judge.same_answer("a?", "b?")
        assert "logprobs" not in fake.last.body
        assert '"Is 3 greater than 5?"' in fake.requests[-3].body["messages"][-1]["content"]  # JSON-quoted
    finally:
        await backend.close()
