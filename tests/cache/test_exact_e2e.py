"""L1 through the gateway with the openai SDK against a fake OpenAI upstream, on a real Redis."""

from __future__ import annotations

import time

import httpx
import openai
import orjson
import pytest
import redis

from tests.cache.gateway_helpers import ask, client, policy, user


@pytest.fixture
def gw(fake_openai, serve_gateway):
    fake, up = fake_openai
    return fake, serve_gateway(policy(up.url, cache="{exact: {ttl: 60}}"))


def test_second_identical_request_is_an_exact_hit(gw) -> None:
    fake, srv = gw
    first, h1 = ask(srv, "hello cache")
    second, h2 = ask(srv, "hello cache")
    assert (h1["x-cache"], h2["x-cache"]) == ("MISS", "HIT-EXACT")
    assert h2["x-backend"] == "cache"
    assert fake.request_count == 1
    assert second.choices[0].message.content == first.choices[0].message.content == "echo: hello cache"
    assert second.usage == first.usage
    assert second.id != first.id and second.id == f"chatcmpl-{h2['x-request-id']}"


def test_key_fields_through_the_gateway(gw) -> None:
    fake, srv = gw
    ask(srv, "fields")
    assert ask(srv, "fields", user="someone-else")[1]["x-cache"] == "HIT-EXACT"  # `user` is not in the key
    assert ask(srv, "fields", max_tokens=3)[1]["x-cache"] == "MISS"
    assert ask(srv, "fields", seed=5)[1]["x-cache"] == "MISS"
    assert ask(srv, "fields", model="fake-model-2")[1]["x-cache"] == "MISS"
    assert ask(srv, [{"role": "system", "content": "be brief"}, *user("fields")])[1]["x-cache"] == "MISS"
    assert fake.request_count == 5


def test_sampled_requests_are_not_stored_by_default(gw) -> None:
    fake, srv = gw
    ask(srv, "roll the dice", temperature=0.8)
    assert ask(srv, "roll the dice", temperature=0.8)[1]["x-cache"] == "MISS"
    ask(srv, "roll the dice", temperature=0.8, seed=3)  # a seed makes it reproducible: stored
    assert ask(srv, "roll the dice", temperature=0.8, seed=3)[1]["x-cache"] == "HIT-EXACT"
    assert fake.request_count == 3


def test_stream_then_non_stream_replays_the_same_answer(gw) -> None:
    fake, srv = gw
    c = client(srv)
    chunks = list(c.chat.completions.create(model="fake-model", messages=user("one two three four"),
                                            temperature=0, stream=True))
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    raw = c.chat.completions.with_raw_response.create(model="fake-model", messages=user("one two three four"),
                                                      temperature=0)
    replayed = raw.parse()
    assert raw.headers["x-cache"] == "HIT-EXACT"
    assert replayed.choices[0].message.content == streamed == "echo: one two three four"
    assert replayed.choices[0].finish_reason == chunks[-1].choices[0].finish_reason == "stop"
    assert replayed.usage is not None and replayed.usage.completion_tokens > 0  # the gateway asked for usage
    assert fake.request_count == 1


def test_non_stream_then_stream_replays_well_formed_chunks(gw) -> None:
    fake, srv = gw
    first, _ = ask(srv, "alpha beta gamma")
    c = client(srv)
    raw = c.chat.completions.with_raw_response.create(
        model="fake-model", messages=user("alpha beta gamma"), temperature=0, stream=True,
        stream_options={"include_usage": True})
    assert raw.headers["x-cache"] == "HIT-EXACT"
    chunks = list(raw.parse())
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == first.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage == first.usage  # include_usage honoured
    plain = list(c.chat.completions.create(model="fake-model", messages=user("alpha beta gamma"),
                                           temperature=0, stream=True))
    assert all(ch.usage is None for ch in plain)
    assert fake.request_count == 1


def test_tool_calls_are_replayed(gw) -> None:
    fake, srv = gw
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    c = client(srv)
    streamed = list(c.chat.completions.create(model="fake-model", messages=user("find it"), tools=tools,
                                              temperature=0, stream=True))
    assert [ch.choices[0].finish_reason for ch in streamed if ch.choices][-1] == "tool_calls"
    raw = c.chat.completions.with_raw_response.create(model="fake-model", messages=user("find it"),
                                                      tools=tools, temperature=0)
    hit = raw.parse()
    assert raw.headers["x-cache"] == "HIT-EXACT"
    call = hit.choices[0].message.tool_calls[0]
    streamed_args = "".join(tc.function.arguments or "" for ch in streamed if ch.choices
                            for tc in (ch.choices[0].delta.tool_calls or ()))
    assert call.function.name == "lookup" and call.function.arguments == streamed_args
    assert orjson.loads(call.function.arguments) == {"text": "find it"}
    assert fake.request_count == 1


