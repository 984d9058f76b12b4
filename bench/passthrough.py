"""The in-run baseline: the least any Python (aiohttp) gateway must cost. Forwards bytes, streams back."""

import sys

import aiohttp
from aiohttp import web

UPSTREAM = sys.argv[1]  # e.g. http://127.0.0.1:9001
PORT = int(sys.argv[2])


async def forward(request: web.Request) -> web.StreamResponse:
    session: aiohttp.ClientSession = request.app["session"]
    body = await request.read()
    async with session.post(UPSTREAM + request.path, data=body, headers={"Content-Type": "application/json"}) as up:
        response = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers["Content-Type"]})
        await response.prepare(request)
        async for data in up.content.iter_any():
            await response.write(data)
        await response.write_eof()
        return response


async def session_ctx(app: web.Application):
    app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))
    yield
    await app["session"].close()


app = web.Application()
app.cleanup_ctx.append(session_ctx)
app.router.add_post("/v1/chat/completions", forward)
if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=PORT, print=None, access_log=None)
