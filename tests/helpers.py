"""Test plumbing: servers on their own event-loop thread, a private real redis-server, free ports, and the
policy text, SDK client and /metrics reading the gateway tests share."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

import httpx
import openai
from aiohttp import web

from gateway.appkeys import GATEWAY
from gateway.embedded_redis import redis_server_binary
from gateway.front import Front


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopThread:
    """An asyncio loop on a daemon thread; `run(coro)` runs a coroutine there and waits for it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[Any], timeout: float = 60) -> Any:
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        return fut.result(timeout)

    def stop(self) -> None:
        """Stop and close the loop, its default executor's threads joined: a loop left open keeps its
        selector, its executor's threads, and whatever its callbacks and tasks still hold, for the session."""
        if self.loop.is_closed():
            return
        try:
            self.run(self.loop.shutdown_default_executor(), timeout=10)
        except TimeoutError:  # a worker stuck in a blocking call: its daemon thread is left to the exit
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class ServerThread:
    """Serve an aiohttp app (built by `factory` inside the loop) on 127.0.0.1 from a background thread; the
    gateway's app (create_app) through gateway/front.py, as `llm-gateway serve` does.

    Usable from sync tests (openai.OpenAI) and async ones (openai.AsyncOpenAI) alike.
    """

    def __init__(self, factory: Callable[[], web.Application | Awaitable[web.Application]], port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._factory = factory
        self._lt = LoopThread()
        self.app: web.Application | None = None
        self._runner: web.AppRunner | None = None
        self._front: Front | None = None

    async def _start(self) -> None:
        app = self._factory()
        if asyncio.iscoroutine(app):
            app = await app
        self.app = app  # type: ignore[assignment]
        self._runner = web.AppRunner(self.app, shutdown_timeout=1.0, handler_cancellation=True)
        await self._runner.setup()
        if GATEWAY in self.app:  # the gateway: served as `llm-gateway serve` serves it, through the front
            self._front = Front(self._runner)
            await self._front.start("127.0.0.1", self.port)
        else:  # a fake upstream or an engine: plain aiohttp
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def start(self) -> ServerThread:
        self._lt.run(self._start())
        return self

    def call(self, coro: Awaitable[Any], timeout: float = 60) -> Any:
        """Run a coroutine on the server's loop (to poke at app state safely)."""
        return self._lt.run(coro, timeout)

    def stop(self) -> None:
        if self._front is not None:
            self._lt.run(self._front.close(1.0))
            self._front = None
        if self._runner is not None:
            self._lt.run(self._runner.cleanup())
            self._runner = None
        self._lt.stop()
        forget_served_apps()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def forget_served_apps() -> None:
    """Empty aiohttp's process-wide cache of middleware chains: keyed by (handler, apps), it holds up to 1,024
    applications, and with them whatever they hold (an engine's weights), long after they stopped serving.
    A server process serves one app for its life; a test session serves hundreds, one after another."""
    from aiohttp import web_app

    cached = getattr(web_app, "_cached_build_middleware", None)  # private: absent from some aiohttp releases
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


class RedisServer:
    """A private, real redis-server on a free port (no persistence). Can be killed and restarted."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.mkdtemp(prefix="redis-test-")
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None

    def flushall(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)


CHAT = "/v1/chat/completions"
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "x"}]}


def route(model: str, backends: str = "up", more: str = "") -> str:
    """One `routes:` item of policy YAML; `more` adds keys to it (each line indented four spaces)."""
    return f'  - match: {{model: "{model}"}}\n    backends: [{backends}]\n{more}'


def upstream_policy(upstream: str, routes: str, *, dead: bool = False, tail: str = "") -> str:
    """Policy YAML over the fake upstream at `upstream`: backend `up` and, with `dead`, a backend `dead` on a
    port nobody listens on; then `routes` (items from `route`) and `tail` (more top-level sections)."""
    dead_backend = f'  dead: {{type: openai, base_url: "http://127.0.0.1:{free_port()}/v1"}}\n' if dead else ""
    return f'backends:\n  up: {{type: openai, base_url: "{upstream}/v1"}}\n{dead_backend}routes:\n{routes}{tail}\n'


def sdk_client(srv: ServerThread, key: str = "k", **kw: Any) -> openai.OpenAI:
    """The official SDK pointed at a started gateway; no retries, so each call is one request."""
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, **kw)


def series(name: str, **labels: str) -> str:
    """A Prometheus series name as the exposition writes it (labels sorted)."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def scrape(srv: ServerThread, key: str | None = None) -> dict[str, float]:
    """Every series on the gateway's /metrics (read with `key` as a bearer token when given)."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    out = {}
    for line in httpx.get(srv.url + "/metrics", headers=headers).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
