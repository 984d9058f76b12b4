"""The replica's long-lived streams: /kv_events (snapshot first, then stored/removed with the engine's block
hashes, NDJSON or SSE) and clients that leave mid-request (their engine requests are aborted, blocks freed)."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from engine.block_manager import hash_prompt_blocks
from engine.serving.async_engine import AsyncEngine
from tests.engine.conftest import MODEL
from tests.helpers import ServerThread


async def wait_all_free(engine: AsyncEngine) -> None:
    for _ in range(400):
        s = engine.stats()
        if s.running == 0 and s.waiting == 0 and s.num_free_blocks == s.num_total_blocks:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"blocks still held: {engine.stats()}")


def chat_body(text: str, max_tokens: int, stream: bool = False) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": stream}


async def test_kv_events_ndjson_mirror_the_replica(server: ServerThread, engine: AsyncEngine) -> None:
    text = "Explain, step by step, how a bicycle gear system works and why it helps on hills. " * 2
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    expected = hash_prompt_blocks(prompt, engine.block_size)[: (len(prompt) - 1) // engine.block_size]
    assert len(expected) >= 3
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + "/kv_events") as events:
            assert events.headers["Content-Type"].startswith("application/x-ndjson")
            snapshot = orjson.loads(await events.content.readline())
            assert snapshot["type"] == "snapshot"
            assert snapshot["block_size"] == engine.block_size
            mirror = set(snapshot["block_hashes"])
            async with http.post(server.url + "/v1/chat/completions", json=chat_body(text, 4)) as resp:
                assert resp.status == 200
            while not set(expected) <= mirror:
                record = orjson.loads(await asyncio.wait_for(events.content.readline(), 60))
                if record["type"] == "stored":
                    mirror.update(record["block_hashes"])
                elif record["type"] == "removed":
                    mirror.difference_update(record["block_hashes"])
    assert set(expected) <= engine.held_block_hashes()


async def test_kv_events_sse_starts_with_the_current_snapshot(server: ServerThread, engine: AsyncEngine) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url + "/v1/chat/completions", json=chat_body("Hello there!", 2)) as resp:
            assert resp.status == 200
        async with http.get(server.url + "/kv_events?format=sse") as events:
            assert events.headers["Content-Type"].startswith("text/event-stream")
            line = await events.content.readline()
            assert line.startswith(b"data: ")
            snapshot = orjson.loads(line[len(b"data: "):])
    assert snapshot["type"] == "snapshot"
    assert set(snapshot["block_hashes"]) == engine.held_block_hashes()
    assert snapshot["block_hashes"]  # the chat above left full prompt blocks cached
    async with aiohttp.ClientSession() as http, http.get(server.url + "/kv_events?format=xml") as bad:
        assert bad.status == 400
        assert (await bad.json())["error"]["param"] == "format"


async def test_client_leaving_a_stream_frees_its_blocks(server: ServerThread, engine: AsyncEngine) -> None:
    body = chat_body("Write a very long essay about the history of tea.", 900, stream=True)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(server.url + "/v1/chat/completions", json=body)
        assert resp.status == 200
        chunks = 0
        async for line in resp.content:
            if line.startswith(b"data: "):
                chunks += 1
            if chunks >= 3:
                break
        assert engine.stats().running == 1
        resp.close()  # drop the connection mid-stream
    await wait_all_free(engine)


async def test_client_leaving_a_whole_request_frees_its_blocks(server: ServerThread, engine: AsyncEngine) -> None:
    body = chat_body("Write a very long essay about the history of coffee.", 900)
    async with aiohttp.ClientSession() as http:
        task = asyncio.create_task(http.post(server.url + "/v1/chat/completions", json=body))
        for _ in range(400):
            if engine.stats().running == 1:
                break
            await asyncio.sleep(0.05)
        assert engine.stats().running == 1
        task.cancel()  # the client gives up before the answer
        with pytest.raises(asyncio.CancelledError):
            await task
    await wait_all_free(engine)
