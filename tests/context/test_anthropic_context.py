"""Context economy in front of the strict fake Messages API, through the official openai SDK: the system prompt
is never dropped, windows come from the model family (or are unknown and nothing is cut), breakpoints keep
Anthropic's rules (1h before 5m, at most four, none under a model's minimum) and follow agent loops."""

from __future__ import annotations

import openai
import orjson
import pytest

from gateway.context import models
from tests.context.test_stage import budget, client

TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Looks things up. " * 40,
                                           "parameters": {"type": "object",
                                                          "properties": {"q": {"type": "string"}}}}}
         for i in range(6)]


def policy(url: str, section: str = "    ordering: {enabled: true, cache_breakpoints: true}") -> str:
    return f"""
backends:
  claude: {{type: anthropic, base_url: "{url}", api_key: k, options: {{default_max_tokens: 4096}}}}
routes:
  - match: {{model: "claude-*"}}
    backends: [claude]
{section}
"""


def markers(body: dict) -> list[dict]:
    """cache_control markers in Anthropic's prompt order (tools, system, messages)."""
    blocks = list(body.get("tools") or [])
    blocks += body["system"] if isinstance(body.get("system"), list) else []
    for m in body["messages"]:
        blocks += m["content"] if isinstance(m["content"], list) else []
    return [b["cache_control"] for b in blocks if "cache_control" in b]


def system_text(body: dict) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else "".join(b["text"] for b in system or [])


def test_a_long_system_prompt_reaches_an_unlisted_claude_model_verbatim(fake_anthropic, serve_gateway) -> None:
    """The defect: claude-opus-5-5 (not in the table) got an 8,192-token window, its 36,000-character system
    prompt was pruned to nothing, the client got 200 and the upstream no `system` at all."""
    fake, up = fake_anthropic
    srv = serve_gateway(policy(up.url))
    system = "".join(f"Rule {i}: answer about topic {i} with the house style and cite sources.\n" for i in range(520))
    assert len(system) > 36_000
    raw = client(srv).chat.completions.with_raw_response.create(
        model="claude-opus-5-5", messages=[{"role": "system", "content": system},
                                           {"role": "user", "content": "Summarise"}])
    assert raw.parse().choices[0].message.content == "echo: Summarise"
    assert system_text(fake.last.body) == system
    assert fake.last.body["messages"][-1]["content"] == "Summarise"
    report = budget(raw.headers)
    assert report["window"] == "200000" and "estimate" in report and int(report["system"]) > 8000


def test_a_prompt_over_the_policy_window_is_a_400_not_a_silent_cut(fake_anthropic, serve_gateway) -> None:
    fake, up = fake_anthropic
    srv = serve_gateway(policy(up.url, "    budget: {context_window: 8192}"))
    system = "Background line about the product. " * 1000
    with pytest.raises(openai.BadRequestError) as e:
        client(srv).chat.completions.create(model="claude-opus-5-5", messages=[
            {"role": "system", "content": system}, {"role": "user", "content": "Summarise"}])
    assert e.value.body["code"] == "context_length_exceeded" and "8192" in e.value.body["message"]
    assert fake.request_count == 0


def test_claude_models_get_the_family_window_and_the_table_is_current() -> None:
    for name in ("claude-opus-5-5", "claude-sonnet-4-6", "claude-haiku-4-5-20251001", "claude-opus-4-1-20250805",
                 "claude-mythos-preview", "claude-3-5-haiku-latest"):
        info = models.lookup(name)
        assert info is not None and info.window == 200_000, name
    assert models.lookup("claude-opus-4-6").cache_min_tokens == 4096
    assert models.lookup("claude-opus-4-5-20251101").cache_min_tokens == 4096
    assert models.lookup("claude-haiku-4-5").cache_min_tokens == 4096
    assert models.lookup("claude-sonnet-4-5").cache_min_tokens == 1024
    assert models.lookup("claude-3-5-haiku-latest").cache_min_tokens == 2048
    assert models.lookup("gpt-5.1").window == 400_000 and models.lookup("gpt-5-chat-latest").window == 128_000
    assert models.lookup("mystery-model-7b") is None


