"""Backend `type: engine` with replicas: N spawned `llm-gateway engine` processes or given URLs.

The route's `routing.strategy` picks the replica (weighted by default). Under `prefix_aware` the gateway
renders the chat template with the engine's tokenizer, hashes the prompt's full blocks with the engine's own
chained hash, and picks the replica with the cheapest prefill given what each replica holds (mirrored from its
/kv_events) and its load; calls outside a route (a summariser) are prefix-routed too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING

from gateway.backends.base import STREAMED, WHOLE, BackendError, Timeouts
from gateway.backends.engine import EngineBackendBase
from gateway.backends.engine_replicas import Replica, ReplicaSet, make_replicas
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from gateway.pipeline import CHAT, Endpoint
from gateway.routing.prefix import PrefixRouter, Ticket

if TYPE_CHECKING:
    from engine import Tokenizer

log = logging.getLogger("gateway.backends.engine")


class EngineReplicasBackend(EngineBackendBase):
    def __init__(self, config: BackendConfig, metrics: Metrics) -> None:
        super().__init__(config, metrics)
        opts = self.options
        block_size = int(opts.engine_args.get("block_size", 16))
        self.router = PrefixRouter(block_size, opts.overlap_weight, opts.balance_abs, opts.balance_rel,
                                   opts.load_weight, opts.shared_weight)
        self.replica_set: ReplicaSet | None = None
        self._tokenizer: Tokenizer | None = None
        self._hash_blocks: Callable[[list[int], int], list[int]] | None = None

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._load_tokenizer)
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
            # the engine's own tokenizer and chained block hash: what a replica reports in its KV events
            from engine import Tokenizer, hash_prompt_blocks, resolve_model_path

            self._tokenizer = Tokenizer.from_model_path(resolve_model_path(self.model))
            self._hash_blocks = hash_prompt_blocks
        except (ImportError, ValueError, OSError) as e:
            log.warning("engine backend %s: no tokenizer for %r (%s); routing by load only", self.name, self.model, e)

    async def close(self) -> None:
        if self.replica_set is not None:
            await self.replica_set.close()
            self.replica_set = None

    # --- replica choice ---------------------------------------------------------------------------------

    async def _route(self, endpoint: Endpoint, body: dict) -> tuple[Replica, Ticket]:
        """Pick a replica; returns it and the router ticket to finish when the request ends."""
        assert self.replica_set is not None
        hashes, num_tokens = await asyncio.get_running_loop().run_in_executor(
            None, self._prompt_blocks, endpoint, body)
        try:
            decision = self.router.choose(hashes, num_tokens)
        except LookupError:
            raise self._fail(BackendError("connect", f"no healthy replica of engine backend {self.name}", 503,
                                          retryable=True)) from None
        ticket = self.router.start(decision, hashes, num_tokens)
        return self.replica_set.replicas[decision.replica], ticket

    def _prompt_blocks(self, endpoint: Endpoint, body: dict) -> tuple[list[int], int]:
        """The prompt's chained block hashes (full blocks) and length; ([], 0) when it cannot be rendered
        here (the replica will answer the client's error itself)."""
        if self._tokenizer is None or self._hash_blocks is None:
            return [], 0
        from engine import chat_messages

        try:
            if endpoint == CHAT:
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
        return self._hash_blocks(ids, self.router.block_size), len(ids)

    def _note_failure(self, replica: Replica, e: BackendError) -> None:
        if e.reason == "connect" and self.replica_set is not None:
            self.replica_set.mark_down(replica.name)  # a retry picks another replica; health brings it back

    # --- calls ------------------------------------------------------------------------------------------

    async def _whole(self, endpoint: Endpoint, body: dict, timeouts: Timeouts) -> dict:
        replica, ticket = await self._route(endpoint, body)
        try:
            return await WHOLE[endpoint](replica.client, body, timeouts)
        except BackendError as e:
            self._note_failure(replica, e)
            raise
        finally:
            self.router.finish(ticket)

    async def _stream(self, endpoint: Endpoint, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        replica, ticket = await self._route(endpoint, body)
        try:
            stream = STREAMED[endpoint](replica.client, body, timeouts)
            async with aclosing(stream):
                async for chunk in stream:
                    yield chunk
        except BackendError as e:
            self._note_failure(replica, e)
            raise
        finally:
            self.router.finish(ticket)

    async def list_models(self) -> list[str]:
        if self.config.model:
            return [self.model]
        assert self.replica_set is not None
        for replica in self.replica_set.healthy():
            models = await replica.client.list_models()
            if models:
                return models
        return list(self.config.models)

    async def check_ready(self) -> str | None:
        if self.replica_set is None:
            return f"{self.name}: not started"
        if not self.replica_set.healthy():
            return f"{self.name}: no engine replica is healthy"
        return None
