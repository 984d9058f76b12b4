"""The incremental SSE parser: events split anywhere across reads come out whole and once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.backends import sse
from gateway.backends.sse import SSEEvent, SSEParser, SSEProtocolError

STREAM = (
    b": keep-alive comment\n"
    b"event: message_start\n"
    b'data: {"type":"message_start"}\n'
    b"\n"
    b"data: line one\r\n"
    b"data: line two\r\n"
    b"id: 7\r\n"
    b"retry: 100\r\n"
    b"\r\n"
    b"data:no-space\r"
    b"\r"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent(b'{"type":"message_start"}', "message_start"),
    SSEEvent(b"line one\nline two", None),
    SSEEvent(b"no-space", None),
    SSEEvent(b"[DONE]", None),
]


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    last = 0
    for cut in sorted(cuts) + [len(data)]:
        events.extend(parser.feed(data[last:cut]))
        last = cut
    return events


def test_whole_stream() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


def test_every_single_split_point() -> None:
    for cut in range(len(STREAM) + 1):
        assert parse_in_pieces(STREAM, [cut]) == EXPECTED, cut


def test_byte_by_byte() -> None:
    assert parse_in_pieces(STREAM, list(range(len(STREAM)))) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_splits(cuts: list[int]) -> None:
    assert parse_in_pieces(STREAM, cuts) == EXPECTED


def test_crlf_split_between_reads_is_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\ndata: b\r\n\r\n") == [SSEEvent(b"a\nb")]


def test_empty_read_between_cr_and_lf_keeps_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"") == []
    assert parser.feed(b"\ndata: b\r\n\r\n") == [SSEEvent(b"a\nb")]


def test_unfinished_event_at_end_is_not_dispatched() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: whole\n\ndata: half") == [SSEEvent(b"whole")]
    assert parser.feed(b"") == []


def test_blank_lines_and_comments_alone_dispatch_nothing() -> None:
    assert SSEParser().feed(b"\n\n: ping\n\n:\n\n") == []


def test_event_name_resets_after_dispatch() -> None:
    events = SSEParser().feed(b"event: ping\ndata: {}\n\ndata: x\n\n")
    assert events == [SSEEvent(b"{}", "ping"), SSEEvent(b"x", None)]


def test_overlong_line_is_a_protocol_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "MAX_LINE_BYTES", 64)
    parser = SSEParser()
    with pytest.raises(SSEProtocolError):
        parser.feed(b"data: " + b"x" * 100)
