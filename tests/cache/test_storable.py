"""Which completions may be stored: only complete, successful answers."""

from __future__ import annotations

import pytest

from gateway.cache.stage import storable


def completion(*finish_reasons: str | None) -> dict:
    return {"object": "chat.completion", "choices": [
        {"index": i, "message": {"role": "assistant", "content": "x"}, "finish_reason": fr}
        for i, fr in enumerate(finish_reasons)]}


@pytest.mark.parametrize("finish", [("stop",), ("length",), ("tool_calls",), ("stop", "length")])
def test_finished_answers_are_storable(finish: tuple) -> None:
    assert storable(completion(*finish))


@pytest.mark.parametrize("body", [
    completion("content_filter"),
    completion("stop", "content_filter"),
    completion(None),  # a stream cut before its terminal event
    completion("stop", None),
    {"object": "chat.completion", "choices": []},
    {"error": {"message": "boom", "type": "server_error"}},
    {**completion("stop"), "error": {"message": "in-band error"}},
])
def test_refusals_cut_streams_and_errors_are_not(body: dict) -> None:
    assert not storable(body)
