"""AnthropicBackend against the fake Messages API: translation on the wire, caching, errors, disconnects."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.backends.anthropic import AnthropicBackend
from gateway.backends.base import BackendError, Timeouts
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from tests.backends.conftest import API_KEY
from tests.backends.raw_upstream import start_raw_sse
from tests.fakes.anthropic_server import FakeAnthropic
from tests.helpers import ServerThread, free_port

T = Timeouts(connect=2.0, first_byte=5.0, total=10.0)
EPHEMERAL = {"type": "ephemeral"}
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather by city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


def chat(text: str = "hello there", **extra: object) -> dict:
    return {"model": "claude-fake-1", "messages": [{"role": "user", "content": text}], **extra}


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def collect(stream) -> list[dict]:
    return [chunk async for chunk in stream]


def content_of(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


async def test_chat_headers_and_body(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic) -> None:
    body = {"model": "claude-fake-1", "max_tokens": 100, "temperature": 0.5, "stop": ["zzz"],
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]}
    answer = await anthropic_backend.chat(body, T)
    assert answer["object"] == "chat.completion" and answer["model"] == "claude-fake-1"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "echo: hello there", "refusal": None}
    assert answer["choices"][0]["finish_reason"] == "stop"
    sent = fake_anthropic.last
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == API_KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in sent.headers
    assert sent.body == {"model": "claude-fake-1", "max_tokens": 100, "system": "be brief", "temperature": 0.5,
                         "stop_sequences": ["zzz"], "messages": [{"role": "user", "content": "hello there"}]}


async def test_config_options(anthropic_server: tuple[FakeAnthropic, ServerThread], fake_anthropic: FakeAnthropic,
                              metrics: Metrics) -> None:
    config = BackendConfig(name="c2", type="anthropic", base_url=anthropic_server[1].url + "/v1", api_key=API_KEY,
                           model="claude-fake-2", headers={"X-Team": "a"},
                           options={"anthropic_version": "2024-01-01", "anthropic_beta": "prompt-caching-2024-07-31",
                                    "default_max_tokens": 77})
    backend = AnthropicBackend(config, metrics)
    try:
        await backend.chat(chat(), T)
    finally:
        await backend.close()
    sent = fake_anthropic.last
    assert sent.path == "/v1/messages"  # base_url given with /v1 works too
    assert sent.headers["anthropic-version"] == "2024-01-01"
    assert sent.headers["anthropic-beta"] == "prompt-caching-2024-07-31" and sent.headers["X-Team"] == "a"
    assert sent.body["model"] == "claude-fake-2" and sent.body["max_tokens"] == 77


@pytest.mark.parametrize(("extra", "finish", "content"), [
    ({"max_tokens": 2}, "length", "echo: hello "),
    ({"stop": "there"}, "stop", "echo: hello "),
    ({}, "stop", "echo: hello there"),
])
async def test_stop_reasons_from_upstream(anthropic_backend: AnthropicBackend, extra: dict, finish: str,
                                          content: str) -> None:
    answer = await anthropic_backend.chat(chat(**extra), T)
    assert answer["choices"][0]["finish_reason"] == finish
    assert answer["choices"][0]["message"]["content"] == content
    chunks = await collect(anthropic_backend.chat_stream(chat(**extra), T))
    assert content_of(chunks) == content
    assert chunks[-1]["choices"][0]["finish_reason"] == finish


async def test_stream_with_usage(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic) -> None:
    chunks = await collect(anthropic_backend.chat_stream(chat(stream_options={"include_usage": True}), T))
    assert fake_anthropic.last.body["stream"] is True and "stream_options" not in fake_anthropic.last.body
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert content_of(chunks) == "echo: hello there"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + 3


async def test_tool_round_trip(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic) -> None:
    first = await anthropic_backend.chat(chat("weather in Paris", tools=TOOLS, tool_choice="required"), T)
    message = first["choices"][0]["message"]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    call = message["tool_calls"][0]
    assert call["function"]["name"] == "weather"
    assert orjson.loads(call["function"]["arguments"]) == {"text": "weather in Paris"}
    assert fake_anthropic.last.body["tool_choice"] == {"type": "any"}
    assert fake_anthropic.last.body["tools"][0]["input_schema"]["properties"] == {"city": {"type": "string"}}
    # the client sends the assistant turn back with the tool result; the fake checks the ids pair up
    follow_up = {"model": "claude-fake-1", "tools": TOOLS, "messages": [
        {"role": "user", "content": "weather in Paris"}, message,
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21C"}]}
    second = await anthropic_backend.chat(follow_up, T)
    assert second["choices"][0]["message"]["content"] == "tool said: sunny, 21C"
    sent = fake_anthropic.last.body["messages"]
    assert sent[1]["content"][0]["type"] == "tool_use" and sent[1]["content"][0]["id"] == call["id"]
    assert sent[2] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                                    "content": "sunny, 21C"}]}


async def test_stream_tool_call_deltas(anthropic_backend: AnthropicBackend) -> None:
    chunks = await collect(anthropic_backend.chat_stream(chat("weather in Rome", tools=TOOLS), T))
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
             if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert calls[0]["id"].startswith("toolu_") and calls[0]["function"] == {"name": "weather", "arguments": ""}
    assert all(c["index"] == 0 for c in calls)
    assert orjson.loads("".join(c["function"]["arguments"] for c in calls)) == {"text": "weather in Rome"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_images_reach_the_upstream(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic) -> None:
    body = {"model": "claude-fake-1", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}]}]}
    answer = await anthropic_backend.chat(body, T)
    assert answer["choices"][0]["message"]["content"] == "echo: describe"
    assert fake_anthropic.last.body["messages"][0]["content"][1] == {
        "type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}


async def test_cache_control_breakpoints_and_cached_tokens(anthropic_backend: AnthropicBackend,
                                                           fake_anthropic: FakeAnthropic) -> None:
    system = "You follow these rules. " * 40
    tools = [{**TOOLS[0], "cache_control": EPHEMERAL}]

    def body(question: str) -> dict:
        return {"model": "claude-fake-1", "tools": tools, "messages": [
            {"role": "system", "content": [{"type": "text", "text": system, "cache_control": EPHEMERAL}]},
            {"role": "user", "content": question}]}

    first = await anthropic_backend.chat(body("first question"), T)
    sent = fake_anthropic.last.body
    assert sent["system"] == [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    assert sent["tools"][0]["cache_control"] == EPHEMERAL
    details = first["usage"]["prompt_tokens_details"]
    assert details["cached_tokens"] == 0 and details["cache_write_tokens"] > 0
    second = await anthropic_backend.chat(body("second question"), T)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == details["cache_write_tokens"]
    assert second["usage"]["prompt_tokens"] > second["usage"]["prompt_tokens_details"]["cached_tokens"]
    chunks = await collect(anthropic_backend.chat_stream({**body("third"), "stream_options": {"include_usage": True}},
                                                         T))
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == details["cache_write_tokens"]


async def test_too_many_breakpoints_is_refused_before_sending(anthropic_backend: AnthropicBackend,
                                                              fake_anthropic: FakeAnthropic) -> None:
    parts = [{"type": "text", "text": f"part {i}", "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(BackendError) as e:
        await anthropic_backend.chat({"model": "claude-fake-1", "messages": [{"role": "user", "content": parts}]}, T)
    assert e.value.status == 400 and "at most 4" in e.value.body["error"]["message"]
    assert fake_anthropic.request_count == 0


# ---- errors --------------------------------------------------------------------------------------------


async def test_error_body_mapped_to_envelope(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic,
                                             metrics: Metrics) -> None:
    fake_anthropic.fail_next(1, 400, body={"type": "error", "error": {"type": "invalid_request_error",
                                                                      "message": "messages: roles must alternate"}})
    with pytest.raises(BackendError) as e:
        await anthropic_backend.chat(chat(), T)
    assert (e.value.status, e.value.retryable) == (400, False)
    assert e.value.body == {"error": {"message": "messages: roles must alternate", "type": "invalid_request_error",
                                      "param": None, "code": None}}
    assert e.value.to_gateway_error().message == "messages: roles must alternate"
    # the client's own mistake: not counted as an upstream error
    assert value(metrics, "gateway_upstream_errors_total", backend="claude", reason="status_4xx") == 0


async def test_wrong_key(anthropic_server: tuple[FakeAnthropic, ServerThread], fake_anthropic: FakeAnthropic,
                         metrics: Metrics) -> None:
    backend = AnthropicBackend(BackendConfig(name="bad", type="anthropic", base_url=anthropic_server[1].url,
                                             api_key="wrong"), metrics)
    try:
        with pytest.raises(BackendError) as e:
            await backend.chat(chat(), T)
        assert e.value.status == 401 and e.value.body["error"]["type"] == "authentication_error"
        assert "credentials" in (await backend.check_ready() or "")
    finally:
        await backend.close()


@pytest.mark.parametrize(("status", "out", "reason"), [(429, 429, "status_429"), (529, 529, "status_5xx"),
                                                       (500, 500, "status_5xx")])
async def test_retryable_statuses(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic,
                                  status: int, out: int, reason: str) -> None:
    fake_anthropic.fail_next(1, status, retry_after=3)
    with pytest.raises(BackendError) as e:
        await collect(anthropic_backend.chat_stream(chat(), T))
    assert (e.value.status, e.value.reason, e.value.retryable, e.value.retry_after) == (out, reason, True, 3.0)


async def test_stream_error_event_mid_stream(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic,
                                             metrics: Metrics) -> None:
    fake_anthropic.stream_error_after = 4  # message_start, ping, block start, first delta
    got: list[dict] = []
    with pytest.raises(BackendError) as e:
        async for chunk in anthropic_backend.chat_stream(chat(), T):
            got.append(chunk)
    assert content_of(got) == "echo: "
    assert (e.value.status, e.value.retryable) == (529, False) and "Overloaded" in e.value.message
    assert e.value.to_gateway_error().type == "overloaded_error"
    assert value(metrics, "gateway_upstream_errors_total", backend="claude", reason="status_5xx") == 1


@pytest.mark.parametrize("after", [1, 2, 3])  # after message_start, ping, an empty text block's start
async def test_stream_error_event_before_content_is_retryable(anthropic_backend: AnthropicBackend,
                                                              fake_anthropic: FakeAnthropic, after: int) -> None:
    """No chunk has gone out yet, so the router may retry it like an error status (it used to send the role
    chunk at message_start, which made the error final)."""
    fake_anthropic.stream_error_after = after
    got: list[dict] = []
    with pytest.raises(BackendError) as e:
        async for chunk in anthropic_backend.chat_stream(chat(), T):
            got.append(chunk)
    assert got == [] and (e.value.status, e.value.retryable) == (529, True)


async def test_cut_stream(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.cut_after = 4
    with pytest.raises(BackendError) as e:
        await collect(anthropic_backend.chat_stream(chat(), T))
    assert (e.value.reason, e.value.retryable) == ("protocol", False)


async def test_timeouts(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.delay_headers = 2.0
    with pytest.raises(BackendError) as e:
        await anthropic_backend.chat(chat(), Timeouts(connect=2, first_byte=0.2, total=20))
    assert (e.value.reason, e.value.status, e.value.retryable) == ("timeout", 504, True)
    fake_anthropic.delay_headers = 0.0
    fake_anthropic.delay_per_chunk = 2.0
    with pytest.raises(BackendError) as e:
        await collect(anthropic_backend.chat_stream(chat(), Timeouts(connect=2, first_byte=0.2, total=20)))
    assert (e.value.reason, e.value.retryable) == ("timeout", True)


async def test_connect_refused(metrics: Metrics) -> None:
    backend = AnthropicBackend(BackendConfig(name="gone", type="anthropic",
                                             base_url=f"http://127.0.0.1:{free_port()}"), metrics)
    try:
        with pytest.raises(BackendError) as e:
            await backend.chat(chat(), T)
        assert (e.value.reason, e.value.retryable) == ("connect", True)
        assert await backend.check_ready() is not None
    finally:
        await backend.close()


async def test_untranslatable_request_is_400_without_upstream_call(anthropic_backend: AnthropicBackend,
                                                                   fake_anthropic: FakeAnthropic) -> None:
    with pytest.raises(BackendError) as e:
        await anthropic_backend.chat(chat(n=3), T)
    err = e.value.to_gateway_error()
    assert (err.status, err.type, err.param) == (400, "invalid_request_error", "n")
    with pytest.raises(BackendError):
        await collect(anthropic_backend.chat_stream(chat(n=3), T))
    assert fake_anthropic.request_count == 0


async def test_completions_and_embeddings_unsupported(anthropic_backend: AnthropicBackend,
                                                      fake_anthropic: FakeAnthropic) -> None:
    for call in (anthropic_backend.completions({"model": "m", "prompt": "x"}, T),
                 anthropic_backend.embeddings({"model": "m", "input": "x"}, T),
                 collect(anthropic_backend.completions_stream({"model": "m", "prompt": "x"}, T))):
        with pytest.raises(BackendError) as e:
            await call
        err = e.value.to_gateway_error()
        assert err.status == 400 and "not supported by this backend" in err.message
    assert fake_anthropic.request_count == 0


async def test_models_and_ready(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic) -> None:
    assert await anthropic_backend.list_models() == ["claude-fake-1", "claude-fake-2"]
    assert await anthropic_backend.check_ready() is None
    assert fake_anthropic.last.path == "/v1/models"


async def test_aclose_closes_upstream(anthropic_backend: AnthropicBackend, fake_anthropic: FakeAnthropic,
                                      metrics: Metrics) -> None:
    fake_anthropic.delay_per_chunk = 0.2
    stream = anthropic_backend.chat_stream(chat("a b c d e f"), T)
    await anext(stream)
    await stream.aclose()
    assert await asyncio.to_thread(fake_anthropic.disconnected.wait, 5)
    assert value(metrics, "gateway_backend_inflight", backend="claude") == 0


@pytest.mark.parametrize("bad", [
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":"zero","delta":{}}\n\n',
    b"event: message_start\ndata: [1, 2]\n\n",
    b"event: message_start\ndata: {not json\n\n",
])
async def test_malformed_stream_event_is_protocol_error(metrics: Metrics, bad: bytes) -> None:
    start = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","model":"c",'
             b'"usage":{"input_tokens":1}}}\n\n')
    server, url = await start_raw_sse(start + bad)
    backend = AnthropicBackend(BackendConfig(name="raw", type="anthropic", base_url=url), metrics)
    try:
        with pytest.raises(BackendError) as e:
            await collect(backend.chat_stream(chat(), T))
        # Nothing went out before the bad event (the role chunk waits for content): a retry is still safe.
        assert (e.value.reason, e.value.status, e.value.retryable) == ("protocol", 502, True)
        assert value(metrics, "gateway_upstream_errors_total", backend="raw", reason="protocol") == 1
    finally:
        await backend.close()
        server.close()
        await server.wait_closed()
