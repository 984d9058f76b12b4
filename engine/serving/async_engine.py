"""The LLMEngine step loop on its own thread, with async per-request streams for event-loop callers.

Only the loop thread touches the LLMEngine. Callers hand it commands (add, abort, stop) through a
thread-safe queue and get outputs back through `loop.call_soon_threadsafe`, one call per loop per step.
A request rejected by the engine (prompt too long, bad params) raises ValueError from `add_request`
before any output, so a server can answer 400 and keep serving others. An exception inside `step()`
fails the requests then in flight with `EngineStepError` and the loop goes on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.serving.metrics import EngineMetrics

if TYPE_CHECKING:
    from engine.config import EngineConfig
    from engine.guided import GuidedSpec
    from engine.llm_engine import EngineStats, LLMEngine, RequestOutput
    from engine.sampling_params import SamplingParams
    from engine.tokenizer import Tokenizer

log = logging.getLogger(__name__)

KV_SUBSCRIBER_MAX_BACKLOG = 10_000  # events; a subscriber further behind is dropped and must resubscribe


class EngineStepError(RuntimeError):
    """The engine failed while stepping a batch this request was in."""


class EngineStoppedError(RuntimeError):
    """The engine was shut down before the request finished."""


class RequestStream:
    """The outputs of one request (all its `n` choices), consumed with `async for`.

    Closing it early (`aclose`, cancellation, or dropping it) aborts the request and frees its blocks.
    """

    def __init__(self, engine: AsyncEngine, request_id: str, n: int, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = request_id
        self._engine = engine
        self._loop = loop
        self._queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._choices_left = n
        self.finished = False  # every choice's last output (or an error) was handed out
        self.closed = False  # the consumer left early; the request is being aborted

    def _push(self, item: RequestOutput | BaseException) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished or self.closed:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            self._abandon()
            raise
        if isinstance(item, BaseException):
            self.finished = True
            raise item
        if item.finished:
            self._choices_left -= 1
            if self._choices_left <= 0:
                self.finished = True
        return item

    async def aclose(self) -> None:
        """Abort the request unless it already finished; returns once its blocks are free."""
        if self.finished:
            return
        self.closed = True
        await self._engine.abort(self.request_id)  # commands run in order: after any earlier abort too

    def _abandon(self) -> None:
        if not self.finished and not self.closed:
            self.closed = True
            self._engine.abort_nowait(self.request_id)

    def __del__(self) -> None:
        if not self.finished and not self.closed and self._engine is not None:
            self._engine.abort_nowait(self.request_id)


@dataclass(slots=True)
class _Tracked:
    """Loop-thread bookkeeping of one live request."""

    stream: RequestStream
    loop: asyncio.AbstractEventLoop
    choices_left: int
    arrived: float
    first_token: dict[int, float] = field(default_factory=dict)


class KVEventSubscription:
    """A `/kv_events` feed: `snapshot` (the block hashes held when it began), then event dicts in order.

    `get()` returns None when the feed ended (engine stopped, or this reader fell too far behind).
    """

    def __init__(self, engine: AsyncEngine, loop: asyncio.AbstractEventLoop, snapshot: list[int]) -> None:
        self.snapshot = snapshot
        self._engine = engine
        self._loop = loop
        self._queue: asyncio.Queue[dict | None] = asyncio.Queue()
        self.closed = False

    def _push_threadsafe(self, items: list[dict | None]) -> None:
        _call_soon(self._loop, self._deliver, items)

    def _deliver(self, items: list[dict | None]) -> None:
        for item in items:
            self._queue.put_nowait(item)

    async def get(self) -> dict | None:
        if self.closed and self._queue.empty():
            return None
        item = await self._queue.get()
        if item is None:
            self.closed = True
        return item

    def close(self) -> None:
        self.closed = True
        self._engine._unsubscribe(self)


@dataclass(slots=True)
class AddCommand:
    """Admit a request; `accepted` resolves on `loop` once the engine took it (or with its ValueError)."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    stream: RequestStream
    loop: asyncio.AbstractEventLoop
    accepted: asyncio.Future[None]


@dataclass(slots=True)
class AbortCommand:
    """Abort a request; `done` (when given) resolves on `loop` once its blocks are free."""

    request_id: str
    loop: asyncio.AbstractEventLoop | None = None
    done: asyncio.Future[None] | None = None


@dataclass(slots=True)
class StopCommand:
    """End the loop thread; commands queued behind it are refused."""


Command = AddCommand | AbortCommand | StopCommand


