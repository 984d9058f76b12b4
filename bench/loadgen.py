"""A small, fast HTTP/1.1 keep-alive load generator on raw asyncio streams (uvloop).

Much cheaper per request than an HTTP client library, so on a 2-core machine the generator is not what is
measured. Understands Content-Length and chunked bodies (SSE streams arrive chunked).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gateway.loadtest import percentile as sorted_percentile


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    elapsed: float = 0.0

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


def install_uvloop() -> None:
    """The event loop the gateway's `serve` uses in production (uvloop is a dependency off Windows)."""
    try:
        import uvloop
    except ImportError:  # Windows: the default loop
        return
    uvloop.install()


def percentile(values: list[float], q: float) -> float:
    """`llm-gateway bench`'s percentile (numpy's linear interpolation), so both report the same P99."""
    return sorted_percentile(sorted(values), q)


class Connection:
    def __init__(self, url: str, path: str, body: bytes) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.request = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer bench\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def send(self) -> int:
        """One request/response on the kept-alive connection; returns the status."""
        assert self.reader and self.writer
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        if b"transfer-encoding: chunked" in lower:
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            i = lower.index(b"content-length:")
            length = int(lower[i + 15:lower.index(b"\r\n", i)])
            await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        if self.writer:
            self.writer.close()


async def closed_loop(url: str, path: str, body: bytes, concurrency: int, requests: int) -> Result:
    conns = [Connection(url, path, body) for _ in range(concurrency)]
    await asyncio.gather(*(c.open() for c in conns))
    result = Result()
    remaining = requests

    async def worker(conn: Connection) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            t0 = time.perf_counter()
            try:
                status = await conn.send()
            except (OSError, asyncio.IncompleteReadError, ValueError):
                result.errors += 1
                conn.close()
                await conn.open()
                continue
            result.latencies.append(time.perf_counter() - t0)
            if status != 200:
                result.errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    result.elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    return result


async def open_loop(url: str, path: str, body: bytes, rate: float, duration_s: float, max_conns: int = 256) -> Result:
    """Requests sent at a fixed offered rate whatever the latency (no coordinated omission): latency counts
    from each request's scheduled send time."""
    idle: list[Connection] = []
    result = Result()
    tasks: set[asyncio.Task] = set()
    interval = 1.0 / rate

    async def one(scheduled: float) -> None:
        conn = idle.pop() if idle else Connection(url, path, body)
        try:
            if conn.writer is None:
                await conn.open()
            status = await conn.send()
            result.latencies.append(time.perf_counter() - scheduled)
            if status != 200:
                result.errors += 1
            idle.append(conn)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            result.errors += 1
            conn.close()

    start = time.perf_counter()
    n = int(rate * duration_s)
    for i in range(n):
        scheduled = start + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(tasks) >= max_conns:
            result.errors += 1  # the system under test cannot keep up: count as an error, do not queue
            continue
        task = asyncio.create_task(one(scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    result.elapsed = time.perf_counter() - start
    for c in idle:
        c.close()
    return result
