"""Debian's headless Chromium driven over the DevTools protocol (aiohttp's websocket client): open a page,
wait for a condition, read values, take a screenshot, and collect every console error and uncaught exception."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self) -> None:
        self.errors: list[str] = []  # console errors, uncaught exceptions, failed loads
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}

    async def __aenter__(self) -> Browser:
        self._dir = tempfile.TemporaryDirectory()
        self._proc = await asyncio.create_subprocess_exec(
            *[chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-port=0", f"--user-data-dir={self._dir.name}", "--window-size=1280,1100",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # type: ignore[list-item]
            start_new_session=True)  # its own process group: the renderers and helpers end with it
        port_file = Path(self._dir.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            assert time.monotonic() < deadline and self._proc.returncode is None, "chromium did not start"
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        self._http = aiohttp.ClientSession()
        async with self._http.get(f"http://127.0.0.1:{port}/json/list") as r:
            page = next(t for t in await r.json() if t["type"] == "page")
        self._ws = await self._http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        for domain in ("Runtime", "Log", "Page"):
            await self.send(f"{domain}.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._reader.cancel()
        await self._ws.close()
        await self._http.close()
        # The whole group: a helper still writing into the profile made the directory's removal fail.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        await asyncio.wait_for(self._proc.wait(), 10)
        for _ in range(50):
            if not _group_alive(self._proc.pid):
                break
            await asyncio.sleep(0.1)
        self._dir.cleanup()

    async def _read(self) -> None:
        async for msg in self._ws:
            data = msg.json()
            if "id" in data:
                self._pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                self.errors.append(str(data["params"]["exceptionDetails"]))
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] in ("error", "assert"):
                self.errors.append(str(data["params"]["args"]))
            elif data.get("method") == "Log.entryAdded" and data["params"]["entry"]["level"] == "error":
                self.errors.append(data["params"]["entry"]["text"])

    async def send(self, method: str, **params: Any) -> dict:
        i = next(self._ids)
        fut = self._pending[i] = asyncio.get_running_loop().create_future()
        await self._ws.send_json({"id": i, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 30)
        assert "error" not in reply, reply
        return reply["result"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    async def open(self, url: str, ready: str, timeout_s: float = 20) -> None:
        await self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while not await self.evaluate(ready):
            assert time.monotonic() < deadline, f"page not ready ({ready}); errors: {self.errors}"
            await asyncio.sleep(0.1)

    async def screenshot(self) -> bytes:
        """The whole page as a PNG."""
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return base64.b64decode(shot["data"])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
