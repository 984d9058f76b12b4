"""Engine backends are counted with the engine's own tokenizer and chat template: the count is what it prefills."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings

from engine.serving.params import chat_messages
from gateway.context.engine_tokens import load_engine_counter
from gateway.errors import GatewayError
from tests.context.test_budget import assemble, requests

CONVERSATIONS = [
    [{"role": "user", "content": "hello there"}],
    [
        {"role": "system", "content": "You are terse. Never apologise."},
        {"role": "user", "content": "Summarise: 大语言模型 and emoji 🎉 in one line."},
        {"role": "assistant", "content": "LLMs 🎉 — 大语言模型."},
        {"role": "user", "content": "def f(x):\n    return x * 2\n# what does it do?"},
    ],
    [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "third " * 50},
    ],
]


@pytest.fixture(scope="module")
def counter():
    return load_engine_counter("smollm2-135m")


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_per_message_counts_add_up_to_the_template(counter, messages) -> None:
    expected = len(counter.tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    assert counter.count_prompt(messages) == expected
    assert counter.count_messages(messages) == expected


def test_engine_counter_is_exact_and_named(counter) -> None:
    assert counter.exact and counter.name == "engine/smollm2-135m"
    assert load_engine_counter("smollm2-135m") is counter  # loaded once per process


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=requests())
def test_budget_is_never_exceeded_with_the_engine_template(counter, case) -> None:
    raw_config, window, reserved, messages, docs, summary, _ = case
    assume(not any(m.get("tool_calls") for m in messages))  # SmolLM2's template has no tool-call syntax
    try:
        _, assembled = assemble(counter, raw_config, window, reserved, messages, docs, summary=summary)
    except GatewayError as e:
        assert e.code == "context_length_exceeded"
        return
    engine_view = chat_messages({"messages": assembled.messages})  # the engine's own request handling
    prefill = len(counter.tokenizer.apply_chat_template(engine_view, add_generation_prompt=True))
    assert prefill == assembled.report.total <= window - reserved
