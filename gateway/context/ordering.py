"""Cache-friendly layout: static before dynamic, so the prompt's leading bytes repeat from request to request.

Layout with ordering on:   system · static documents · summary · history · retrieved documents · query
Layout with ordering off:  system · all documents (by score) · summary · history · query

Tools are sorted by name and their keys sorted recursively, so the serialised tool block is byte-stable.
For Anthropic upstreams, `cache_control: {"type": "ephemeral"}` breakpoints mark the end of the tools, of the
static system part and of the history, each only where the prefix up to it is long enough for Anthropic to
cache, and never more than four in the request (markers the client sent count against the four).
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


def _mark_message(message: dict) -> dict | None:
    """A copy of the message whose last text part carries the breakpoint; None when it has no text."""
    content = message.get("content")
    if isinstance(content, str) and content:
        return {**message, "content": [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]}
    if isinstance(content, list):
        for i in range(len(content) - 1, -1, -1):
            part = content[i]
            if isinstance(part, dict) and part.get("type") == "text":
                parts = list(content)
                parts[i] = {**part, "cache_control": dict(EPHEMERAL)}
                return {**message, "content": parts}
    return None


def add_breakpoints(
    messages: list[dict],
    tools: list | None,
    boundaries: list[tuple[int, int]],
    tools_tokens: int,
    min_tokens: int,
) -> tuple[list[dict], list | None, int]:
    """Place Anthropic breakpoints; returns (messages, tools, how many were added).

    `boundaries` are (index of the last message of a stable section, prompt tokens up to and including it),
    in priority order. A breakpoint at the tools needs `tools_tokens >= min_tokens`.
    """
    free = MAX_BREAKPOINTS - count_markers(messages) - count_markers(tools or [])
    added = 0
    out = list(messages)
    for index, prefix_tokens in boundaries:
        if free - added <= 0 or prefix_tokens < min_tokens:
            continue
        # Walk back to a message with text (an assistant tool call has none) within the same prefix.
        for j in range(index, -1, -1):
            if count_markers(out[j]):
                break  # already marked here (by the client or by an earlier boundary)
            marked = _mark_message(out[j])
            if marked is not None:
                out[j] = marked
                added += 1
                break
    new_tools = tools
    if tools and free - added > 0 and tools_tokens >= min_tokens and not count_markers(tools[-1]):
        new_tools = [*tools[:-1], {**tools[-1], "cache_control": dict(EPHEMERAL)}]
        added += 1
    return out, new_tools, added
