"""HTTP handlers: small functions over the app's state. Errors leave as OpenAI's envelope (see `envelope`)."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from gateway.appkeys import EXCHANGE, GATEWAY
from gateway.backends.base import STREAMED, WHOLE, BackendError
from gateway.config.schema import ServerConfig
from gateway.errors import GatewayError, bad_request
from gateway.gateway import Gateway
from gateway.pipeline import CHAT, COMPLETIONS, EMBEDDINGS, CacheControl, Endpoint, RequestContext, Stage
from gateway.request_checks import check_depth, check_embeddings, check_generation, check_length
from gateway.state import Snapshot
from gateway.streaming import DONE_EVENT, CoalescingWriter, StreamAssembler, completion_to_chunks, sse_event
from gateway.usage import ledger as usage_ledger
from gateway.usage.report import usage_report

log = logging.getLogger("gateway")

JSON = "application/json"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
ENDPOINT_PARAMS: dict[Endpoint, str] = {CHAT: "messages", COMPLETIONS: "prompt", EMBEDDINGS: "input"}
# The backend call that answers each endpoint, whole or streamed: explicit callables, not method names.
# How long a request's body may take to arrive once its headers have, on both servers: a client that sends headers
# and then stalls or trickles its body is answered 408 and its connection closed, instead of holding the connection
# (and on aiohttp's server a handler) forever. A total, not an idle timeout: a byte every few seconds would keep an
# idle timer from ever firing. A 10 MB body (server.max_body_bytes' default) still fits at under 2 Mbit/s.
BODY_TIMEOUT_S = 60.0
# A client's X-Request-Id is echoed in headers, logs and JSON only if it is plain visible ASCII of sane length;
# anything else (control bytes, non-UTF-8, spaces) is replaced by a fresh id.
REQUEST_ID_OK = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}\Z")


def new_request_id() -> str:
    """128 random bits as 32 hex digits: no getrandom system call per request (the random module's generator,
    which reseeds itself in a forked child), and not a counter, so ids do not tell one tenant how much traffic
    a worker served another between two of its requests."""
    return f"{random.getrandbits(128):032x}"


def body_timeout(seconds: float) -> GatewayError:
    """The 408 for a request whose body did not arrive within `seconds` of its headers."""
    return GatewayError(408, f"The request body did not arrive within {seconds:g} seconds.", "invalid_request_error",
                        "request_timeout")


def json_response(body: Any, headers: dict[str, str] | None = None, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON, headers=headers)


# ---- the exchange: one request and its answer, whichever HTTP server carries them ----------------------------


class Exchange:
    """What the pipeline and the envelope need of an HTTP request and its response, and nothing more: aiohttp's
    server carries it (`AiohttpExchange`) for every endpoint, `gateway/front.py`'s lean server for the two
    generation endpoints. The facts the envelope reads after the handler (route, backend, status) live here."""

    __slots__ = ("gateway", "method", "path", "headers", "content_length", "request_id", "route", "backend",
                 "status", "streaming")
    # aiohttp writes a handler's response only when the handler returns, so what the envelope does after the
    # handler delays the answer; the front writes it in `reply` itself.
    writes_on_return = True

    def __init__(self, gateway: Gateway, method: str, path: str, headers: Mapping[str, str],
                 content_length: int | None) -> None:
        self.gateway = gateway
        self.method = method
        self.path = path
        self.headers = headers
        self.content_length = content_length
        self.request_id = ""
        self.route: str | None = None  # the route's name, once routed
        self.backend = "none"  # what answered: a backend's name, or "cache"
        self.status: str | None = None  # the status counted: the response's, or an in-band error's
        self.streaming = False  # the headers went out: an error now ends the stream in-band

    # The request body when it has arrived already (the front reads it before the handler runs): taken as is,
    # no `read` to await. None: `read` it.
    body: bytes | None = None

    async def read(self) -> bytes:
        raise NotImplementedError

    def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        """A whole JSON answer (with X-Request-Id)."""
        raise NotImplementedError

    async def open_stream(self, headers: Mapping[str, str]) -> None:
        """Send a 200 with these headers; the body follows by `write` and ends with `write_eof`."""
        raise NotImplementedError

    async def write(self, data: bytes) -> None:
        raise NotImplementedError

    async def write_eof(self, data: bytes = b"") -> None:
        """The stream's last bytes and its end (again: nothing)."""
        raise NotImplementedError


