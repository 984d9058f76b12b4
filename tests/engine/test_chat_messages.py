"""Messages of every OpenAI shape through chat templates: a tool-aware template (Qwen2.5 style) renders
tools, calls and results its own way; one without tool syntax (SmolLM2) gets the documented text
rendering; template failures are 400s naming the message, never Python's text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat_template import ChatTemplateError, knows_tools, render_chat
from engine.serving.errors import EngineRequestError
from engine.serving.params import chat_messages, render_chat_prompt

QWEN = (Path(__file__).parent / "data" / "qwen2_5_tools.jinja").read_text()
SMOL = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
# What an agent loop sends after a tool call: content null + tool_calls, then the tool's result.
ROUND_TRIP = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}],
     "name": "ana"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22C"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "18C"}]},
]


def test_tool_aware_template_renders_its_own_way() -> None:
    assert knows_tools(QWEN) and not knows_tools(SMOL)
    text = render_chat(QWEN, chat_messages({"messages": ROUND_TRIP}), True, TOOLS, SPECIAL)
    assert "<tools>\n" + json.dumps(TOOLS[0], ensure_ascii=False) + "\n</tools>" in text
    # OpenAI's JSON-string arguments reach the template as a mapping (HF's convention), so they render once.
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n22C\n</tool_response>\n<tool_response>\n18C\n</tool_response>" \
        "<|im_end|>" in text
    assert "Weather in Paris?" in text and text.endswith("<|im_start|>assistant\n")


def test_template_without_tool_syntax_gets_the_text_rendering() -> None:
    text = render_chat(SMOL, chat_messages({"messages": ROUND_TRIP}), True, TOOLS, SPECIAL)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert json.dumps(TOOLS[0], ensure_ascii=False) in system and "<tool_call>" in system
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>'
            '<|im_end|>') in text
    # both results in one user turn, each named after the call it answers
    assert ('<|im_start|>user\n<tool_response name="get_weather">\n22C\n</tool_response>\n'
            '<tool_response name="get_weather">\n18C\n</tool_response><|im_end|>') in text
    # no tools, no system message: the template's own default system prompt stays
    plain = render_chat(SMOL, [{"role": "developer", "content": "Hi"}], True, None, SPECIAL)
    assert plain.startswith("<|im_start|>system\nHi<|im_end|>")


def test_legacy_function_role_and_refusal_parts() -> None:
    msgs = chat_messages({"messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {"role": "function", "name": "lookup", "content": "found"}]})
    text = render_chat(SMOL, msgs, True, None, SPECIAL)
    assert "<|im_start|>assistant\nno<|im_end|>" in text
    assert '<tool_response name="lookup">\nfound\n</tool_response>' in text
    assert "<|im_start|>user\n<tool_response>\nfound\n</tool_response>" in render_chat(QWEN, msgs, True, None, SPECIAL)


class _Tok:
    """Just enough tokenizer to drive render_chat_prompt with an arbitrary template."""

    def __init__(self, template: str) -> None:
        self.template = template

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool, tools: list | None) -> list[int]:
        return [len(render_chat(self.template, messages, add_generation_prompt, tools, SPECIAL))]


ALTERNATING = (
    "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{{ m['role'] + ': ' + m['content'] }}{% endfor %}"
)
BROKEN = "{% for m in messages %}{{ m['content'] + m['extra'] }}{% endfor %}"


def test_template_errors_name_the_message_and_hide_python() -> None:
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "assistant", "content": "c"}]
    with pytest.raises(EngineRequestError) as info:
        render_chat_prompt(_Tok(ALTERNATING), msgs, None)
    e = info.value
    assert (e.status, e.param, e.code) == (400, "messages[2]", "invalid_value")
    assert "messages[2] (role 'assistant')" in e.message and "roles must alternate" in e.message
    with pytest.raises(EngineRequestError) as info:
        render_chat_prompt(_Tok(BROKEN), [{"role": "user", "content": "a"}], None)
    assert info.value.param == "messages[0]"
    assert "NoneType" not in info.value.message and "Undefined" not in info.value.message
    with pytest.raises(ChatTemplateError):
        render_chat("{% for %}", msgs, True, None, SPECIAL)


@pytest.mark.parametrize(("message", "param"), [
    ({"role": "user", "content": None}, "messages[0].content"),
    ({"role": "user", "content": "x", "tool_calls": []}, "messages[0].tool_calls"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]}, "messages[0].tool_calls[0]"),
    ({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": 3}}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"role": "tool", "content": "x", "tool_call_id": 5}, "messages[0].tool_call_id"),
])
def test_malformed_messages_are_400(message: dict, param: str) -> None:
    with pytest.raises(EngineRequestError) as info:
        chat_messages({"messages": [message]})
    assert (info.value.status, info.value.param) == (400, param)


def _builder(stream: bool) -> object:
    from engine.sampling_params import SamplingParams
    from engine.serving.output import ResponseBuilder
    from engine.serving.params import PreparedRequest, ToolCallMode

    prepared = PreparedRequest("chat", "m", [[1, 2]], SamplingParams(), stream, False, False,
                               tool_call=ToolCallMode("auto", None, True, ("get_weather",)))
    return ResponseBuilder(prepared, None, "chatcmpl-x", 0)  # type: ignore[arg-type]


def _feed(builder: object, pieces: list[str], finish: str = "stop") -> list[dict]:
    from engine.outputs import RequestOutput

    chunks = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        out = RequestOutput(request_id="r", index=0, new_token_ids=[5], new_text=piece, logprobs=None, finished=last,
                            finish_reason=finish if last else None, num_prompt_tokens=2, num_cached_tokens=0,
                            num_output_tokens=i + 1)
        chunk = builder.add(0, out)  # type: ignore[attr-defined]
        if chunk is not None:
            chunks.append(chunk["choices"][0])
    return chunks


CALL_PIECES = ["Let me check. <tool", '_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool_call>']


def test_auto_tool_choice_reads_tool_call_blocks() -> None:
    whole = _builder(False)
    _feed(whole, CALL_PIECES)
    choice = whole.response()["choices"][0]  # type: ignore[attr-defined]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me check."
    [call] = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'} and call["id"].startswith("call_")
    # streamed: text goes out until a block may begin, the call comes whole at the end
    chunks = _feed(_builder(True), CALL_PIECES)
    assert "".join(c["delta"].get("content", "") for c in chunks) == "Let me check. "
    assert chunks[-1]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert chunks[-1]["finish_reason"] == "tool_calls"
    # an unknown function or broken JSON is not a call: everything stays content, nothing is lost
    for pieces in (["<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>"], ["a <tool_call>{oops", " x"],
                   ["a <tool", "tip> b"]):
        text = "".join(pieces)
        whole = _builder(False)
        _feed(whole, pieces)
        assert whole.response()["choices"][0]["message"] == {"role": "assistant", "content": text}  # type: ignore[attr-defined]
        chunks = _feed(_builder(True), pieces)
        assert "".join(c["delta"].get("content", "") for c in chunks) == text
        assert chunks[-1]["finish_reason"] == "stop"
