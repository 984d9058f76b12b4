"""Cache keys: canonical (equal requests hash equal) and complete (any output-affecting field changes the key)."""

from __future__ import annotations

import pytest

from gateway.cache.keys import (
    canonical_request,
    exact_key,
    is_deterministic,
    namespace_id,
    semantic_query,
)

BASE = {"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0}


def key(body: dict, tenant: str = "t", route: int = 0, version: str = "1", endpoint: str = "chat.completions") -> str:
    return exact_key(tenant, route, "m*", version, endpoint, body)


@pytest.mark.parametrize("change", [
    {"model": "m2"},
    {"messages": [{"role": "user", "content": "What is 2+3?"}]},
    {"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "What is 2+2?"}]},
    {"messages": [{"role": "user", "content": "What is 2+2?", "name": "bob"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"},
                                               {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]},
    {"temperature": 0.5},
    {"top_p": 0.9},
    {"max_tokens": 10},
    {"max_completion_tokens": 10},
    {"stop": ["\n"]},
    {"n": 2},
    {"seed": 7},
    {"presence_penalty": 0.5},
    {"frequency_penalty": 0.5},
    {"logit_bias": {"50256": -100}},
    {"logprobs": True},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
    {"tool_choice": "required"},
    {"response_format": {"type": "json_object"}},
    {"reasoning_effort": "high"},
    {"some_future_field": 1},  # unknown fields may change the output: they are in the key
])
def test_every_output_affecting_field_changes_the_key(change: dict) -> None:
    assert key({**BASE, **change}) != key(BASE)


@pytest.mark.parametrize("change", [
    {"stream": True},
    {"stream": True, "stream_options": {"include_usage": True}},
    {"user": "u-42"},
    {"metadata": {"trace": "x"}},
    {"store": True},
    {"service_tier": "auto"},
    {"temperature": 0.0},
    {"top_p": 1},
    {"top_p": 1.0},
    {"n": 1},
    {"presence_penalty": 0.0},
    {"logprobs": False},
    {"response_format": {"type": "text"}},
    {"tool_choice": "none"},
    {"logit_bias": {}},
    {"stop": None},
    {"seed": None},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]},
])
def test_fields_that_cannot_change_the_output_or_equal_defaults_share_the_key(change: dict) -> None:
    assert key({**BASE, **change}) == key(BASE)


def test_key_order_and_number_spelling_do_not_matter() -> None:
    a = {"temperature": 0, "model": "m", "max_tokens": 5, "messages": BASE["messages"]}
    b = {"messages": BASE["messages"], "max_tokens": 5.0, "model": "m", "temperature": 0.0}
    assert key(a) == key(b)


def test_max_tokens_and_max_completion_tokens_are_one_field() -> None:
    assert key({**BASE, "max_tokens": 8}) == key({**BASE, "max_completion_tokens": 8})


def test_stop_string_equals_single_item_list_and_order_is_irrelevant() -> None:
    assert key({**BASE, "stop": "x"}) == key({**BASE, "stop": ["x"]})
    assert key({**BASE, "stop": ["a", "b"]}) == key({**BASE, "stop": ["b", "a"]})


def test_tenant_route_version_and_endpoint_are_in_the_key() -> None:
    k = key(BASE)
    assert key(BASE, tenant="other") != k
    assert key(BASE, route=1) != k
    assert key(BASE, version="2") != k
    assert key(BASE, endpoint="completions") != k


def test_tool_choice_auto_is_the_default_only_with_tools() -> None:
    tools = {"tools": [{"type": "function", "function": {"name": "f"}}]}
    assert key({**BASE, **tools, "tool_choice": "auto"}) == key({**BASE, **tools})
    assert key({**BASE, "tool_choice": "auto"}) != key(BASE)


def test_completions_defaults() -> None:
    body = {"model": "m", "prompt": "hi", "temperature": 0}
    assert canonical_request("completions", {**body, "max_tokens": 16, "echo": False}) == \
        canonical_request("completions", body)


def test_deterministic_means_temperature_zero_or_a_seed() -> None:
    assert is_deterministic("chat.completions", {"temperature": 0})
    assert is_deterministic("chat.completions", {"temperature": 0.7, "seed": 1})
    assert not is_deterministic("chat.completions", {})  # OpenAI's default temperature is 1
    assert not is_deterministic("chat.completions", {"temperature": 0.2})


def test_namespace_is_per_tenant_and_model() -> None:
    assert namespace_id("a", "m") != namespace_id("b", "m")
    assert namespace_id("a", "m") != namespace_id("a", "n")
    assert namespace_id("a|b", "c") != namespace_id("a", "b|c")


# ---- semantic scope -----------------------------------------------------------------------------------------


def scope(body: dict, tenant: str = "t") -> str | None:
    q = semantic_query(tenant, 0, "m*", "1", body)
    return q.scope if q else None


def test_semantic_embeds_only_the_last_user_message() -> None:
    q = semantic_query("t", 0, "m*", "1", {"model": "m", "messages": [
        {"role": "system", "content": "Be terse."}, {"role": "user", "content": "  What is 2+2?  "}]})
    assert q is not None and q.text == "What is 2+2"  # in near-repeat form (normalize.py)


def test_multi_turn_chats_sharing_the_last_message_get_different_scopes() -> None:
    last = {"role": "user", "content": "And what about its population?"}
    paris = [{"role": "user", "content": "Tell me about Paris."}, {"role": "assistant", "content": "Paris..."}, last]
    tokyo = [{"role": "user", "content": "Tell me about Tokyo."}, {"role": "assistant", "content": "Tokyo..."}, last]
    assert scope({"model": "m", "messages": paris}) != scope({"model": "m", "messages": tokyo})


def test_scope_separates_tenants_system_prompts_models_and_params() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    s = scope(body)
    assert scope(body, tenant="other") != s
    assert scope({**body, "model": "n"}) != s
    assert scope({**body, "temperature": 0.3}) != s
    assert scope({**body, "messages": [{"role": "system", "content": "x"}, *body["messages"]]}) != s
    assert scope({**body, "stream": True, "user": "u"}) == s


@pytest.mark.parametrize("messages", [
    [],
    [{"role": "assistant", "content": "hi"}],
    [{"role": "user", "content": "call it"}, {"role": "tool", "tool_call_id": "1", "content": "42"}],
    [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}],
    [{"role": "user", "content": "   "}],
])
def test_requests_that_cannot_be_matched_semantically(messages: list) -> None:
    assert semantic_query("t", 0, "m", "1", {"model": "m", "messages": messages}) is None
