"""The engine replica's OpenAI server, with the official `openai` SDK as the client: chat and completions
(stream and not), the vLLM extension fields, errors in OpenAI's envelope, models, health, metrics."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from engine.serving.async_engine import AsyncEngine
from tests.engine.conftest import MODEL
from tests.helpers import ServerThread

HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def post_raw(url: str, data: bytes, content_type: str = "application/json") -> tuple[int, dict]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_chat_completion(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.object == "chat.completion"
    assert r.model == MODEL
    assert r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8


def test_stream_matches_non_stream_and_reports_usage(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=10, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=10, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_n_seed_and_logprobs(client: openai.OpenAI) -> None:
    kw = dict(model=MODEL, messages=HELLO, max_tokens=5, temperature=1.0, seed=123, n=2, logprobs=True,
              top_logprobs=3, extra_body={"ignore_eos": True})
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]  # seeded
    assert a.usage.completion_tokens == 10
    for choice in a.choices:
        entries = choice.logprobs.content
        assert len(entries) == 5
        assert "".join(e.token for e in entries) == choice.message.content
        for e in entries:
            assert e.logprob <= 0
            assert len(e.top_logprobs) == 3
            assert e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob


def test_stop_string_and_extension_fields(client: openai.OpenAI, engine: AsyncEngine) -> None:
    base = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=0,
                                          extra_body={"ignore_eos": True})
    text = base.choices[0].message.content
    assert len(text) > 4
    stop = text[2:4]
    r = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=0, stop=[stop],
                                       extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == text[: text.index(stop)]
    # top_k=1 is greedy whatever the temperature; min_p passes through
    k1 = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=1.5,
                                        extra_body={"top_k": 1, "min_p": 0.05, "ignore_eos": True})
    assert k1.choices[0].message.content == text
    stop_id = engine.tokenizer.encode(text)[1]  # the answer's second token (greedy BPE output is canonical)
    stopped = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, temperature=0,
                                             extra_body={"stop_token_ids": [stop_id], "ignore_eos": True})
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens < 12
    assert text.startswith(stopped.choices[0].message.content)


def test_completions_forms(client: openai.OpenAI, engine: AsyncEngine) -> None:
    one = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert one.object == "text_completion"
    assert one.choices[0].text
    ids = engine.tokenizer.encode("The capital of France is")
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == one.choices[0].text
    batch = client.completions.create(model=MODEL, prompt=["The capital of France is", "One, two,"], max_tokens=6,
                                      temperature=0, n=2)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.choices[0].text == one.choices[0].text == batch.choices[1].text
    streamed = client.completions.create(model=MODEL, prompt=["The capital of France is", "One, two,"],
                                         max_tokens=6, temperature=0, stream=True)
    texts: dict[int, str] = {}
    for chunk in streamed:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts[0] == one.choices[0].text
    assert texts[1] == batch.choices[2].text
    echoed = client.completions.create(model=MODEL, prompt="One, two,", max_tokens=3, temperature=0, echo=True)
    assert echoed.choices[0].text.startswith("One, two,")
    lp = client.completions.create(model=MODEL, prompt="One, two,", max_tokens=3, temperature=0, logprobs=2,
                                   echo=True)
    info = lp.choices[0].logprobs
    assert len(info.tokens) == 3
    assert all(len(t) == 2 for t in info.top_logprobs)
    assert "".join(info.tokens) == lp.choices[0].text[len("One, two,"):]
    # offsets index the returned text, which starts with the echoed prompt
    assert info.text_offset == [len("One, two,") + len("".join(info.tokens[:i])) for i in range(3)]
    streamed_offsets = []
    for chunk in client.completions.create(model=MODEL, prompt="One, two,", max_tokens=3, temperature=0,
                                           logprobs=2, stream=True):
        streamed_offsets += chunk.choices[0].logprobs.text_offset if chunk.choices[0].logprobs else []
    assert streamed_offsets == [len("".join(info.tokens[:i])) for i in range(3)]


def expect_400(call, param: str | None = None, code: str | None = None) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        call()
    err = info.value.body
    assert isinstance(err, dict) and err.get("message")
    assert err.get("type") == "invalid_request_error"
    if param is not None:
        assert err.get("param") == param
    if code is not None:
        assert err.get("code") == code
    return info.value


def test_bad_input_is_400_and_the_engine_keeps_serving(client: openai.OpenAI, engine: AsyncEngine) -> None:
    chat = client.chat.completions.create
    long_text = "word " * (engine.max_model_len + 10)
    expect_400(lambda: chat(model=MODEL, messages=[{"role": "user", "content": long_text}], max_tokens=4),
               "messages", "context_length_exceeded")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, max_tokens=engine.max_model_len),
               "max_tokens", "context_length_exceeded")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, temperature=3.5), "temperature")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, top_p=0), "top_p")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, n=0), "n")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, seed=-1), "seed")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, stop=["a"] * 17), "stop")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, response_format={"type": "xml"}),
               "response_format.type", "unsupported_parameter")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, max_tokens=0), "max_tokens")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, top_logprobs=2), "top_logprobs")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, presence_penalty=0.5), "presence_penalty",
               "unsupported_parameter")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, extra_body={"top_k": -2}), "top_k")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, extra_body={"stop_token_ids": [-1]}), "stop_token_ids")
    expect_400(lambda: chat(model=MODEL, messages=HELLO, stream_options={"include_usage": True}), "stream_options")
    expect_400(lambda: chat(model=MODEL, messages=[]), "messages")
    expect_400(lambda: chat(model=MODEL, messages=[{"role": "wizard", "content": "hi"}]), "messages[0].role")
    expect_400(lambda: chat(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]), "messages[0].content")
    expect_400(lambda: client.completions.create(model=MODEL, prompt="", max_tokens=2), "prompt")
    expect_400(lambda: client.completions.create(model=MODEL, prompt=[10**9], max_tokens=2), "prompt")
    with pytest.raises(openai.NotFoundError) as nf:
        chat(model="gpt-4o", messages=HELLO)
    assert nf.value.body["code"] == "model_not_found"
    ok = chat(model=MODEL, messages=HELLO, max_tokens=3, temperature=0)
    assert ok.usage.completion_tokens >= 1


def test_malformed_bodies(server: ServerThread) -> None:
    url = server.url + "/v1/chat/completions"
    status, body = post_raw(url, b"{not json")
    assert status == 400
    assert body["error"]["code"] == "invalid_json"
    status, body = post_raw(url, b"")
    assert (status, body["error"]["code"]) == (400, "invalid_json")
    status, body = post_raw(url, b"[1, 2]")
    assert (status, body["error"]["type"]) == (400, "invalid_request_error")
    status, body = post_raw(url, json.dumps({"messages": HELLO}).encode())
    assert (status, body["error"]["param"]) == (400, "model")
    status, body = post_raw(server.url + "/v1/nope", b"{}")
    assert status == 404 and "error" in body


def test_models_health_metrics(client: openai.OpenAI, server: ServerThread) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]
    status, body = get(server.url + "/health")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, temperature=0,
                                   extra_body={"ignore_eos": True})
    status, text = get(server.url + "/metrics")
    assert status == 200
    samples = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    for name in ("engine_requests_running", "engine_requests_waiting", "engine_kv_cache_usage_ratio",
                 "engine_prefix_cache_queries_total", "engine_prefix_cache_hits_total", "engine_preemptions_total",
                 "engine_prompt_tokens_total", "engine_generation_tokens_total", "engine_ttft_seconds_count",
                 "engine_tpot_seconds_count"):
        assert name in samples, name
    assert samples["engine_generation_tokens_total"] >= 4
    assert samples["engine_prompt_tokens_total"] > 0
    assert samples["engine_ttft_seconds_count"] >= 1
    # HELLO's prompt was sent many times: its first full block is a prefix-cache hit by now
    assert samples["engine_prefix_cache_hits_total"] > 0
