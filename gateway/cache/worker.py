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
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
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


@dataclass(slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple
    future: asyncio.Future = field(repr=False)


_Item = _Job | _Call


def _deliver(outcomes: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    """On the loop: hand results to the callers still waiting (a lookup past its deadline was cancelled)."""
    for future, result, error in outcomes:
        if future.done():
            continue
        if isinstance(error, asyncio.CancelledError):
            future.cancel()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


def _reply(outcomes: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    """From the thread: one wake-up per loop (there is one unless tests run several) for a batch's results."""
    by_loop: dict[asyncio.AbstractEventLoop, list] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].get_loop(), []).append(outcome)
    for loop, mine in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver, mine)
        except RuntimeError:  # that loop is closed: nobody waits any more
            pass


Candidates = list[tuple[EntryMeta, float]]
WARM_UP_TEXT = "How do I warm up the embedding model?"  # the first forward pass is several times slower


class SemanticWorker:
    def __init__(self, encoder_factory: Callable[[], Encoder], dim: int, batching: bool = True,
                 max_batch: int = 64, window_factory: Callable[[], TokenWindow] = minilm_window) -> None:
        self._factory = encoder_factory
        self._window_factory = window_factory
        self._window: TokenWindow | None = None
        # One thread of our own rather than a ThreadPoolExecutor driven by a drain task: a lookup is one queue
        # put and one call_soon_threadsafe back, where the executor path (drain task, executor future, its
        # asyncio wrapper, the job's future) cost ~0.2 ms of hand-offs per C=1 hit on one core (~0.03 ms now).
        self._queue: queue.SimpleQueue[list[_Item] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._outbox: list[_Item] = []  # items submitted in this loop turn, queued together at its end
        self._closed = False
        self._encoder: Encoder | None = None
        self._load_error: BaseException | None = None
        self._loaded = asyncio.Event()
        self._load_task: asyncio.Task | None = None
        self.batching = batching
        self.max_batch = max_batch
        self.indexes = IndexSet(dim)
        self.timings = Timings()
        self.on_batch: Callable[[int], object] | None = None  # metrics hook: texts per encode call

    @property
    def ready(self) -> bool:
        return self._encoder is not None

    @property
    def state(self) -> str:
        """For /admin/cache/stats: which runner this worker embeds with (int8 may have fallen back to fp32)."""
        if self._encoder is None:
            return "not loaded"
        parts = [str(getattr(self._encoder, name)) for name in ("backend", "precision") if hasattr(self._encoder, name)]
        return f"ready ({'/'.join(parts)})" if parts else "ready"

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
        """Run fn on the worker thread (index mutations, bulk loads), in order with the lookups queued before."""
        future = asyncio.get_running_loop().create_future()
        self._post(_Call(fn, args, future))
        return await future

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
        self._post(job)
        return await job.future

    def _post(self, item: _Item) -> None:
        """Queue an item for the thread at the end of this loop turn, with every other item of the turn: lookups
        that start together (a burst of requests) reach the thread together and share one encode call."""
        if self._closed:
            raise RuntimeError("semantic worker closed")
        self._outbox.append(item)
        if len(self._outbox) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        items, self._outbox = self._outbox, []
        if not items:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="semantic-cache", daemon=True)
            self._thread.start()
        self._queue.put(items)

    def _serve(self) -> None:
        """The thread: everything queued while it was busy is taken at once, so lookups that gathered meanwhile
        form the next batch (micro-batching: at C=64 one forward pass serves many requests). FIFO otherwise."""
        pending: deque[_Item] = deque()
        while True:
            if not pending:
                items = self._queue.get()
                if items is None:
                    return
                pending.extend(items)
            while True:  # whatever else arrived meanwhile
                try:
                    items = self._queue.get_nowait()
                except queue.Empty:
                    break
                if items is None:
                    self._closed = True
                    break
                pending.extend(items)
            if self._closed:
                _reply([(item.future, None, asyncio.CancelledError()) for item in pending])
                return
            item = pending.popleft()
            if isinstance(item, _Call):
                if item.future.done():  # its caller was cancelled before it ran, as an executor would skip it
                    continue
                try:
                    outcome = (item.future, item.fn(*item.args), None)
                except Exception as e:
                    outcome = (item.future, None, e)
                _reply([outcome])
                continue
            batch = [item]
            limit = self.max_batch if self.batching else 1
            while pending and isinstance(pending[0], _Job) and len(batch) < limit:
                batch.append(pending.popleft())  # type: ignore[arg-type]
            # Lookups whose deadline passed while they queued were cancelled by their caller: skip them. (A
            # read of the future's state from this thread; a stale answer costs one encode, nothing more.)
            batch = [job for job in batch if not job.future.done()]
            if not batch:
                continue
            try:
                results = self._run_batch(batch)
                outcomes = [(job.future, result, None) for job, result in zip(batch, results, strict=True)]
            except Exception as e:  # fail every waiter of this batch open; the next batch tries again
                outcomes = [(job.future, None, e) for job in batch]
            _reply(outcomes)

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
        if self._load_task is not None:
            self._load_task.cancel()
        if self._closed:
            return
        self._flush()  # what was submitted this turn is cancelled with the rest, not stranded
        self._closed = True
        self._queue.put(None)  # the thread finishes the item it is running, cancels the rest and ends
