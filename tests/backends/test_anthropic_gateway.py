"""The official openai SDK -> gateway -> the strict fake Messages API: what Anthropic would refuse is refused
first with a 400 naming the parameter, errors keep Anthropic's type, early stream errors are retried, extended
thinking round-trips with its signatures, and large non-streaming requests are streamed upstream."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest
from openai import OpenAI

from tests.backends.conftest import API_KEY
from tests.fakes.anthropic_server import sign

TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather by city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


def policy(url: str, section: str = "", retries: int = 0) -> str:
    return f"""
backends:
  claude: {{type: anthropic, base_url: "{url}", api_key: {API_KEY}, options: {{default_max_tokens: 4096}}}}
routes:
  - match: {{model: "claude-*"}}
    backends: [claude]
    retries: {retries}
    backoff: {{base_s: 0.01, max_s: 0.05}}
{section}
"""


@pytest.fixture
def upstream(anthropic_server, fake_anthropic):
    """(the fake, its server): the module's fake, reset, which wants API_KEY as x-api-key."""
    return fake_anthropic, anthropic_server[1]


def client(srv) -> OpenAI:
    return OpenAI(base_url=srv.url + "/v1", api_key="k", max_retries=0)


def post(url: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(url + "/v1/messages", json=body, headers=headers or {}, timeout=10)


# ---- the fake is strict where the docs are ------------------------------------------------------------


def test_the_fake_refuses_what_anthropic_refuses(upstream) -> None:
    fake, up = upstream
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    ok = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert post(up.url, ok, headers).status_code == 200
    assert post(up.url, ok, {"anthropic-version": "2023-06-01"}).status_code == 401
    assert post(up.url, ok, {"x-api-key": API_KEY}).status_code == 400
    user_tool = {"role": "user", "content": [{"type": "text", "text": "also"},
                                             {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}
    hour = {"type": "ephemeral", "ttl": "1h"}
    refused = {
        "missing max_tokens": {k: v for k, v in ok.items() if k != "max_tokens"},
        "empty messages": {**ok, "messages": []},
        "temperature > 1": {**ok, "temperature": 1.5},
        "temperature and top_p": {**ok, "temperature": 0.5, "top_p": 0.9},
        "large non-streaming": {**ok, "max_tokens": 50_000},
        "text before tool_result": {**ok, "messages": [ok["messages"][0], call, user_tool]},
        "unanswered tool_use": {**ok, "messages": [ok["messages"][0], call,
                                                   {"role": "user", "content": "never mind"}]},
        "1h after 5m": {**ok, "system": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                                         {"type": "text", "text": "b", "cache_control": hour}]},
        "five breakpoints": {**ok, "system": [{"type": "text", "text": str(i), "cache_control": hour}
                                              for i in range(5)]},
        "forged signature": {**ok, "messages": [ok["messages"][0], {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "forged"}, {"type": "text", "text": "yes"}]},
            {"role": "user", "content": "ok"}]},
        "thinking budget >= max_tokens": {**ok, "thinking": {"type": "enabled", "budget_tokens": 1024}},
    }
    for what, body in refused.items():
        answer = post(up.url, body, headers)
        assert answer.status_code == 400, what
        assert answer.json()["error"]["type"] == "invalid_request_error", what
    assert post(up.url, {**ok, "max_tokens": 50_000, "stream": True}, headers).status_code == 200
    merged = {**ok, "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    assert post(up.url, merged, headers).status_code == 200  # consecutive turns are merged, as the API does
    signed = {**ok, "messages": [ok["messages"][0], {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": sign("hmm")}, {"type": "text", "text": "yes"}]},
        {"role": "user", "content": "ok"}]}
    assert post(up.url, signed, headers).status_code == 200


# ---- validation before sending ------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "extra", "param"), [
    ("claude-sonnet-4-5", {"temperature": 1.5}, "temperature"),
    ("claude-sonnet-4-5", {"top_p": 1.2}, "top_p"),
    ("claude-sonnet-4-5", {"temperature": 0.5, "top_p": 0.9}, "top_p"),
    ("claude-opus-4-1-20250805", {"temperature": 0.2, "top_p": 0.5}, "top_p"),
    ("claude-sonnet-4-5", {"reasoning_effort": "high", "temperature": 0.3}, "temperature"),
    ("claude-sonnet-4-5", {"reasoning_effort": "turbo"}, "reasoning_effort"),
    ("claude-sonnet-4-5", {"reasoning_effort": "low", "max_tokens": 500}, "max_tokens"),
])
def test_what_anthropic_would_refuse_is_a_400_naming_the_parameter(upstream, serve_gateway, model: str,
                                                                    extra: dict, param: str) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    with pytest.raises(openai.BadRequestError) as e:
        client(srv).chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], **extra)
    assert e.value.body["param"] == param and e.value.body["type"] == "invalid_request_error"
    assert fake.request_count == 0
    fake.reset()
    body = {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **extra}
    if "reasoning_effort" not in extra:  # the fake (the real API's rules) refuses the same request
        assert post(up.url, body, {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}).status_code == 400


