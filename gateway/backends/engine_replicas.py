"""Engine replicas behind the gateway: spawned `llm-gateway engine` processes (supervised, restarted on
crash, stopped on close) or given URLs, each followed on `/kv_events` to mirror its cached blocks into the
prefix router."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time

import aiohttp
import orjson

from gateway.backends.engine_options import EngineOptions
from gateway.backends.openai import OpenAIBackend
from gateway.config.schema import BackendConfig
from gateway.metrics import Metrics
from gateway.routing.prefix import PrefixRouter

log = logging.getLogger(__name__)

HEALTH_POLL_S = 0.25
KV_RECONNECT_S = 0.5
STOP_GRACE_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One engine replica: its URL, its OpenAI client, and (when spawned) its process."""

    def __init__(self, name: str, url: str, backend_name: str, model: str | None, max_connections: int,
                 metrics: Metrics) -> None:
        self.name = name
        self.url = url.rstrip("/")
        cfg = BackendConfig(name=backend_name, type="openai", base_url=self.url + "/v1", model=model,
                            max_connections=max_connections)
        self.client = OpenAIBackend(cfg, metrics)
        self.process: asyncio.subprocess.Process | None = None
        self.ready = asyncio.Event()  # healthy at least once
        self.checked = asyncio.Event()  # health checked at least once
        self.restarts = 0


class ReplicaSet:
    """Keeps the replicas up and the router's mirror of their KV caches current."""

    def __init__(self, replicas: list[Replica], router: PrefixRouter, options: EngineOptions, spawn: bool) -> None:
        self.replicas = {r.name: r for r in replicas}
        self.router = router
        self.options = options
        self.spawn = spawn
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None
        self._closing = False
        for r in replicas:
            router.add_replica(r.name)
            router.set_healthy(r.name, False)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        for r in self.replicas.values():
            await r.client.start()
            if self.spawn:
                self._tasks.append(asyncio.create_task(self._supervise(r), name=f"supervise {r.name}"))
            else:
                self._tasks.append(asyncio.create_task(self._watch_url(r), name=f"watch {r.name}"))
            self._tasks.append(asyncio.create_task(self._follow_kv_events(r), name=f"kv_events {r.name}"))
        # spawned replicas: wait until all are up; given URLs: until each was checked once (a dead URL must
        # not hold up the gateway; its watcher brings it in when it answers)
        events = [r.ready if self.spawn else r.checked for r in self.replicas.values()]
        waits = [asyncio.create_task(e.wait()) for e in events]
        try:
            _, pending = await asyncio.wait(waits, timeout=self.options.start_timeout_s)
        finally:
            for w in waits:
                w.cancel()
        if pending and self.spawn:
            missing = [r.name for r in self.replicas.values() if not r.ready.is_set()]
            raise RuntimeError(f"engine replicas did not become healthy within {self.options.start_timeout_s}s: "
                               f"{', '.join(missing)}")

    async def close(self) -> None:
        self._closing = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        await asyncio.gather(*(self._stop_process(r) for r in self.replicas.values()))
        for r in self.replicas.values():
            await r.client.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas.values() if self.router.replicas[r.name].healthy]

    # --- health -----------------------------------------------------------------------------------------

    async def _is_healthy(self, r: Replica) -> bool:
        assert self._session is not None
        try:
            async with self._session.get(r.url + "/health", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def mark_down(self, name: str) -> None:
        """A request could not reach the replica: out of the choice until its health check passes again."""
        self._mark(self.replicas[name], False)

    def _mark(self, r: Replica, healthy: bool) -> None:
        if self.router.replicas[r.name].healthy != healthy:
            log.info("engine replica %s is %s", r.name, "healthy" if healthy else "down")
        self.router.set_healthy(r.name, healthy)
        if healthy:
            r.ready.set()

    async def _watch_url(self, r: Replica) -> None:
        """Given URLs: poll /health so a dead replica leaves the rotation and a revived one rejoins."""
        while True:
            self._mark(r, await self._is_healthy(r))
            r.checked.set()
            await asyncio.sleep(1.0 if self.router.replicas[r.name].healthy else HEALTH_POLL_S * 4)

    # --- spawned processes ------------------------------------------------------------------------------

    def _command(self, port: int) -> list[str]:
        return [sys.executable, "-m", "engine", "--model", self.options.model, "--served-model-name",
                self.options.model, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                *self.options.cli_args()]

    async def _supervise(self, r: Replica) -> None:
        backoff = 1.0
        port = int(r.url.rsplit(":", 1)[1])
        while not self._closing:
            started = time.monotonic()
            r.process = await asyncio.create_subprocess_exec(
                *self._command(port), stdin=asyncio.subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                start_new_session=True)  # its own group, so a terminal's Ctrl-C reaches the gateway first
            exit_wait = asyncio.create_task(r.process.wait())
            while not exit_wait.done():  # health decides whether it is routed to, while it runs
                self._mark(r, await self._is_healthy(r))
                poll = 1.0 if self.router.replicas[r.name].healthy else HEALTH_POLL_S
                await asyncio.wait({exit_wait}, timeout=poll)
            code = await exit_wait
            self._mark(r, False)
            self.router.apply_snapshot(r.name, [])  # its KV cache died with it
            if self._closing:
                return
            r.restarts += 1
            if time.monotonic() - started > 60:
                backoff = 1.0
            log.warning("engine replica %s exited with %s; restarting in %.0fs", r.name, code, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.options.restart_backoff_max_s)

    async def _stop_process(self, r: Replica) -> None:
        proc = r.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    # --- KV mirror --------------------------------------------------------------------------------------

    async def _follow_kv_events(self, r: Replica) -> None:
        """Mirror the replica's cached block hashes; each (re)connection starts with a full snapshot."""
        assert self._session is not None
        while True:
            try:
                async with self._session.get(r.url + "/kv_events") as resp:
                    if resp.status != 200:
                        raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        event = orjson.loads(line)
                        if event.get("type") == "snapshot" and event.get("block_size") != self.router.block_size:
                            log.error("replica %s uses block_size %s, the router %s: prefix routing is blind",
                                      r.name, event.get("block_size"), self.router.block_size)
                        self.router.apply_event(r.name, event)
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, ValueError) as e:
                log.debug("kv_events of %s: %s", r.name, e)
            await asyncio.sleep(KV_RECONNECT_S)


def make_replicas(config: BackendConfig, options: EngineOptions, metrics: Metrics) -> tuple[list[Replica], bool]:
    """The replicas of an engine backend, and whether they are to be spawned."""
    if config.urls:
        urls, spawn = list(config.urls), False
    else:
        urls, spawn = [f"http://127.0.0.1:{_free_port()}" for _ in range(config.replicas)], True
    # spawned replicas serve options.model; given ones keep whatever name they serve unless the policy says
    model = options.model if spawn else config.model
    replicas = [Replica(url.rstrip("/"), url, config.name, model, config.max_connections, metrics) for url in urls]
    return replicas, spawn
