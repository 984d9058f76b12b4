"""OpenAI <-> Anthropic translation, case by case (pure functions, no server)."""

from __future__ import annotations

import orjson
import pytest

from gateway.backends.anthropic import StreamTranslator
from gateway.backends.anthropic_format import (
    TranslationError,
    anthropic_error_envelope,
    from_anthropic,
    to_anthropic,
    usage_to_openai,
)
from gateway.backends.base import BackendError

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def translate(**body: object) -> dict:
    return to_anthropic({"model": "claude-x", **body}, None, 4096)


def test_minimal_request() -> None:
    out = translate(messages=[{"role": "user", "content": "hi"}])
    assert out == {"model": "claude-x", "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}]}


def test_model_override_and_max_tokens_sources() -> None:
    body = {"model": "alias", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
    assert to_anthropic(body, "claude-real", 4096)["model"] == "claude-real"
    assert to_anthropic(body, None, 4096)["max_tokens"] == 50
    assert to_anthropic({**body, "max_completion_tokens": 70}, None, 4096)["max_tokens"] == 70
    assert to_anthropic({"model": "m", "messages": body["messages"]}, None, 123)["max_tokens"] == 123


def test_system_messages_become_system() -> None:
    out = translate(messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert out["system"] == "be brief"
    assert out["messages"] == [{"role": "user", "content": "hi"}]
    out = translate(messages=[{"role": "system", "content": "rule one"}, {"role": "developer", "content": "two"},
                              {"role": "user", "content": "hi"}])
    assert out["system"] == [{"type": "text", "text": "rule one"}, {"type": "text", "text": "two"}]


def test_cache_control_on_system_parts_messages_and_tools() -> None:
    out = translate(
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "static rules", "cache_control": HOUR}]},
            {"role": "user", "content": [{"type": "text", "text": "doc", "cache_control": {"type": "ephemeral",
                                                                                          "ttl": "1h"}},
                                         {"type": "text", "text": "question"}]},
            {"role": "assistant", "content": "answer", "cache_control": EPHEMERAL},
            {"role": "user", "content": "next"},
        ],
        tools=[{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
               {"type": "function", "function": {"name": "b"}, "cache_control": HOUR}],
    )
    assert out["system"] == [{"type": "text", "text": "static rules", "cache_control": HOUR}]
    assert out["messages"][0]["content"][0] == {"type": "text", "text": "doc",
                                                "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    assert "cache_control" not in out["messages"][0]["content"][1]
    assert out["messages"][1] == {"role": "assistant", "content": [
        {"type": "text", "text": "answer", "cache_control": EPHEMERAL}]}
    assert out["messages"][2] == {"role": "user", "content": "next"}
    assert "cache_control" not in out["tools"][0]
    assert out["tools"][1] == {"name": "b", "input_schema": {"type": "object", "properties": {}},
                               "cache_control": HOUR}


def test_images_data_and_http() -> None:
    out = translate(messages=[{"role": "user", "content": [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}},
    ]}])
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "what is this"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


def test_pdf_file_part_becomes_document() -> None:
    out = translate(messages=[{"role": "user", "content": [
        {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}}]}])
    assert out["messages"][0]["content"] == [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "image_url", "image_url": {"url": "data:image/bmp;base64,AAA="}}, "messages[0].content[0]"),
    ({"type": "image_url", "image_url": {"url": "data:image/png,notbase64"}}, "messages[0].content[0]"),
    ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "messages[0].content[0]"),
    ({"type": "input_audio", "input_audio": {"data": "AAA=", "format": "wav"}}, "messages[0].content[0]"),
    ({"type": "file", "file": {"file_id": "file-123"}}, "messages[0].content[0]"),
])
def test_unsupported_content_parts(part: dict, param: str) -> None:
    with pytest.raises(TranslationError) as e:
        translate(messages=[{"role": "user", "content": [part]}])
    assert e.value.param == param


def test_tools_round_trip_and_tool_results_merged() -> None:
    out = translate(
        messages=[
            {"role": "user", "content": "weather in Paris and Rome?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Rome"}'}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
            {"role": "user", "content": "thanks"},
        ],
        tools=[{"type": "function", "function": {"name": "weather", "description": "Weather by city",
                                                 "parameters": {"type": "object",
                                                                "properties": {"city": {"type": "string"}}}}}],
        tool_choice="required",
    )
    assert out["tools"] == [{"name": "weather", "description": "Weather by city", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}}}}]
    assert out["tool_choice"] == {"type": "any"}
    assert out["messages"][1] == {"role": "assistant", "content": [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "weather", "input": {"city": "Rome"}},
    ]}
    assert out["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
        {"type": "text", "text": "thanks"},
    ]}
    assert len(out["messages"]) == 3


@pytest.mark.parametrize(("choice", "parallel", "expected"), [
    ("auto", None, {"type": "auto"}),
    ("none", None, {"type": "none"}),
    ("required", None, {"type": "any"}),
    ({"type": "function", "function": {"name": "f"}}, None, {"type": "tool", "name": "f"}),
    ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
])
def test_tool_choice(choice: object, parallel: bool | None, expected: dict) -> None:
    body: dict = {"messages": [{"role": "user", "content": "x"}],
                  "tools": [{"type": "function", "function": {"name": "f"}}]}
    if choice is not None:
        body["tool_choice"] = choice
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    assert translate(**body)["tool_choice"] == expected


