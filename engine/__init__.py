"""A small paged-attention inference engine (nano-vllm style) with a CPU path, and its OpenAI serving layer.

This module is the engine's public API: the core (`LLMEngine`, `EngineConfig`, `SamplingParams`, ...) and the
serving layer in `engine/serving/` (`AsyncEngine`, `OpenAIServing`, the `llm-gateway engine` CLI). The gateway
imports only names listed here (tests/test_engine_api.py holds it to that).

Names load on first use (PEP 562): `from engine import parse_size` or `Tokenizer` must not pull in torch,
which only the core's model path needs, so a gateway without an engine backend never loads it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.block_manager import hash_prompt_blocks
    from engine.config import DEFAULT_MODEL, EngineConfig, resolve_model_path
    from engine.kv_events import KVEvent
    from engine.llm_engine import LLMEngine
    from engine.outputs import CompletionOutput, CompletionResult, EngineStats, RequestOutput
    from engine.sampling_params import SamplingParams
    from engine.serving.async_engine import AsyncEngine
    from engine.serving.cli import main, parse_size
    from engine.serving.errors import EngineRequestError
    from engine.serving.metrics import EngineMetrics
    from engine.serving.openai_serving import OpenAIServing
    from engine.serving.params import chat_messages
    from engine.tokenizer import Tokenizer

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # the core
    "DEFAULT_MODEL": "engine.config",
    "EngineConfig": "engine.config",
    "resolve_model_path": "engine.config",
    "LLMEngine": "engine.llm_engine",
    "SamplingParams": "engine.sampling_params",
    "CompletionOutput": "engine.outputs",
    "CompletionResult": "engine.outputs",
    "EngineStats": "engine.outputs",
    "RequestOutput": "engine.outputs",
    "Tokenizer": "engine.tokenizer",
    "KVEvent": "engine.kv_events",
    "hash_prompt_blocks": "engine.block_manager",  # a router's view of a replica's prefix cache
    # the serving layer
    "AsyncEngine": "engine.serving.async_engine",
    "OpenAIServing": "engine.serving.openai_serving",
    "EngineRequestError": "engine.serving.errors",
    "EngineMetrics": "engine.serving.metrics",
    "chat_messages": "engine.serving.params",  # OpenAI messages as the chat template receives them
    "parse_size": "engine.serving.cli",  # '512MiB' -> bytes, as `--kv-cache-memory` reads it
    "main": "engine.serving.cli",  # `llm-gateway engine ...` / `python -m engine ...`
}

__all__ = [
    "DEFAULT_MODEL", "AsyncEngine", "CompletionOutput", "CompletionResult", "EngineConfig", "EngineMetrics",
    "EngineRequestError", "EngineStats", "KVEvent", "LLMEngine", "OpenAIServing", "RequestOutput", "SamplingParams",
    "Tokenizer", "chat_messages", "hash_prompt_blocks", "main", "parse_size", "resolve_model_path",
]  # the keys of _EXPORTS (tests/test_engine_api.py checks they agree)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
