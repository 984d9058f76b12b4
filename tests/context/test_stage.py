"""The context stage end to end: the official openai SDK -> gateway -> fake OpenAI / Anthropic upstreams."""

from __future__ import annotations

import random
import re

import httpx
import openai
import orjson
import pytest
from openai import OpenAI

from gateway.context.tokens import tiktoken_counter


def client(srv) -> OpenAI:
    return OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


def budget(headers) -> dict[str, str]:
    return dict(p.split("=", 1) if "=" in p else (p, "") for p in headers["x-token-budget"].split("; "))


def metric(srv, name: str, **labels: str) -> float:
    text = httpx.get(srv.url + "/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if m and ",".join(sorted((m.group(1) or "").split(","))) == want:
            return float(m.group(2))
    return 0.0


def openai_policy(url: str, section: str, extra_backends: str = "") -> str:
    return f"""
backends:
  up: {{type: openai, base_url: "{url}/v1", api_key: k}}
{extra_backends}
routes:
  - match: {{model: "gpt-4o*"}}
    backends: [up]
{section}
  - match: {{model: "plain-*"}}
    backends: [up]
"""


def history(turns: int, words: int = 40) -> list[dict]:
    out: list[dict] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"Question {i}: " + "please explain this part again. " * (words // 5)})
        out.append({"role": "assistant", "content": f"Answer {i}: " + "here is the explanation you asked. " * (words // 5)})
    return out


def test_documents_are_assembled_stripped_and_reported(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(openai_policy(
        up.url, "    budget: {context_window: 4000, max_output_tokens: 300, input_price_per_mtok: 1000}"))
    docs = [{"id": "a", "content": "The launch is on Tuesday.", "score": 0.9},
            {"id": "b", "content": "The launch is on Tuesday.", "score": 0.1}]
    raw = client(srv).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "When is the launch?"}], extra_body={"documents": docs}
    )
    forwarded = fake.last.body
    assert "documents" not in forwarded
    assert forwarded["max_tokens"] == 300
    assert '<document id="a">\nThe launch is on Tuesday.\n</document>' in forwarded["messages"][0]["content"]
    assert 'id="b"' not in forwarded["messages"][0]["content"]  # the duplicate
    report = budget(raw.headers)
    assert report["window"] == "4000" and report["output"] == "300" and report["tokenizer"] == "tiktoken/o200k_base"
    counter = tiktoken_counter("o200k_base")
    assert int(report["total"]) == counter.count_prompt(forwarded["messages"])
    assert int(report["documents"]) + int(report["query"]) + counter.reply_priming == int(report["total"])
    assert raw.parse().choices[0].message.content == "echo: When is the launch?"
    assert metric(srv, "gateway_context_documents_total", action="duplicate") == 1
    saved = int(report["saved"])
    assert saved > 0 and float(report["saved_usd"]) == pytest.approx(saved * 1000 / 1e6, abs=1e-6)
    assert metric(srv, "gateway_tokens_total", kind="saved_by_compression") == saved
    assert metric(srv, "gateway_context_saved_dollars_total") == pytest.approx(saved * 1000 / 1e6)


def test_routes_without_context_config_only_strip_documents(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(openai_policy(up.url, "    budget: {context_window: 4000}"))
    raw = client(srv).chat.completions.with_raw_response.create(
        model="plain-model", messages=[{"role": "user", "content": "hi"}],
        extra_body={"documents": [{"id": "x", "content": "c", "score": 1}]},
    )
    assert "x-token-budget" not in raw.headers
    assert "documents" not in fake.last.body and fake.last.body["messages"] == [{"role": "user", "content": "hi"}]


def test_prompt_that_cannot_fit_is_a_400_with_the_numbers(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(openai_policy(up.url, "    budget: {context_window: 200, max_output_tokens: 50}"))
    with pytest.raises(openai.BadRequestError) as err:
        client(srv).chat.completions.create(
            model="gpt-4o", messages=[{"role": "system", "content": "You must follow all rules. " * 30},
                                      {"role": "user", "content": "hello"}])
    assert err.value.status_code == 400
    body = err.value.body
    assert body["code"] == "context_length_exceeded" and body["type"] == "invalid_request_error"
    assert "200" in body["message"] and "50" in body["message"] and "150" in body["message"]
    assert fake.request_count == 0
    assert metric(srv, "gateway_context_rejected_total") == 1


@pytest.mark.parametrize(
    ("documents", "param"),
    [
        ("not a list", "documents"),
        ([{"id": "a"}], "documents[0].content"),
        ([{"id": "a", "content": "x", "score": "high"}], "documents[0].score"),
        ([{"id": "a", "content": "x", "static": "yes"}], "documents[0].static"),
        ([{"id": ["a"], "content": "x"}], "documents[0].id"),
        (["plain string"], "documents[0]"),
    ],
)
def test_bad_documents_are_a_400_naming_the_field(fake_openai, serve_gateway, documents, param) -> None:
    fake, up = fake_openai
    srv = serve_gateway(openai_policy(up.url, "    budget: {context_window: 4000}"))
    with pytest.raises(openai.BadRequestError) as err:
        client(srv).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "q"}], extra_body={"documents": documents})
    assert err.value.body["param"] == param and err.value.body["type"] == "invalid_request_error"
    assert fake.request_count == 0


TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"Look up {name}.", "parameters": {
        "type": "object", "required": ["q"], "properties": {"q": {"type": "string", "description": "query"}}}}}
    for name in ("search_web", "get_weather", "read_file")
]


