"""Stream assembly and replay: a stream folds into the completion a non-streaming call would give, and back."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from gateway.streaming import CoalescingWriter, StreamAssembler, _resume, completion_to_chunks

BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(delta: dict | None = None, finish: str | None = None, index: int = 0, **extra: object) -> dict:
    choices = [] if delta is None and finish is None else [{"index": index, "delta": delta or {}, "finish_reason": finish}]
    return {**BASE, "choices": choices, **extra}


def test_text_stream_assembles_into_completion() -> None:
    a = StreamAssembler()
    for c in [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
              chunk(finish="stop"), chunk(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})]:
        a.add(c)
    assert not a.complete  # no terminal event yet
    a.finish()
    assert a.complete
    body = a.result()
    assert body["object"] == "chat.completion"
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "logprobs": None,
                                "finish_reason": "stop"}]
    assert body["usage"]["total_tokens"] == 5


def test_cut_stream_is_never_complete() -> None:
    a = StreamAssembler()
    a.add(chunk({"role": "assistant", "content": "partial"}))
    a.finish()  # even if the relay thought it ended, a choice without finish_reason is not complete
    assert not a.complete


def test_tool_call_deltas_assemble() -> None:
    a = StreamAssembler()
    a.add(chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                      "function": {"name": "get_weather", "arguments": ""}}]}))
    a.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}))
    a.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}))
    a.add(chunk(finish="tool_calls"))
    a.finish()
    msg = a.result()["choices"][0]["message"]
    assert msg["tool_calls"] == [{"id": "call_1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]


def test_replay_then_assemble_round_trips() -> None:
    completion = {
        "id": "chatcmpl-9", "object": "chat.completion", "created": 7, "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "A"}, "logprobs": None, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
             "logprobs": None, "finish_reason": "tool_calls"},
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    chunks = completion_to_chunks(completion, include_usage=True)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == completion["usage"]
    a = StreamAssembler()
    for c in chunks:
        a.add(c)
    a.finish()
    again = a.result()
    assert again == completion
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "usage" not in completion_to_chunks(completion, include_usage=False)[-1]


def test_reasoning_deltas_are_kept_and_replayed() -> None:
    """`reasoning_content` pieces (vLLM, DeepSeek, Anthropic thinking) and signed `thinking_blocks` survive
    assembly (what the cache stores and a non-stream view shows) and come back in a replay."""
    block = {"type": "thinking", "thinking": "Sky: Rayleigh.", "signature": "sig-1"}
    a = StreamAssembler()
    for c in [chunk({"role": "assistant", "content": "", "reasoning_content": "Sky: "}),
              chunk({"reasoning_content": "Rayleigh."}), chunk({"thinking_blocks": [block]}),
              chunk({"content": "Blue."}), chunk(finish="stop")]:
        a.add(c)
    a.finish()
    message = a.result()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Blue.", "reasoning_content": "Sky: Rayleigh.",
                       "thinking_blocks": [block]}
    replayed = StreamAssembler()
    for c in completion_to_chunks(a.result(), include_usage=False):
        replayed.add(c)
    replayed.finish()
    assert replayed.result() == a.result()


async def test_coalescing_writer_to_a_slow_client_keeps_order_and_ends_the_stream() -> None:
    """A client that does not read for a while: writes must drain (the stepped write suspends and a task
    finishes it), every event arrives once and in order, and close() ends the chunked body."""
    events = [b"data: %d %s\n\n" % (i, b"x" * 4000) for i in range(2000)]  # 8 MB, past any socket buffer

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        out = CoalescingWriter(response)
        for i, event in enumerate(events):
            await out.add(event)
            if i % 50 == 0:
                await asyncio.sleep(0)  # a new upstream read: the next events form another flush
        await out.close(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.3)  # not reading: the server's socket fills and its writes must wait
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"chunked" in head.lower()
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                break
        writer.close()
        assert bytes(body).replace(b"\r\n", b"") == b"".join(events) + b"data: [DONE]\n\n"
    finally:
        await runner.cleanup()


async def test_resumed_write_cancelled_at_a_bare_yield_stays_a_cancel() -> None:
    """A write that suspended on a bare yield (no future) is resumed with sleep(0); cancelling it there
    cancels the task (it read `waiting.cancelled()` on None: AttributeError)."""
    async def never() -> None:
        await asyncio.Event().wait()

    task = asyncio.ensure_future(_resume(never(), None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
