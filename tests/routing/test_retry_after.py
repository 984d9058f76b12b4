"""Retry-After from an upstream is a floor: never retried sooner; a longer wait than the route allows is
answered at once with the upstream's 429 and Retry-After (Anthropic and OpenAI-compatible upstreams alike)."""

from __future__ import annotations

import openai
import pytest

from gateway.config.schema import Backoff, Route, RouteBackend
from gateway.routing.balancer import backoff_delay, waits_too_long


def client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="k", max_retries=0)


def policy(kind: str, url: str, fallback: str = "") -> str:
    base = url if kind == "anthropic" else url + "/v1"
    backup = f'\n  backup: {{type: {kind}, base_url: "{base}", api_key: k, model: backup-model}}' if fallback else ""
    return f"""
backends:
  up: {{type: {kind}, base_url: "{base}", api_key: k}}{backup}
routes:
  - match: {{model: "*"}}
    backends: [up]
    retries: 2
    backoff: {{base_s: 0.01, max_s: 2}}
    fallbacks: [{fallback}]
"""


@pytest.fixture(params=["anthropic", "openai"])
def upstream(request, fake_anthropic, fake_openai):
    return request.param, *(fake_anthropic if request.param == "anthropic" else fake_openai)


@pytest.mark.parametrize("stream", [False, True])
def test_a_longer_wait_than_the_route_allows_is_answered_at_once(upstream, serve_gateway, stream: bool) -> None:
    """The defect: `retry-after: 5` was retried after backoff.max_s (2 s), three calls in 4 s."""
    kind, fake, up = upstream
    srv = serve_gateway(policy(kind, up.url))
    fake.fail_next(3, status=429, retry_after=5)
    with pytest.raises(openai.RateLimitError) as e:
        reply = client(srv).chat.completions.create(model="claude-x", messages=[{"role": "user", "content": "hi"}],
                                                    stream=stream)
        list(reply) if stream else None
    assert e.value.status_code == 429 and e.value.response.headers["retry-after"] == "5"
    assert fake.request_count == 1


def test_a_fallback_still_answers_when_the_primary_asks_for_a_long_wait(upstream, serve_gateway) -> None:
    kind, fake, up = upstream
    srv = serve_gateway(policy(kind, up.url, fallback="backup"))
    fake.fail_next(1, status=429, retry_after=30)
    reply = client(srv).chat.completions.create(model="claude-x", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "echo: hi"
    assert [r.body["model"] for r in fake.requests] == ["claude-x", "backup-model"]


def test_a_short_retry_after_is_waited_out_then_retried(upstream, serve_gateway) -> None:
    kind, fake, up = upstream
    srv = serve_gateway(policy(kind, up.url))
    fake.fail_next(1, status=429, retry_after=1)
    reply = client(srv).chat.completions.create(model="claude-x", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "echo: hi" and fake.request_count == 2


def test_backoff_is_never_shorter_than_retry_after() -> None:
    route = Route("m", [RouteBackend("b")], retries=3, backoff=Backoff(base_s=0.1, max_s=2.0))
    assert all(backoff_delay(route, a, 1.5) >= 1.5 for a in range(4))
    assert all(backoff_delay(route, a, None) <= 2.0 for a in range(6))
    assert not waits_too_long(route, 2.0, 0.0) and waits_too_long(route, 2.5, 0.0)
    assert not waits_too_long(route, None, 0.0)
    assert waits_too_long(route, 1.0, route.timeouts.total - 0.5)  # less of the timeout left than asked
