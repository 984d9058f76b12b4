"""Agents through the gateway to its in-process engine: cached tool calls and JSON answers replay
exactly (streamed and not), and LangChain's structured output and tool binding work end to end."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.engine.test_structured import ASK_WEATHER, PERSON, TOOLS, WEATHER, streamed

MODEL = "smollm2-135m"
POLICY = f"""
backends:
  local: {{type: engine, model: {MODEL}, options: {{device: cpu, num_threads: 1, max_model_len: 1024}}}}
routes:
  - match: {{model: {MODEL}}}
    backends: [local]
    cache: {{exact: {{ttl: 3600}}}}
"""


@pytest.fixture
def gateway(serve_gateway):  # noqa: ANN001, ANN201 (the shared fixture's factory)
    return serve_gateway(POLICY)


def test_cached_tool_calls_and_json_replay_the_same(gateway) -> None:  # noqa: ANN001
    api = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    forced = {"model": MODEL, "messages": ASK_WEATHER, "tools": TOOLS, "max_tokens": 30, "temperature": 0,
              "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    first = api.chat.completions.with_raw_response.create(**forced)
    assert first.headers["x-cache"] == "MISS"
    call = first.parse().choices[0].message.tool_calls[0]
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    again = api.chat.completions.with_raw_response.create(**forced)
    assert again.headers["x-cache"] == "HIT-EXACT"
    assert again.parse().choices[0].message.model_dump() == first.parse().choices[0].message.model_dump()
    assert again.parse().choices[0].finish_reason == "tool_calls"
    # the stored answer streamed back: same call, same id, as tool-call deltas
    _, calls, finish = streamed(api, **forced)
    assert finish == "tool_calls"
    assert calls == [{"id": call.id, "name": "get_weather", "arguments": call.function.arguments}]

    # a `required` call streamed first (stored from the stream), then replayed streamed and whole
    required = {**forced, "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 40}
    _, live, finish = streamed(api, **required)
    assert finish == "tool_calls" and len(live) == 1
    _, replay, _ = streamed(api, **required)
    whole = api.chat.completions.with_raw_response.create(**required)
    assert whole.headers["x-cache"] == "HIT-EXACT" and replay == live
    hit = whole.parse().choices[0].message.tool_calls[0]
    assert [{"id": hit.id, "name": hit.function.name, "arguments": hit.function.arguments}] == live

    schema = {"model": MODEL, "messages": [{"role": "user", "content": "Describe a person as JSON."}],
              "max_tokens": 80, "temperature": 0,
              "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}}
    text, _, _ = streamed(api, **schema)
    jsonschema.validate(json.loads(text), PERSON)
    cached = api.chat.completions.with_raw_response.create(**schema)
    assert cached.headers["x-cache"] == "HIT-EXACT" and cached.parse().choices[0].message.content == text
    assert streamed(api, **schema)[0] == text


def test_langchain_structured_output_and_tool_round_trip(gateway) -> None:  # noqa: ANN001
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    llm = ChatOpenAI(model=MODEL, base_url=gateway.url + "/v1", api_key="unused", temperature=0, max_tokens=40,
                     max_retries=0, timeout=300)

    class Weather(BaseModel):
        """Weather in a city."""

        city: str = Field(max_length=12)
        unit: str = Field(json_schema_extra={"enum": ["celsius", "fahrenheit"]})

    for method in ("function_calling", "json_schema"):
        result = llm.with_structured_output(Weather, method=method).invoke("What is the weather in Paris?")
        assert isinstance(result, Weather), method
        assert result.unit in ("celsius", "fahrenheit")

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"21C in {city}"

    bound = llm.bind_tools([get_weather], tool_choice="get_weather")
    messages: list = [HumanMessage("What is the weather in Paris?")]
    ai = bound.invoke(messages)
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather"
    assert isinstance(ai.tool_calls[0]["args"].get("city"), str)
    messages += [ai, ToolMessage(get_weather.invoke(ai.tool_calls[0]["args"]), tool_call_id=ai.tool_calls[0]["id"])]
    final = llm.bind_tools([get_weather]).invoke(messages)  # tool_choice auto: the model answers in text
    assert isinstance(final.content, str) and final.content