class AiohttpExchange(Exchange):
    """An exchange on aiohttp's server: the handler's answer is `response`, which aiohttp writes."""

    __slots__ = ("request", "response")

    def __init__(self, request: web.Request) -> None:
        super().__init__(request.app[GATEWAY], request.method, request.path, request.headers, request.content_length)
        self.request = request
        self.response: web.StreamResponse | None = None

    async def read(self) -> bytes:
        # aiohttp's server has no deadline of its own on a body (its keep-alive timer runs only between requests):
        # the requests the front hands over (a chunked body, Expect: 100-continue) get the front's.
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                return await self.request.read()
        except TimeoutError:
            raise body_timeout(BODY_TIMEOUT_S) from None

    def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        response = web.Response(body=body, status=status, content_type=JSON, headers=headers)
        if status == 408:  # the body never came whole: the connection is not reused (aiohttp drains what it can)
            response.force_close()
        self.adopt(response)

    def adopt(self, response: web.StreamResponse) -> None:
        """A response an aiohttp handler made (or `reply` did): counted by its status, the request id added."""
        self.response = response
        if not response.prepared:
            response.headers["X-Request-Id"] = self.request_id
            self.status = str(response.status)

    async def open_stream(self, headers: Mapping[str, str]) -> None:
        response = self.response = web.StreamResponse(headers=headers)
        await response.prepare(self.request)
        self.streaming = True
        self.status = "200"

    async def write(self, data: bytes) -> None:
        await self.response.write(data)  # type: ignore[union-attr]

    async def write_eof(self, data: bytes = b"") -> None:
        await self.response.write_eof(data)  # type: ignore[union-attr]



# ---- request preparation -------------------------------------------------------------------------------------


async def read_json(ex: Exchange, server: ServerConfig, param: str) -> dict:
    """The body as a JSON object within the server's limits on its size and on the length of `param`."""
    max_bytes = server.max_body_bytes
    if ex.content_length is not None and ex.content_length > max_bytes:
        raise GatewayError(413, f"Request body of {ex.content_length} bytes is over the limit of {max_bytes} bytes.",
                           "invalid_request_error", "request_too_large")
    raw = ex.body if ex.body is not None else await ex.read()
    if len(raw) > max_bytes:
        raise GatewayError(413, f"Request body is over the limit of {max_bytes} bytes.", "invalid_request_error",
                           "request_too_large")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"We could not parse the JSON body of your request: {e}.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    check_length(body, param, server.max_messages)
    check_depth(raw, body)
    return body


def validate_body(body: dict, endpoint: Endpoint) -> tuple[str, bool, bool]:
    """Checks what the gateway itself relies on; returns (model, stream, include_usage)."""
    model = body.get("model")
    if model is None:
        raise bad_request("You must provide a model parameter.", "model", "missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string.", "model", "invalid_type")
    param = ENDPOINT_PARAMS[endpoint]
    if param not in body:
        raise bad_request(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    if endpoint == CHAT:
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty array.", "messages", "invalid_type")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise bad_request(f"'messages[{i}]' must be an object with a string 'role'.", f"messages[{i}]",
                                  "invalid_type")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean.", "stream", "invalid_type")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object.", "stream_options", "invalid_type")
    if options and not stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true.", "stream_options", "invalid_value")
    if endpoint == EMBEDDINGS:
        check_embeddings(body)
    else:
        check_generation(body, endpoint)
    return model, stream, bool(options and options.get("include_usage"))


async def prepare(ex: Exchange, endpoint: Endpoint) -> tuple[Gateway, Snapshot, RequestContext]:
    gw = ex.gateway
    snap = gw.snapshot
    headers = ex.headers
    tenant = snap.auth.tenant_for(headers.get("Authorization"))
    body = await read_json(ex, snap.policy.server, ENDPOINT_PARAMS[endpoint])
    model, stream, include_usage = validate_body(body, endpoint)
    route = snap.policy.route_for(model)
    if route is None:
        raise GatewayError(404, f"The model `{model}` does not exist or you do not have access to it.",
                           "invalid_request_error", "model_not_found", "model")
    ex.route = route.name
    if tenant.limits.rpm or tenant.limits.tpm:  # an open tenant has nothing to check, nor to await
        await gw.limiter.admit(tenant)
    if tenant.limits.has_budget:
        await gw.accounting.budgets.admit(tenant, time.time())
    ctx = RequestContext(
        request_id=ex.request_id, endpoint=endpoint, body=body, forward_body=body, model=model,
        stream=stream, include_usage=include_usage, tenant=tenant, route=route, policy=snap.policy,
        headers=headers, cache_control=CacheControl.parse(headers.get("Cache-Control")),
        response_headers={"X-Request-Id": ex.request_id},  # streams send headers before the envelope
    )
    usage_ledger.current.set(ctx.ledger)  # for the judge, which has no ctx; this request's task owns the context
    return gw, snap, ctx


