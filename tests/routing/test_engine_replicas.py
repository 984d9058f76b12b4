"""Two spawned engine replicas behind one engine backend: prefix-aware routing on the replicas' own block
hashes (mirrored from /kv_events), supervision (a killed replica is restarted), and clean shutdown.

Heavy on a small machine (two model processes), so the KV caches are small and there is one test."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import orjson

from gateway.backends.base import Timeouts
from gateway.backends.engine import engine_backend
from gateway.backends.engine_remote import EngineReplicasBackend
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from gateway.pipeline import CHAT

MODEL = "smollm2-135m"
T = Timeouts(first_byte=120, total=300)
SYSTEMS = [
    "You are a ship's navigator in the age of sail. You answer with bearings, tides and old sea lore. " * 2,
    "You are a pastry chef from Lyon who explains every answer through recipes and oven temperatures. " * 2,
    "You are a patient chess coach; every reply names an opening, a plan and a common beginner mistake. " * 2,
]


def conversation(i: int, question: str) -> dict:
    return {"model": MODEL, "max_tokens": 3, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "system", "content": SYSTEMS[i]}, {"role": "user", "content": question}]}


async def wait_for(predicate, what: str, tries: int = 2400) -> None:
    for _ in range(tries):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def assert_mirror_matches(backend: EngineReplicasBackend, url: str, name: str) -> None:
    """The router's mirror of a replica equals the snapshot the replica itself serves now."""
    assert backend.router is not None
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            async with http.get(url + "/kv_events") as resp:
                snapshot = orjson.loads(await resp.content.readline())
            if set(snapshot["block_hashes"]) == backend.router.replicas[name].confirmed:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"router mirror of {name} differs from its snapshot")


async def test_two_replicas_route_by_prefix_and_survive_a_crash() -> None:
    config = BackendConfig(name="pool", type="engine", model=MODEL, replicas=2,
                           options={"kv_cache_memory": "24MiB", "num_threads": 1, "max_num_seqs": 4})
    backend = engine_backend(config, Metrics())
    assert isinstance(backend, EngineReplicasBackend)
    await backend.start()
    try:
        assert backend.router is not None and backend.replica_set is not None
        assert await backend.check_ready() is None
        assert await backend.list_models() == [MODEL]
        names = sorted(backend.router.replicas)
        assert len(names) == 2

        homes: dict[int, str] = {}
        for i in range(len(SYSTEMS)):
            first = await backend.chat(conversation(i, "Who are you?"), T)
            assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            hashes, n = backend._prompt_blocks(CHAT, conversation(i, "Who are you?"))
            # the replica that served it reports the blocks on /kv_events; the router mirrors them
            await wait_for(lambda h=hashes: any(r.confirmed.issuperset(h[:4]) for r in backend.router.replicas.values()),
                           "the prefix blocks reached the router's mirror")
            homes[i] = next(r.name for r in backend.router.replicas.values() if r.confirmed.issuperset(hashes[:4]))
        assert len(set(homes.values())) == 2  # cold prefixes were spread by load, not piled on one replica

        for i in range(len(SYSTEMS)):
            follow = conversation(i, "And what do you do all day?")
            hashes, n = backend._prompt_blocks(CHAT, follow)
            decision = backend.router.choose(hashes, n)
            assert decision.replica == homes[i]
            assert decision.cached_blocks >= 2
            answer = await backend.chat(follow, T)
            # the shared system prompt was a prefix-cache hit on the replica it was routed to, exactly as long
            # as the router predicted from its mirror of that replica's block hashes
            cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached == decision.cached_blocks * backend.router.block_size

        chunks = [c async for c in backend.chat_stream({**conversation(0, "Stream, please."), "stream": True}, T)]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all(s.inflight == 0 for s in backend.router.replicas.values())

        victim = backend.replica_set.replicas[homes[0]]
        assert victim.process is not None
        old_pid = victim.process.pid
        victim.process.kill()
        await wait_for(lambda: not backend.router.replicas[victim.name].healthy, "the crash was noticed")
        survivor = conversation(1 if homes[1] != victim.name else 2, "Still there?")
        assert (await backend.chat(survivor, T))["choices"][0]["message"]["content"] is not None
        await wait_for(lambda: backend.router.replicas[victim.name].healthy, "the replica was restarted")
        assert victim.restarts == 1 and victim.process.pid != old_pid
        await assert_mirror_matches(backend, victim.url, victim.name)
        cold_hashes, _ = backend._prompt_blocks(CHAT, conversation(0, "Who are you?"))
        assert backend.router.cached_blocks(victim.name, cold_hashes) == 0  # a restarted engine starts empty
        again = await backend.chat(conversation(0, "Who are you?"), T)
        assert again["choices"][0]["message"]["content"] is not None
        pids = [r.process.pid for r in backend.replica_set.replicas.values() if r.process is not None]
    finally:
        await backend.close()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"replica process {pid} still runs after close()")