def test_temperature_and_top_p_together_still_work_on_older_models(upstream, serve_gateway) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    client(srv).chat.completions.create(model="claude-3-5-haiku-latest", temperature=0.5, top_p=0.9,
                                        messages=[{"role": "user", "content": "hi"}])
    assert fake.last.body["temperature"] == 0.5 and fake.last.body["top_p"] == 0.9


def test_only_system_messages_is_a_400_naming_messages(upstream, serve_gateway) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    for messages in ([{"role": "system", "content": "be brief"}],
                     [{"role": "system", "content": "be brief"}, {"role": "user", "content": ""}]):
        with pytest.raises(openai.BadRequestError) as e:
            client(srv).chat.completions.create(model="claude-sonnet-4-5", messages=messages)
        assert e.value.body["param"] == "messages"
    assert fake.request_count == 0


# ---- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_overloaded_529_reaches_the_client_as_such(upstream, serve_gateway, stream: bool) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    fake.fail_next(1, status=529)
    with pytest.raises(openai.InternalServerError) as e:
        reply = client(srv).chat.completions.create(model="claude-sonnet-4-5", stream=stream,
                                                    messages=[{"role": "user", "content": "hi"}])
        list(reply) if stream else None
    assert e.value.status_code == 529 and e.value.body["type"] == "overloaded_error"


