"""Structured output and forced tool calls by constrained decoding, through the official openai SDK
against the engine replica's server (SmolLM2-135M on CPU, greedy, short outputs)."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.engine.conftest import MODEL
from tests.helpers import ServerThread

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "blue"]}, "maxItems": 2},
        "pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "vaccinated": {"type": "boolean"}},
                "required": ["kind", "vaccinated"], "additionalProperties": False},
    },
    "required": ["name", "age", "tags", "pet"],
    "additionalProperties": False,
}
ASK_PERSON = [{"role": "user", "content": "Describe a person as JSON."}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time in a timezone",
                                      "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
                                                     "required": ["tz"], "additionalProperties": False}}},
]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def streamed(client: openai.OpenAI, **kw: object) -> tuple[str, list, str | None]:
    """(content, tool_calls as the SDK's stream helpers would assemble them, finish_reason)."""
    content, calls, finish = [], {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):  # type: ignore[call-overload]
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        content.append(c.delta.content or "")
        for d in c.delta.tool_calls or ():
            call = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
            call["id"] = d.id or call["id"]
            if d.function:
                call["name"] = d.function.name or call["name"]
                call["arguments"] += d.function.arguments or ""
        finish = c.finish_reason or finish
    return "".join(content), [calls[i] for i in sorted(calls)], finish


def answer(client: openai.OpenAI, stream: bool, **kw: object) -> tuple[str, str | None]:
    """(content, finish_reason), streamed or whole."""
    if stream:
        text, _, finish = streamed(client, **kw)
        return text, finish
    r = client.chat.completions.create(**kw)  # type: ignore[call-overload]
    return r.choices[0].message.content or "", r.choices[0].finish_reason


@pytest.mark.parametrize("stream", [False, True])
def test_nested_json_schema_parses_and_validates(client: openai.OpenAI, stream: bool) -> None:
    kw = {"model": MODEL, "messages": ASK_PERSON, "max_tokens": 80, "temperature": 0,
          "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                                     "strict": True}}}
    text, finish = answer(client, stream, **kw)
    assert finish == "stop"
    jsonschema.validate(json.loads(text), PERSON)


@pytest.mark.parametrize("stream", [False, True])
def test_json_object(client: openai.OpenAI, stream: bool) -> None:
    kw = {"model": MODEL, "max_tokens": 40, "temperature": 0, "response_format": {"type": "json_object"},
          "messages": [{"role": "system", "content": 'Reply in JSON, like {"answer": "..."}.'},
                       {"role": "user", "content": "Is the sky blue?"}]}
    text, finish = answer(client, stream, **kw)
    assert finish == "stop"
    assert isinstance(json.loads(text), dict)


def test_max_tokens_cuts_json_with_length(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, messages=ASK_PERSON, max_tokens=5, temperature=0,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "p", "schema": PERSON}})
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content.startswith("{")


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_call(client: openai.OpenAI, stream: bool) -> None:
    kw = {"model": MODEL, "messages": ASK_WEATHER, "tools": TOOLS, "max_tokens": 30, "temperature": 0,
          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    if stream:
        content, calls, finish = streamed(client, **kw)
        assert content == ""
    else:
        r = client.chat.completions.create(**kw)  # type: ignore[call-overload]
        msg = r.choices[0].message
        assert msg.content is None
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in msg.tool_calls]
        finish = r.choices[0].finish_reason
    assert finish == "tool_calls"
    assert len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)


@pytest.mark.parametrize(("stream", "parallel"), [(False, False), (True, False), (False, True)])
def test_required_tool_call(client: openai.OpenAI, stream: bool, parallel: bool) -> None:
    kw = {"model": MODEL, "messages": ASK_WEATHER, "tools": TOOLS, "tool_choice": "required", "temperature": 0,
          "max_tokens": 60, "parallel_tool_calls": parallel}
    if stream:
        _, calls, finish = streamed(client, **kw)
    else:
        r = client.chat.completions.create(**kw)  # type: ignore[call-overload]
        finish = r.choices[0].finish_reason
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in r.choices[0].message.tool_calls or ()]
    # With parallel calls allowed this small model keeps adding calls: a cut array keeps its whole calls.
    assert finish == "tool_calls" if not parallel else finish in ("tool_calls", "length")
    assert len(calls) == 1 if not parallel else len(calls) >= 1
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        assert call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), schemas[call["name"]])


