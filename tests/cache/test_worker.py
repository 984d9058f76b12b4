"""The semantic worker with the real model: off-loop embedding, micro-batching, scoped search."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.cache.embedder import DIM, MiniLMEmbedder
from gateway.cache.index import EntryMeta
from gateway.cache.worker import SemanticWorker


async def started(embedder: MiniLMEmbedder, batching: bool = True) -> SemanticWorker:
    worker = SemanticWorker(lambda: embedder, DIM, batching=batching)
    assert await worker.wait_ready_or_load()
    return worker


async def test_embeddings_are_unit_vectors_and_paraphrases_are_close(embedder) -> None:
    worker = await started(embedder)
    try:
        a, b, c = await asyncio.gather(worker.embed("How do I reset my password?"),
                                       worker.embed("how do i reset my password"),
                                       worker.embed("Best pizza in Naples"))
        assert a.shape == (DIM,) and abs(float(np.linalg.norm(a)) - 1) < 1e-4
        assert float(a @ b) > 0.95 > float(a @ c)
    finally:
        await worker.close()


async def test_concurrent_lookups_share_encode_calls(embedder) -> None:
    worker = await started(embedder)
    try:
        await asyncio.gather(*(worker.embed(f"question number {i}") for i in range(24)))
        assert worker.timings.texts == 24
        assert worker.timings.batches < 24  # queued while a batch encoded, they rode the next one together
    finally:
        await worker.close()


async def test_without_batching_every_lookup_is_its_own_encode(embedder) -> None:
    worker = await started(embedder, batching=False)
    try:
        await asyncio.gather(*(worker.embed(f"question number {i}") for i in range(6)))
        assert worker.timings.batches == 6
    finally:
        await worker.close()


async def test_lookup_searches_only_its_own_scope(embedder) -> None:
    worker = await started(embedder)
    try:
        vec = await worker.embed("What is the capital of France?")
        await worker.run(worker.indexes.add, EntryMeta("x", "ns", "scope-a", "What is the capital of France?",
                                                       0.0, 1e12), vec)
        _, same = await worker.lookup("what is the capital of france", "scope-a")
        _, other = await worker.lookup("What is the capital of France?", "scope-b")
        assert same and same[0][0].entry_id == "x" and same[0][1] > 0.85
        assert other == []
    finally:
        await worker.close()


async def test_each_text_is_tokenized_once(embedder) -> None:
    """The window check's word pieces are what gets embedded: no second tokenization for the encode."""
    calls: list[str] = []

    class Spy:
        dim = DIM

        def encode(self, texts: list[str]) -> np.ndarray:
            calls.append("encode")
            return embedder.encode(texts)

        def encode_pieces(self, pieces: list[list[int]]) -> np.ndarray:
            calls.append("encode_pieces")
            return embedder.encode_pieces(pieces)

    worker = SemanticWorker(Spy, DIM)
    assert await worker.wait_ready_or_load()
    try:
        calls.clear()  # the warm-up encode at load
        long = "Please summarise the following report for me. " * 8  # past the no-tokenizing shortcut
        vector = await worker.embed(long)
        assert calls == ["encode_pieces"]
        assert vector is not None and float(vector @ embedder.encode([long])[0]) > 0.99999
    finally:
        await worker.close()


async def test_queue_order_deadlines_and_close(embedder) -> None:
    """The worker's own thread keeps submission order (a run() queued after lookups sees them done), skips a
    lookup its caller gave up on before it was encoded, and close() cancels what is still queued, so nobody
    awaits forever."""
    worker = await started(embedder)
    try:
        texts_before = worker.timings.texts
        first = asyncio.ensure_future(worker.embed("How do I reset my password?"))
        given_up = asyncio.ensure_future(worker.embed("This lookup's deadline passes before it is encoded"))
        seen = asyncio.ensure_future(worker.run(lambda: worker.timings.texts))
        await asyncio.sleep(0)  # all three reach the queue together at the end of this turn
        given_up.cancel()
        assert await seen == texts_before + 1  # the first lookup ran before the call, the cancelled one never
        assert (await first).shape == (DIM,)
        assert given_up.cancelled()
        queued = [asyncio.ensure_future(worker.embed(f"queued question {i}")) for i in range(40)]
        await asyncio.sleep(0)
    finally:
        await worker.close()
    done = await asyncio.gather(*queued, return_exceptions=True)
    # Whatever the thread had not started is cancelled; what it was encoding when close came still answers.
    assert all(isinstance(r, asyncio.CancelledError) or r.shape == (DIM,) for r in done)
    with pytest.raises(RuntimeError):
        await worker.embed("after close")
