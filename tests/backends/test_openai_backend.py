"""OpenAIBackend against the fake OpenAI server: forwarding, streaming, errors, timeouts, disconnects."""

from __future__ import annotations

import asyncio
import contextlib

import orjson
import pytest

from gateway.backends.base import BackendError, Timeouts
from gateway.backends.openai import OpenAIBackend
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from tests.backends.conftest import API_KEY
from tests.backends.raw_upstream import start_raw_sse
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread, free_port

T = Timeouts(connect=2.0, first_byte=5.0, total=10.0)
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello there"}]}


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def collect(stream) -> list[dict]:
    return [chunk async for chunk in stream]


async def test_chat_forwards_body_and_headers(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    body = {**CHAT, "temperature": 0, "x_unknown_field": {"kept": True}, "stream": False}
    answer = await openai_backend.chat(body, T)
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"] == "echo: hello there"
    assert answer["usage"]["completion_tokens"] == 3
    sent = fake_openai.last
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["Authorization"] == f"Bearer {API_KEY}"
    assert sent.headers["X-Extra"] == "yes"
    assert sent.body == {"model": "gpt-test", "messages": CHAT["messages"], "temperature": 0,
                         "x_unknown_field": {"kept": True}}
    assert body["stream"] is False  # the caller's dict is not mutated


async def test_model_rewrite(openai_server: tuple[FakeOpenAI, ServerThread], fake_openai: FakeOpenAI,
                             metrics: Metrics) -> None:
    config = BackendConfig(name="rw", type="openai", base_url=openai_server[1].url + "/v1", api_key=API_KEY,
                           model="upstream-name")
    backend = OpenAIBackend(config, metrics)
    await backend.start()
    try:
        await backend.chat(CHAT, T)
        assert fake_openai.last.body["model"] == "upstream-name"
        await collect(backend.chat_stream(CHAT, T))
        assert fake_openai.last.body["model"] == "upstream-name"
    finally:
        await backend.close()


async def test_chat_stream_chunks_and_usage(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    body = {**CHAT, "stream_options": {"include_usage": True}}
    chunks = await collect(openai_backend.chat_stream(body, T))
    assert fake_openai.last.body["stream"] is True
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "echo: hello there"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


async def test_stream_tool_calls(openai_backend: OpenAIBackend) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    chunks = await collect(openai_backend.chat_stream({**CHAT, "tools": tools}, T))
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if c["choices"][0]["delta"].get("tool_calls")]
    assert calls[0]["id"] and calls[0]["function"]["name"] == "lookup"
    assert orjson.loads("".join(c["function"]["arguments"] for c in calls)) == {"text": "hello there"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_keep_alive_connection_is_reused(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    await collect(openai_backend.chat_stream(CHAT, T))
    await openai_backend.chat(CHAT, T)
    await collect(openai_backend.chat_stream(CHAT, T))
    peers = {r.peer for r in fake_openai.requests}
    assert len(fake_openai.requests) == 3 and len(peers) == 1


async def test_completions_and_embeddings(openai_backend: OpenAIBackend) -> None:
    answer = await openai_backend.completions({"model": "m", "prompt": "say hi", "max_tokens": 2}, T)
    assert answer["choices"][0]["text"] == "echo: say " and answer["choices"][0]["finish_reason"] == "length"
    chunks = await collect(openai_backend.completions_stream({"model": "m", "prompt": "say hi"}, T))
    assert "".join(c["choices"][0]["text"] for c in chunks) == "echo: say hi"
    emb = await openai_backend.embeddings({"model": "e", "input": ["a", "b"]}, T)
    assert [d["index"] for d in emb["data"]] == [0, 1] and len(emb["data"][0]["embedding"]) == 8


async def test_list_models_and_ready(openai_backend: OpenAIBackend) -> None:
    assert await openai_backend.list_models() == ["fake-model", "fake-model-2"]
    assert await openai_backend.check_ready() is None


async def test_down_upstream_models_fallback_and_not_ready(metrics: Metrics) -> None:
    config = BackendConfig(name="down", type="openai", base_url=f"http://127.0.0.1:{free_port()}/v1",
                           models=["listed-a"])
    backend = OpenAIBackend(config, metrics)
    await backend.start()
    try:
        assert await backend.list_models() == ["listed-a"]
        reason = await backend.check_ready()
        assert reason is not None and "down" in reason
    finally:
        await backend.close()


async def test_wrong_key_is_not_ready(openai_server: tuple[FakeOpenAI, ServerThread], fake_openai: FakeOpenAI,
                                      metrics: Metrics) -> None:
    config = BackendConfig(name="badkey", type="openai", base_url=openai_server[1].url + "/v1", api_key="nope")
    backend = OpenAIBackend(config, metrics)
    try:
        assert "credentials" in (await backend.check_ready() or "")
        with pytest.raises(BackendError) as e:
            await backend.chat(CHAT, T)
        assert e.value.status == 401 and e.value.body["error"]["code"] == "invalid_api_key"
    finally:
        await backend.close()


# ---- errors --------------------------------------------------------------------------------------------


async def test_4xx_envelope_passed_through(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI,
                                           metrics: Metrics) -> None:
    envelope = {"error": {"message": "bad temperature", "type": "invalid_request_error", "param": "temperature",
                          "code": "invalid_value"}}
    fake_openai.fail_next(1, 400, body=envelope)
    with pytest.raises(BackendError) as e:
        await openai_backend.chat(CHAT, T)
    err = e.value
    assert (err.status, err.reason, err.retryable, err.body) == (400, "status_4xx", False, envelope)
    gateway_error = err.to_gateway_error()
    assert gateway_error.status == 400 and gateway_error.param == "temperature"
    # the client's own mistake: not an upstream error
    assert value(metrics, "gateway_upstream_errors_total", backend="up", reason="status_4xx") == 0


async def test_non_json_error_body_becomes_envelope(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(1, 404, body=b"<html>no such route</html>", content_type="text/html")
    with pytest.raises(BackendError) as e:
        await openai_backend.chat(CHAT, T)
    error = e.value.body["error"]
    assert e.value.status == 404 and error["type"] == "invalid_request_error"
    assert "HTTP 404" in error["message"] and "no such route" not in error["message"]  # clients may see it
    assert "no such route" in e.value.message  # the log does


async def test_fastapi_detail_error_becomes_envelope(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(1, 422, body={"detail": "field required"})
    with pytest.raises(BackendError) as e:
        await openai_backend.chat(CHAT, T)
    assert e.value.body["error"]["message"] == "field required"


@pytest.mark.parametrize(("status", "reason"), [(429, "status_429"), (500, "status_5xx"), (503, "status_5xx")])
async def test_retryable_statuses_carry_retry_after(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI,
                                                    metrics: Metrics, status: int, reason: str) -> None:
    fake_openai.fail_next(1, status, retry_after=7)
    with pytest.raises(BackendError) as e:
        await openai_backend.chat(CHAT, T)
    assert (e.value.status, e.value.reason, e.value.retryable, e.value.retry_after) == (status, reason, True, 7.0)
    assert value(metrics, "gateway_upstream_errors_total", backend="up", reason=reason) == 1


async def test_stream_error_status_before_first_chunk(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(1, 429, retry_after="2")
    with pytest.raises(BackendError) as e:
        await collect(openai_backend.chat_stream(CHAT, T))
    assert e.value.reason == "status_429" and e.value.retryable and e.value.retry_after == 2.0


async def test_connect_refused(metrics: Metrics) -> None:
    config = BackendConfig(name="refused", type="openai", base_url=f"http://127.0.0.1:{free_port()}/v1")
    backend = OpenAIBackend(config, metrics)
    try:
        for call in (backend.chat(CHAT, T), collect(backend.chat_stream(CHAT, T))):
            with pytest.raises(BackendError) as e:
                await call
            assert (e.value.reason, e.value.status, e.value.retryable) == ("connect", 502, True)
        assert value(metrics, "gateway_upstream_errors_total", backend="refused", reason="connect") == 2
    finally:
        await backend.close()


async def test_connect_timeout(stalled_port: int, metrics: Metrics) -> None:
    config = BackendConfig(name="stalled", type="openai", base_url=f"http://127.0.0.1:{stalled_port}/v1")
    backend = OpenAIBackend(config, metrics)
    try:
        with pytest.raises(BackendError) as e:
            await backend.chat(CHAT, Timeouts(connect=0.2, first_byte=10, total=20))
        assert (e.value.reason, e.value.status, e.value.retryable) == ("timeout", 504, True)
        assert "connect" in e.value.message
    finally:
        await backend.close()


async def test_first_byte_timeout_waiting_for_headers(openai_backend: OpenAIBackend,
                                                      fake_openai: FakeOpenAI) -> None:
    fake_openai.delay_headers = 2.0
    with pytest.raises(BackendError) as e:
        await openai_backend.chat(CHAT, Timeouts(connect=2, first_byte=0.2, total=20))
    assert (e.value.reason, e.value.status, e.value.retryable) == ("timeout", 504, True)
    assert "headers" in e.value.message


async def test_first_byte_timeout_waiting_for_first_event(openai_backend: OpenAIBackend,
                                                          fake_openai: FakeOpenAI) -> None:
    fake_openai.delay_per_chunk = 2.0  # headers come at once, the first event late
    with pytest.raises(BackendError) as e:
        await collect(openai_backend.chat_stream(CHAT, Timeouts(connect=2, first_byte=0.3, total=20)))
    assert (e.value.reason, e.value.retryable) == ("timeout", True)
    assert "first event" in e.value.message
    assert await asyncio.to_thread(fake_openai.disconnected.wait, 5)  # the upstream saw us leave


async def test_total_timeout_non_stream(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    fake_openai.delay_headers = 2.0
    with pytest.raises(BackendError) as e:
        await openai_backend.chat(CHAT, Timeouts(connect=2, first_byte=10, total=0.3))
    assert (e.value.reason, e.value.status) == ("timeout", 504)
    assert "total" in e.value.message


async def test_total_timeout_mid_stream_is_not_retryable(openai_backend: OpenAIBackend,
                                                         fake_openai: FakeOpenAI) -> None:
    fake_openai.delay_per_chunk = 0.25
    got: list[dict] = []
    with pytest.raises(BackendError) as e:
        async for chunk in openai_backend.chat_stream(CHAT, Timeouts(connect=2, first_byte=5, total=0.6)):
            got.append(chunk)
    assert got, "the stream yielded before timing out"
    assert (e.value.reason, e.value.status, e.value.retryable) == ("timeout", 504, False)


async def test_cut_stream_raises_mid_stream(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI,
                                            metrics: Metrics) -> None:
    fake_openai.cut_after = 2
    got: list[dict] = []
    with pytest.raises(BackendError) as e:
        async for chunk in openai_backend.chat_stream(CHAT, T):
            got.append(chunk)
    assert len(got) == 2
    assert (e.value.reason, e.value.retryable) == ("protocol", False)
    assert value(metrics, "gateway_upstream_errors_total", backend="up", reason="protocol") == 1


async def test_cut_before_any_event_is_retryable(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    fake_openai.cut_after = 0
    with pytest.raises(BackendError) as e:
        await collect(openai_backend.chat_stream(CHAT, T))
    assert (e.value.reason, e.value.retryable) == ("protocol", True)


async def test_error_event_in_stream(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI) -> None:
    fake_openai.stream_error_after = 2
    got: list[dict] = []
    with pytest.raises(BackendError) as e:
        async for chunk in openai_backend.chat_stream(CHAT, T):
            got.append(chunk)
    assert len(got) == 2 and not e.value.retryable
    assert "scripted stream error" in e.value.message


# ---- disconnects and bookkeeping -----------------------------------------------------------------------


async def test_aclose_closes_upstream_at_once(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI,
                                              metrics: Metrics) -> None:
    fake_openai.delay_per_chunk = 0.2
    stream = openai_backend.chat_stream({**CHAT, "messages": [{"role": "user", "content": "a b c d e f g"}]}, T)
    first = await anext(stream)
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert value(metrics, "gateway_backend_inflight", backend="up") == 1
    await stream.aclose()
    assert value(metrics, "gateway_backend_inflight", backend="up") == 0
    assert await asyncio.to_thread(fake_openai.disconnected.wait, 5)
    assert fake_openai.streams_completed == 0


async def test_cancelling_the_consumer_closes_upstream(openai_backend: OpenAIBackend,
                                                       fake_openai: FakeOpenAI, metrics: Metrics) -> None:
    fake_openai.delay_per_chunk = 0.2
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in openai_backend.chat_stream({**CHAT, "messages": [{"role": "user", "content": "a b c d"}]}, T):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(fake_openai.disconnected.wait, 5)
    assert value(metrics, "gateway_backend_inflight", backend="up") == 0


async def test_inflight_counts_concurrent_requests(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI,
                                                   metrics: Metrics) -> None:
    fake_openai.delay_headers = 0.3
    calls = [asyncio.create_task(openai_backend.chat(CHAT, T)) for _ in range(3)]
    await asyncio.sleep(0)  # each task counts itself before its first await
    assert value(metrics, "gateway_backend_inflight", backend="up") == 3
    await asyncio.gather(*calls)
    assert value(metrics, "gateway_backend_inflight", backend="up") == 0


async def test_works_without_explicit_start(openai_server: tuple[FakeOpenAI, ServerThread],
                                            fake_openai: FakeOpenAI, metrics: Metrics) -> None:
    backend = OpenAIBackend(BackendConfig(name="lazy", type="openai", base_url=openai_server[1].url + "/v1",
                                          api_key=API_KEY), metrics)
    try:
        assert (await backend.chat(CHAT, T))["choices"][0]["message"]["content"] == "echo: hello there"
    finally:
        await backend.close()


async def _dropping_server(drops: int) -> tuple[asyncio.Server, list[int]]:
    """A raw HTTP server that closes the first `drops` connections without answering, then answers 200."""
    seen = [0]
    answer = orjson.dumps({"id": "x", "object": "chat.completion", "choices": []})

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen[0] += 1
        await reader.readuntil(b"\r\n\r\n")
        if seen[0] > drops:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(answer), answer))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen


async def test_dropped_fresh_connection_is_not_sent_again(metrics: Metrics) -> None:
    """A new connection closed before any answer: the upstream may have acted on the POST, so the client does
    not send it twice (only a reused keep-alive connection gets the one fresh try: test_http_client)."""
    server, seen = await _dropping_server(1)
    port = server.sockets[0].getsockname()[1]
    backend = OpenAIBackend(BackendConfig(name="drop", type="openai", base_url=f"http://127.0.0.1:{port}/v1"),
                            metrics)
    try:
        with pytest.raises(BackendError) as e:
            await backend.chat(CHAT, T)
        assert (e.value.reason, e.value.retryable) == ("connect", True)
        assert seen[0] == 1
        assert (await backend.chat(CHAT, T))["id"] == "x"  # the next request, on a new connection, is served
    finally:
        await backend.close()
        server.close()
        await server.wait_closed()


async def test_stream_dribbled_byte_by_byte_with_comments_and_crlf(metrics: Metrics) -> None:
    """A raw upstream that sends its SSE body a few bytes per write, CRLF line ends and keep-alive comments."""
    events = [{"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": w},
                                                                         "finish_reason": None}]}
              for w in ("split ", "across ", "reads")]
    body = b": keep-alive\r\n\r\n" + b"".join(b"data: " + orjson.dumps(e) + b"\r\n\r\n" for e in events)
    body += b"data: [DONE]\r\n\r\n"

    server, url = await start_raw_sse(body)
    backend = OpenAIBackend(BackendConfig(name="dribble", type="openai", base_url=url + "/v1"), metrics)
    try:
        chunks = await collect(backend.chat_stream(CHAT, T))
        assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["split ", "across ", "reads"]
    finally:
        await backend.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(("bad", "retryable"), [(b"data: {oops\n\n", True), (b"data: [1]\n\n", True),
                                                (b'data: {"choices":[]}\n\ndata: nope\n\n', False)])
async def test_malformed_stream_event_is_protocol_error(metrics: Metrics, bad: bytes, retryable: bool) -> None:
    server, url = await start_raw_sse(bad)
    backend = OpenAIBackend(BackendConfig(name="raw", type="openai", base_url=url + "/v1"), metrics)
    try:
        with pytest.raises(BackendError) as e:
            await collect(backend.chat_stream(CHAT, T))
        assert (e.value.reason, e.value.status, e.value.retryable) == ("protocol", 502, retryable)
    finally:
        await backend.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("raw", [b"<html>proxy page</html>", b"[1, 2]"])
async def test_non_object_json_answer_is_protocol_error(openai_backend: OpenAIBackend, fake_openai: FakeOpenAI,
                                                         raw: bytes) -> None:
    fake_openai.fail_next(1, 200, body=raw, content_type="text/html")
    with pytest.raises(BackendError) as e:
        await openai_backend.chat(CHAT, T)
    assert (e.value.reason, e.value.status) == ("protocol", 502)