def test_parallel_required_calls_end_at_a_repeat(client: openai.OpenAI) -> None:
    """SmolLM2 allowed parallel calls repeats its call; the repeat ends the array with "tool_calls" well
    before max_tokens, and no call comes back twice."""
    r = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required",
                                       temperature=0, max_tokens=400)
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in r.choices[0].message.tool_calls or ()]
    assert r.choices[0].finish_reason == "tool_calls"
    assert calls and all(calls[i] not in calls[:i] for i in range(len(calls)))
    assert r.usage.completion_tokens < 400


def test_tool_round_trip(client: openai.OpenAI) -> None:
    """Call, run the tool, send the result back: the agent loop every framework runs."""
    first = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=40, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    history = [*ASK_WEATHER, first.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})}]
    assert history[1]["content"] is None if "content" in history[1] else True
    second = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=8, temperature=0)
    assert second.choices[0].finish_reason in ("stop", "length")
    assert second.choices[0].message.content
    # the same history with content: null spelled out (what the SDK's dict form sends)
    raw = [*ASK_WEATHER, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]}, history[2]]
    again = client.chat.completions.create(model=MODEL, messages=raw, max_tokens=8, temperature=0)
    assert again.choices[0].message.content


def test_vllm_guided_fields(client: openai.OpenAI) -> None:
    choice = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Is fire hot?"}],
                                            max_tokens=5, temperature=0, extra_body={"guided_choice": ["yes", "no"]})
    assert choice.choices[0].message.content in ("yes", "no")
    regex = client.completions.create(model=MODEL, prompt="The year is", max_tokens=6, temperature=0,
                                      extra_body={"guided_regex": r" [12][0-9]{3}"})
    assert regex.choices[0].text[0] == " " and regex.choices[0].text[1:].isdigit()
    guided = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, max_tokens=30, temperature=0,
                                            extra_body={"guided_json": json.dumps(WEATHER)})
    jsonschema.validate(json.loads(guided.choices[0].message.content), WEATHER)


def _err(fn: object) -> dict:
    with pytest.raises(openai.BadRequestError) as info:
        fn()  # type: ignore[operator]
    assert isinstance(info.value.body, dict)
    return info.value.body


def test_refusals_are_400(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create
    body = _err(lambda: chat(model=MODEL, messages=ASK_WEATHER, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "currency"}}}))
    assert (body["param"], body["code"]) == ("response_format", "unsupported_parameter")
    assert "currency" in body["message"] and "cc:" not in body["message"]
    body = _err(lambda: chat(model=MODEL, messages=ASK_WEATHER, extra_body={"guided_regex": "(ab"}))
    assert body["code"] == "unsupported_parameter"
    body = _err(lambda: chat(model=MODEL, messages=ASK_WEATHER, tools=TOOLS,
                             tool_choice={"type": "function", "function": {"name": "nope"}}))
    assert body["param"] == "tool_choice"
    body = _err(lambda: chat(model=MODEL, messages=ASK_WEATHER, tool_choice="required"))
    assert body["param"] == "tool_choice"
    body = _err(lambda: chat(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required",
                             response_format={"type": "json_object"}))
    assert "give only one" in body["message"]
    body = _err(lambda: chat(model=MODEL, messages=ASK_WEATHER, extra_body={"guided_grammar": "root ::= x"}))
    assert body["code"] == "unsupported_parameter"
    body = _err(lambda: chat(model=MODEL, messages=ASK_WEATHER, tools=[{"type": "function", "function": {}}]))
    assert body["param"] == "tools[0].function.name"


