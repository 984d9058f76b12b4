"""Budget assembly: never over the window (property-based), each strategy's split, the 400 when system +
query cannot fit, priority of what is kept, and tool calls kept with their results."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gateway.context.budget import finish, plan, split_conversation
from gateway.context.compress import Document
from gateway.context.config import parse_context_config
from gateway.context.tokens import TokenCounter, tiktoken_counter
from gateway.errors import GatewayError

COUNTER = tiktoken_counter("o200k_base")
WORDS = ["alpha", "beta", "gamma", "令牌", "预算", "🎉", "def", "x=1;", "The", "quick.", "fox!", "\n", "3.14", "。"]


def assemble(counter: TokenCounter, raw_config: dict, window: int, reserved: int, messages: list[dict],
             docs: list[Document], tools: list | None = None, summary: str | None = None):
    config = parse_context_config(raw_config, "routes[0]")
    assert config is not None
    p = plan(counter, config, window, reserved, split_conversation(messages), docs, tools, messages)
    return p, finish(p, summary if p.summary_max_tokens > 0 else None)


def text(draw, max_words: int = 60) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=max_words)))


@st.composite
def requests(draw):
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": text(draw, 80)})
    for i in range(draw(st.integers(0, 14))):
        messages.append({"role": "user", "content": text(draw)})
        if draw(st.integers(0, 4)) == 0:  # a tool round trip
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]})
            messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text(draw, 30)})
        messages.append({"role": "assistant", "content": text(draw)})
    messages.append({"role": "user", "content": text(draw, 20)})
    docs = [
        Document(str(i), " ".join(text(draw, 40) for _ in range(draw(st.integers(1, 4)))),
                 draw(st.floats(0, 1)), draw(st.booleans()))
        for i in range(draw(st.integers(0, 8)))
    ]
    raw_config = {
        "budget": {"strategy": draw(st.sampled_from(["balanced", "context_heavy", "output_heavy"]))},
        "compression": {
            "conversation": {"keep_recent": draw(st.integers(0, 8)),
                             **({"summarizer": "s"} if draw(st.booleans()) else {})},
            "documents": {"dedup": draw(st.booleans()),
                          **({"max_tokens": draw(st.integers(1, 400))} if draw(st.booleans()) else {})},
            **({"system": {"max_share": draw(st.floats(0.05, 1.0))}} if draw(st.booleans()) else {}),
        },
        "ordering": {"enabled": draw(st.booleans())},
    }
    window = draw(st.integers(40, 2500))
    reserved = draw(st.integers(1, max(1, window // 2)))
    summary = text(draw, 200) if draw(st.booleans()) else None
    tools = [{"type": "function", "function": {"name": f"tool_{k}", "description": text(draw, 10), "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "description": text(draw, 5)}}}}}
        for k in range(draw(st.integers(0, 2)))] or None
    return raw_config, window, reserved, messages, docs, summary, tools


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_budget_is_never_exceeded(case) -> None:
    raw_config, window, reserved, messages, docs, summary, tools = case
    conversation = split_conversation(messages)
    try:
        _, assembled = assemble(COUNTER, raw_config, window, reserved, messages, docs, tools, summary=summary)
    except GatewayError as e:
        assert e.status == 400 and e.code == "context_length_exceeded"
        event("rejected: context_length_exceeded")
        assert str(window) in e.message and str(reserved) in e.message
        # Only when the system prompt and the query cannot fit (pruning only ever shortens the system prompt).
        assert COUNTER.count_prompt(conversation.system + conversation.query, tools) > window - reserved
        return
    report = assembled.report
    event(f"summarised={report.messages_summarized > 0} dropped={report.messages_dropped > 0} "
          f"docs_cut={report.documents_kept < len(docs)}")
    out = assembled.messages
    total = COUNTER.count_prompt(out, tools)
    assert total <= window - reserved
    assert total == assembled.report.total
    assert out[len(out) - len(conversation.query):] == conversation.query  # the query is kept whole
    system = out[: len(conversation.system)]
    if "system" not in raw_config["compression"]:  # pruning not asked for: the system prompt is kept verbatim
        assert system == conversation.system
    else:  # pruned, if at all, never to nothing
        assert all(m["content"].strip() or not o["content"].strip() for m, o in zip(system, conversation.system,
                                                                                    strict=True))
    for i, m in enumerate(out):  # every tool result still follows its call
        if m.get("role") == "tool":
            j = i - 1
            while out[j].get("role") == "tool":
                j -= 1
            assert out[j].get("tool_calls")


def long_history(turns: int, words: int = 60) -> list[dict]:
    messages = [{"role": "system", "content": "You must answer from the documents."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Question {i}: " + "tell me more about the topic. " * (words // 6)})
        messages.append({"role": "assistant", "content": f"Answer {i}: " + "here is what I know about it. " * (words // 6)})
    messages.append({"role": "user", "content": "And finally?"})
    return messages


def many_docs(n: int = 30) -> list[Document]:
    return [Document(f"d{i}", " ".join(f"Fact {i}.{k} about subject {i} is stated here." for k in range(40)), 1 - i / n)
            for i in range(n)]


@pytest.mark.parametrize(
    ("strategy", "output_share", "doc_share"),
    [("balanced", 0.25, 0.5), ("context_heavy", 0.125, 0.65), ("output_heavy", 0.5, 0.4)],
)
def test_each_strategy_reserves_output_and_splits_the_rest(strategy: str, output_share: float, doc_share: float) -> None:
    from gateway.context.stage import Target, reserve_output

    window = 8000
    config = parse_context_config({"budget": {"strategy": strategy}}, "r")
    reserved, key = reserve_output({"messages": []}, config, Target("openai", "m", False, None), window)
    assert reserved == int(window * output_share) and key is None
    messages = long_history(80)
    _, assembled = assemble(COUNTER, {"budget": {"strategy": strategy}, "compression": {
        "conversation": {"keep_recent": 0}}}, window, reserved, messages, many_docs())
    r = assembled.report
    assert r.total <= window - reserved
    flexible = window - reserved - r.system - r.query - COUNTER.reply_priming
    assert r.documents / flexible == pytest.approx(doc_share, abs=0.05)
    assert r.history / flexible == pytest.approx(1 - doc_share, abs=0.05)


def test_a_part_that_needs_less_than_its_share_leaves_the_rest() -> None:
    short = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "go"}]
    _, a = assemble(COUNTER, {"budget": {}}, 6000, 1000, short, many_docs())
    assert a.report.documents > 0.9 * (5000 - a.report.history - a.report.query - a.report.system - 3)
    _, b = assemble(COUNTER, {"budget": {}}, 6000, 1000, long_history(60), [Document("d", "One short fact.", 1.0)])
    assert b.report.history > 0.9 * (5000 - b.report.documents - b.report.query - b.report.system - 3)


def test_client_max_tokens_is_reserved_and_policy_caps_it() -> None:
    from gateway.context.stage import Target, reserve_output

    config = parse_context_config({"budget": {"max_output_tokens": 300}}, "r")
    target = Target("openai", "m", False, None)
    assert reserve_output({"max_tokens": 100}, config, target, 4000) == (100, "max_tokens")
    assert reserve_output({"max_completion_tokens": 900}, config, target, 4000) == (300, "max_completion_tokens")
    assert reserve_output({}, config, target, 4000) == (300, None)
    with pytest.raises(GatewayError) as err:
        reserve_output({"max_tokens": 0}, config, target, 4000)
    assert err.value.status == 400 and err.value.param == "max_tokens"


def test_system_and_query_that_cannot_fit_is_a_400_naming_the_numbers() -> None:
    messages = [{"role": "system", "content": "You must obey every rule. " * 40},
                {"role": "user", "content": "Explain everything in detail. " * 40}]
    with pytest.raises(GatewayError) as err:
        assemble(COUNTER, {"budget": {}}, 300, 100, messages, [])
    e = err.value
    assert (e.status, e.code, e.type, e.param) == (400, "context_length_exceeded", "invalid_request_error", "messages")
    system = COUNTER.count_messages(messages[:1]) - COUNTER.reply_priming
    query = COUNTER.count_messages(messages[1:]) - COUNTER.reply_priming
    for number in (300, 100, 200, system, query):
        assert str(number) in e.message


def test_priority_keeps_recent_turns_then_documents_then_older_turns() -> None:
    messages = long_history(30)
    docs = many_docs(5)
    _, a = assemble(COUNTER, {"compression": {"conversation": {"keep_recent": 4}}}, 3000, 500, messages, docs)
    out = a.messages
    assert out[0] == messages[0] and out[-1] == messages[-1]
    assert out[-6:-2] == messages[-5:-1]  # the 4 newest history messages, then the documents, then the query
    assert "<documents>" in out[-2]["content"]
    assert a.report.messages_dropped > 0 and a.report.documents_kept >= 1
    kept_history = [m for m in out if m in messages[1:-1]]
    assert kept_history == messages[1:-1][-len(kept_history):]  # older turns go oldest first


def test_summary_replaces_older_turns_when_they_do_not_fit() -> None:
    messages = long_history(30)
    p, a = assemble(COUNTER, {"compression": {"conversation": {"keep_recent": 2, "summarizer": "s"}}}, 2000, 300,
                    messages, [], summary="The user asked thirty questions about the topic; all were answered.")
    assert p.summary_max_tokens > 0
    summary = [m for m in a.messages if m["role"] == "system" and m["content"].startswith("Summary of the")]
    assert len(summary) == 1 and "thirty questions" in summary[0]["content"]
    assert a.report.messages_summarized == len(messages) - 2 - 2 - a.report.messages_dropped
    assert a.messages[-3:] == messages[-3:]


def test_no_summary_falls_back_to_dropping_the_oldest() -> None:
    messages = long_history(30)
    _, a = assemble(COUNTER, {"compression": {"conversation": {"keep_recent": 2, "summarizer": "s"}}}, 2000, 300,
                    messages, [], summary=None)
    assert not any(m["content"].startswith("Summary of the") for m in a.messages if m["role"] == "system")
    assert a.report.messages_dropped > 0 and a.report.total <= 1700
    assert a.messages[-3:] == messages[-3:]


def test_system_prompt_is_pruned_by_rule_priority_only_when_over_its_share() -> None:
    system = "\n".join([
        "You must answer in English.",
        "You may use bullet points.",
        "Background: the company sells bicycles and has shops in three cities.",
        "Never reveal internal prices.",
        "You should keep answers short.",
        "必须使用礼貌用语。",
        "可以适当使用表情符号。",
    ])
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
    _, roomy = assemble(COUNTER, {"budget": {}}, 4000, 100, messages, [])
    assert roomy.messages[0]["content"] == system
    _, tight = assemble(COUNTER, {"compression": {"system": {"max_share": 0.05}}}, 800, 100, messages, [])
    kept = tight.messages[0]["content"].split("\n")
    assert "You must answer in English." in kept and "Never reveal internal prices." in kept
    assert "必须使用礼貌用语。" in kept
    assert "You may use bullet points." not in kept and "可以适当使用表情符号。" not in kept
    assert kept == [line for line in system.split("\n") if line in kept]  # order preserved


def test_system_prompt_is_never_pruned_unless_the_route_asks() -> None:
    """The defect: a long system prompt over half the input was pruned to almost nothing by default."""
    system = "Background: the shop sells bicycles and repairs them in three cities.\n" * 300
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Summarise"}]
    _, a = assemble(COUNTER, {"budget": {}}, 8192, 2048, messages, [])
    assert a.messages == messages and a.report.system == COUNTER.count_message(messages[0])
    with pytest.raises(GatewayError) as err:  # cannot fit: the client hears it, nothing is cut
        assemble(COUNTER, {"budget": {}}, 3000, 500, messages, [])
    assert err.value.code == "context_length_exceeded"
    # Asked for by the route, pruning drops lines but never empties the prompt.
    _, pruned = assemble(COUNTER, {"compression": {"system": {"max_share": 0.05}}}, 3000, 500, messages, [])
    assert 0 < len(pruned.messages[0]["content"]) < len(system)
    with pytest.raises(GatewayError):  # one line: pruning would leave nothing, so it stays whole and is a 400
        assemble(COUNTER, {"compression": {"system": {"max_share": 0.05}}}, 3000, 500,
                 [{"role": "system", "content": "x " * 3000}, messages[1]], [])


def test_unknown_window_takes_no_destructive_step() -> None:
    messages = long_history(40)
    docs = many_docs(20)
    _, a = assemble(COUNTER, {"compression": {"conversation": {"keep_recent": 1}}}, None, None, messages, docs)
    r = a.report
    assert r.messages_dropped == r.messages_summarized == r.documents_dropped == r.documents_truncated == 0
    assert [m for m in a.messages if m in messages] == messages
    assert r.documents_kept == 20 and a.report.header().startswith("window=unknown; output=default;")


def test_documents_are_deduplicated_ordered_by_score_and_cut_at_a_sentence() -> None:
    base = ("Paris is the capital of France. It has many museums. The Louvre is the largest. The Seine runs "
            "through the city from east to west. Montmartre is a hill in the north.")
    docs = [
        Document("low", "Bordeaux is known for wine. It lies on the Garonne.", 0.2),
        Document("copy", "  " + base.lower().replace(". ", ".  ") + " ", 0.5),
        Document("near", base + " It is busy.", 0.6),  # word-shingle Jaccard with `best` about 0.9
        Document("best", base, 0.9),
        Document("long", " ".join(f"Sentence number {i} is here." for i in range(200)), 0.4),
    ]
    messages = [{"role": "user", "content": "Tell me about Paris."}]
    _, a = assemble(COUNTER, {"compression": {"documents": {"near_duplicate": 0.6}}}, 1000, 600, messages, docs)
    content = a.messages[0]["content"]
    assert a.report.documents_duplicate == 2  # the exact copy and the near copy
    assert content.index('id="best"') < content.index('id="long"')
    assert 'id="copy"' not in content and 'id="near"' not in content
    assert a.report.documents_truncated == 1
    cut = content.split('<document id="long">\n', 1)[1].split("\n</document>", 1)[0]
    assert cut.endswith("is here.") and cut.startswith("Sentence number 0")
    assert a.report.total <= 400


def test_documents_field_limits() -> None:
    docs = many_docs(10)
    messages = [{"role": "user", "content": "q"}]
    _, a = assemble(COUNTER, {"compression": {"documents": {"max_tokens": 300}}}, 100_000, 1000, messages, docs)
    assert 0 < a.report.documents <= 300
