"""Tokenizer and chat template from a GGUF file's metadata or a Hugging Face directory."""

from __future__ import annotations

import os

import orjson
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as BackendTokenizer

from engine.chat_template import render_chat

# Pre-tokenizer splits for `tokenizer.ggml.pre` values whose merges were learned on a non-GPT-2 split.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_SPLITS = {
    "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "smaug-bpe": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT,
}
CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable spelling of each byte."""
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(visible), 0
    for b in range(256):
        if b not in visible:
            visible.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(visible, chars, strict=True)}


class Tokenizer:
    def __init__(self, backend: BackendTokenizer, chat_template: str | None, special_tokens: dict[str, str | None],
                 eos_token_ids: set[int], add_bos_token: bool = False, specials_from_backend: bool = False) -> None:
        self.backend = backend
        # tokenizer.json files carry their own post-processor (e.g. Llama 3 adds BOS there); GGUF-built
        # backends have none, so BOS comes from the file's add_bos_token flag instead.
        self.specials_from_backend = specials_from_backend
        self.chat_template = chat_template
        self.special_tokens = special_tokens  # bos_token, eos_token, unk_token, pad_token -> text
        self.eos_token_ids = eos_token_ids
        self.add_bos_token = add_bos_token
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        bos = special_tokens.get("bos_token")
        self.bos_token_id = backend.token_to_id(bos) if bos else None

    @classmethod
    def from_model_path(cls, path: str) -> Tokenizer:
        if path.endswith(".gguf"):
            from engine.loader.gguf import open_gguf

            return cls.from_gguf_fields(open_gguf(path))
        return cls.from_hf_dir(path)

    @classmethod
    def from_gguf_fields(cls, reader: object) -> Tokenizer:
        from engine.loader.gguf import field_value

        def get(key: str) -> object:
            return field_value(reader, f"tokenizer.ggml.{key}")

        kind = get("model")
        if kind != "gpt2":
            raise ValueError(f"unsupported GGUF tokenizer type {kind!r}; supported: 'gpt2' (byte-level BPE)")
        tokens: list[str] = list(get("tokens"))
        token_types: list[int] = list(get("token_type") or [])
        alphabet = _byte_alphabet()
        spelled = set(alphabet.values())
        vocab = {
            (t if set(t) <= spelled else "".join(alphabet[b] for b in t.encode())): i for i, t in enumerate(tokens)
        }
        merges = [tuple(m.split(" ", 1)) for m in (get("merges") or [])]
        backend = BackendTokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                                              end_of_word_suffix="", fuse_unk=False))
        split = PRE_TOKENIZER_SPLITS.get(str(get("pre")))
        if split is None:
            backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            backend.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ])
        backend.decoder = decoders.ByteLevel()
        typed = list(zip(tokens, token_types, strict=False))
        backend.add_special_tokens([
            AddedToken(t, normalized=False, special=True) for t, k in typed if k == CONTROL and set(t) <= spelled
        ])
        backend.add_tokens([AddedToken(t, normalized=False, special=False) for t, k in typed if k == USER_DEFINED])

        def token_text(key: str) -> str | None:
            index = get(key)
            return tokens[int(index)] if index is not None else None

        special = {"bos_token": token_text("bos_token_id"), "eos_token": token_text("eos_token_id"),
                   "unk_token": token_text("unknown_token_id"), "pad_token": token_text("padding_token_id")}
        eos = get("eos_token_id")
        template = field_value(reader, "tokenizer.chat_template")
        return cls(backend, template, special, {int(eos)} if eos is not None else set(),
                   add_bos_token=bool(get("add_bos_token")))

    @classmethod
    def from_hf_dir(cls, directory: str) -> Tokenizer:
        path = os.path.join(directory, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{directory!r} has no tokenizer.json")
        backend = BackendTokenizer.from_file(path)
        config = _read_json(os.path.join(directory, "tokenizer_config.json"))
        template = config.get("chat_template")
        jinja_file = os.path.join(directory, "chat_template.jinja")
        if template is None and os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                template = f.read()
        special = {name: _token_content(config.get(name)) for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
        eos_ids: set[int] = set()
        if special["eos_token"] and backend.token_to_id(special["eos_token"]) is not None:
            eos_ids.add(backend.token_to_id(special["eos_token"]))
        generation = _read_json(os.path.join(directory, "generation_config.json"))
        eos = generation.get("eos_token_id")
        eos_ids.update(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
        return cls(backend, template, special, eos_ids, specials_from_backend=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if self.specials_from_backend:
            return self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def render_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                             tools: list | None = None) -> str:
        if not self.chat_template:
            raise ValueError("this model has no chat template; use the completions endpoint")
        return render_chat(self.chat_template, messages, add_generation_prompt, tools, self.special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list | None = None) -> list[int]:
        return self.encode(self.render_chat_template(messages, add_generation_prompt, tools))


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path, "rb") as f:
        return orjson.loads(f.read())


def _token_content(value: object) -> str | None:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older tokenizer_config.json files
        return value.get("content")
    return value if isinstance(value, str) else None