def upstream_body(ctx: RequestContext) -> dict:
    """What is forwarded: streams always ask for usage, so tokens are counted and cached entries carry it."""
    body = ctx.forward_body
    if ctx.stream and not ctx.include_usage:
        body = {**body, "stream_options": {**(body.get("stream_options") or {}), "include_usage": True}}
    return body


# ---- completion endpoints ------------------------------------------------------------------------------------


async def generate(ex: Exchange, endpoint: Endpoint) -> None:
    """Chat or legacy completions, whole or streamed, from a stage (a cache hit) or a backend."""
    gw, snap, ctx = await prepare(ex, endpoint)
    stages = gw.stages_by_endpoint[endpoint]
    for stage in stages:
        hit = await stage.before(ctx)
        if hit is not None:
            return await _answer_from_cache(ex, ctx, hit)
    route = ctx.route
    if ctx.stream:
        return await _relay_stream(ex, gw, snap, ctx, stages)
    call = WHOLE[endpoint]
    completion, name = await gw.router.call(
        route, snap.backends, lambda b: call(b, ctx.forward_body, route.timeouts),
        endpoint=endpoint, body=ctx.forward_body, tenant=ctx.tenant.name,
    )
    usage = completion.get("usage")
    try:
        for stage in stages:
            await stage.after(ctx, completion)
    finally:
        # The answer came: its tokens are spent, whatever happens before it goes out. A client that hangs up
        # now cancels this task in the cache's store or in the charge itself; either way it is charged (the
        # charge is shielded), or a tenant could spend past its TPM limit through requests it abandons.
        gw.accounting.settle_upstream(ctx, usage, completion.get("model"))
        if ctx.tenant.limits.tpm:
            await gw.charge(ctx, usage)
        await _charge_budget(gw, ctx)
    ctx.response_headers["X-Backend"] = ex.backend = name
    ex.reply(200, orjson.dumps(completion), ctx.response_headers)
    # Counted once the answer is on its way (the client does not wait on the metrics' locks), with no await
    # between the answer and the envelope's request count: a client that reads /metrics after its answer finds
    # both. An error here is logged by the envelope, never a second answer.
    gw.count_tokens(usage)


async def _charge_budget(gw: Gateway, ctx: RequestContext) -> None:
    """The request's dollars against its tenant's budgets; shielded: a client gone has spent them all the same."""
    if ctx.tenant.limits.has_budget:
        await asyncio.shield(gw.accounting.charge(ctx))


async def _answer_from_cache(ex: Exchange, ctx: RequestContext, hit: dict) -> None:
    ex.gateway.accounting.settle_hit(ctx, hit)  # before the headers go out: X-Cost-USD is one of them
    await _charge_budget(ex.gateway, ctx)  # a judge's yes cost money even though the answer was cached
    ctx.response_headers["X-Backend"] = ex.backend = "cache"
    if not ctx.stream:
        return ex.reply(200, orjson.dumps(hit), ctx.response_headers)
    await ex.open_stream({**SSE_HEADERS, **ctx.response_headers})
    # The whole replay is one write: every event and the end of the body.
    await ex.write_eof(b"".join(map(sse_event, completion_to_chunks(hit, ctx.include_usage))) + DONE_EVENT)


