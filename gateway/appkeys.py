"""The app's one piece of state, as an aiohttp AppKey."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.gateway import Gateway
    from gateway.handlers import AiohttpExchange

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway")

# The request's exchange (gateway/handlers.py), made by the envelope middleware: the facts it reads after the
# handler (request id, route, backend, status) and the response the handler's answer became.
EXCHANGE: web.RequestKey[AiohttpExchange] = web.RequestKey("exchange", "AiohttpExchange")
