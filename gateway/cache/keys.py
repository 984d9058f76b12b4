"""Cache keys: the canonical request (L1) and the hard scope plus embedded text of a semantic lookup (L2).

A key must be canonical (two requests that ask the same thing hash the same: sorted keys, 1 == 1.0, OpenAI's
defaults filled in) and complete (every field that can change the output is in it, unknown fields included).
Fields that cannot change the output (`stream`, `stream_options`, `user`, `metadata`, ...) are left out, so a
streamed and a non-streamed request share one entry.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from gateway.cache.normalize import semantic_form

# Fields that never change what the model answers.
IGNORED_FIELDS = frozenset({
    "stream", "stream_options", "user", "metadata", "store", "service_tier", "prompt_cache_key",
    "prompt_cache_retention", "safety_identifier",
})

# OpenAI's documented defaults: a field equal to its default is the same request as the field left out.
CHAT_DEFAULTS: dict[str, Any] = {
    "temperature": 1, "top_p": 1, "n": 1, "presence_penalty": 0, "frequency_penalty": 0, "logprobs": False,
    "response_format": {"type": "text"}, "parallel_tool_calls": True, "modalities": ["text"],
}
COMPLETIONS_DEFAULTS: dict[str, Any] = {
    "temperature": 1, "top_p": 1, "n": 1, "presence_penalty": 0, "frequency_penalty": 0, "echo": False,
    "best_of": 1, "max_tokens": 16,
}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def normalize(value: Any) -> Any:
    """Numbers that are integral become ints (1.0 -> 1), nulls are dropped from mappings, recursively."""
    kind = type(value)
    if kind is str or kind is int or kind is bool:  # the common leaves, before the slower isinstance chain
        return value
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, dict):
        return {str(k): normalize(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return value


def _normalize_content(content: Any) -> Any:
    """A content list of a single text part is the same prompt as the bare string."""
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        part = content[0]
        if part.get("type") == "text" and isinstance(part.get("text"), str) and set(part) <= {"type", "text"}:
            return part["text"]
    return content


def _normalize_message(message: Any) -> Any:
    msg = normalize(message)
    if isinstance(msg, dict) and "content" in msg:
        msg["content"] = _normalize_content(msg["content"])
    return msg


def canonical_request(endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    """The request reduced to what decides its output, with defaults removed so equal requests are equal."""
    req = {k: normalize(v) for k, v in body.items() if k not in IGNORED_FIELDS and v is not None}
    defaults = CHAT_DEFAULTS if endpoint == "chat.completions" else COMPLETIONS_DEFAULTS
    if endpoint == "chat.completions":
        if "messages" in req and isinstance(req["messages"], list):
            req["messages"] = [_normalize_message(m) for m in req["messages"]]
        if "max_tokens" in req and "max_completion_tokens" not in req:
            req["max_completion_tokens"] = req.pop("max_tokens")
        tools = req.get("tools")
        if not tools:
            req.pop("tools", None)
            req.pop("parallel_tool_calls", None)
        if req.get("tool_choice") == ("auto" if tools else "none"):
            del req["tool_choice"]
    stop = req.get("stop")
    if isinstance(stop, str):
        req["stop"] = [stop]
    if isinstance(req.get("stop"), list):
        req["stop"] = sorted({s for s in req["stop"] if isinstance(s, str)}) or None
        if req["stop"] is None:
            del req["stop"]
    bias = req.get("logit_bias")
    if isinstance(bias, dict):
        req["logit_bias"] = {_token_key(k): v for k, v in bias.items()}
        if not req["logit_bias"]:
            del req["logit_bias"]
    for key, default in defaults.items():
        if key in req and req[key] == default:
            del req[key]
    if not req.get("logprobs"):
        req.pop("top_logprobs", None)
    return req


def _token_key(key: str) -> str:
    try:
        return str(int(key))
    except ValueError:
        return key


def canonical_bytes(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def is_deterministic(endpoint: str, body: dict[str, Any]) -> bool:
    """Temperature 0 (OpenAI's default is 1) or a seed: the answer is meant to be reproducible."""
    temperature = body.get("temperature")
    if temperature is None:
        temperature = 1
    return (not isinstance(temperature, bool) and temperature == 0) or body.get("seed") is not None


@lru_cache(maxsize=1024)  # every request computes it; a handful of (tenant, model) pairs repeat
def namespace_id(tenant: str, model: str) -> str:
    """The Redis hash tag of one (tenant, model): every key of it lands in one Cluster slot."""
    return _digest(canonical_bytes([tenant, model]))[:20]


def exact_key(tenant: str, route_index: int, route_model: str, version: str, endpoint: str,
              body: dict[str, Any]) -> str:
    """sha256 of tenant, route, cache version, endpoint and the canonical request."""
    return _digest(canonical_bytes([tenant, route_index, route_model, version, endpoint,
                                    canonical_request(endpoint, body)]))


@dataclass(frozen=True, slots=True)
class SemanticQuery:
    scope: str  # hash of tenant, route, version, model, output-affecting params, conversation before the last turn
    text: str  # the last user message in near-repeat form (normalize.py): what is embedded and verified


def semantic_query(tenant: str, route_index: int, route_model: str, version: str,
                   body: dict[str, Any]) -> SemanticQuery | None:
    """The hard scope and the text to embed, or None when the request cannot be matched semantically.

    Only a conversation ending in a text-only user message qualifies. Everything else (system prompt, earlier
    turns, tools, sampling parameters) goes into the scope hash, so two chats that share the last message but
    not their history land in different scopes and can never hit each other.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    text = _plain_text(last.get("content"))
    if text is None or not text.strip():
        return None
    canonical = canonical_request("chat.completions", body)
    history = canonical.pop("messages")[:-1]
    extra = {k: v for k, v in normalize(last).items() if k not in ("role", "content")}  # e.g. `name`
    scope = _digest(canonical_bytes([tenant, route_index, route_model, version, canonical, history, extra]))
    return SemanticQuery(scope=scope, text=semantic_text(text))


def semantic_text(text: str) -> str:
    """The text a semantic lookup embeds and the verifier compares: the message in near-repeat form, so
    case, spacing, Unicode forms, trailing punctuation, politeness and typos do not turn a repeat into a miss
    (normalize.py)."""
    return semantic_form(text)


def _plain_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                return None  # images, audio, files: not something a text embedding can stand for
            texts.append(part["text"])
        return "\n".join(texts)
    return None