async def _relay_stream(
    ex: Exchange, gw: Gateway, snap: Snapshot, ctx: RequestContext, stages: tuple[Stage, ...]
) -> None:
    route = ctx.route
    body = upstream_body(ctx)
    open_call = STREAMED[ctx.endpoint]
    assembler = StreamAssembler()
    ttft: float | None = None
    charged = False  # the tenant's TPM was charged the stream's usage (or its estimate) before [DONE]
    # The lease closes the upstream stream and frees the backend's in-flight slot however this block is left
    # (done, an error event, a client that hung up); a stream that never opened raises here, holding nothing.
    name: str | None = None  # set once a backend's stream is open
    try:
        async with gw.router.open_stream(route, snap.backends, lambda b: open_call(b, body, route.timeouts),
                                         endpoint=ctx.endpoint, body=body, tenant=ctx.tenant.name) as lease:
            name = lease.backend
            ctx.response_headers["X-Backend"] = ex.backend = name
            await ex.open_stream({**SSE_HEADERS, **ctx.response_headers})
            out = CoalescingWriter(ex)
            include_usage = ctx.include_usage

            def take(chunk: dict) -> bytes | None:
                """Fold the chunk into the answer; its event for the client (None: usage it did not ask for)."""
                nonlocal ttft
                assembler.add(chunk)
                choices = chunk.get("choices")
                if ttft is None and choices:
                    ttft = time.perf_counter() - ctx.started
                return sse_event(chunk) if include_usage or choices or not chunk.get("usage") else None

            try:
                if (data := take(lease.first)) is not None:
                    await out.add(data)
                async for chunk in lease.chunks:  # `async for`, not anext(): one wrapper less per chunk
                    if (data := take(chunk)) is not None:
                        await out.add(data)
            except BackendError as e:
                # Headers are gone: report in-band the way OpenAI does, and end without [DONE]. Chunks of the
                # wrong shape are BackendErrors already (checked at the backend edge); anything else raised
                # here is the gateway's own bug and goes to the envelope, which also ends the stream in-band.
                e.backend = name
                err = _backend_failure(e, ex)
                ex.status = str(err.status)
                await out.close(sse_event(err.body()))
                return
            assembler.finish()
            completion = assembler.result()
            if assembler.complete:  # every choice ended: only then may a stage store it, and before [DONE], so
                for stage in stages:  # a client that asks again the moment its stream ends finds it
                    await stage.after(ctx, completion)
            # Charged before [DONE], as a whole answer is charged before it goes out: a one-shot client (curl)
            # hangs up the moment it reads [DONE], which cancels this task; nothing after [DONE] awaits, so
            # that cancel can cost neither the charge nor the token count, nor turn the 200 into a 499.
            # Shielded, both: a hang-up during the charge cancels this task, not the charge, so the `finally`
            # below must not charge an estimate on top.
            charged = True
            usage = completion.get("usage")
            estimate = None if usage else estimated_usage(ctx, assembler.chunks)
            gw.accounting.settle_upstream(ctx, usage or estimate, completion.get("model"))
            if usage:
                await gw.charge(ctx, usage)
            elif ctx.tenant.limits.tpm and estimate:  # an upstream that ignores stream_options.include_usage
                await asyncio.shield(gw.limiter.charge_tokens(ctx.tenant, sum(estimate.values())))
            await _charge_budget(gw, ctx)
            await out.close(DONE_EVENT)
    finally:
        if name is not None and not charged:
            # Cut upstream, or a client that hung up: the stream ended before its usage chunk. Charge the
            # tenant's TPM an estimate, or a tenant could generate without limit through streams that end
            # early. Shielded: a client that hangs up cancels this task. Its dollars are an estimate too.
            estimate = estimated_usage(ctx, assembler.chunks)
            gw.accounting.settle_upstream(ctx, estimate)
            await asyncio.shield(gw.limiter.charge_tokens(ctx.tenant, sum(estimate.values())))
            await _charge_budget(gw, ctx)
    completion = assembler.result()
    usage = completion.get("usage")
    if ttft is not None:
        ttft_hist, tpot_hist = gw.metrics.stream_timings(route.name)
        ttft_hist.observe(ttft)
        n_out = (usage or {}).get("completion_tokens") or assembler.chunks
        if n_out > 1:
            tpot_hist.observe((time.perf_counter() - ctx.started - ttft) / (n_out - 1))
    gw.count_tokens(usage)


