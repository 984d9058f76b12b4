"""The app's one piece of state, as an aiohttp AppKey."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.gateway import Gateway

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway")