class AsyncEngine:
    def __init__(self, engine: LLMEngine, metrics: EngineMetrics | None = None) -> None:
        self.engine = engine
        self.metrics = metrics if metrics is not None else EngineMetrics()
        self._commands: collections.deque[Command] = collections.deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopping = False
        self._tracked: dict[str, _Tracked] = {}  # loop thread only
        self._kv_lock = threading.Lock()
        self._held_hashes: set[int] = set()
        self._subscribers: list[KVEventSubscription] = []
        self._stats: EngineStats = engine.stats()
        self.metrics.bind_stats(self.stats)  # a bound method, held weakly: the metrics may outlive the engine

    @classmethod
    def from_config(cls, config: EngineConfig, metrics: EngineMetrics | None = None) -> AsyncEngine:
        from engine.llm_engine import LLMEngine

        return cls(LLMEngine(config), metrics)

    # --- facts about the served model -------------------------------------------------------------------

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def block_size(self) -> int:
        return int(self.engine.config.block_size)

    def compile_grammar(self, spec: GuidedSpec) -> object:
        """Compile (or find in the LRU) a constrained-output grammar; any thread. ValueError if unsupported."""
        return self.engine.grammar_runtime().compile(spec)

    def stats(self) -> EngineStats:
        """The stats as of the loop's last step or command (never blocks)."""
        return self._stats

    # --- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        with self._start_lock:
            if self._stopping:
                raise EngineStoppedError("the engine was shut down")
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="engine-step-loop", daemon=True)
            self._thread.start()

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop the loop thread; requests still in flight end with EngineStoppedError."""
        self._stopping = True
        self._submit(StopCommand())
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- requests ---------------------------------------------------------------------------------------

    async def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> RequestStream:
        """Queue a request; raises ValueError (the engine's message) if the engine refuses it."""
        self.start()
        loop = asyncio.get_running_loop()
        stream = RequestStream(self, request_id, max(1, int(params.n)), loop)
        accepted: asyncio.Future[None] = loop.create_future()
        self._submit(AddCommand(request_id, list(prompt_token_ids), params, stream, loop, accepted))
        try:
            await accepted
        except BaseException:
            stream.finished = True  # never admitted (or the caller gave up): nothing to abort here
            if not accepted.done() or accepted.cancelled():
                self.abort_nowait(request_id)
            raise
        return stream

    async def generate(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[RequestOutput]:
        """Outputs of one request as they are produced; leaving the loop early aborts it."""
        stream = await self.add_request(request_id, prompt_token_ids, params)
        try:
            async for output in stream:
                yield output
        finally:
            await stream.aclose()

    async def abort(self, request_id: str) -> None:
        """Abort a request; returns once the engine has freed its blocks."""
        if not self.is_running:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._submit(AbortCommand(request_id, loop, done))
        await done

    def abort_nowait(self, request_id: str) -> None:
        """Abort from any thread without waiting (client gone, stream dropped)."""
        if self.is_running:
            self._submit(AbortCommand(request_id))

    # --- KV events --------------------------------------------------------------------------------------

    def subscribe_kv_events(self) -> KVEventSubscription:
        """A feed of this engine's block-stored/removed events, starting with the hashes held right now."""
        loop = asyncio.get_running_loop()
        with self._kv_lock:
            sub = KVEventSubscription(self, loop, sorted(self._held_hashes))
            self._subscribers.append(sub)
        return sub

    def held_block_hashes(self) -> set[int]:
        with self._kv_lock:
            return set(self._held_hashes)

    def _unsubscribe(self, sub: KVEventSubscription) -> None:
        with self._kv_lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)

    # --- the loop thread --------------------------------------------------------------------------------

    def _submit(self, command: Command) -> None:
        self._commands.append(command)
        self._wake.set()

    def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                try:
                    if not self._handle_commands():
                        break
                    if self.engine.has_unfinished_requests():
                        self._step()
                    else:
                        self._publish_kv_events()
                        self._stats = self.engine.stats()
                        self._wake.wait()
                except Exception as e:  # a bug outside step(): fail what is in flight, keep serving
                    log.exception("engine loop error; failing the requests in flight")
                    self._fail_all(EngineStepError(f"engine loop error: {e}"))
        finally:
            self._fail_all(EngineStoppedError("the engine was shut down"))
            self._refuse_pending()
            self._publish_kv_events()
            with self._kv_lock:
                subs, self._subscribers = self._subscribers, []
            for sub in subs:
                sub._push_threadsafe([None])

    def _handle_commands(self) -> bool:
        while self._commands:
            command = self._commands.popleft()
            if isinstance(command, StopCommand):
                return False
            if isinstance(command, AddCommand):
                self._handle_add(command)
            elif isinstance(command, AbortCommand):
                self._handle_abort(command)
            else:
                raise AssertionError(f"unknown engine command {command!r}")
        return True

    def _handle_add(self, c: AddCommand) -> None:
        if c.request_id in self._tracked:
            _resolve(c.loop, c.accepted, ValueError(f"request id {c.request_id!r} is already in flight"))
            return
        try:
            self.engine.add_request(c.request_id, c.prompt_token_ids, c.params)
        except Exception as e:  # ValueError for bad input; anything else is still this request's alone
            _resolve(c.loop, c.accepted, e if isinstance(e, ValueError) else ValueError(str(e)))
            return
        self._tracked[c.request_id] = _Tracked(c.stream, c.loop, c.stream._choices_left, time.perf_counter())
        _resolve(c.loop, c.accepted, None)

    def _handle_abort(self, c: AbortCommand) -> None:
        if self._tracked.pop(c.request_id, None) is not None:
            try:
                self.engine.abort_request(c.request_id)
            except Exception:
                log.exception("abort of %s failed", c.request_id)
            self._stats = self.engine.stats()
        if c.loop is not None and c.done is not None:
            _resolve(c.loop, c.done, None)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:
            log.exception("engine step failed; failing the requests in flight")
            self._fail_all(EngineStepError(f"engine step failed: {e}"))
            return
        now = time.perf_counter()
        batches: dict[asyncio.AbstractEventLoop, list[tuple[RequestStream, RequestOutput]]] = {}
        for out in outputs:
            tracked = self._tracked.get(out.request_id)
            if tracked is None:
                continue  # aborted while this step ran
            self._observe_latency(tracked, out, now)
            batches.setdefault(tracked.loop, []).append((tracked.stream, out))
            if out.finished:
                tracked.choices_left -= 1
                if tracked.choices_left <= 0:
                    del self._tracked[out.request_id]
        # stats and KV events first, so a caller that sees its request finish also sees its blocks freed
        self._publish_kv_events()
        self._stats = self.engine.stats()
        for loop, items in batches.items():
            _call_soon(loop, _deliver_outputs, items)

    def _observe_latency(self, tracked: _Tracked, out: RequestOutput, now: float) -> None:
        if out.new_token_ids and out.index not in tracked.first_token:
            tracked.first_token[out.index] = now
            if len(tracked.first_token) == 1:
                self.metrics.ttft.observe(now - tracked.arrived)
        if out.finished and out.num_output_tokens > 1 and out.index in tracked.first_token:
            self.metrics.tpot.observe((now - tracked.first_token[out.index]) / (out.num_output_tokens - 1))

    def _fail_all(self, error: BaseException) -> None:
        tracked, self._tracked = self._tracked, {}
        for request_id in tracked:
            try:
                self.engine.abort_request(request_id)
            except Exception:
                log.exception("abort of %s failed", request_id)
        self._stats = self.engine.stats()
        for t in tracked.values():
            _call_soon(t.loop, t.stream._push, error)

    def _refuse_pending(self) -> None:
        """At shutdown: adds and aborts still queued are answered, so no caller waits forever."""
        while self._commands:
            command = self._commands.popleft()
            if isinstance(command, AddCommand):
                command.stream.finished = True
                _resolve(command.loop, command.accepted, EngineStoppedError("the engine was shut down"))
            elif isinstance(command, AbortCommand) and command.loop is not None and command.done is not None:
                _resolve(command.loop, command.done, None)

    def _publish_kv_events(self) -> None:
        events = self.engine.drain_kv_events()
        if not events:
            return
        records: list[dict | None] = []
        with self._kv_lock:
            for ev in events:
                hashes = [int(h) for h in ev.block_hashes]
                if ev.kind == "stored":
                    self._held_hashes.update(hashes)
                    records.append({"type": "stored", "block_hashes": hashes, "parent_hash": ev.parent_hash})
                else:
                    self._held_hashes.difference_update(hashes)
                    records.append({"type": "removed", "block_hashes": hashes})
            subscribers = list(self._subscribers)
        for sub in subscribers:
            if sub._queue.qsize() > KV_SUBSCRIBER_MAX_BACKLOG:
                self._unsubscribe(sub)  # too far behind: end its feed; it resubscribes for a fresh snapshot
                sub._push_threadsafe([None])
            else:
                sub._push_threadsafe(records)


def _deliver_outputs(items: list[tuple[RequestStream, RequestOutput]]) -> None:
    for stream, out in items:
        if not stream.finished and not stream.closed:  # a closed stream's consumer is gone
            stream._push(out)


def _resolve(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None], error: BaseException | None) -> None:
    def set_result() -> None:
        if fut.done():
            return
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)

    _call_soon(loop, set_result)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the caller's loop is closed: nobody is listening any more
        pass