def estimated_usage(ctx: RequestContext, chunks: int) -> dict[str, int]:
    """The usage of a stream without one: ~4 bytes of prompt JSON per token, one token per content chunk."""
    prompt = ctx.forward_body.get("messages") or ctx.forward_body.get("prompt") or ""
    return {"prompt_tokens": len(orjson.dumps(prompt)) // 4, "completion_tokens": chunks}


async def embed(ex: Exchange) -> None:
    gw, snap, ctx = await prepare(ex, EMBEDDINGS)
    route = ctx.route
    call = WHOLE[EMBEDDINGS]
    result, name = await gw.router.call(route, snap.backends, lambda b: call(b, ctx.forward_body, route.timeouts),
                                        endpoint=EMBEDDINGS, tenant=ctx.tenant.name)
    usage = result.get("usage")
    gw.accounting.settle_upstream(ctx, usage, result.get("model"))
    await gw.charge(ctx, usage)  # shielded: a client gone now has spent the tokens all the same
    await _charge_budget(gw, ctx)
    ex.backend = name
    ex.reply(200, orjson.dumps(result), {"X-Backend": name, "X-Cost-USD": ctx.response_headers["X-Cost-USD"]})
    gw.count_tokens(usage)  # after the answer, as in `generate`


def _on_aiohttp(serve: Callable[[Exchange], Awaitable[None]]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler running `serve` on the exchange the envelope middleware made."""

    async def handler(request: web.Request) -> web.StreamResponse:
        ex = request[EXCHANGE]
        await serve(ex)
        return ex.response  # type: ignore[return-value]

    return handler


async def _chat(ex: Exchange) -> None:
    await generate(ex, CHAT)


async def _completions(ex: Exchange) -> None:
    await generate(ex, COMPLETIONS)


# The front (gateway/front.py) serves these two itself; aiohttp serves them for requests the front hands over
# (a chunked body, Expect: 100-continue).
HOT_PATHS: dict[str, Callable[[Exchange], Awaitable[None]]] = {"/v1/chat/completions": _chat,
                                                               "/v1/completions": _completions}
chat_completions = _on_aiohttp(_chat)
completions = _on_aiohttp(_completions)
embeddings = _on_aiohttp(embed)


# ---- operations ----------------------------------------------------------------------------------------------


async def list_models(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    gw.snapshot.auth.tenant_for(request.headers.get("Authorization"))
    models = await gw.models()
    return json_response({"object": "list", "data": [
        {"id": m, "object": "model", "created": 0, "owned_by": owner} for m, owner in models
    ]})


async def retrieve_model(request: web.Request) -> web.Response:
    """`GET /v1/models/{id}`: the model as /v1/models lists it, or 404 as OpenAI answers."""
    gw = request.app[GATEWAY]
    gw.snapshot.auth.tenant_for(request.headers.get("Authorization"))
    model = request.match_info["model"]
    owner = dict(await gw.models()).get(model)
    route = gw.snapshot.policy.route_for(model)
    if owner is None and route is None:
        raise GatewayError(404, f"The model '{model}' does not exist", "invalid_request_error", "model_not_found",
                           "model")
    owner = owner or route.backends[0].name  # type: ignore[union-attr]  # a glob route would serve it
    return json_response({"id": model, "object": "model", "created": 0, "owned_by": owner})


async def health(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    gw.snapshot.auth.check_ops(request.headers.get("Authorization"))
    reasons, degraded = await gw.readiness()
    if reasons:
        return json_response({"status": "unavailable", "reasons": reasons, "degraded": degraded}, status=503)
    return json_response({"status": "degraded" if degraded else "ready", "degraded": degraded})


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    gw.snapshot.auth.check_ops(request.headers.get("Authorization"))
    return web.Response(body=gw.metrics.render(), content_type="text/plain", charset="utf-8")


async def admin_cache_purge(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    gw.snapshot.auth.check_admin(request.headers.get("Authorization"))
    tenant = request.query.get("tenant") or None
    model = request.query.get("model") or None
    deleted = await gw.cache_admin().purge(tenant, model)
    return json_response({"deleted": deleted, "tenant": tenant, "model": model})


async def admin_cache_stats(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    gw.snapshot.auth.check_admin(request.headers.get("Authorization"))
    return json_response(await gw.cache_admin().stats())


async def admin_usage(request: web.Request) -> web.Response:
    """Dollars spent and saved, tokens and requests, with a per-hour series (gateway/usage/report.py)."""
    gw = request.app[GATEWAY]
    gw.snapshot.auth.check_admin(request.headers.get("Authorization"))
    return json_response(await usage_report(gw.accounting.store, request.query))


UI_DIR = Path(__file__).with_name("ui")
UI_FILES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
# The page loads only its own files and calls only this origin: no CDN, nothing inline to inject into.
UI_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:", "Cache-Control": "no-cache",
              "X-Content-Type-Options": "nosniff"}


async def ui_file(request: web.Request) -> web.Response:
    """`GET /ui` and its static files. The shell carries no data: every figure comes from /admin/usage and
    /metrics, which the page calls with the admin key the operator gives it."""
    name = request.match_info.get("name") or "index.html"
    if name not in UI_FILES:
        raise GatewayError(404, f"No UI file {name!r}.", "invalid_request_error", "not_found")
    body = await asyncio.to_thread((UI_DIR / name).read_bytes)
    return web.Response(body=body, content_type=UI_FILES[name], charset="utf-8", headers=UI_HEADERS)


# ---- the envelope: request id, errors as OpenAI's envelope, metrics --------------------------------------------


async def envelope(ex: Exchange, serve: Callable[[Exchange], Awaitable[None]]) -> None:
    """Request id on everything; every error as OpenAI's envelope (in-band once a stream's headers went out);
    request count and latency per route; 499 for a client that went away. Both servers run every request
    through this."""
    given = ex.headers.get("X-Request-Id")
    ex.request_id = given if given and REQUEST_ID_OK.match(given) else new_request_id()
    started = time.perf_counter()
    try:
        await serve(ex)
    except (asyncio.CancelledError, ConnectionResetError):
        _observe(ex, "499", started)  # the client went away
        raise
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(e.status)
        await _error_reply(ex, GatewayError(
            e.status, e.text if e.status == 413 and e.text else e.reason, "invalid_request_error", code))
    except Exception as e:
        await _error_reply(ex, _gateway_error(e, ex))
    _observe(ex, ex.status or "200", started, deferred=ex.writes_on_return)


@web.middleware
async def envelope_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """`envelope` on aiohttp's server: every route's handler runs inside it."""
    ex = request[EXCHANGE] = AiohttpExchange(request)

    async def serve(ex: AiohttpExchange) -> None:
        response = await handler(request)
        if response is not ex.response:  # a plain aiohttp handler's; the generation endpoints' was adopted already
            ex.adopt(response)

    await envelope(ex, serve)  # type: ignore[arg-type]
    return ex.response  # type: ignore[return-value]


def _gateway_error(e: Exception, ex: Exchange) -> GatewayError:
    if isinstance(e, GatewayError):
        return e
    if isinstance(e, BackendError):
        return _backend_failure(e, ex)
    log.exception("unhandled error on %s %s (request %s)", ex.method, ex.path, ex.request_id)
    return GatewayError(500, "The gateway hit an internal error.", "server_error", "internal_error")


def _backend_failure(e: BackendError, ex: Exchange) -> GatewayError:
    """The tenant's view of a backend failure (generic, with the request id); the details go to the log."""
    if e.backend is not None:
        ex.backend = e.backend
    log.warning("request %s: backend %s failed (%s): %s", ex.request_id, e.backend, e.reason, e.message)
    return e.to_gateway_error(ex.request_id)


async def _error_reply(ex: Exchange, err: GatewayError) -> None:
    """The error as a fresh response, or, when headers already went out, as a last SSE event on the open one
    (a second status line inside a chunked body would garble the stream for every client)."""
    if ex.status is not None and not ex.streaming:
        return  # the whole answer went out before this failed (logged by _gateway_error): it stands
    if not ex.streaming:
        return ex.reply(err.status, orjson.dumps(err.body()), err.headers)
    ex.status = str(err.status)
    try:
        await ex.write_eof(sse_event(err.body()))
    except (ConnectionError, RuntimeError):
        pass  # the client is gone or the body already ended: nothing more can be said


OPS_PATHS = frozenset({"/metrics", "/ready", "/health"})  # scrapes and probes are not traffic


def _observe(ex: Exchange, status: str, started: float, deferred: bool = False) -> None:
    """Every request is counted, those refused before routing (401, 404, 400, 405, 413) as route "none".
    `deferred`: the count runs on the loop's next turn, after the response is written (aiohttp writes it when
    the handler returns), so the client's answer does not wait on the metrics' locks; the front's answer is
    written already, so it is counted at once."""
    route = ex.route
    if route is None and ex.path in OPS_PATHS:
        return
    args = (route or "none", ex.backend, status, time.perf_counter() - started)
    observe = ex.gateway.metrics.observe_request
    if deferred:
        asyncio.get_running_loop().call_soon(observe, *args)
    else:
        observe(*args)