def test_errors_are_never_stored(gw) -> None:
    fake, srv = gw
    fake.fail_next(1, status=500)
    with pytest.raises(openai.InternalServerError):
        ask(srv, "flaky")
    assert ask(srv, "flaky")[1]["x-cache"] == "MISS"
    assert ask(srv, "flaky")[1]["x-cache"] == "HIT-EXACT"


@pytest.mark.parametrize("knob", ["cut_after", "stream_error_after"])
def test_a_stream_that_did_not_finish_is_never_stored(gw, knob: str) -> None:
    fake, srv = gw
    setattr(fake, knob, 2)
    body = {"model": "fake-model", "messages": user("a b c d e f g h"), "temperature": 0, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": "Bearer key-a"}) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert r.status_code == 200 and events and events[-1] != "data: [DONE]"  # the client saw the stream end without its terminal event
    assert '"error"' in events[-1]  # ... and was told why, in-band
    setattr(fake, knob, None)
    assert ask(srv, "a b c d e f g h")[1]["x-cache"] == "MISS"


def test_ttl_is_absolute_and_hits_never_extend_it(fake_openai, serve_gateway, redis_url) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, cache="{exact: {ttl: 1.5}}"))
    ask(srv, "short lived")
    r = redis.Redis.from_url(redis_url)
    (key,) = [k for k in r.scan_iter("llmgw:cache:*:x:*")]
    before = r.pttl(key)
    for _ in range(3):
        assert ask(srv, "short lived")[1]["x-cache"] == "HIT-EXACT"
    assert 0 < r.pttl(key) <= before
    time.sleep(max(0.0, r.pttl(key) / 1000) + 0.1)
    assert ask(srv, "short lived")[1]["x-cache"] == "MISS"
    r.close()


def test_max_age_accepts_only_younger_entries(gw) -> None:
    fake, srv = gw
    ask(srv, "how old")
    time.sleep(0.2)
    assert ask(srv, "how old", headers={"Cache-Control": "max-age=0"})[1]["x-cache"] == "MISS"
    assert ask(srv, "how old", headers={"Cache-Control": "max-age=3600"})[1]["x-cache"] == "HIT-EXACT"
    assert fake.request_count == 2


def test_no_cache_skips_the_lookup_but_stores(gw) -> None:
    fake, srv = gw
    ask(srv, "fresh please")
    assert ask(srv, "fresh please", headers={"Cache-Control": "no-cache"})[1]["x-cache"] == "BYPASS"
    assert fake.request_count == 2
    fake.reply = "a newer answer"
    ask(srv, "refresh me", headers={"Cache-Control": "no-cache"})
    fake.reply = None
    completion, headers = ask(srv, "refresh me")
    assert headers["x-cache"] == "HIT-EXACT" and completion.choices[0].message.content == "a newer answer"


def test_no_store_may_be_served_but_never_stores(gw) -> None:
    fake, srv = gw
    assert ask(srv, "private", headers={"Cache-Control": "no-store"})[1]["x-cache"] == "MISS"
    assert ask(srv, "private")[1]["x-cache"] == "MISS"  # the no-store answer was not kept
    assert ask(srv, "private", headers={"Cache-Control": "no-store"})[1]["x-cache"] == "HIT-EXACT"


def test_two_tenants_never_share_an_exact_entry(gw) -> None:
    fake, srv = gw
    a, _ = ask(srv, "identical prompt", key="key-a")
    b, hb = ask(srv, "identical prompt", key="key-b")
    assert hb["x-cache"] == "MISS" and fake.request_count == 2
    assert ask(srv, "identical prompt", key="key-b")[1]["x-cache"] == "HIT-EXACT"


def test_route_without_cache_is_bypassed(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, cache="false"))
    ask(srv, "no cache here")
    assert ask(srv, "no cache here")[1]["x-cache"] == "BYPASS"
    assert fake.request_count == 2


def test_metrics_count_lookups_and_saved_tokens(gw) -> None:
    import httpx

    fake, srv = gw
    ask(srv, "count me")
    ask(srv, "count me")
    text = httpx.get(srv.url + "/metrics").text
    assert 'gateway_cache_lookups_total{layer="exact",result="hit"} 1.0' in text
    assert 'gateway_cache_lookups_total{layer="exact",result="miss"} 1.0' in text
    assert 'gateway_tokens_total{kind="saved_by_cache"}' in text
    assert 'gateway_cache_lookup_seconds_count{layer="exact"} 2.0' in text