def run_twenty_turns(fake, srv) -> list[bytes]:
    """A 20-turn conversation with a static reference doc, new retrieved docs each turn and tools in a new
    order each turn; returns the raw request bytes the upstream received."""
    rng = random.Random(7)
    api = client(srv)
    messages: list[dict] = [{"role": "system", "content": "You are a support agent. You must cite documents."}]
    for turn in range(20):
        messages.append({"role": "user", "content": f"Turn {turn}: what about item {turn}?"})
        tools = [dict(t) for t in TOOLS]
        rng.shuffle(tools)
        docs = [{"id": "handbook", "content": "The handbook says: be kind.", "score": 0.5, "static": True}]
        docs += [{"id": f"r{turn}-{k}", "content": f"Item {turn} fact {k}.", "score": rng.random()} for k in range(3)]
        reply = api.chat.completions.create(
            model="gpt-4o", messages=messages, tools=tools, tool_choice="none", extra_body={"documents": docs})
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return [r.raw for r in fake.requests]


def test_ordering_keeps_the_prefix_byte_identical_across_twenty_turns(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(openai_policy(up.url, "    budget: {context_window: 100000}"))
    raws = run_twenty_turns(fake, srv)
    assert len(raws) == 20
    bodies = [orjson.loads(r) for r in raws]
    for before, after in zip(bodies, bodies[1:], strict=False):
        stable = before["messages"][:-2]  # everything but the retrieved documents and the query
        assert after["messages"][: len(stable)] == stable
        assert orjson.dumps(after["messages"][: len(stable)]) == orjson.dumps(stable)
        assert orjson.dumps(after["tools"]) == orjson.dumps(before["tools"])
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["get_weather", "read_file", "search_web"]
    for before, after in zip(raws, raws[1:], strict=False):  # on the wire, too
        cut = before.index(b"Documents retrieved for the next question")
        assert after[:cut] == before[:cut]
    assert len(bodies[-1]["messages"]) == 1 + 1 + 19 * 2 + 2


def test_without_ordering_the_prefix_breaks_every_turn(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(openai_policy(up.url, "    budget: {context_window: 100000}\n    ordering: {enabled: false}"))
    bodies = [orjson.loads(r) for r in run_twenty_turns(fake, srv)]
    changed = sum(after["messages"][1] != before["messages"][1] for before, after in zip(bodies, bodies[1:], strict=False))
    assert changed == 19  # the documents message right after the system prompt differs each turn


def summarizer_policy(up_url: str, summ_url: str, timeout_s: float = 5) -> str:
    section = f"""    budget: {{context_window: 1500, max_output_tokens: 200}}
    compression:
      conversation: {{keep_recent: 2, summarizer: summ, timeout_s: {timeout_s}, max_summary_tokens: 120}}"""
    extra = f'  summ: {{type: openai, base_url: "{summ_url}/v1", api_key: k, model: summary-model}}'
    return openai_policy(up_url, section, extra)


def test_summaries_are_cached_and_extended_with_only_new_turns(fake_openai, summarizer_upstream, serve_gateway) -> None:
    fake, up = fake_openai
    summ, summ_srv = summarizer_upstream
    srv = serve_gateway(summarizer_policy(up.url, summ_srv.url))
    api = client(srv)
    conversation = history(12) + [{"role": "user", "content": "What did we conclude?"}]

    first = api.chat.completions.with_raw_response.create(model="gpt-4o", messages=conversation)
    assert summ.request_count == 1
    assert summ.last.body["model"] == "summary-model"
    assert "Question 0:" in summ.last.body["messages"][1]["content"]
    report = budget(first.headers)
    assert int(report["summary"]) > 0 and int(report["total"]) <= 1300
    forwarded = fake.last.body["messages"]
    assert forwarded[0]["role"] == "system" and forwarded[0]["content"].startswith("Summary of the 22 earlier")
    assert summ.reply in forwarded[0]["content"]
    assert forwarded[1:] == conversation[-3:]

    api.chat.completions.create(model="gpt-4o", messages=conversation)  # second turn: served from Redis
    assert summ.request_count == 1
    assert fake.last.body["messages"] == forwarded
    assert metric(srv, "gateway_context_summaries_total", result="miss") == 1
    assert metric(srv, "gateway_context_summaries_total", result="hit") == 1

    grown = history(13) + [{"role": "user", "content": "And now?"}]  # two more turns leave the recent window
    api.chat.completions.create(model="gpt-4o", messages=grown)
    assert summ.request_count == 2
    prompt = summ.last.body["messages"][1]["content"]
    assert prompt.startswith("Summary so far:\n" + summ.reply)
    assert "Question 11:" in prompt and "Answer 11:" in prompt
    assert "Question 10:" not in prompt and "Question 12:" not in prompt
    assert metric(srv, "gateway_context_summaries_total", result="extended") == 1
    saved = metric(srv, "gateway_tokens_total", kind="saved_by_compression")
    assert saved > 0  # priced from the model table: gpt-4o input at $2.50 per million tokens
    assert metric(srv, "gateway_context_saved_dollars_total") == pytest.approx(saved * 2.5 / 1e6)


@pytest.mark.parametrize("failure", ["error", "timeout"])
def test_summarizer_failure_falls_back_to_dropping_oldest_turns(fake_openai, summarizer_upstream, serve_gateway, failure) -> None:
    fake, up = fake_openai
    summ, summ_srv = summarizer_upstream
    if failure == "error":
        summ.fail_next(10, status=500)
    else:
        summ.delay_headers = 3.0
    srv = serve_gateway(summarizer_policy(up.url, summ_srv.url, timeout_s=0.3))
    conversation = history(12) + [{"role": "user", "content": "What did we conclude?"}]
    raw = client(srv).chat.completions.with_raw_response.create(model="gpt-4o", messages=conversation)
    report = budget(raw.headers)
    assert report["summary"] == "0" and int(report["total"]) <= 1300
    forwarded = fake.last.body["messages"]
    assert not any(m["content"].startswith("Summary of") for m in forwarded)
    assert forwarded == conversation[len(conversation) - len(forwarded):]  # the newest turns, oldest dropped
    assert len(forwarded) < len(conversation)
    assert metric(srv, "gateway_context_summaries_total", result=failure) == 1
    dropped = metric(srv, "gateway_context_dropped_messages_total", reason="summarizer_failed")
    assert dropped == len(conversation) - len(forwarded)


def anthropic_policy(url: str) -> str:
    return f"""
backends:
  claude: {{type: anthropic, base_url: "{url}", api_key: k}}
routes:
  - match: {{model: "claude-*"}}
    backends: [claude]
    budget: {{max_output_tokens: 1000}}
"""


def test_anthropic_requests_carry_breakpoints_at_the_end_of_the_static_prefix(fake_anthropic, serve_gateway) -> None:
    fake, up = fake_anthropic
    srv = serve_gateway(anthropic_policy(up.url))
    api = client(srv)
    system = "You are the support assistant of a bicycle shop. You must be precise.\n" + "Policy line. " * 600
    tools = [dict(t) for t in TOOLS]
    conversation = [{"role": "system", "content": system}] + history(8, words=200)
    conversation.append({"role": "user", "content": "What is the warranty?"})
    docs = [{"id": "warranty", "content": "Frames carry a lifetime warranty. " * 150, "score": 1, "static": True},
            {"id": "today", "content": "The shop is open until six today.", "score": 0.7}]
    first = api.chat.completions.create(model="claude-sonnet-4-20250514", messages=conversation, tools=tools,
                                        extra_body={"documents": docs})
    body = fake.last.body
    marked_system = [b for b in body["system"] if "cache_control" in b]
    assert len(marked_system) == 1 and marked_system[0] is body["system"][-1]
    assert "lifetime warranty" in body["system"][-1]["text"]  # the static document ends the static part
    history_end = body["messages"][-2]  # the retrieved documents and the query come after the breakpoint
    assert history_end["role"] == "assistant" and "cache_control" in history_end["content"][-1]
    assert history_end["content"][-1]["text"] == conversation[-2]["content"]
    assert "The shop is open until six" in orjson.dumps(body["messages"][-1]).decode()
    assert not any("cache_control" in t for t in body["tools"])  # tools alone are below Anthropic's minimum
    assert orjson.dumps(body).count(b"cache_control") <= 4
    assert first.usage.prompt_tokens_details.cached_tokens == 0

    conversation.append({"role": "assistant", "content": first.choices[0].message.content or "ok"})
    conversation.append({"role": "user", "content": "And for wheels?"})
    second = api.chat.completions.create(model="claude-sonnet-4-20250514", messages=conversation, tools=tools,
                                         extra_body={"documents": docs})
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached > 0  # the fake's simulated prompt cache hit the previous breakpoints
    assert metric(srv, "gateway_tokens_total", kind="cached_upstream") == cached
    assert metric(srv, "gateway_context_cache_breakpoints_total") == 4


def test_short_prefixes_get_no_breakpoints(fake_anthropic, serve_gateway) -> None:
    fake, up = fake_anthropic
    srv = serve_gateway(anthropic_policy(up.url))
    client(srv).chat.completions.create(
        model="claude-sonnet-4-20250514",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                  {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}])
    assert b"cache_control" not in fake.last.raw


def test_large_conversation_is_fitted_to_the_table_window(fake_openai, serve_gateway) -> None:
    """More text than OFFLOAD_CHARS (assembled on a worker thread); gpt-4 has an 8,192-token window."""
    fake, up = fake_openai
    srv = serve_gateway(openai_policy(up.url, "    budget: {max_output_tokens: 1000}").replace('"gpt-4o*"', '"gpt-4*"'))
    conversation = history(120, words=100) + [{"role": "user", "content": "Summing up?"}]
    assert sum(len(m["content"]) for m in conversation) > 64_000
    raw = client(srv).chat.completions.with_raw_response.create(model="gpt-4-0613", messages=conversation)
    report = budget(raw.headers)
    assert report["window"] == "8192" and report["tokenizer"] == "tiktoken/cl100k_base"
    forwarded = fake.last.body["messages"]
    assert tiktoken_counter("cl100k_base").count_prompt(forwarded) == int(report["total"]) <= 8192 - 1000
    assert forwarded == conversation[len(conversation) - len(forwarded):]
    assert metric(srv, "gateway_context_dropped_messages_total", reason="no_summarizer") == len(conversation) - len(forwarded)


def test_a_route_over_backends_of_different_windows_fits_the_smallest(fake_openai, serve_gateway) -> None:
    """Weighted over gpt-4o (128k) and ft:gpt-4 (8,192): whichever answers, the prompt fits 8,192 tokens,
    counted with the small model's tokenizer."""
    fake, up = fake_openai
    srv = serve_gateway(f"""
backends:
  big: {{type: openai, base_url: "{up.url}/v1", api_key: k, model: gpt-4o}}
  small: {{type: openai, base_url: "{up.url}/v1", api_key: k, model: ft:gpt-4-0613}}
routes:
  - match: {{model: mixed}}
    backends: [big, small]
    budget: {{max_output_tokens: 1000}}
""")
    conversation = history(60, words=100) + [{"role": "user", "content": "Summing up?"}]
    raw = client(srv).chat.completions.with_raw_response.create(model="mixed", messages=conversation)
    report = budget(raw.headers)
    assert report["window"] == "8192" and report["tokenizer"] == "tiktoken/cl100k_base"
    forwarded = fake.last.body["messages"]
    assert tiktoken_counter("cl100k_base").count_prompt(forwarded) == int(report["total"]) <= 8192 - 1000
    assert len(forwarded) < len(conversation) and forwarded[-1] == conversation[-1]


def mixed_policy(url: str, models: list[str], section: str) -> str:
    """One route, model `mixed`, over one OpenAI-compatible backend per model (all the one fake)."""
    names = [f"b{i}" for i in range(len(models))]
    backends = "".join(f'  {n}: {{type: openai, base_url: "{url}/v1", api_key: k, model: "{m}"}}\n'
                       for n, m in zip(names, models, strict=True))
    return f"backends:\n{backends}routes:\n  - match: {{model: mixed}}\n    backends: [{', '.join(names)}]\n{section}\n"


def test_a_backend_of_unknown_window_leaves_the_window_unknown(fake_openai, serve_gateway) -> None:
    """A vLLM model the table does not know (its window may be 8k) beside gpt-4o-mini (128k): not budgeted for
    128k, and no output limit taken from it (16,384 tokens would be a 400 on an 8k server)."""
    fake, up = fake_openai
    srv = serve_gateway(mixed_policy(up.url, ["meta-llama/Llama-3.1-8B-Instruct", "gpt-4o-mini"],
                                     "    budget: {strategy: balanced}"))
    conversation = history(3) + [{"role": "user", "content": "Summing up?"}]
    raw = client(srv).chat.completions.with_raw_response.create(model="mixed", messages=conversation)
    assert budget(raw.headers)["window"] == "unknown"
    assert fake.last.body["messages"] == conversation
    assert "max_tokens" not in fake.last.body and "max_completion_tokens" not in fake.last.body


def test_the_output_cap_is_the_smallest_of_the_routes_backends(fake_openai, serve_gateway) -> None:
    """gpt-4 (8,192 window and output) is assembled for, but gpt-4-turbo may answer: it takes 4,096 at most."""
    fake, up = fake_openai
    srv = serve_gateway(mixed_policy(up.url, ["gpt-4", "gpt-4-turbo"], "    budget: {strategy: balanced}"))
    raw = client(srv).chat.completions.with_raw_response.create(
        model="mixed", messages=[{"role": "user", "content": "Write a long story."}], max_tokens=6000)
    assert budget(raw.headers)["window"] == "8192"
    assert fake.last.body["max_tokens"] == 4096


def test_a_reasoning_model_in_the_route_gets_max_completion_tokens(fake_openai, serve_gateway) -> None:
    """o3 refuses `max_tokens`; gpt-4o (the smaller window, assembled for) takes `max_completion_tokens` too."""
    fake, up = fake_openai
    srv = serve_gateway(mixed_policy(up.url, ["gpt-4o", "o3"], "    budget: {max_output_tokens: 500}"))
    client(srv).chat.completions.create(model="mixed", messages=[{"role": "user", "content": "Think."}])
    assert fake.last.body["max_completion_tokens"] == 500 and "max_tokens" not in fake.last.body
