"""What the gateway knows about well-known models: context window, output limit, prices, tokenizer.

Looked up by the longest matching name prefix, so dated snapshots (`gpt-4o-2024-08-06`), aliases
(`claude-sonnet-4-0`) and fine-tune names find their family; a model the table does not name falls back to its
provider family's entry (`claude-` covers every Claude model, `claude-opus-5-5` included: all have 200k
windows). Every number can be overridden per route in the policy (`budget.context_window`,
`budget.max_output_tokens`, `budget.input_price_per_mtok`, `budget.output_price_per_mtok`). A model with no
entry at all has an unknown window: budget assembly then takes no destructive step (see budget.py). Prices are
USD per million tokens as published by the providers (OpenAI's and DeepSeek's cached-input price where they
publish one); they feed the dollar accounting (gateway/usage/) and budgets, never a routing decision.

Anthropic's minimum cacheable prompt lengths (a `cache_control` breakpoint on a shorter prefix is ignored by
the API and wastes one of the four slots), from Anthropic's prompt-caching docs: 4,096 tokens for Claude
Opus 4.5, 4.6 and 4.7 and Haiku 4.5; 2,048 for Haiku 3.5 and Haiku 3; 1,024 for Opus 4.8, Opus 4.1, Opus 4,
Sonnet 4.6, 4.5, 4 and 3.7 (and older Sonnet / Opus 3). Claude models the table does not name use
ANTHROPIC_DEFAULT_CACHE_MIN, the largest of these, so an added breakpoint is never below the real minimum.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelInfo:
    window: int  # context window in tokens (prompt + output)
    max_output: int  # the provider's own cap on output tokens; 0 = not known
    input_price: float = 0.0  # USD per million prompt tokens
    output_price: float = 0.0  # USD per million completion tokens
    encoding: str | None = None  # tiktoken encoding for OpenAI models; None = no public tokenizer
    cache_min_tokens: int = 0  # Anthropic: shortest prefix its prompt cache stores
    # USD per million prompt tokens served from the provider's prefix cache; None: no discount published (the
    # input price). Claude's read and write prices follow Anthropic's rule (gateway/usage/prices.py).
    cached_price: float | None = None


_TABLE: dict[str, ModelInfo] = {
    # OpenAI: o200k_base families
    "gpt-5": ModelInfo(400_000, 128_000, 1.25, 10.0, "o200k_base", cached_price=0.125),
    "gpt-5-mini": ModelInfo(400_000, 128_000, 0.25, 2.0, "o200k_base", cached_price=0.025),
    "gpt-5-nano": ModelInfo(400_000, 128_000, 0.05, 0.40, "o200k_base", cached_price=0.005),
    "gpt-5-chat": ModelInfo(128_000, 16_384, 1.25, 10.0, "o200k_base", cached_price=0.125),
    "gpt-5-pro": ModelInfo(400_000, 272_000, 15.0, 120.0, "o200k_base"),
    "gpt-5-codex": ModelInfo(400_000, 128_000, 1.25, 10.0, "o200k_base", cached_price=0.125),
    "codex-mini": ModelInfo(200_000, 100_000, 1.50, 6.0, "o200k_base", cached_price=0.375),
    "gpt-4.1": ModelInfo(1_047_576, 32_768, 2.0, 8.0, "o200k_base", cached_price=0.5),
    "gpt-4.1-mini": ModelInfo(1_047_576, 32_768, 0.40, 1.60, "o200k_base", cached_price=0.1),
    "gpt-4.1-nano": ModelInfo(1_047_576, 32_768, 0.10, 0.40, "o200k_base", cached_price=0.025),
    "gpt-4.5": ModelInfo(128_000, 16_384, 75.0, 150.0, "o200k_base", cached_price=37.5),
    "gpt-4o": ModelInfo(128_000, 16_384, 2.50, 10.0, "o200k_base", cached_price=1.25),
    "gpt-4o-mini": ModelInfo(128_000, 16_384, 0.15, 0.60, "o200k_base", cached_price=0.075),
    "chatgpt-4o": ModelInfo(128_000, 16_384, 5.0, 15.0, "o200k_base"),
    "ft:gpt-4o": ModelInfo(128_000, 16_384, 3.75, 15.0, "o200k_base", cached_price=1.875),
    "o1": ModelInfo(200_000, 100_000, 15.0, 60.0, "o200k_base", cached_price=7.5),
    "o1-pro": ModelInfo(200_000, 100_000, 150.0, 600.0, "o200k_base"),
    "o1-mini": ModelInfo(128_000, 65_536, 1.10, 4.40, "o200k_base", cached_price=0.55),
    "o3": ModelInfo(200_000, 100_000, 2.0, 8.0, "o200k_base", cached_price=0.5),
    "o3-pro": ModelInfo(200_000, 100_000, 20.0, 80.0, "o200k_base"),
    "o3-mini": ModelInfo(200_000, 100_000, 1.10, 4.40, "o200k_base", cached_price=0.55),
    "o4-mini": ModelInfo(200_000, 100_000, 1.10, 4.40, "o200k_base", cached_price=0.275),
    # OpenAI: cl100k_base families
    "gpt-4": ModelInfo(8_192, 8_192, 30.0, 60.0, "cl100k_base"),
    "gpt-4-32k": ModelInfo(32_768, 32_768, 60.0, 120.0, "cl100k_base"),
    "gpt-4-turbo": ModelInfo(128_000, 4_096, 10.0, 30.0, "cl100k_base"),
    "gpt-4-1106": ModelInfo(128_000, 4_096, 10.0, 30.0, "cl100k_base"),
    "gpt-4-0125": ModelInfo(128_000, 4_096, 10.0, 30.0, "cl100k_base"),
    "gpt-3.5-turbo": ModelInfo(16_385, 4_096, 0.50, 1.50, "cl100k_base"),
    "ft:gpt-4": ModelInfo(8_192, 8_192, 30.0, 60.0, "cl100k_base"),
    "ft:gpt-3.5-turbo": ModelInfo(16_385, 4_096, 3.0, 6.0, "cl100k_base"),
    # Anthropic: no public tokenizer (estimated); every current Claude model has a 200k window.
    # Prompt-cache minimums: see the module docstring.
    "claude-": ModelInfo(200_000, 0),  # the family: models not named below (limits, prices unknown)
    "claude-3-haiku": ModelInfo(200_000, 4_096, 0.25, 1.25, None, 2048),
    "claude-3-5-haiku": ModelInfo(200_000, 8_192, 0.80, 4.0, None, 2048),
    "claude-haiku-4-5": ModelInfo(200_000, 64_000, 1.0, 5.0, None, 4096),
    "claude-3-5-sonnet": ModelInfo(200_000, 8_192, 3.0, 15.0, None, 1024),
    "claude-3-7-sonnet": ModelInfo(200_000, 64_000, 3.0, 15.0, None, 1024),
    "claude-sonnet-4": ModelInfo(200_000, 64_000, 3.0, 15.0, None, 1024),
    "claude-sonnet-4-5": ModelInfo(200_000, 64_000, 3.0, 15.0, None, 1024),
    "claude-sonnet-4-6": ModelInfo(200_000, 64_000, 3.0, 15.0, None, 1024),
    "claude-3-opus": ModelInfo(200_000, 4_096, 15.0, 75.0, None, 1024),
    "claude-opus-4": ModelInfo(200_000, 32_000, 15.0, 75.0, None, 1024),
    "claude-opus-4-1": ModelInfo(200_000, 32_000, 15.0, 75.0, None, 1024),
    "claude-opus-4-5": ModelInfo(200_000, 64_000, 5.0, 25.0, None, 4096),
    "claude-opus-4-6": ModelInfo(200_000, 128_000, 5.0, 25.0, None, 4096),
    "claude-opus-4-7": ModelInfo(200_000, 128_000, 5.0, 25.0, None, 4096),
    "claude-opus-4-8": ModelInfo(200_000, 128_000, 5.0, 25.0, None, 1024),
    # OpenAI's open-weight models (served by vLLM / SGLang and the like; their tokenizer is not a tiktoken one)
    "gpt-oss-": ModelInfo(131_072, 131_072),
    # DeepSeek (OpenAI-compatible API, automatic prefix caching; its tokenizer is not tiktoken)
    "deepseek-chat": ModelInfo(128_000, 8_192, 0.27, 1.10, None, cached_price=0.07),
    "deepseek-reasoner": ModelInfo(128_000, 64_000, 0.55, 2.19, None, cached_price=0.14),
    # The bundled engine's default model
    "smollm2-135m": ModelInfo(8_192, 8_192),
}

# Anthropic's shortest cacheable prefix for Claude models the table gives none: the largest published one.
ANTHROPIC_DEFAULT_CACHE_MIN = 4096


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
