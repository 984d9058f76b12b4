"""One engine replica as an OpenAI-compatible HTTP server (aiohttp).

POST /v1/chat/completions, POST /v1/completions (stream and not), GET /v1/models, GET /health,
GET /metrics (engine_* names) and GET /kv_events: newline-delimited JSON (or SSE with
`?format=sse` / `Accept: text/event-stream`) starting with a snapshot of the block hashes this replica
holds, then every block-stored / block-removed event, so a router can mirror it exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from engine.serving.errors import EngineRequestError, bad_request, error_body
from engine.serving.openai_serving import Generation, OpenAIServing

if TYPE_CHECKING:
    from engine.serving.async_engine import AsyncEngine

log = logging.getLogger(__name__)

STARTED_KEY = web.AppKey("started", int)
# Admission: requests open in this server (running or waiting) and the most it takes before answering 503.
ADMISSION_KEY = web.AppKey("admission", dict)
SERVING_KEY = web.AppKey("serving", OpenAIServing)
MAX_BODY_BYTES = 32 * 2**20
KV_HEARTBEAT_S = 10.0
DISCONNECT_POLL_S = 0.25  # how often a non-streaming request checks whether its client is still there

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except EngineRequestError as e:
        return _json(e.body(), e.status)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = "not_found" if e.status == 404 else None
        return _json(error_body(e.reason or "error", "invalid_request_error", code), e.status)
    except Exception as e:  # never let a bug answer with a bare 500 page
        log.exception("unhandled error on %s", request.path)
        return _json(error_body(f"internal error: {e}", "server_error", "internal_error"), 500)


async def _read_json(request: web.Request) -> object:
    raw = await request.read()
    if not raw:
        raise bad_request("the request body is empty; send a JSON object", None, "invalid_json")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"the request body is not valid JSON: {e}", None, "invalid_json") from e


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _respond_whole(request: web.Request, generation: Generation) -> web.Response:
    task = asyncio.ensure_future(generation.response())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return _json(task.result())
            if _client_gone(request):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await generation.aclose()
                return _json(error_body("client disconnected", "invalid_request_error", "client_gone"), 499)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await generation.aclose()


async def _respond_stream(request: web.Request, generation: Generation) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    chunks = generation.chunks()
    try:
        await resp.prepare(request)
        try:
            async for chunk in chunks:
                await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        except EngineRequestError as e:  # the engine failed mid-stream: say so in-band, then end the stream
            await resp.write(b"data: " + orjson.dumps(e.body()) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError:
        pass  # client gone: closing the chunks below aborts the engine request
    finally:
        await chunks.aclose()
        await generation.aclose()
    return resp


def _saturated(app: web.Application) -> bool:
    admission = app[ADMISSION_KEY]
    return admission["limit"] is not None and admission["open"] >= admission["limit"]


async def _openai(request: web.Request, kind: str) -> web.StreamResponse:
    serving = request.app[SERVING_KEY]
    admission = request.app[ADMISSION_KEY]
    if _saturated(request.app):
        # A waiting list that only grows makes every request slower until clients time out: refuse at once.
        return web.Response(status=503, body=orjson.dumps(error_body(
            f"the engine is saturated ({admission['open']} requests open, at most {admission['limit']}); "
            "retry shortly", "server_error", "engine_overloaded")), content_type="application/json",
            headers={"Retry-After": "1"})
    admission["open"] += 1
    try:
        prepared = await serving.prepare(kind, await _read_json(request))
        generation = await serving.open(prepared)
        if prepared.stream:
            return await _respond_stream(request, generation)
        return await _respond_whole(request, generation)
    finally:
        admission["open"] -= 1


async def ready(request: web.Request) -> web.Response:
    """503 while the loop is down or the waiting list is full (a load balancer should send elsewhere)."""
    engine = request.app[SERVING_KEY].engine
    if not engine.is_running:
        return _json(error_body("the engine loop is not running", "server_error", "engine_stopped"), 503)
    if _saturated(request.app):
        return _json(error_body("the engine's waiting list is full", "server_error", "engine_overloaded"), 503)
    return _json({"status": "ready", "open": request.app[ADMISSION_KEY]["open"]})


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, "completion")


async def models(request: web.Request) -> web.Response:
    serving = request.app[SERVING_KEY]
    engine = serving.engine
    return _json({"object": "list", "data": [{
        "id": serving.served_model, "object": "model", "created": request.app[STARTED_KEY], "owned_by": "llm-gateway",
        "max_model_len": engine.max_model_len,
    }]})


async def health(request: web.Request) -> web.Response:
    engine = request.app[SERVING_KEY].engine
    if not engine.is_running:
        return _json(error_body("the engine loop is not running", "server_error", "engine_stopped"), 503)
    return _json({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[SERVING_KEY].engine
    return web.Response(body=engine.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"})


async def kv_events(request: web.Request) -> web.StreamResponse:
    engine = request.app[SERVING_KEY].engine
    sse = request.query.get("format") == "sse" or "text/event-stream" in request.headers.get("Accept", "")
    if request.query.get("format") not in (None, "sse", "ndjson"):
        raise bad_request("format must be 'ndjson' or 'sse'", "format", "invalid_value")
    resp = web.StreamResponse(headers={
        "Content-Type": "text/event-stream" if sse else "application/x-ndjson", "Cache-Control": "no-cache"})

    def frame(record: dict) -> bytes:
        data = orjson.dumps(record)
        return b"data: " + data + b"\n\n" if sse else data + b"\n"

    sub = engine.subscribe_kv_events()
    try:
        await resp.prepare(request)
        await resp.write(frame({"type": "snapshot", "block_size": engine.block_size, "block_hashes": sub.snapshot}))
        while True:
            try:
                record = await asyncio.wait_for(sub.get(), KV_HEARTBEAT_S)
            except TimeoutError:
                await resp.write(frame({"type": "heartbeat"}))
                continue
            if record is None:
                break
            await resp.write(frame(record))
        await resp.write_eof()
    except ConnectionResetError:
        pass
    finally:
        sub.close()
    return resp


def create_engine_app(
    engine: AsyncEngine, model_name: str, max_waiting_requests: int | None = None
) -> web.Application:
    """The replica's HTTP app; it starts the engine loop on start-up (the caller owns shutdown).
    `max_waiting_requests`: beyond max_num_seqs running plus this many waiting, requests get a 503 at once."""
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)
    app[SERVING_KEY] = OpenAIServing(engine, model_name)
    limit = None if max_waiting_requests is None else engine.engine.config.max_num_seqs + max_waiting_requests
    app[ADMISSION_KEY] = {"open": 0, "limit": limit}
    app[STARTED_KEY] = int(time.time())

    async def start_loop(_: web.Application) -> None:
        engine.start()

    app.on_startup.append(start_loop)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/kv_events", kv_events)
    return app