def test_a_truly_unknown_window_cuts_nothing_and_says_so(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(f"""
backends:
  up: {{type: openai, base_url: "{up.url}/v1", api_key: k}}
routes:
  - match: {{model: "*"}}
    backends: [up]
    compression: {{conversation: {{keep_recent: 1}}}}
""")
    conversation = [{"role": "system", "content": "Be exact. " * 4000}]
    for i in range(60):
        conversation += [{"role": "user", "content": f"Question {i}? " * 30},
                         {"role": "assistant", "content": f"Answer {i}. " * 30}]
    conversation.append({"role": "user", "content": "And so?"})
    docs = [{"id": f"d{i}", "content": f"Fact {i}. " * 300, "score": 1 - i / 10} for i in range(10)]
    raw = client(srv).chat.completions.with_raw_response.create(model="mystery-model-7b", messages=conversation,
                                                                extra_body={"documents": docs})
    forwarded = fake.last.body["messages"]
    assert [m for m in forwarded if m in conversation] == conversation
    assert sum(f"Fact {i}. " * 300 in orjson.dumps(forwarded).decode() for i in range(10)) == 10
    assert "max_tokens" not in fake.last.body  # no window: nothing reserved, the upstream's default holds
    report = budget(raw.headers)
    assert report["window"] == "unknown" and report["output"] == "default"


def test_added_breakpoints_respect_a_clients_one_hour_ttl(fake_anthropic, serve_gateway) -> None:
    """The defect: a client's 1h system breakpoint with ordering on got a 5m breakpoint added on the last tool,
    before it in Anthropic's order (tools, system, messages): the request was refused."""
    fake, up = fake_anthropic
    srv = serve_gateway(policy(up.url))
    system = [{"type": "text", "text": "House rules. " * 2000, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    history = []
    for i in range(4):
        history += [{"role": "user", "content": f"Question {i}: " + "details " * 600},
                    {"role": "assistant", "content": f"Answer {i}: " + "explained " * 600}]
    reply = client(srv).chat.completions.create(
        model="claude-sonnet-4-5", tools=TOOLS, tool_choice="none", max_tokens=1000,
        messages=[{"role": "system", "content": system}, *history, {"role": "user", "content": "Next?"}])
    assert reply.choices[0].message.content == "echo: Next?"
    sent = fake.last.body
    found = markers(sent)
    assert found[0] == {"type": "ephemeral", "ttl": "1h"} and len(found) <= 4
    assert not any("cache_control" in t for t in sent["tools"])  # no 5m marker before the client's 1h one
    assert len(found) == 2 and "cache_control" in sent["messages"][-2]["content"][-1]  # the history's end


def test_breakpoints_never_exceed_four_with_the_clients_own(fake_anthropic, serve_gateway) -> None:
    fake, up = fake_anthropic
    srv = serve_gateway(policy(up.url))
    mark = {"type": "ephemeral"}
    history = []
    for i in range(3):
        history += [{"role": "user", "content": [{"type": "text", "text": f"Q{i} " + "words " * 900,
                                                  "cache_control": mark}]},
                    {"role": "assistant", "content": f"A{i} " + "words " * 900}]
    client(srv).chat.completions.create(
        model="claude-sonnet-4-5", tools=TOOLS, max_tokens=1000,
        messages=[{"role": "system", "content": "Rules. " * 2000}, *history, {"role": "user", "content": "Q?"}])
    assert len(markers(fake.last.body)) == 4


def test_agent_loops_mark_the_newest_tool_round_so_the_next_step_reads_the_cache(fake_anthropic,
                                                                                  serve_gateway) -> None:
    """Tool rounds after the last user message grow every step; without a breakpoint at the newest one each
    step paid full price for the whole transcript."""
    fake, up = fake_anthropic
    srv = serve_gateway(policy(up.url))
    api = client(srv)
    history: list[dict] = [{"role": "system", "content": "You are an agent."},
                           {"role": "user", "content": "Investigate the outage."}]
    cached = []
    for step in range(4):
        history += [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"call_{step}", "type": "function",
                         "function": {"name": "tool_0", "arguments": orjson.dumps({"page": step}).decode()}}]},
                    {"role": "tool", "tool_call_id": f"call_{step}", "content": f"log page {step}: " + "line " * 1500}]
        reply = api.chat.completions.create(model="claude-sonnet-4-5", tools=TOOLS[:1], messages=history,
                                            max_tokens=2000)
        assert reply.choices[0].message.content == f"tool said: log page {step}: " + "line " * 1500
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        last = fake.last.body["messages"][-1]["content"]
        assert last[-1]["type"] == "tool_result" and "cache_control" in last[-1]
        assert len(markers(fake.last.body)) <= 4
    assert cached[0] == 0 and 0 < cached[1] < cached[2] < cached[3]  # each step reads what the last one wrote


@pytest.mark.parametrize(("model", "marked"), [("claude-opus-4-6", False), ("claude-opus-4-5", False),
                                               ("claude-opus-5-5", False), ("claude-sonnet-4-5", True)])
def test_no_breakpoint_under_the_models_minimum(fake_anthropic, serve_gateway, model: str, marked: bool) -> None:
    """About 2,000 tokens of stable prefix: enough for Sonnet 4.5 (1,024), not for Opus 4.5 / 4.6 (4,096) nor an
    unlisted Claude model (the largest published minimum), where a marker would only waste a slot."""
    fake, up = fake_anthropic
    srv = serve_gateway(policy(up.url))
    client(srv).chat.completions.create(model=model, max_tokens=1000, messages=[
        {"role": "system", "content": "Policy sentence for the assistant. " * 280},
        {"role": "user", "content": "hi"}])
    assert bool(markers(fake.last.body)) is marked
