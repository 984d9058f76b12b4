"""Shape checks for what upstreams send, applied at the backend edge.

Everything past a backend (stream assembly, caching, token accounting, replay) trusts these shapes, so an
upstream that sends a string token count or a choice that is not an object is a `protocol` BackendError
here, counted against that backend, instead of a TypeError somewhere in the gateway's own code.
Each function returns None when the object is fine, else what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _count_ok(v: Any) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def usage_problem(usage: Any) -> str | None:
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return "usage is not an object"
    for key in USAGE_COUNTS:
        if not _count_ok(usage.get(key)):
            return f"usage.{key} is not a non-negative integer: {usage.get(key)!r:.40}"
    return None


def _str_or_none(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _delta_problem(delta: Any) -> str | None:
    if not isinstance(delta, dict):
        return "delta is not an object"
    for key in ("role", "content", "refusal"):
        if not _str_or_none(delta.get(key)):
            return f"delta.{key} is not a string"
    calls = delta.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return "delta.tool_calls is not an array"
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
            return "a tool call delta is not an object with an integer index"
        fn = call.get("function")
        if fn is not None and (not isinstance(fn, dict) or not _str_or_none(fn.get("name"))
                               or not _str_or_none(fn.get("arguments"))):
            return "a tool call's function is not an object of strings"
    return None


def _choice_common(choice: Any) -> str | None:
    if not isinstance(choice, dict):
        return "a choice is not an object"
    if not isinstance(choice.get("index", 0), int):
        return "a choice index is not an integer"
    if not _str_or_none(choice.get("finish_reason")):
        return "a finish_reason is not a string"
    if choice.get("logprobs") is not None and not isinstance(choice["logprobs"], dict):
        return "logprobs is not an object"
    return None


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "a choice's message is not an object"
    if not _str_or_none(message.get("content")):
        return "message.content is not a string"
    if message.get("tool_calls") is not None and not isinstance(message["tool_calls"], list):
        return "message.tool_calls is not an array"
    return None


def _choices_problem(body: dict, body_key: str, body_problem: Callable[[Any], str | None]) -> str | None:
    """The part a stream chunk and a whole completion share: each choice, then usage. `body_key` names
    the chat part of a choice ("delta" in a chunk, "message" in a completion); a choice without it is
    the legacy `text_completion` form, whose `text` must be a string."""
    for choice in body["choices"]:
        problem = _choice_common(choice)
        if problem:
            return problem
        if choice.get(body_key) is not None:
            problem = body_problem(choice[body_key])
            if problem:
                return problem
        elif not _str_or_none(choice.get("text")):
            return "a choice's text is not a string"
    return usage_problem(body.get("usage"))


def chunk_problem(chunk: dict) -> str | None:
    """A `chat.completion.chunk` or legacy `text_completion` stream chunk."""
    choices = chunk.get("choices")
    if choices is None:
        # A usage-only chunk (stream_options.include_usage) may carry no choices at all.
        return usage_problem(chunk.get("usage"))
    if not isinstance(choices, list):
        return "choices is not an array"
    return _choices_problem(chunk, "delta", _delta_problem)


def completion_problem(completion: dict) -> str | None:
    """A non-streamed `chat.completion` / `text_completion` body."""
    if not isinstance(completion.get("choices"), list):
        return "choices is missing or not an array"
    return _choices_problem(completion, "message", _message_problem)


def embeddings_problem(result: dict) -> str | None:
    if not isinstance(result.get("data"), list):
        return "data is missing or not an array"
    return usage_problem(result.get("usage"))
