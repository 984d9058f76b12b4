"""The app factory: routes, middleware, and the Gateway's start-up and shutdown."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from gateway import handlers
from gateway.appkeys import GATEWAY
from gateway.config.schema import Policy
from gateway.errors import GatewayError
from gateway.gateway import Gateway

log = logging.getLogger("gateway")


def create_app(policy: Policy, *, redis_url: str | None = None, policy_path: str | Path | None = None) -> web.Application:
    """An aiohttp app serving `policy`. `redis_url` overrides policy.redis.url (the CLI passes the embedded
    server's socket to its workers); with `policy_path` the file is watched and reloaded on change and SIGHUP."""
    server = policy.server
    app = web.Application(
        middlewares=[handlers.envelope_middleware], client_max_size=server.max_body_bytes,
        # Limits of the HTTP parser, per connection. aiohttp's keep-alive timer runs from the connection's start
        # and is not reset by partial data, so it also closes connections whose headers never finish.
        handler_args={"max_line_size": server.max_header_bytes, "max_field_size": server.max_header_bytes,
                      "max_headers": server.max_headers, "keepalive_timeout": server.header_timeout_s},
    )
    gateway = Gateway(policy, redis_url)
    app[GATEWAY] = gateway
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/embeddings", handlers.embeddings)
    app.router.add_get("/v1/models", handlers.list_models)
    app.router.add_get("/v1/models/{model:.+}", handlers.retrieve_model)
    app.router.add_get("/health", handlers.health)
    ops = server.ops
    if ops.port is None:
        _add_ops_routes(app)
    app.router.add_delete("/admin/cache", handlers.admin_cache_purge)
    app.router.add_get("/admin/cache/stats", handlers.admin_cache_stats)
    app.router.add_get("/admin/usage", handlers.admin_usage)
    app.router.add_get("/ui", handlers.ui_file)
    app.router.add_get("/ui/{name}", handlers.ui_file)

    async def lifecycle(app: web.Application):
        await gateway.start()
        ops_runner = None
        if ops.port is not None:
            # /ready and /metrics on their own listener (an internal interface, say), and not on the main one.
            # reuse_port: with --workers N every worker binds it, like the main port.
            ops_app = web.Application(middlewares=[handlers.envelope_middleware])
            ops_app[GATEWAY] = gateway
            ops_app.router.add_get("/health", handlers.health)
            _add_ops_routes(ops_app)
            ops_runner = web.AppRunner(ops_app, access_log=None)
            await ops_runner.setup()
            await web.TCPSite(ops_runner, ops.host or "127.0.0.1", ops.port, reuse_port=True).start()
            log.info("/ready and /metrics served on http://%s:%d", ops.host or "127.0.0.1", ops.port)
        watcher = None
        if policy_path is not None:
            from gateway.config.reload import PolicyWatcher

            watcher = PolicyWatcher(policy_path, gateway.apply_policy, gateway.metrics, current=policy)
            await watcher.start()
        yield
        if watcher is not None:
            await watcher.stop()
        if ops_runner is not None:
            await ops_runner.cleanup()
        await gateway.close()

    app.cleanup_ctx.append(lifecycle)
    return app


def _add_ops_routes(app: web.Application) -> None:
    app.router.add_get("/ready", handlers.ready)
    app.router.add_get("/metrics", handlers.metrics)


# Requests the HTTP parser refuses (header line too long, too many headers, a malformed request line) never
# reach the middleware: aiohttp answers them from RequestHandler.handle_error with a plain-text page and logs a
# traceback per request. For this app they get OpenAI's envelope, a count in gateway_requests_total
# (route "none") and one quiet log line instead: hostile clients should not be able to flood the log.
_aiohttp_handle_error = RequestHandler.handle_error


def _handle_error(
    self: RequestHandler, request: Any, status: int = 500, exc: BaseException | None = None,
    message: str | None = None,
) -> web.StreamResponse:
    app = getattr(getattr(self._manager, "request_handler", None), "__self__", None)
    if not isinstance(app, web.Application) or GATEWAY not in app or status >= 500:
        return _aiohttp_handle_error(self, request, status, exc, message)
    if request.writer.output_size > 0:
        raise ConnectionError("a response was already sent; cannot send the error")
    reason, too_long = _refusal_reason(exc, message)
    log.info("refused a malformed HTTP request from %s: %s", request.remote, reason)
    err = GatewayError(status, f"Bad HTTP request: {reason}.", "invalid_request_error",
                       "headers_too_large" if too_long else "bad_http_request")
    app[GATEWAY].metrics.observe_request("none", "none", str(status), 0.0)
    response = err.response()
    response.force_close()
    return response


# The parsers quote the offending bytes in their messages (a whole header line: an Authorization key, a cookie):
# only the plain-words reason before any quote, colon or newline is kept for the log and the answer.
_REASON_END = re.compile(r"[:'\"\n(]")
_PLAIN_REASON = re.compile(r"[A-Za-z][A-Za-z /-]{2,79}")


def _refusal_reason(exc: BaseException | None, message: str | None) -> tuple[str, bool]:
    """What may be said about a refused request, and whether its headers were over a size limit."""
    if isinstance(exc, LineTooLong):
        return "a request line or header line is over the size limit", True
    text = str(getattr(exc, "message", None) or message or "")
    if "Too many headers" in text:
        return "too many header lines", True
    reason = _REASON_END.split(text, maxsplit=1)[0].strip()
    return (reason if _PLAIN_REASON.fullmatch(reason) else "malformed request line or headers"), False


RequestHandler.handle_error = _handle_error  # type: ignore[method-assign]
