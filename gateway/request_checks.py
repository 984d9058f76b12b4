"""Checks on a client's request body before anything acts on it: JSON depth and OpenAI's parameter types.

Unknown fields still pass through untouched (engines and clouds take their own extensions); only the fields
OpenAI defines are checked, with OpenAI's types and ranges, so a mistyped value is a 400 here instead of an
upstream's 500, a cached oddity, or an exception deep in a stage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.errors import GatewayError, bad_request

# Deepest JSON nesting accepted in a request body (objects and arrays). Real requests stay far below it: a
# chat body is 4-6 levels, JSON schemas in tools or response_format rarely pass 20. Deeper bodies are refused
# because later stages (canonical cache keys, orjson dumps) recurse and would fail at 255 / 1000 levels.
MAX_JSON_DEPTH = 64


def check_depth(raw: bytes, body: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """400 when `body` nests deeper than `limit`. A body with fewer brackets than the limit cannot be too
    deep, and counting bytes is C-fast, so the walk only runs for bodies with many containers."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise bad_request(f"The request body nests JSON deeper than {limit} levels.", None, "json_too_deep")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))


def check_length(body: dict, param: str, limit: int) -> None:
    """400 (OpenAI's `array_above_max_length`) when `param`, the messages or a batch of prompts or inputs, has
    more than `limit` items (`server.max_messages`). Cache keys, the depth check and token counts each take a step
    per item on the event loop, so this runs before any of them. A list of token ids is one prompt, not a batch."""
    items = body.get(param)
    if not isinstance(items, list) or len(items) <= limit or (param != "messages" and _is_int(items[0])):
        return
    raise bad_request(f"Invalid '{param}': array too long. Expected an array with maximum length {limit}, but got "
                      f"an array with length {len(items)} instead.", param, "array_above_max_length")


def _type_error(param: str, expected: str) -> GatewayError:
    return bad_request(f"Invalid type for '{param}': expected {expected}.", param, "invalid_type")


def _value_error(param: str, message: str) -> GatewayError:
    return bad_request(f"Invalid value for '{param}': {message}.", param, "invalid_value")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _number(body: dict, key: str, lo: float, hi: float) -> None:
    v = body.get(key)
    if v is None:
        return
    if not _is_number(v):
        raise _type_error(key, "a number")
    if not lo <= v <= hi:
        raise _value_error(key, f"must be between {lo:g} and {hi:g}, got {v!r}")


def _integer(body: dict, key: str, minimum: int, maximum: int | None = None) -> None:
    v = body.get(key)
    if v is None:
        return
    if not _is_int(v):
        raise _type_error(key, "an integer")
    if v < minimum or (maximum is not None and v > maximum):
        bound = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise _value_error(key, f"must be {bound}, got {v}")


def _of_type(body: dict, key: str, kinds: type | tuple[type, ...], expected: str) -> None:
    v = body.get(key)
    if v is not None and not isinstance(v, kinds):  # never an int kind here, so bool needs no special case
        raise _type_error(key, expected)


def _stop(body: dict) -> None:
    v = body.get("stop")
    if v is None or isinstance(v, str):
        return
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise _type_error("stop", "a string or an array of strings")
    if len(v) > 4:
        raise _value_error("stop", f"at most 4 sequences, got {len(v)}")


def _tools(body: dict) -> None:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _type_error("tools", "an array of tool objects")
    for i, tool in enumerate(tools):
        p = f"tools[{i}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise _type_error(p, "an object with a string 'type'")
        if tool["type"] == "function":
            fn = tool.get("function")
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise _type_error(f"{p}.function", "an object with a non-empty string 'name'")
            if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
                raise _type_error(f"{p}.function.parameters", "a JSON schema object")


def _tool_choice(body: dict) -> None:
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, str | dict):
        raise _type_error("tool_choice", "a string or an object")