def test_consecutive_same_role_messages_merge() -> None:
    out = translate(messages=[{"role": "user", "content": "one"}, {"role": "user", "content": "two"},
                              {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]


def test_sampling_stop_and_user() -> None:
    out = translate(messages=[{"role": "user", "content": "x"}], temperature=0.2, top_p=0.9, top_k=5,
                    stop="END", user="u-1", seed=3, presence_penalty=0.5)
    assert (out["temperature"], out["top_p"], out["top_k"]) == (0.2, 0.9, 5)
    assert out["stop_sequences"] == ["END"] and out["metadata"] == {"user_id": "u-1"}
    assert "seed" not in out and "presence_penalty" not in out
    assert translate(messages=[{"role": "user", "content": "x"}], stop=["a", "b"])["stop_sequences"] == ["a", "b"]


@pytest.mark.parametrize(("extra", "param"), [
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
])
def test_untranslatable_requests(extra: dict, param: str) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], **extra}
    with pytest.raises(TranslationError) as e:
        translate(**body)
    assert e.value.param == param


def test_response_text_and_tool_use() -> None:
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                  "cache_creation_input_tokens": 20},
    }
    out = from_anthropic(message)
    choice = out["choices"][0]
    assert out["object"] == "chat.completion" and out["id"] == "msg_1" and out["model"] == "claude-x"
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check."
    call = choice["message"]["tool_calls"][0]
    assert call["id"] == "toolu_1" and call["function"]["name"] == "weather"
    assert orjson.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert out["usage"] == {"prompt_tokens": 130, "completion_tokens": 5, "total_tokens": 135,
                            "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 20}}


@pytest.mark.parametrize(("reason", "finish"), [("end_turn", "stop"), ("stop_sequence", "stop"),
                                                ("max_tokens", "length"), ("tool_use", "tool_calls"),
                                                ("refusal", "content_filter")])
def test_stop_reasons(reason: str, finish: str) -> None:
    out = from_anthropic({"content": [{"type": "text", "text": "x"}], "stop_reason": reason, "usage": {}})
    assert out["choices"][0]["finish_reason"] == finish


def test_usage_without_cache_fields() -> None:
    assert usage_to_openai({"input_tokens": 3, "output_tokens": 4})["prompt_tokens_details"]["cached_tokens"] == 0


def test_error_envelope_mapping() -> None:
    raw = b'{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}'
    assert anthropic_error_envelope(400, raw) == {"error": {"message": "max_tokens: Field required",
                                                            "type": "invalid_request_error", "param": None,
                                                            "code": None}}
    assert anthropic_error_envelope(502, b"Bad Gateway")["error"]["message"] == "upstream answered HTTP 502"


def _events() -> list[tuple[str, dict]]:
    return [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_9", "model": "claude-x", "usage": {"input_tokens": 5, "cache_read_input_tokens": 40,
                                                          "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
        ("ping", {"type": "ping"}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Hi"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1,
                                 "content_block": {"type": "tool_use", "id": "toolu_2", "name": "f", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "input_json_delta", "partial_json": '{"a":'}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                           "usage": {"output_tokens": 12}}),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_stream_translation() -> None:
    translator = StreamTranslator(include_usage=True)
    chunks = [c for name, data in _events() for c in translator.feed(name, data)]
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "Hi"}
    assert deltas[2] == {"tool_calls": [{"index": 0, "id": "toolu_2", "type": "function",
                                         "function": {"name": "f", "arguments": ""}}]}
    assert deltas[3:5] == [{"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]},
                           {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}]
    assert chunks[5]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c["id"] == "msg_9" and c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 45, "completion_tokens": 12, "total_tokens": 57,
                                   "prompt_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 0}}


def test_stream_translation_without_usage_chunk() -> None:
    translator = StreamTranslator(include_usage=False)
    chunks = [c for name, data in _events() for c in translator.feed(name, data)]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(("kind", "status", "retryable"), [("overloaded_error", 529, True),
                                                            ("rate_limit_error", 429, True),
                                                            ("invalid_request_error", 400, False)])
def test_stream_error_event(kind: str, status: int, retryable: bool) -> None:
    translator = StreamTranslator(include_usage=False)
    with pytest.raises(BackendError) as e:
        translator.feed("error", {"type": "error", "error": {"type": kind, "message": "boom"}})
    assert (e.value.status, e.value.retryable) == (status, retryable)
    assert e.value.body["error"]["type"] == kind
    assert translator.feed(*_events()[0]) == []  # message_start: nothing goes out before content
    with pytest.raises(BackendError) as e:
        translator.feed("error", {"type": "error", "error": {"type": kind, "message": "boom"}})
    assert e.value.retryable == retryable
    assert translator.feed("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": "hi"}})
    with pytest.raises(BackendError) as e:
        translator.feed("error", {"type": "error", "error": {"type": kind, "message": "boom"}})
    assert not e.value.retryable  # a chunk already went out
