"""The app's one piece of state, as an aiohttp AppKey."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.gateway import Gateway

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway")

# Per-request facts the middleware reads after the handler: for metrics and the X-Request-Id header.
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
ROUTE: web.RequestKey[str] = web.RequestKey("route", str)
BACKEND: web.RequestKey[str] = web.RequestKey("backend", str)
STATUS: web.RequestKey[str] = web.RequestKey("status", str)
# A response the handler already sent headers for: errors after that end it in-band, never as a new response.
PREPARED: web.RequestKey[web.StreamResponse] = web.RequestKey("prepared", web.StreamResponse)
