"""Backend `type: engine`: the bundled inference engine, as one of two backends that `engine_backend` picks.

- replicas: 1, no urls -> `InProcessEngineBackend`: the engine runs in this process (AsyncEngine on its own
  thread); requests go straight to it through the same OpenAI layer the engine's own server uses.
- replicas: N > 1 -> `EngineReplicasBackend` (engine_remote.py) over N `llm-gateway engine` processes,
  supervised (restarted on crash, stopped on close).
- urls: [...] -> `EngineReplicasBackend` over engine replicas that already run.
Both read the same policy keys (engine_options.py) and answer the same errors; only where the engine runs
differs.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING

from gateway.backends.base import Backend, BackendError, Timeouts
from gateway.backends.engine_options import EngineOptions, parse_engine_options
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from gateway.pipeline import CHAT, COMPLETIONS, Endpoint

if TYPE_CHECKING:
    from engine import AsyncEngine, EngineRequestError, OpenAIServing

# The engine's own names for the two generation endpoints (engine/ never imports the gateway's vocabulary).
ENGINE_KIND: dict[Endpoint, str] = {CHAT: "chat", COMPLETIONS: "completion"}


def engine_backend(config: BackendConfig, metrics: Metrics) -> Backend:
    """The engine backend the policy entry asks for: in this process, or replicas (spawned or given URLs)."""
    if not config.urls and config.replicas <= 1:
        return InProcessEngineBackend(config, metrics)
    from gateway.backends.engine_remote import EngineReplicasBackend

    return EngineReplicasBackend(config, metrics)


def backend_error(e: EngineRequestError) -> BackendError:
    reason = "status_4xx" if 400 <= e.status < 500 else "status_5xx"
    return BackendError(reason, e.message, e.status, retryable=e.status >= 500, body=e.body())


class EngineBackendBase(ABC):
    """What both engine backends share: their options, error counting, the endpoints over `_whole` and
    `_stream`, no embeddings."""

    def __init__(self, config: BackendConfig, metrics: Metrics) -> None:
        self.name = config.name
        self.config = config
        self.metrics = metrics
        self.options: EngineOptions = parse_engine_options(config)
        self.model = self.options.model

    def _fail(self, err: BackendError) -> BackendError:
        self.metrics.count_upstream_error(self.name, err.reason, err.status)  # a client's 400 is not counted
        return err

    @abstractmethod
    async def _whole(self, endpoint: Endpoint, body: dict, timeouts: Timeouts) -> dict: ...

    @abstractmethod
    def _stream(self, endpoint: Endpoint, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]: ...

    async def chat(self, body: dict, timeouts: Timeouts) -> dict:
        return await self._whole(CHAT, body, timeouts)

    def chat_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        return self._stream(CHAT, body, timeouts)

    async def completions(self, body: dict, timeouts: Timeouts) -> dict:
        return await self._whole(COMPLETIONS, body, timeouts)

    def completions_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        return self._stream(COMPLETIONS, body, timeouts)

    async def embeddings(self, body: dict, timeouts: Timeouts) -> dict:
        raise BackendError("status_4xx", f"engine backend {self.name} does not serve embeddings", 400, body={
            "error": {"message": f"the engine backend {self.name} does not serve embeddings",
                      "type": "invalid_request_error", "param": "model", "code": "unsupported_endpoint"}})


def _shutdown(held: list[AsyncEngine]) -> None:
    held.pop().shutdown()


class InProcessEngineBackend(EngineBackendBase):
    """The engine in this process: AsyncEngine on its own thread, reached through the engine's OpenAI layer."""

    def __init__(self, config: BackendConfig, metrics: Metrics) -> None:
        super().__init__(config, metrics)
        self.engine: AsyncEngine | None = None
        self._serving: OpenAIServing | None = None
        self._inflight = metrics.inflight(config.name)

    async def start(self) -> None:
        # imported here: the engine package (and torch) loads only for in-process backends
        from engine import AsyncEngine, EngineConfig, EngineMetrics, OpenAIServing

        config = EngineConfig(model=self.model, **self.options.engine_args)
        config.validate()
        engine_metrics = EngineMetrics.on(self.metrics.registry)
        # loading dequantises the weights: seconds of CPU work, off the event loop
        loop = asyncio.get_running_loop()
        self.engine = await loop.run_in_executor(None, AsyncEngine.from_config, config, engine_metrics)
        self.engine.start()
        self._serving = OpenAIServing(self.engine, None)

    async def close(self) -> None:
        if self.engine is not None:
            # Both references go: a backend retired by a policy reload can outlive its close (the gateway's
            # objects are frozen out of the collector's sight), and must not keep the weights with it. The
            # engine goes to the executor in a list its worker empties: the executor's work item lives on a
            # moment after the call returns, and must not be what still holds the engine then.
            held, self.engine, self._serving = [self.engine], None, None
            await asyncio.get_running_loop().run_in_executor(None, _shutdown, held)

    def _serving_or_stopped(self) -> OpenAIServing:
        """The engine's OpenAI layer; after close, the 503 a stopped engine answers (close lets go of it)."""
        from engine import EngineRequestError

        if self._serving is None:
            raise self._fail(backend_error(EngineRequestError(503, "the engine was shut down", "server_error",
                                                              "engine_stopped")))
        return self._serving

    async def _whole(self, endpoint: Endpoint, body: dict, timeouts: Timeouts) -> dict:
        from engine import EngineRequestError

        serving = self._serving_or_stopped()
        self._inflight.inc()
        try:
            async with asyncio.timeout(timeouts.total):
                return await serving.run(ENGINE_KIND[endpoint], {**body, "stream": False, "stream_options": None})
        except EngineRequestError as e:
            raise self._fail(backend_error(e)) from None
        except TimeoutError:
            raise self._fail(BackendError("timeout", f"the engine took longer than {timeouts.total}s", 504)) from None
        finally:
            self._inflight.dec()

    async def _stream(self, endpoint: Endpoint, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        from engine import EngineRequestError

        serving = self._serving_or_stopped()
        self._inflight.inc()
        try:
            try:
                async with asyncio.timeout(timeouts.first_byte):
                    prepared = await serving.prepare(ENGINE_KIND[endpoint], {**body, "stream": True})
                    generation = await serving.open(prepared)
            except EngineRequestError as e:
                raise self._fail(backend_error(e)) from None
            except TimeoutError:
                raise self._fail(BackendError("timeout", "the engine did not admit the request within "
                                              f"{timeouts.first_byte}s", 504, retryable=True)) from None
            deadline = asyncio.get_running_loop().time() + timeouts.total
            async with aclosing(generation.chunks()) as chunks:
                try:
                    while True:
                        # The deadline bounds each wait for the engine, never the caller's work between
                        # chunks (a timeout around a yield would cancel the caller instead).
                        async with asyncio.timeout_at(deadline):
                            chunk = await anext(chunks, None)
                        if chunk is None:
                            break
                        yield chunk
                except EngineRequestError as e:
                    raise self._fail(backend_error(e)) from None
                except TimeoutError:
                    raise self._fail(BackendError("timeout", f"the stream ran past {timeouts.total}s", 504)) from None
        finally:
            self._inflight.dec()

    async def list_models(self) -> list[str]:
        return [self.model]

    async def check_ready(self) -> str | None:
        if self.engine is None or not self.engine.is_running:
            return f"{self.name}: the engine is not running"
        return None
