"""Counts for bundled-engine backends: the engine's own tokenizer and chat template, so the prompt count is
the number of tokens the engine will prefill.

Per-message framing is measured once from the template (the tokens it adds around a message, the
generation prompt, and the default system prompt some templates insert when the request has none);
`count_prompt` renders the real template, so the final check of an assembled prompt is exact.
"""

from __future__ import annotations

import asyncio
import threading

import orjson

from gateway.context.tokens import TokenCounter, digest

_PROBE_SYSTEM = {"role": "system", "content": "a"}
_PROBE_TEXT = "x"


class EngineCounter(TokenCounter):
    additive = False
    def __init__(self, model: str, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        encode = tokenizer.encode  # type: ignore[attr-defined]
        super().__init__(f"engine/{model}", True, lambda text: len(encode(text)))
        self._measure_framing()

    def _template_len(self, messages: list[dict], generation: bool) -> int:
        return len(self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation))  # type: ignore[attr-defined]

    def _measure_framing(self) -> None:
        base = self._template_len([_PROBE_SYSTEM], False)
        text = self._encode_len(_PROBE_TEXT)
        framing = {}
        for role in ("system", "user", "assistant"):
            probe = [_PROBE_SYSTEM, {"role": role, "content": _PROBE_TEXT}]
            framing[role] = self._template_len(probe, False) - base - text
        # A message is counted as its role's text + its content + tokens_per_message.
        self.tokens_per_message = max(f - self._encode_len(role) for role, f in framing.items())
        self.tokens_per_name = 0
        generation = self._template_len([_PROBE_SYSTEM], True) - base
        alone = self._template_len([{"role": "user", "content": _PROBE_TEXT}], False)
        default_system = max(0, alone - framing["user"] - text)
        self.reply_priming = generation
        self.default_system = default_system

    def priming(self, messages: list[dict]) -> int:
        has_system = bool(messages) and messages[0].get("role") == "system"
        return self.reply_priming + (0 if has_system else self.default_system)

    def count_prompt(self, messages: list[dict], tools: list | None = None) -> int:
        key = digest(orjson.dumps([messages, tools], option=orjson.OPT_SORT_KEYS))
        cached = self.memo.get(key)
        if cached is None:
            ids = self.tokenizer.apply_chat_template(  # type: ignore[attr-defined]
                [_flatten(m) for m in messages], add_generation_prompt=True, tools=tools or None
            )
            cached = len(ids)
            self.memo.put(key, cached)
        return cached


def _flatten(message: dict) -> dict:
    """Templates that concatenate `content` need a string: join text parts as the engine backend does."""
    content = message.get("content")
    if isinstance(content, str):
        return message
    if isinstance(content, list):
        text = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        return {**message, "content": text}
    return {**message, "content": ""}


_counters: dict[str, EngineCounter] = {}
_load_lock = threading.Lock()


def load_engine_counter(model: str) -> EngineCounter:
    """Blocking (seconds for a GGUF file): call it off the event loop."""
    with _load_lock:
        counter = _counters.get(model)
        if counter is None:
            from engine import Tokenizer, resolve_model_path

            counter = _counters[model] = EngineCounter(model, Tokenizer.from_model_path(resolve_model_path(model)))
        return counter


async def engine_counter(model: str) -> EngineCounter:
    """The engine's counter for `model`, loaded once per process, off the event loop."""
    counter = _counters.get(model)
    return counter if counter is not None else await asyncio.to_thread(load_engine_counter, model)
