"""Backend `type: engine`: the bundled inference engine.

- replicas: 1, no urls -> the engine runs in this process (AsyncEngine on its own thread); requests go
  straight to it through the same OpenAI layer the engine's own server uses.
- replicas: N > 1 -> N `llm-gateway engine` processes, supervised (restarted on crash, stopped on close).
- urls: [...] -> engine replicas that already run.
With replicas, the route's `routing.strategy` picks the replica (weighted by default). Under `prefix_aware`
the gateway renders the chat template with the engine's tokenizer, hashes the prompt's full blocks with the
engine's own chained hash, and picks the replica with the cheapest prefill given what each replica holds
(mirrored from its /kv_events) and its load; calls outside a route (a summariser) are prefix-routed too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from gateway.backends.base import BackendError, Timeouts
from gateway.backends.engine_options import EngineOptions, parse_engine_options
from gateway.backends.engine_replicas import Replica, ReplicaSet, make_replicas
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from gateway.routing.prefix import PrefixRouter

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from engine.errors import EngineRequestError
    from engine.serving import OpenAIServing
    from engine.tokenizer import Tokenizer

log = logging.getLogger(__name__)


def _backend_error(e: EngineRequestError) -> BackendError:
    reason = "status_4xx" if 400 <= e.status < 500 else "status_5xx"
    return BackendError(reason, e.message, e.status, retryable=e.status >= 500, body=e.body())


class EngineBackend:
    def __init__(self, config: BackendConfig, metrics: Metrics) -> None:
        self.name = config.name
        self.config = config
        self.metrics = metrics
        self.options: EngineOptions = parse_engine_options(config)
        self.model = self.options.model
        self.in_process = not config.urls and config.replicas <= 1
        self.engine: AsyncEngine | None = None
        self._serving: OpenAIServing | None = None
        self.router: PrefixRouter | None = None
        self.replica_set: ReplicaSet | None = None
        self._tokenizer: Tokenizer | None = None
        self._hash_blocks: Any = None
        self._inflight = metrics.inflight(config.name)

    # --- lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.in_process:
            from engine.async_engine import AsyncEngine
            from engine.config import EngineConfig
            from engine.metrics import EngineMetrics
            from engine.serving import OpenAIServing

            config = EngineConfig(model=self.model, **self.options.engine_args)
            config.validate()
            engine_metrics = EngineMetrics.on(self.metrics.registry)
            # loading dequantises the weights: seconds of CPU work, off the event loop
            self.engine = await loop.run_in_executor(None, AsyncEngine.from_config, config, engine_metrics)
            self.engine.start()
            self._serving = OpenAIServing(self.engine, None)
            return
        block_size = int(self.options.engine_args.get("block_size", 16))
        self.router = PrefixRouter(block_size, self.options.overlap_weight, self.options.balance_abs,
                                   self.options.balance_rel, self.options.load_weight, self.options.shared_weight)
        await loop.run_in_executor(None, self._load_tokenizer)
        replicas, spawn = make_replicas(self.config, self.options, self.metrics)
        self.replica_set = ReplicaSet(replicas, self.router, self.options, spawn)
        try:
            await self.replica_set.start()
        except BaseException:
            await self.replica_set.close()
            raise

    def _load_tokenizer(self) -> None:
        """The engine's tokenizer and block hash, for routing; without them the router balances load only."""
        if self.config.urls and not self.config.model:
            log.warning("engine backend %s: urls without model; routing by load only", self.name)
            return
        try:
            from engine.block_manager import hash_prompt_blocks  # the engine's own chained block hash
            from engine.config import resolve_model_path
            from engine.tokenizer import Tokenizer

            self._tokenizer = Tokenizer.from_model_path(resolve_model_path(self.model))
            self._hash_blocks = hash_prompt_blocks
        except (ImportError, ValueError, OSError) as e:
            log.warning("engine backend %s: no tokenizer for %r (%s); routing by load only", self.name, self.model, e)

    async def close(self) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            await asyncio.get_running_loop().run_in_executor(None, engine.shutdown)
        if self.replica_set is not None:
            await self.replica_set.close()
            self.replica_set = None

    # --- in-process calls -------------------------------------------------------------------------------

    async def _local_whole(self, kind: str, body: dict, timeouts: Timeouts) -> dict:
        # imported here: the engine package (and torch) loads only for in-process backends
        from engine.errors import EngineRequestError

        assert self._serving is not None
        self._inflight.inc()
        try:
            async with asyncio.timeout(timeouts.total):
                return await self._serving.run(kind, {**body, "stream": False, "stream_options": None})
        except EngineRequestError as e:
            raise self._fail(_backend_error(e)) from None
        except TimeoutError:
            raise self._fail(BackendError("timeout", f"the engine took longer than {timeouts.total}s", 504)) from None
        finally:
            self._inflight.dec()

    async def _local_stream(self, kind: str, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        from engine.errors import EngineRequestError

        assert self._serving is not None
        self._inflight.inc()
        try:
            try:
                async with asyncio.timeout(timeouts.first_byte):
                    prepared = await self._serving.prepare(kind, {**body, "stream": True})
                    generation = await self._serving.open(prepared)
            except EngineRequestError as e:
                raise self._fail(_backend_error(e)) from None
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
                    raise self._fail(_backend_error(e)) from None
                except TimeoutError:
                    raise self._fail(BackendError("timeout", f"the stream ran past {timeouts.total}s", 504)) from None
        finally:
            self._inflight.dec()

    def _fail(self, err: BackendError) -> BackendError:
        self.metrics.count_upstream_error(self.name, err.reason, err.status)  # a client's 400 is not counted
        return err

    # --- replica calls ----------------------------------------------------------------------------------

    async def _route(self, kind: str, body: dict) -> tuple[Replica, Any]:
        """Pick a replica; returns it and the router ticket to finish when the request ends."""
        assert self.router is not None and self.replica_set is not None
        hashes, num_tokens = await asyncio.get_running_loop().run_in_executor(None, self._prompt_blocks, kind, body)
        try:
            decision = self.router.choose(hashes, num_tokens)
        except LookupError:
            raise self._fail(BackendError("connect", f"no healthy replica of engine backend {self.name}", 503,
                                          retryable=True)) from None
        ticket = self.router.start(decision, hashes, num_tokens)
        return self.replica_set.replicas[decision.replica], ticket

    def _prompt_blocks(self, kind: str, body: dict) -> tuple[list[int], int]:
        """The prompt's chained block hashes (full blocks) and length; ([], 0) when it cannot be rendered
        here (the replica will answer the client's error itself)."""
        if self._tokenizer is None or self._hash_blocks is None:
            return [], 0
        from engine.serving_params import chat_messages

        try:
            if kind == "chat":
                tools = body.get("tools") if isinstance(body.get("tools"), list) else None
                ids = self._tokenizer.apply_chat_template(chat_messages(body), add_generation_prompt=True, tools=tools)
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, str):
                    ids = self._tokenizer.encode(prompt, add_special_tokens=False)
                elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
                    ids = list(prompt)
                else:
                    return [], 0
        except Exception:  # bad messages: routing does not matter, the replica answers 400
            return [], 0
        assert self.router is not None
        return self._hash_blocks(ids, self.router.block_size), len(ids)

    async def _remote_whole(self, kind: str, body: dict, timeouts: Timeouts) -> dict:
        replica, ticket = await self._route(kind, body)
        try:
            if kind == "chat":
                return await replica.client.chat(body, timeouts)
            return await replica.client.completions(body, timeouts)
        except BackendError as e:
            self._note_failure(replica, e)
            raise
        finally:
            self.router.finish(ticket)  # type: ignore[union-attr]

    async def _remote_stream(self, kind: str, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        replica, ticket = await self._route(kind, body)
        try:
            stream = replica.client.chat_stream(body, timeouts) if kind == "chat" else \
                replica.client.completions_stream(body, timeouts)
            async with aclosing(stream):
                async for chunk in stream:
                    yield chunk
        except BackendError as e:
            self._note_failure(replica, e)
            raise
        finally:
            self.router.finish(ticket)  # type: ignore[union-attr]

    def _note_failure(self, replica: Replica, e: BackendError) -> None:
        if e.reason == "connect" and self.replica_set is not None:
            self.replica_set.mark_down(replica.name)  # a retry picks another replica; health brings it back

    # --- the Backend protocol ---------------------------------------------------------------------------

    async def chat(self, body: dict, timeouts: Timeouts) -> dict:
        if self.in_process:
            return await self._local_whole("chat", body, timeouts)
        return await self._remote_whole("chat", body, timeouts)

    def chat_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        if self.in_process:
            return self._local_stream("chat", body, timeouts)
        return self._remote_stream("chat", body, timeouts)

    async def completions(self, body: dict, timeouts: Timeouts) -> dict:
        if self.in_process:
            return await self._local_whole("completion", body, timeouts)
        return await self._remote_whole("completion", body, timeouts)

    def completions_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        if self.in_process:
            return self._local_stream("completion", body, timeouts)
        return self._remote_stream("completion", body, timeouts)

    async def embeddings(self, body: dict, timeouts: Timeouts) -> dict:
        raise BackendError("status_4xx", f"engine backend {self.name} does not serve embeddings", 400, body={
            "error": {"message": f"the engine backend {self.name} does not serve embeddings",
                      "type": "invalid_request_error", "param": "model", "code": "unsupported_endpoint"}})

    async def list_models(self) -> list[str]:
        if self.in_process or self.config.model:
            return [self.model]
        assert self.replica_set is not None
        for replica in self.replica_set.healthy():
            models = await replica.client.list_models()
            if models:
                return models
        return list(self.config.models)

    async def check_ready(self) -> str | None:
        if self.in_process:
            if self.engine is None or not self.engine.is_running:
                return f"{self.name}: the engine is not running"
            return None
        if self.replica_set is None:
            return f"{self.name}: not started"
        if not self.replica_set.healthy():
            return f"{self.name}: no engine replica is healthy"
        return None
