"""The app factory: routes, middleware, and the Gateway's start-up and shutdown."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from gateway import handlers
from gateway.appkeys import GATEWAY
from gateway.config.schema import Policy
from gateway.gateway import Gateway


def create_app(policy: Policy, *, redis_url: str | None = None, policy_path: str | Path | None = None) -> web.Application:
    """An aiohttp app serving `policy`. `redis_url` overrides policy.redis.url (the CLI passes the embedded
    server's socket to its workers); with `policy_path` the file is watched and reloaded on change and SIGHUP."""
    app = web.Application(middlewares=[handlers.envelope_middleware], client_max_size=policy.server.max_body_bytes)
    gateway = Gateway(policy, redis_url)
    app[GATEWAY] = gateway
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/embeddings", handlers.embeddings)
    app.router.add_get("/v1/models", handlers.list_models)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/ready", handlers.ready)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_delete("/admin/cache", handlers.admin_cache_purge)
    app.router.add_get("/admin/cache/stats", handlers.admin_cache_stats)

    async def lifecycle(app: web.Application):
        await gateway.start()
        watcher = None
        if policy_path is not None:
            from gateway.config.reload import PolicyWatcher

            watcher = PolicyWatcher(policy_path, gateway.apply_policy, gateway.metrics, current=policy)
            await watcher.start()
        yield
        if watcher is not None:
            await watcher.stop()
        await gateway.close()

    app.cleanup_ctx.append(lifecycle)
    return app
