"""Cache-friendly layout: static before dynamic, so the prompt's leading bytes repeat from request to request.

Layout with ordering on:   system · static documents · summary · history · retrieved documents · query
Layout with ordering off:  system · all documents (by score) · summary · history · query

Tools are sorted by name and their keys sorted recursively, so the serialised tool block is byte-stable.
For Anthropic upstreams, `cache_control: {"type": "ephemeral"}` breakpoints mark the end of the static system
part, of the history, of an agent loop's newest tool round and of the tools, each only where the prefix up to
it is long enough for Anthropic to cache, never more than four in the request (markers the client sent count
against the four), and never before a 1-hour marker of the client's (Anthropic wants 1-hour entries first).
"""

from __future__ import annotations

from typing import Any

from gateway.context.compress import Document

EPHEMERAL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4


def canonical(value: Any) -> Any:
    """The same JSON value with every object's keys sorted (lists keep their order: it means something)."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
        if isinstance(tool.get("name"), str):
            return tool["name"]
    return ""


def canonical_tools(tools: list) -> list:
    return [canonical(t) for t in sorted(tools, key=tool_name)]


def render_documents(docs: list[Document], heading: str) -> str:
    body = "\n\n".join(f'<document id="{d.id}">\n{d.content}\n</document>' for d in docs)
    return f"{heading}\n<documents>\n{body}\n</documents>"


STATIC_HEADING = "Reference documents:"
RETRIEVED_HEADING = "Documents retrieved for the next question:"
ALL_HEADING = "Reference documents:"


def document_messages(docs: list[Document], ordered: bool) -> tuple[dict | None, dict | None]:
    """(message that goes after the system prompt, message that goes just before the query)."""
    if not docs:
        return None, None
    if not ordered:
        ranked = sorted(docs, key=lambda d: -d.score)
        return {"role": "system", "content": render_documents(ranked, ALL_HEADING)}, None
    static = sorted((d for d in docs if d.static), key=lambda d: d.id)
    retrieved = sorted((d for d in docs if not d.static), key=lambda d: -d.score)
    head = {"role": "system", "content": render_documents(static, STATIC_HEADING)} if static else None
    tail = {"role": "user", "content": render_documents(retrieved, RETRIEVED_HEADING)} if retrieved else None
    return head, tail


def count_markers(value: Any) -> int:
    """How many `cache_control` markers a request part already carries."""
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(count_markers(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_markers(v) for v in value)
    return 0


def _has_long_ttl(value: Any) -> bool:
    """Whether a request part carries a client marker with the 1-hour TTL."""
    if isinstance(value, dict):
        marker = value.get("cache_control")
        if isinstance(marker, dict) and marker.get("ttl") == "1h":
            return True
        return any(_has_long_ttl(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return any(_has_long_ttl(v) for v in value)
    return False


def _prompt_position(messages: list[dict], index: int) -> tuple[int, int]:
    """Where a message lands in Anthropic's prompt order (tools, then every system message, then the turns)."""
    return (1 if messages[index].get("role") in ("system", "developer") else 2, index)


def _mark_message(message: dict) -> dict:
    """A copy of the message carrying the breakpoint: on its last text part when it has one (the block the
    marker lands on either way), else on the message (the Anthropic translation puts it on the last block:
    the tool_use of an assistant tool call, the tool_result of a tool message)."""
    content = message.get("content")
    if isinstance(content, str) and content and message.get("role") != "tool":
        return {**message, "content": [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]}
    if isinstance(content, list) and content and message.get("role") != "tool":
        last = content[-1]
        if isinstance(last, dict) and last.get("type") == "text" and last.get("text"):
            return {**message, "content": [*content[:-1], {**last, "cache_control": dict(EPHEMERAL)}]}
    return {**message, "cache_control": dict(EPHEMERAL)}


def add_breakpoints(
    messages: list[dict],
    tools: list | None,
    boundaries: list[tuple[int, int]],
    tools_tokens: int,
    min_tokens: int,
) -> tuple[list[dict], list | None, int]:
    """Place Anthropic breakpoints; returns (messages, tools, how many were added).

    `boundaries` are (index of the last message of a stable section, prompt tokens up to and including it),
    in priority order. A breakpoint at the tools needs `tools_tokens >= min_tokens`. Rules kept, as Anthropic
    enforces them: at most four markers in the request, the client's included; a 1-hour entry never after a
    5-minute one, so added (5-minute) markers only go after the client's last 1-hour marker; and none on a
    prefix shorter than the model's minimum (the API would ignore it, wasting one of the four).
    """
    free = MAX_BREAKPOINTS - count_markers(messages) - count_markers(tools or [])
    long_ttl = [_prompt_position(messages, i) for i, m in enumerate(messages) if _has_long_ttl(m)]
    if tools and _has_long_ttl(tools):
        long_ttl.append((0, len(tools)))
    after = max(long_ttl, default=(0, -1))  # added markers must come later in the prompt than this
    added = 0
    out = list(messages)
    for index, prefix_tokens in boundaries:
        if free - added <= 0 or prefix_tokens < min_tokens or _prompt_position(out, index) <= after:
            continue
        if count_markers(out[index]):
            continue  # already marked here (by the client or by an earlier boundary)
        out[index] = _mark_message(out[index])
        added += 1
    new_tools = tools
    if (tools and free - added > 0 and tools_tokens >= min_tokens and not count_markers(tools[-1])
            and (0, len(tools) - 1) > after):
        new_tools = [*tools[:-1], {**tools[-1], "cache_control": dict(EPHEMERAL)}]
        added += 1
    return out, new_tools, added
