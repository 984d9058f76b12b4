"""The test plumbing lets go of what it served: a session starts hundreds of servers, some over an engine
(a gigabyte each), and the suite's memory is bounded only if each is freed when it stops."""

from __future__ import annotations

import gc
import threading
import weakref

import httpx
from aiohttp import web

from tests.helpers import ServerThread


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


@web.middleware
async def _passthrough(request: web.Request, handler):  # type: ignore[no-untyped-def]
    return await handler(request)


def test_a_stopped_server_frees_its_app_loop_and_threads() -> None:
    threads = threading.active_count()
    built: list[weakref.ref[web.Application]] = []

    def factory() -> web.Application:
        app = web.Application(middlewares=[_passthrough])  # with a middleware, aiohttp caches the chain
        app.router.add_get("/", _hello)
        built.append(weakref.ref(app))
        return app

    srv = ServerThread(factory).start()
    assert httpx.get(srv.url + "/").text == "hello"
    loop = srv._lt.loop
    srv.stop()
    del srv
    gc.collect()
    assert built[0]() is None  # before: held by aiohttp's middleware cache for the rest of the session
    assert loop.is_closed()  # before: left open, with its default executor's threads
    assert threading.active_count() == threads
