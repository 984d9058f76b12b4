"""The semantic worker: one thread that owns the embedding model and every FAISS index of the process.

Lookups are queued; while the thread encodes one batch, new lookups gather, and the next batch takes them all
in one encode call (micro-batching: at C=64 one forward pass serves many requests). Index inserts and removals
go through the same thread, so FAISS is never touched concurrently and the event loop never blocks.

Each text is tokenized once: the window (window.py) returns its word pieces, which the encoder embeds directly. A
text that does not fit the embedding window is not embedded: its job answers with no vector, and the cache
treats the request as exact-only. A lookup whose caller gave up (its deadline passed) is dropped from
the queue before it costs an encode.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from gateway.cache.index import EntryMeta, IndexSet
from gateway.cache.window import TokenWindow, minilm_window

T = TypeVar("T")
log = logging.getLogger("gateway.cache")


class Encoder(Protocol):
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...

    def encode_pieces(self, pieces: list[list[int]]) -> np.ndarray: ...


@dataclass(slots=True)
class Timings:
    """Seconds spent per part of semantic lookups (cumulative), for stats and the benchmark."""

    batches: int = 0
    texts: int = 0
    embed_s: float = 0.0
    search_s: float = 0.0
    verify_s: float = 0.0
    fetch_s: float = 0.0
    verified: int = 0
    fetched: int = 0

    def as_dict(self) -> dict[str, float | int | None]:
        per = lambda total, n: round(total / n * 1000, 3) if n else None  # noqa: E731
        return {
            "batches": self.batches, "texts": self.texts, "verified": self.verified, "fetched": self.fetched,
            "embed_s": self.embed_s, "search_s": self.search_s, "verify_s": self.verify_s, "fetch_s": self.fetch_s,
            "mean_batch": round(self.texts / self.batches, 2) if self.batches else None,
            "embed_ms_per_batch": per(self.embed_s, self.batches),
            "search_ms_per_lookup": per(self.search_s, self.texts),
            "verify_ms_per_lookup": per(self.verify_s, self.verified),
            "fetch_ms_per_hit": per(self.fetch_s, self.fetched),
        }


@dataclass(slots=True)
class _Job:
    text: str
    scope: str | None  # None: embed only (a store)
    k: int
    future: asyncio.Future = field(repr=False)


Candidates = list[tuple[EntryMeta, float]]
WARM_UP_TEXT = "How do I warm up the embedding model?"  # the first forward pass is several times slower


class SemanticWorker:
    def __init__(self, encoder_factory: Callable[[], Encoder], dim: int, batching: bool = True,
                 max_batch: int = 64, window_factory: Callable[[], TokenWindow] = minilm_window) -> None:
        self._factory = encoder_factory
        self._window_factory = window_factory
        self._window: TokenWindow | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="semantic-cache")
        self._encoder: Encoder | None = None
        self._load_error: BaseException | None = None
        self._loaded = asyncio.Event()
        self._load_task: asyncio.Task | None = None
        self._pending: list[_Job] = []
        self._drainer: asyncio.Task | None = None
        self.batching = batching
        self.max_batch = max_batch
        self.indexes = IndexSet(dim)
        self.timings = Timings()
        self.on_batch: Callable[[int], object] | None = None  # metrics hook: texts per encode call

    @property
    def ready(self) -> bool:
        return self._encoder is not None

    @property
    def loading(self) -> bool:
        return not self._loaded.is_set()

    @property
    def load_error(self) -> BaseException | None:
        return self._load_error

    async def load(self) -> None:
        """Load the model on the worker thread (seconds of CPU) without holding up the event loop."""
        try:
            self._encoder = await self.run(self._load)
        except Exception as e:  # the semantic layer stays off; L1 and the backend still serve
            self._load_error = e
            log.exception("semantic cache: embedding model failed to load; L2 disabled")
        finally:
            self._loaded.set()

    def _load(self) -> Encoder:
        encoder = self._factory()
        self._window = self._window_factory()
        try:  # so that the first lookup after /ready says 200 is as fast as the rest
            encoder.encode([WARM_UP_TEXT])
        except Exception as e:  # a per-call failure: every lookup will count it; loading itself succeeded
            log.warning("semantic cache: warm-up encode failed: %s", e)
        return encoder

    async def wait_ready_or_load(self) -> bool:
        """Start loading the model if nobody has yet; wait until it is loaded (True) or failed (False)."""
        if self._load_task is None and not self._loaded.is_set():
            self._load_task = asyncio.create_task(self.load())
        return await self.wait_ready()

    async def wait_ready(self) -> bool:
        await self._loaded.wait()
        return self._encoder is not None

    def encode(self, texts: list[str]) -> np.ndarray:
        """Encode on the calling thread; for bulk work already running on the worker (`run(worker.encode, ...)`)."""
        if self._encoder is None:
            raise RuntimeError("embedding model not loaded")
        return self._encoder.encode(texts)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run fn on the worker thread (index mutations, bulk loads)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def lookup(self, text: str, scope: str, k: int = 4) -> tuple[np.ndarray | None, Candidates]:
        """Embed `text` and search `scope`; returns the vector (for a later store) and the top-k candidates.
        The vector is None when the text does not fit the embedding window."""
        return await self._submit(text, scope, k)

    async def embed(self, text: str) -> np.ndarray | None:
        """The text's vector, or None when it does not fit the embedding window."""
        vector, _ = await self._submit(text, None, 0)
        return vector

    async def _submit(self, text: str, scope: str | None, k: int) -> tuple[np.ndarray | None, Candidates]:
        if self._encoder is None:
            raise RuntimeError("embedding model not loaded")
        job = _Job(text, scope, k, asyncio.get_running_loop().create_future())
        if not self.batching:
            results = await self.run(self._run_batch, [job])
            return results[0]
        self._pending.append(job)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await job.future

    async def _drain(self) -> None:
        while self._pending:
            # Lookups whose deadline passed while they queued were cancelled by their caller: skip them.
            self._pending = [job for job in self._pending if not job.future.done()]
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            if not batch:
                break
            try:
                results = await self.run(self._run_batch, batch)
            except Exception as e:  # fail every waiter of this batch open; the next batch tries again
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(e)
                continue
            for job, result in zip(batch, results, strict=True):
                if not job.future.done():
                    job.future.set_result(result)

    def _run_batch(self, jobs: list[_Job]) -> list[tuple[np.ndarray | None, Candidates]]:
        assert self._encoder is not None
        t0 = time.perf_counter()
        assert self._window is not None
        pieces = self._window.pieces([j.text for j in jobs])
        rows = [i for i, p in enumerate(pieces) if p is not None]
        vectors: list[np.ndarray | None] = [None] * len(jobs)
        if rows:
            encoded = self._encoder.encode_pieces([pieces[i] for i in rows])  # type: ignore[misc]
            for i, vector in zip(rows, encoded, strict=True):
                vectors[i] = vector
        t1 = time.perf_counter()
        by_scope: dict[str, list[int]] = {}
        for i in rows:
            job = jobs[i]
            if job.scope is not None and self.indexes.has_entries(job.scope):
                by_scope.setdefault(job.scope, []).append(i)
        candidates: list[Candidates] = [[] for _ in jobs]
        for scope, scope_rows in by_scope.items():
            k = max(jobs[i].k for i in scope_rows)
            queries = np.ascontiguousarray(np.stack([vectors[i] for i in scope_rows]))  # type: ignore[misc]
            found = self.indexes.scopes[scope].search(queries, k)
            for i, hits in zip(scope_rows, found, strict=True):
                candidates[i] = hits
        t2 = time.perf_counter()
        tm = self.timings
        if self.on_batch is not None:
            self.on_batch(len(jobs))
        tm.batches += 1
        tm.texts += len(jobs)
        tm.embed_s += t1 - t0
        tm.search_s += t2 - t1
        return [(vectors[i], candidates[i]) for i in range(len(jobs))]

    async def close(self) -> None:
        for task in (self._drainer, self._load_task):
            if task is not None:
                task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
