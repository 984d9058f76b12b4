"""A bare asyncio HTTP server that answers every request with one fixed SSE body, a few bytes per write."""

from __future__ import annotations

import asyncio


async def start_raw_sse(body: bytes, piece: int = 3) -> tuple[asyncio.Server, str]:
    """Serve `body` as text/event-stream (then close) to each request; returns (server, base URL)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        for i in range(0, len(body), piece):
            writer.write(body[i:i + piece])
            await writer.drain()
            await asyncio.sleep(0.001)  # separate TCP segments, so events really arrive split
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
