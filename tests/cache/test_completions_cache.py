"""Legacy /v1/completions through the stages: the exact cache answers a repeat (`X-Cache: HIT-EXACT`), streamed
and not, replaying `text_completion` chunks; through the openai SDK against a fake OpenAI upstream on a real Redis.
The route also has a context budget: that stage reads `messages`, so it must not run for a legacy `prompt`."""

from __future__ import annotations

import contextlib

import openai
import pytest

from tests.cache.gateway_helpers import client

POLICY = """
backends:
  up: {{type: openai, base_url: "{url}/v1", api_key: sk-up}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
    cache: {{exact: {{ttl: 60}}}}
    budget: {{context_window: 4096, max_output_tokens: 256}}
"""


@pytest.fixture
def gw(fake_openai, serve_gateway):
    fake, up = fake_openai
    return fake, serve_gateway(POLICY.format(url=up.url))


def complete(srv, prompt: str, **kw):
    raw = client(srv).completions.with_raw_response.create(model="fake-model", prompt=prompt, temperature=0, **kw)
    return raw.parse(), raw.headers


def stream(srv, prompt: str, **kw):
    with client(srv).completions.with_streaming_response.create(
            model="fake-model", prompt=prompt, temperature=0, stream=True, **kw) as raw:
        return list(raw.parse()), raw.headers


def test_repeat_is_an_exact_hit_not_streamed(gw) -> None:
    fake, srv = gw
    first, h1 = complete(srv, "legacy prompt")
    second, h2 = complete(srv, "legacy prompt")
    assert (h1["x-cache"], h2["x-cache"], h2["x-backend"]) == ("MISS", "HIT-EXACT", "cache")
    assert fake.request_count == 1
    assert second.object == "text_completion"
    assert second.choices[0].text == first.choices[0].text == "echo: legacy prompt"
    assert second.choices[0].finish_reason == first.choices[0].finish_reason == "stop"
    assert second.usage == first.usage
    assert second.id == f"cmpl-{h2['x-request-id']}" != first.id
    assert complete(srv, "legacy prompt", max_tokens=2)[1]["x-cache"] == "MISS"  # max_tokens is in the key
    assert fake.request_count == 2


def test_repeat_is_an_exact_hit_streamed(gw) -> None:
    fake, srv = gw
    live, h1 = stream(srv, "one two three four")
    replay, h2 = stream(srv, "one two three four", stream_options={"include_usage": True})
    assert (h1["x-cache"], h2["x-cache"]) == ("MISS", "HIT-EXACT")
    assert fake.request_count == 1
    text = "".join(c.choices[0].text for c in live if c.choices)
    assert text == "".join(c.choices[0].text for c in replay if c.choices) == "echo: one two three four"
    assert all(c.object == "text_completion" for c in replay)
    finishes = [c.choices[0].finish_reason for c in replay if c.choices]
    assert finishes[-1] == "stop" and not any(finishes[:-1])
    assert replay[-1].choices == [] and replay[-1].usage is not None and replay[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in live)  # the client did not ask for usage: the gateway's ask is hidden


def test_streamed_answer_serves_a_non_streamed_repeat_and_back(gw) -> None:
    fake, srv = gw
    live, _ = stream(srv, "shared entry")
    whole, headers = complete(srv, "shared entry")
    assert headers["x-cache"] == "HIT-EXACT"
    assert whole.choices[0].text == "".join(c.choices[0].text for c in live if c.choices)
    assert whole.usage is not None and whole.usage.completion_tokens > 0  # the gateway asked for usage upstream
    complete(srv, "other entry")
    replay, h = stream(srv, "other entry")
    assert h["x-cache"] == "HIT-EXACT"
    assert "".join(c.choices[0].text for c in replay if c.choices) == "echo: other entry"
    assert fake.request_count == 2


def test_cut_stream_is_not_stored(gw) -> None:
    fake, srv = gw
    fake.cut_after = 2  # the upstream drops the connection mid-stream
    with contextlib.suppress(openai.APIError):  # the gateway ends the client's stream with an in-band error
        stream(srv, "cut me short")
    fake.cut_after = None
    assert complete(srv, "cut me short")[1]["x-cache"] == "MISS"
