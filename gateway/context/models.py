"""What the gateway knows about well-known models: context window, output limit, prices, tokenizer.

Looked up by the longest matching name prefix, so dated snapshots (`gpt-4o-2024-08-06`) and fine-tune names
find their family. Every number can be overridden per route in the policy (`budget.context_window`,
`budget.max_output_tokens`, `budget.input_price_per_mtok`, `budget.output_price_per_mtok`). Prices are USD per
million tokens as published by the providers; they only feed the savings report, never a decision.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_WINDOW = 8192  # for models the table does not know and the policy does not describe


@dataclass(frozen=True, slots=True)
class ModelInfo:
    window: int  # context window in tokens (prompt + output)
    max_output: int  # the provider's own cap on output tokens
    input_price: float = 0.0  # USD per million prompt tokens
    output_price: float = 0.0  # USD per million completion tokens
    encoding: str | None = None  # tiktoken encoding for OpenAI models; None = no public tokenizer
    cache_min_tokens: int = 0  # Anthropic: shortest prefix its prompt cache stores


_TABLE: dict[str, ModelInfo] = {
    # OpenAI: o200k_base families
    "gpt-5": ModelInfo(400_000, 128_000, 1.25, 10.0, "o200k_base"),
    "gpt-5-mini": ModelInfo(400_000, 128_000, 0.25, 2.0, "o200k_base"),
    "gpt-5-nano": ModelInfo(400_000, 128_000, 0.05, 0.40, "o200k_base"),
    "gpt-4.1": ModelInfo(1_047_576, 32_768, 2.0, 8.0, "o200k_base"),
    "gpt-4.1-mini": ModelInfo(1_047_576, 32_768, 0.40, 1.60, "o200k_base"),
    "gpt-4.1-nano": ModelInfo(1_047_576, 32_768, 0.10, 0.40, "o200k_base"),
    "gpt-4.5": ModelInfo(128_000, 16_384, 75.0, 150.0, "o200k_base"),
    "gpt-4o": ModelInfo(128_000, 16_384, 2.50, 10.0, "o200k_base"),
    "gpt-4o-mini": ModelInfo(128_000, 16_384, 0.15, 0.60, "o200k_base"),
    "chatgpt-4o": ModelInfo(128_000, 16_384, 5.0, 15.0, "o200k_base"),
    "ft:gpt-4o": ModelInfo(128_000, 16_384, 3.75, 15.0, "o200k_base"),
    "o1": ModelInfo(200_000, 100_000, 15.0, 60.0, "o200k_base"),
    "o1-mini": ModelInfo(128_000, 65_536, 1.10, 4.40, "o200k_base"),
    "o3": ModelInfo(200_000, 100_000, 2.0, 8.0, "o200k_base"),
    "o3-mini": ModelInfo(200_000, 100_000, 1.10, 4.40, "o200k_base"),
    "o4-mini": ModelInfo(200_000, 100_000, 1.10, 4.40, "o200k_base"),
    # OpenAI: cl100k_base families
    "gpt-4": ModelInfo(8_192, 8_192, 30.0, 60.0, "cl100k_base"),
    "gpt-4-32k": ModelInfo(32_768, 32_768, 60.0, 120.0, "cl100k_base"),
    "gpt-4-turbo": ModelInfo(128_000, 4_096, 10.0, 30.0, "cl100k_base"),
    "gpt-4-1106": ModelInfo(128_000, 4_096, 10.0, 30.0, "cl100k_base"),
    "gpt-4-0125": ModelInfo(128_000, 4_096, 10.0, 30.0, "cl100k_base"),
    "gpt-3.5-turbo": ModelInfo(16_385, 4_096, 0.50, 1.50, "cl100k_base"),
    "ft:gpt-4": ModelInfo(8_192, 8_192, 30.0, 60.0, "cl100k_base"),
    "ft:gpt-3.5-turbo": ModelInfo(16_385, 4_096, 3.0, 6.0, "cl100k_base"),
    # Anthropic: no public tokenizer (estimated); prompt-cache minimums from Anthropic's docs
    "claude-3-haiku": ModelInfo(200_000, 4_096, 0.25, 1.25, None, 2048),
    "claude-3-5-haiku": ModelInfo(200_000, 8_192, 0.80, 4.0, None, 2048),
    "claude-haiku-4-5": ModelInfo(200_000, 64_000, 1.0, 5.0, None, 4096),
    "claude-3-5-sonnet": ModelInfo(200_000, 8_192, 3.0, 15.0, None, 1024),
    "claude-3-7-sonnet": ModelInfo(200_000, 64_000, 3.0, 15.0, None, 1024),
    "claude-sonnet-4": ModelInfo(200_000, 64_000, 3.0, 15.0, None, 1024),
    "claude-3-opus": ModelInfo(200_000, 4_096, 15.0, 75.0, None, 1024),
    "claude-opus-4": ModelInfo(200_000, 32_000, 15.0, 75.0, None, 1024),
    "claude-opus-4-5": ModelInfo(200_000, 64_000, 5.0, 25.0, None, 4096),
    # DeepSeek (OpenAI-compatible API, automatic prefix caching; its tokenizer is not tiktoken)
    "deepseek-chat": ModelInfo(128_000, 8_192, 0.27, 1.10, None),
    "deepseek-reasoner": ModelInfo(128_000, 64_000, 0.55, 2.19, None),
    # The bundled engine's default model
    "smollm2-135m": ModelInfo(8_192, 8_192),
}

# Anthropic's shortest cacheable prefix for Claude models the table does not list.
ANTHROPIC_DEFAULT_CACHE_MIN = 1024


def lookup(model: str) -> ModelInfo | None:
    """The table entry whose name is the longest prefix of `model` (case-insensitive), or None."""
    name = model.lower()
    best: str | None = None
    for key in _TABLE:
        if name.startswith(key) and (best is None or len(key) > len(best)):
            best = key
    return _TABLE[best] if best is not None else None


def openai_encoding(model: str) -> str | None:
    """The tiktoken encoding OpenAI uses for `model`, or None when it is not an OpenAI model we know."""
    info = lookup(model)
    return info.encoding if info is not None else None