def _content(messages: list) -> None:
    """Message content is a string, null, or an array of typed parts; text parts carry string text (null is
    tolerated: some clients send it for empty parts)."""
    for i, m in enumerate(messages):
        content = m.get("content")
        if content is None or isinstance(content, str):
            continue
        p = f"messages[{i}].content"
        if not isinstance(content, list):
            raise _type_error(p, "a string or an array of content parts")
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _type_error(f"{p}[{j}]", "an object with a string 'type'")
            if part["type"] == "text" and part.get("text") is not None and not isinstance(part["text"], str):
                raise _type_error(f"{p}[{j}].text", "a string")


# The checks of each OpenAI field of chat and completions, in the order they run (a body with several wrong
# fields names the first of this order). Only fields present in the body are checked: a typical request
# carries three or four of these, so most of the table costs one dict lookup, not a call.
_COMMON_CHECKS: tuple[tuple[str, Callable[[dict], None]], ...] = (
    ("max_tokens", lambda b: _integer(b, "max_tokens", 1)),
    ("n", lambda b: _integer(b, "n", 1, 128)),
    ("seed", lambda b: _integer(b, "seed", -(2**63), 2**63 - 1)),
    ("temperature", lambda b: _number(b, "temperature", 0, 2)),
    ("top_p", lambda b: _number(b, "top_p", 0, 1)),
    ("presence_penalty", lambda b: _number(b, "presence_penalty", -2, 2)),
    ("frequency_penalty", lambda b: _number(b, "frequency_penalty", -2, 2)),
    ("stop", _stop),
    ("logit_bias", lambda b: _of_type(b, "logit_bias", dict, "an object")),
    ("user", lambda b: _of_type(b, "user", str, "a string")),
)
_CHAT_CHECKS: tuple[tuple[str, Callable[[dict], None]], ...] = (
    ("messages", lambda b: _content(b["messages"])),
    ("tools", _tools),
    ("tool_choice", _tool_choice),
    ("response_format", lambda b: _of_type(b, "response_format", dict, "an object")),
    ("parallel_tool_calls", lambda b: _of_type(b, "parallel_tool_calls", bool, "a boolean")),
    ("max_completion_tokens", lambda b: _integer(b, "max_completion_tokens", 1)),
    ("top_logprobs", lambda b: _integer(b, "top_logprobs", 0, 20)),
    ("logprobs", lambda b: _of_type(b, "logprobs", bool, "a boolean")),
    *_COMMON_CHECKS,
)
_COMPLETION_CHECKS: tuple[tuple[str, Callable[[dict], None]], ...] = (
    ("prompt", lambda b: _prompt(b["prompt"])),
    ("logprobs", lambda b: _integer(b, "logprobs", 0, 5)),
    ("best_of", lambda b: _integer(b, "best_of", 1)),
    ("echo", lambda b: _of_type(b, "echo", bool, "a boolean")),
    ("suffix", lambda b: _of_type(b, "suffix", str, "a string")),
    *_COMMON_CHECKS,
)


def _prompt(prompt: Any) -> None:
    if not isinstance(prompt, str | list):
        raise _type_error("prompt", "a string or an array")


def check_generation(body: dict, endpoint: str) -> None:
    """OpenAI's types (and documented ranges) for the sampling and tool fields of chat and completions."""
    for key, check in _CHAT_CHECKS if endpoint == "chat.completions" else _COMPLETION_CHECKS:
        if key in body:
            check(body)


def check_embeddings(body: dict) -> None:
    data = body["input"]
    if isinstance(data, str):
        return
    if not isinstance(data, list) or not data:
        raise _type_error("input", "a string or a non-empty array")
    # An array of strings, of token ids, or of token-id arrays.
    first = data[0]
    if isinstance(first, str):
        ok = all(isinstance(x, str) for x in data)
    elif _is_int(first):
        ok = all(_is_int(x) for x in data)
    else:
        ok = all(isinstance(x, list) and all(_is_int(t) for t in x) for x in data)
    if not ok:
        raise _type_error("input", "a string, an array of strings, or token ids")
    _integer(body, "dimensions", 1)
    _of_type(body, "encoding_format", str, "a string")
    _of_type(body, "user", str, "a string")
