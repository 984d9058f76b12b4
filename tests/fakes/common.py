"""What both fake clouds share: recorded requests, scripted failures, delays, cut streams, disconnect tracking.

Knobs are plain attributes, safe to set from the test thread while the server runs on its own loop thread.
"""

from __future__ import annotations

import asyncio
import re
import threading
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

WORD = re.compile(r"\S+\s*")
POLL_S = 0.005  # how often a sleeping stream looks for a client that went away


@dataclass(slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or None when absent or not JSON
    raw: bytes
    peer: tuple | None  # the client's (host, port): the same port twice means a reused keep-alive connection


@dataclass(slots=True)
class ScriptedFailure:
    status: int
    body: bytes
    content_type: str
    retry_after: str | None


class ClientGone(Exception):
    """The client closed the connection while we were streaming to it."""


def pieces(text: str) -> list[str]:
    """The reply split the way the fakes stream it: one word (with its trailing space) per token."""
    return WORD.findall(text) or [text]


def text_of(content: object) -> str:
    """Plain text of an OpenAI or Anthropic message content (a string or a list of parts/blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif "content" in part:  # an Anthropic tool_result block
                    out.append(text_of(part["content"]))
        return " ".join(out)
    return ""


class FakeUpstream(ABC):
    """Base of FakeOpenAI / FakeAnthropic. Subclasses define `error_body` and `authorized`."""

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key  # when set, requests without it get 401
        self.delay_headers = 0.0  # seconds before the response headers
        self.delay_per_chunk = 0.0  # seconds before each streamed event
        self.cut_after: int | None = None  # close the connection after this many streamed events
        self.record = True  # keep every request in `requests` (benchmarks turn it off)
        self.requests: list[RecordedRequest] = []
        self.request_count = 0
        self.streams_started = 0
        self.streams_completed = 0
        self.disconnects = 0  # streams whose client went away before the end
        self.disconnected = threading.Event()  # set at the first such disconnect
        self._failures: deque[ScriptedFailure] = deque()
        # reset() bumps this; a stream begun before the reset (the previous test's, still finishing on a loaded
        # box) then leaves the counters and `disconnected` alone
        self._epoch = 0
        self.app = web.Application(client_max_size=64 * 1024 * 1024)

    # ---- knobs -------------------------------------------------------------------------------------------
    def fail_next(
        self,
        n: int = 1,
        status: int = 503,
        retry_after: str | float | None = None,
        body: dict | bytes | None = None,
        content_type: str = "application/json",
    ) -> None:
        """Answer the next `n` requests with `status` (and `Retry-After`). `body` defaults to the cloud's
        own error envelope; bytes are sent as they are (for non-JSON error pages)."""
        if body is None:
            raw = self.error_body(status, f"scripted failure {status}")
        elif isinstance(body, dict):
            raw = orjson.dumps(body)
        else:
            raw = body
        ra = None if retry_after is None else str(retry_after)
        for _ in range(n):
            self._failures.append(ScriptedFailure(status, raw, content_type, ra))

    def reset(self) -> None:
        """Knobs back to their defaults (api_key stays), recorded state cleared."""
        self.record = True
        self.delay_headers = self.delay_per_chunk = 0.0
        self.cut_after = None
        self.requests.clear()
        self.request_count = self.streams_started = self.streams_completed = self.disconnects = 0
        self.disconnected.clear()
        self._failures.clear()
        self._epoch += 1

    @property
    def last(self) -> RecordedRequest:
        return self.requests[-1]

    # ---- for subclasses ----------------------------------------------------------------------------------
    @abstractmethod
    def error_body(self, status: int, message: str, kind: str | None = None) -> bytes:
        """The cloud's own error body for `status`."""

    @abstractmethod
    def authorized(self, request: web.Request) -> bool:
        """Whether the request carries `api_key` the way the cloud expects it."""

    def error_response(self, status: int, message: str, kind: str | None = None) -> web.Response:
        return web.Response(status=status, body=self.error_body(status, message, kind),
                            content_type="application/json")

    async def front(self, request: web.Request) -> tuple[Any, web.Response | None]:
        """Record the request and apply the knobs; returns (parsed body, early response or None)."""
        raw = await request.read()
        self.request_count += 1
        body: Any = None
        if raw:
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                body = None
        if self.record:
            peer = request.transport.get_extra_info("peername") if request.transport is not None else None
            self.requests.append(RecordedRequest(request.method, request.path, dict(request.headers), body, raw,
                                                 peer))
        if self._failures:
            f = self._failures.popleft()
            headers = {"Retry-After": f.retry_after} if f.retry_after is not None else None
            if self.delay_headers:
                await asyncio.sleep(self.delay_headers)
            return body, web.Response(status=f.status, body=f.body, headers=headers,
                                      content_type=f.content_type.split(";")[0])
        if self.delay_headers:
            await asyncio.sleep(self.delay_headers)
        if self.api_key is not None and not self.authorized(request):
            return body, self.error_response(401, "invalid api key", "authentication_error")
        if request.method == "POST" and not isinstance(body, dict):
            return body, self.error_response(400, "the body must be a JSON object")
        return body, None

    async def open_stream(self, request: web.Request) -> web.StreamResponse:
        self.streams_started += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return resp

    async def send_events(self, request: web.Request, resp: web.StreamResponse, events: list[bytes]) -> bool:
        """Stream encoded events with the knobs applied: per-event delay, cut, disconnect tracking.
        Returns True when every event went out."""
        epoch = self._epoch
        try:
            for i, event in enumerate(events):
                if self.cut_after is not None and i >= self.cut_after:
                    if request.transport is not None:
                        request.transport.close()  # a cut stream: no terminal event, no chunk terminator
                    return False
                if self.delay_per_chunk:
                    await self._sleep_watching(request, self.delay_per_chunk)
                if request.transport is None or request.transport.is_closing():
                    raise ClientGone
                await resp.write(event)
            if epoch == self._epoch:
                self.streams_completed += 1
            return True
        except (ClientGone, ConnectionError):
            self._gone(epoch)
            return False
        except asyncio.CancelledError:
            self._gone(epoch)
            raise

    def _gone(self, epoch: int) -> None:
        if epoch != self._epoch:
            return
        self.disconnects += 1
        self.disconnected.set()

    async def _sleep_watching(self, request: web.Request, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while True:
            left = end - loop.time()
            if left <= 0:
                return
            if request.transport is None or request.transport.is_closing():
                raise ClientGone
            await asyncio.sleep(min(POLL_S, left))
