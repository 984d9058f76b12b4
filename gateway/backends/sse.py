"""Incremental Server-Sent Events parsing: feed bytes as they arrive, get complete events out.

Follows the WHATWG event-stream rules that matter for LLM APIs: lines end in LF, CRLF or CR (a CRLF split
across two reads counts once), `:` starts a comment (keep-alive), `data:` lines of one event are joined with
LF, `event:` names the event, a blank line dispatches it, and an unfinished event at end of stream is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_LINE_BYTES = 16 * 1024 * 1024  # a line longer than this is not an event stream


class SSEProtocolError(Exception):
    """The byte stream is not a valid event stream."""


@dataclass(slots=True)
class SSEEvent:
    data: bytes
    event: str | None = None  # the `event:` field (Anthropic names every event); None when absent


class SSEParser:
    __slots__ = ("_tail", "_data", "_event", "_skip_lf")

    def __init__(self) -> None:
        self._tail = b""  # an unfinished line carried to the next feed
        self._data: list[bytes] = []
        self._event: str | None = None
        self._skip_lf = False  # the last feed ended in CR: a leading LF now belongs to that CRLF

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []  # an empty read must not forget a CR that ended the previous one
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = chunk[-1:] == b"\r"
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._tail + chunk if self._tail else chunk
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        if len(self._tail) > MAX_LINE_BYTES:
            raise SSEProtocolError(f"event-stream line longer than {MAX_LINE_BYTES} bytes")
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(SSEEvent(b"\n".join(self._data), self._event))
                    self._data = []
                self._event = None
                continue
            if line[0] == 0x3A:  # ":" comment / keep-alive
                continue
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
            # id, retry and unknown fields carry nothing an LLM client needs
        return events