def test_error_event_before_any_content_is_retried(upstream, serve_gateway) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url, retries=1))
    fake.stream_error_after, fake.stream_error_times = 2, 1  # message_start, ping, then overloaded_error
    chunks = list(client(srv).chat.completions.create(model="claude-sonnet-4-5", stream=True,
                                                      messages=[{"role": "user", "content": "hi there"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: hi there"
    assert fake.request_count == 2  # the first stream ended in the error event, the retry answered


def test_error_event_after_content_is_reported_in_band(upstream, serve_gateway) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url, retries=1))
    fake.stream_error_after = 4  # message_start, ping, block start, first delta
    with pytest.raises(openai.APIError):
        list(client(srv).chat.completions.create(model="claude-sonnet-4-5", stream=True,
                                                 messages=[{"role": "user", "content": "hi there"}]))
    assert fake.request_count == 1


# ---- output limits ------------------------------------------------------------------------------------


def test_large_non_streaming_max_tokens_is_streamed_upstream(upstream, serve_gateway) -> None:
    """Anthropic (and its SDKs) refuse a non-streaming request that may run past 10 minutes; the gateway
    streams it and answers the client with one chat.completion."""
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    reply = client(srv).chat.completions.create(model="claude-sonnet-4-5", max_tokens=50_000, tools=TOOLS,
                                                messages=[{"role": "user", "content": "weather in Oslo"}])
    assert fake.last.body["stream"] is True and fake.last.body["max_tokens"] == 50_000
    call = reply.choices[0].message.tool_calls[0]
    assert orjson.loads(call.function.arguments) == {"text": "weather in Oslo"}
    assert reply.choices[0].finish_reason == "tool_calls" and reply.usage.completion_tokens > 0
    small = client(srv).chat.completions.create(model="claude-sonnet-4-5", max_tokens=1000,
                                                messages=[{"role": "user", "content": "hi"}])
    assert "stream" not in fake.last.body and small.choices[0].message.content == "echo: hi"


@pytest.mark.parametrize("section", ["", "    ordering: {enabled: true, cache_breakpoints: true}",
                                     "    budget: {strategy: balanced}"])
def test_default_max_tokens_is_what_goes_upstream_on_every_path(upstream, serve_gateway, section) -> None:
    """The defect: with ordering on, claude-sonnet-4-0 went upstream with max_tokens 50000 (a quarter of its
    window), not streamed; the strict fake refuses that like the SDKs do."""
    fake, up = upstream
    srv = serve_gateway(policy(up.url, section))
    reply = client(srv).chat.completions.create(model="claude-sonnet-4-0",
                                                messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "echo: hi"
    assert fake.last.body["max_tokens"] == 4096 and "stream" not in fake.last.body
    client(srv).chat.completions.create(model="claude-sonnet-4-0", max_tokens=300,
                                        messages=[{"role": "user", "content": "hi"}])
    assert fake.last.body["max_tokens"] == 300


# ---- extended thinking --------------------------------------------------------------------------------


def extra(message, name: str):
    return (message.model_extra or {}).get(name)


@pytest.mark.parametrize(("effort", "budget"), [("low", 1024), ("medium", 2048), ("high", 4096)])
def test_reasoning_effort_becomes_a_thinking_budget(upstream, serve_gateway, effort: str, budget: int) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    reply = client(srv).chat.completions.create(model="claude-sonnet-4-5", reasoning_effort=effort,
                                                messages=[{"role": "user", "content": "why is the sky blue"}])
    sent = fake.last.body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert sent["max_tokens"] == 4096 + budget  # thinking counts toward max_tokens: the answer keeps its 4096
    message = reply.choices[0].message
    assert message.content == "echo: why is the sky blue"
    assert extra(message, "reasoning_content") == "Thinking about: why is the sky blue"
    assert extra(message, "thinking_blocks") == [{"type": "thinking", "thinking": "Thinking about: why is the sky "
                                                  "blue", "signature": sign("Thinking about: why is the sky blue")}]


def test_thinking_extension_is_passed_on_and_capped_by_the_clients_limit(upstream, serve_gateway) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    api = client(srv)
    api.chat.completions.create(model="claude-sonnet-4-5", max_tokens=3000, messages=[{"role": "user", "content": "q"}],
                                extra_body={"thinking": {"type": "enabled", "budget_tokens": 2000}})
    assert fake.last.body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert fake.last.body["max_tokens"] == 3000
    api.chat.completions.create(model="claude-sonnet-4-5", max_tokens=3000, reasoning_effort="high",
                                messages=[{"role": "user", "content": "q"}])
    assert fake.last.body["thinking"] == {"type": "enabled", "budget_tokens": 2999}  # fitted under max_tokens
    api.chat.completions.create(model="claude-sonnet-4-5", reasoning_effort="none",
                                messages=[{"role": "user", "content": "q"}])
    assert "thinking" not in fake.last.body


def test_thinking_streams_as_reasoning_content_with_its_signed_block(upstream, serve_gateway) -> None:
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    chunks = list(client(srv).chat.completions.create(
        model="claude-sonnet-4-5", reasoning_effort="low", stream=True,
        messages=[{"role": "user", "content": "count the stars"}]))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(extra(d, "reasoning_content") or "" for d in deltas) == "Thinking about: count the stars"
    blocks = [b for d in deltas for b in extra(d, "thinking_blocks") or []]
    assert blocks == [{"type": "thinking", "thinking": "Thinking about: count the stars",
                       "signature": sign("Thinking about: count the stars")}]
    assert "".join(d.content or "" for d in deltas) == "echo: count the stars"
    first_reasoning = next(i for i, d in enumerate(deltas) if extra(d, "reasoning_content"))
    assert first_reasoning < next(i for i, d in enumerate(deltas) if d.content)


@pytest.mark.parametrize("stream", [False, True])
def test_a_thinking_tool_loop_round_trips_its_signatures(upstream, serve_gateway, stream: bool) -> None:
    """The client sends the assistant turn back as it got it (thinking_blocks included); Anthropic needs the
    signed thinking block first in that turn, unchanged, or it refuses the tool result."""
    fake, up = upstream
    srv = serve_gateway(policy(up.url))
    api = client(srv)
    messages: list[dict] = [{"role": "user", "content": "weather in Paris"}]
    if stream:
        chunks = list(api.chat.completions.create(model="claude-sonnet-4-5", reasoning_effort="low", tools=TOOLS,
                                                  stream=True, messages=messages))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        calls = [tc for d in deltas for tc in d.tool_calls or []]
        assistant = {"role": "assistant", "content": None,
                     "thinking_blocks": [b for d in deltas for b in extra(d, "thinking_blocks") or []],
                     "tool_calls": [{"id": calls[0].id, "type": "function", "function": {
                         "name": calls[0].function.name,
                         "arguments": "".join(tc.function.arguments or "" for tc in calls)}}]}
    else:
        first = api.chat.completions.create(model="claude-sonnet-4-5", reasoning_effort="low", tools=TOOLS,
                                            messages=messages)
        assistant = first.choices[0].message.model_dump(exclude_none=True)
    call_id = assistant["tool_calls"][0]["id"]
    messages += [assistant, {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21C"}]
    second = api.chat.completions.create(model="claude-sonnet-4-5", reasoning_effort="low", tools=TOOLS,
                                         messages=messages)
    assert second.choices[0].message.content == "tool said: sunny, 21C"
    turn = fake.last.body["messages"][1]["content"]
    assert turn[0]["type"] == "thinking" and turn[0]["signature"] == sign(turn[0]["thinking"])
    assert turn[1]["type"] == "tool_use" and turn[1]["id"] == call_id
    # Without the thinking blocks the same conversation is refused upstream (and the client hears why).
    bare = {k: v for k, v in assistant.items() if k not in ("thinking_blocks", "reasoning_content")}
    with pytest.raises(openai.BadRequestError) as e:
        api.chat.completions.create(model="claude-sonnet-4-5", reasoning_effort="low", tools=TOOLS,
                                    messages=[messages[0], bare, messages[2]])
    assert "thinking" in e.value.body["message"]
