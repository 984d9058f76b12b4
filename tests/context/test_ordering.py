"""Canonical tools and Anthropic breakpoint placement (limits, minimums, client markers)."""

from __future__ import annotations

import orjson

from gateway.context.compress import Document
from gateway.context.ordering import (
    EPHEMERAL,
    add_breakpoints,
    canonical_tools,
    count_markers,
    document_messages,
)


def tool(name: str, **props: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


def test_tools_are_sorted_and_serialised_canonically() -> None:
    a = [tool("zeta", b={"type": "string"}, a={"type": "integer"}), tool("alpha")]
    b = [
        {"function": {"parameters": {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "type": "object"},
                      "name": "zeta"}, "type": "function"},
        {"function": {"name": "alpha", "parameters": {"properties": {}, "type": "object"}}, "type": "function"},
    ]
    assert orjson.dumps(canonical_tools(a)) == orjson.dumps(canonical_tools(b))
    assert [t["function"]["name"] for t in canonical_tools(a)] == ["alpha", "zeta"]


def test_static_documents_go_first_in_a_stable_order_and_retrieved_ones_before_the_query() -> None:
    docs = [Document("r1", "x", 0.2), Document("s2", "y", 0.1, True), Document("r2", "z", 0.9), Document("s1", "w", 0.5, True)]
    head, tail = document_messages(docs, ordered=True)
    assert head is not None and tail is not None and head["role"] == "system" and tail["role"] == "user"
    assert head["content"].index('id="s1"') < head["content"].index('id="s2"')
    assert tail["content"].index('id="r2"') < tail["content"].index('id="r1"')
    flat, none = document_messages(docs, ordered=False)
    assert none is None and flat is not None and flat["content"].index('id="r2"') < flat["content"].index('id="s1"')


def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
        {"role": "user", "content": "query"},
    ]


def test_breakpoints_need_the_providers_minimum_prefix() -> None:
    messages = conversation()
    out, tools, added = add_breakpoints(messages, [tool("f")], [(0, 500), (3, 1500)], 100, 1024)
    assert added == 1 and "cache_control" not in orjson.dumps(out[0]).decode()
    assert out[3]["content"][-1] == {"type": "text", "text": "part two", "cache_control": EPHEMERAL}
    assert out[3]["content"][0] == {"type": "text", "text": "part one"}
    assert tools == [tool("f")] and messages == conversation()  # inputs are not mutated


def test_messages_without_text_are_marked_whole() -> None:
    """An assistant tool call or a tool result carries the marker on the message (it lands on the tool_use /
    tool_result block), so the breakpoint sits exactly at the boundary, not earlier."""
    messages = [*conversation()[:3], {"role": "tool", "tool_call_id": "c", "content": "sunny"}]
    out, _, added = add_breakpoints(messages, None, [(2, 3000), (3, 3100)], 0, 1024)
    assert added == 2 and out[1] == messages[1]
    assert out[2] == {**messages[2], "cache_control": EPHEMERAL}
    assert out[3] == {**messages[3], "cache_control": EPHEMERAL}


def test_added_breakpoints_never_precede_a_clients_one_hour_marker() -> None:
    """Anthropic rejects a 5-minute entry before a 1-hour one: added (5-minute) markers go after the client's
    last 1-hour marker, or nowhere."""
    long = {"type": "ephemeral", "ttl": "1h"}
    messages = conversation()
    messages[0] = {"role": "system", "content": [{"type": "text", "text": "rules", "cache_control": long}]}
    out, tools, added = add_breakpoints(messages, [tool("a")], [(0, 5000), (3, 9000)], 4000, 1024)
    assert added == 1 and "cache_control" in out[3]["content"][-1] and tools == [tool("a")]
    # A 1-hour marker on the history: neither the tools nor the system prompt before it get one.
    messages = conversation()
    messages[3] = {**messages[3], "cache_control": long}
    out, tools, added = add_breakpoints(messages, [tool("a")], [(0, 5000), (3, 9000)], 4000, 1024)
    assert added == 0 and out == messages and tools == [tool("a")]
    # The system message is hoisted to Anthropic's system block: it precedes every turn whatever its index.
    messages = conversation() + [{"role": "system", "content": [{"type": "text", "text": "late",
                                                                 "cache_control": long}]}]
    out, _, added = add_breakpoints(messages, None, [(3, 9000)], 0, 1024)
    assert added == 1 and "cache_control" in out[3]["content"][-1]


def test_never_more_than_four_markers_counting_the_clients() -> None:
    messages = conversation()
    messages[1] = {"role": "user", "content": [{"type": "text", "text": "q1", "cache_control": EPHEMERAL}]}
    client_tools = [
        {**tool("a"), "cache_control": EPHEMERAL},
        {**tool("b"), "cache_control": EPHEMERAL},
        tool("c"),
    ]
    out, tools, added = add_breakpoints(messages, client_tools, [(0, 5000), (3, 9000)], 4000, 1024)
    assert added == 1  # 3 from the client, one left: the system prompt's end gets it
    assert count_markers(out) + count_markers(tools) == 4
    assert "cache_control" in out[0]["content"][0] and "cache_control" not in tools[2]


def test_large_tool_blocks_get_their_own_breakpoint() -> None:
    out, tools, added = add_breakpoints(conversation(), [tool("a"), tool("b")], [(0, 2500), (3, 4000)], 2000, 1024)
    assert added == 3
    assert tools is not None and tools[-1]["cache_control"] == EPHEMERAL and "cache_control" not in tools[0]