def test_grammars_too_large_to_compile_quickly_are_400_before_compiling(client: openai.OpenAI, monkeypatch) -> None:
    """A 100,000-value enum once held a compile for 44 s; these are refused by size, never compiled."""
    from engine.guided import GrammarRuntime

    compiled: list[str] = []
    real = GrammarRuntime._compile
    monkeypatch.setattr(GrammarRuntime, "_compile", lambda self, spec: compiled.append(spec.payload) or real(self, spec))
    chat = client.chat.completions.create
    huge_enum = {"type": "string", "enum": [f"value-{i}" for i in range(100_000)]}
    nested = {"type": "object", "properties": {"code": {"type": "string", "pattern": "([a-z]{0,2}){0,100}"}}}
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "e", "schema": huge_enum}}},
         "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": nested}}},
         "response_format"),
        ({"extra_body": {"guided_regex": "[a-z]{0,5000}"}}, "guided_regex"),
        ({"extra_body": {"guided_choice": [f"c{i}" for i in range(1001)]}}, "guided_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": huge_enum}}}}], "tool_choice": "required"}, "tools"),
    ]
    for kw, param in cases:
        body = _err(lambda kw=kw: chat(model=MODEL, messages=ASK_WEATHER, max_tokens=4, **kw))  # type: ignore[misc]
        assert (body["param"], body["code"], body["type"]) == (param, "grammar_too_large", "invalid_request_error")
    assert compiled == []
    # Just inside the bounds is compiled and served.
    at_limit = {"type": "string", "enum": [f"v{i}" for i in range(1000)]}
    r = chat(model=MODEL, messages=ASK_WEATHER, max_tokens=4, temperature=0,
             response_format={"type": "json_schema", "json_schema": {"name": "ok", "schema": at_limit}})
    assert r.choices[0].finish_reason in ("stop", "length") and len(compiled) == 1


@pytest.mark.parametrize(("pattern", "refused"), [
    (r"([a-z]{0,30}){0,30}", True), (r"(([a-z]{0,4}){0,4}){0,4}", True), (r"((a{1,3})b){2}", True),
    (r"[a-z]{0,1001}", True), (r"a{2000,}", True),
    (r"[a-z]{0,1000}", False), (r"([a-z]+){0,300}", False), (r"([a-z]{3}){0,300}", False), (r"(ab){0,1000}", False),
    (r"(x(a{1,}))b{0,3}", False), (r"[(]{0,5}\){2}", False), (r"\([a-z]{0,3}\){4}", False), (r" [12][0-9]{3}", False),
])
def test_regex_bounds(pattern: str, refused: bool) -> None:
    from engine.guided import GrammarTooLargeError, check_regex

    if refused:
        with pytest.raises(GrammarTooLargeError):
            check_regex(pattern)
    else:
        check_regex(pattern)


@pytest.mark.parametrize(("stream", "parallel", "tools"), [
    (False, False, TOOLS), (True, False, TOOLS), (False, True, TOOLS), (True, True, TOOLS[:1]),
])
def test_required_call_cut_before_it_is_whole_comes_back_in_tool_calls(
    client: openai.OpenAI, stream: bool, parallel: bool, tools: list,
) -> None:
    """As a named call cut by max_tokens does: the partial call in tool_calls, never the grammar's raw JSON as
    content."""
    kw = {"model": MODEL, "messages": ASK_WEATHER, "tools": tools, "tool_choice": "required", "temperature": 0,
          "max_tokens": 18, "parallel_tool_calls": parallel}  # the name is whole, the arguments are not
    if stream:
        content, calls, finish = streamed(client, **kw)
    else:
        r = client.chat.completions.create(**kw)  # type: ignore[call-overload]
        msg, finish = r.choices[0].message, r.choices[0].finish_reason
        content = msg.content or ""
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in msg.tool_calls or ()]
    assert finish == "length" and content == ""
    assert len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    arguments = calls[0]["arguments"]
    assert arguments.startswith("{") and '"name"' not in arguments
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)  # cut: a JSON prefix, as a named call's arguments are


@pytest.mark.parametrize(("text", "parallel", "expected"), [
    ('{"name": "get_weather", "arguments": {"ci', False, ("get_weather", '{"ci')),
    ('[{"name": "get_time", "arguments": ', True, ("get_time", "")),
    ('{"name": "get_w', False, ("get_weather", "")),  # cut inside the name: the one tool it fits
    ('{"name": "get_', False, None),  # fits both tools: no call can be named
    ("", False, None),
    ('[{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "get_weather", "arg', True, ("get_time", '{"tz":"UTC"}')),
])
def test_required_output_cut_short_is_read_as_calls(text: str, parallel: bool, expected: tuple | None) -> None:
    from engine.serving.output import parse_tool_calls
    from engine.serving.params import ToolCallMode

    calls = parse_tool_calls(ToolCallMode("required", None, parallel, ("get_weather", "get_time")), text)
    if expected is None:
        assert calls is None
    else:
        assert calls is not None and len(calls) == 1
        assert (calls[0]["function"]["name"], calls[0]["function"]["arguments"]) == expected
