"""OpenAI chat/completions on top of an AsyncEngine: validate, tokenize off the loop, run, assemble.

Used by the engine's HTTP server and by the gateway's in-process engine backend. Errors are
`EngineRequestError`s (OpenAI envelope + status): 400 for bad input, including what only the engine can
judge (its ValueError from add_request), 404 for another model, 503 when the engine stopped.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from engine.serving.async_engine import EngineStepError, EngineStoppedError, RequestStream
from engine.serving.errors import EngineRequestError, bad_request
from engine.serving.output import ResponseBuilder
from engine.serving.params import PreparedRequest, prepare_chat, prepare_completion

if TYPE_CHECKING:
    from engine.llm_engine import RequestOutput
    from engine.serving.async_engine import AsyncEngine


class Generation:
    """The engine requests behind one client request (one per prompt), already admitted by the engine."""

    def __init__(self, prepared: PreparedRequest, streams: list[RequestStream], builder: ResponseBuilder) -> None:
        self.prepared = prepared
        self.streams = streams
        self.builder = builder

    async def _outputs(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        if len(self.streams) == 1:
            async for out in self.streams[0]:
                yield 0, out
            return
        queue: asyncio.Queue[tuple[int, RequestOutput] | BaseException | None] = asyncio.Queue()

        async def pump(i: int, stream: RequestStream) -> None:
            try:
                async for out in stream:
                    queue.put_nowait((i, out))
            except BaseException as e:  # re-raised in the consumer
                queue.put_nowait(e)
                return
            queue.put_nowait(None)

        tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(self.streams)]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is None:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()

    async def chunks(self) -> AsyncIterator[dict]:
        """Stream chunks in order; a usage-only chunk last when include_usage was asked."""
        outputs = self._outputs()
        try:
            for chunk in self.builder.role_chunks():
                yield chunk
            async for i, out in outputs:
                chunk = self.builder.add(i, out)
                if chunk is not None:
                    yield chunk
            if self.prepared.include_usage:
                yield self.builder.usage_chunk()
        except (EngineStepError, EngineStoppedError) as e:
            raise _engine_failure(e) from e
        finally:
            await outputs.aclose()
            await self.aclose()

    async def response(self) -> dict:
        outputs = self._outputs()
        try:
            async for i, out in outputs:
                self.builder.add(i, out)
        except (EngineStepError, EngineStoppedError) as e:
            raise _engine_failure(e) from e
        finally:
            await outputs.aclose()
            await self.aclose()
        return self.builder.response()

    async def aclose(self) -> None:
        """Abort whatever has not finished (client gone); frees the blocks at once."""
        for stream in self.streams:
            await stream.aclose()


def _engine_failure(e: Exception) -> EngineRequestError:
    if isinstance(e, EngineStoppedError):
        return EngineRequestError(503, str(e), "server_error", "engine_stopped")
    return EngineRequestError(500, str(e), "server_error", "engine_error")


class OpenAIServing:
    """`served_model` is checked against the body's model (404 otherwise); None accepts any name."""

    def __init__(self, engine: AsyncEngine, served_model: str | None) -> None:
        self.engine = engine
        self.served_model = served_model

    async def prepare(self, kind: str, body: Any) -> PreparedRequest:
        """Validate and tokenize (chat templates and BPE are CPU work, so they run off the event loop)."""
        prepare = prepare_chat if kind == "chat" else prepare_completion
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, prepare, body, self.engine.tokenizer, self.engine.max_model_len, self.served_model,
            self.engine.compile_grammar,
        )

    async def open(self, prepared: PreparedRequest) -> Generation:
        """Admit the request's prompts into the engine; a refusal is a 400 and admits none of them."""
        base = uuid.uuid4().hex
        prefix = "chatcmpl-" if prepared.kind == "chat" else "cmpl-"
        streams: list[RequestStream] = []
        try:
            for i, prompt in enumerate(prepared.prompts):
                request_id = base if len(prepared.prompts) == 1 else f"{base}-{i}"
                streams.append(await self.engine.add_request(request_id, prompt, prepared.params))
        except ValueError as e:
            for s in streams:
                await s.aclose()
            raise bad_request(str(e), "messages" if prepared.kind == "chat" else "prompt", "invalid_value") from e
        except EngineStoppedError as e:
            for s in streams:
                await s.aclose()
            raise _engine_failure(e) from e
        except BaseException:
            for s in streams:
                await s.aclose()
            raise
        top = int(prepared.params.logprobs or 0)
        return Generation(prepared, streams, ResponseBuilder(prepared, self.engine.tokenizer, prefix + base, top))

    async def run(self, kind: str, body: Any) -> dict:
        """A whole non-streaming response."""
        generation = await self.open(await self.prepare(kind, body))
        return await generation.response()
