"""A route's context-economy sections: `budget:`, `compression:` and `ordering:`.

    budget:
      context_window: 8192          # overrides the built-in model table (gateway/context/models.py)
      max_output_tokens: 512        # reserved for the answer; also caps the forwarded max_tokens
      strategy: balanced            # balanced | context_heavy | output_heavy
      input_price_per_mtok: 2.5     # USD, overrides the table (only used to report savings)
      output_price_per_mtok: 10
    compression:
      conversation: {keep_recent: 6, summarizer: local, model: null, timeout_s: 10, max_summary_tokens: 256,
                     cache_ttl_s: 604800}
      documents: {max_tokens: 3000, dedup: true, near_duplicate: 0.85}
      system: {max_share: 0.5}      # opt-in: prune the system prompt (by line priority) when it alone exceeds
                                    # this share of the input; without it the system prompt is never cut
    ordering: {enabled: true, sort_tools: true, cache_breakpoints: true}   # or `ordering: false`

A route with none of the three keys has no context stage work (None). Any of them turns the stage on with
defaults for the others; `budget: false` with nothing else turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.config.errors import PolicyError

StrategyName = Literal["balanced", "context_heavy", "output_heavy"]


@dataclass(frozen=True, slots=True)
class Split:
    output: float  # share of the window reserved for the answer when neither client nor policy says
    documents: float  # share of the flexible input (after system + query) for documents; history gets the rest


STRATEGIES: dict[str, Split] = {
    "balanced": Split(output=0.25, documents=0.5),
    "context_heavy": Split(output=0.125, documents=0.65),
    "output_heavy": Split(output=0.5, documents=0.4),
}


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    context_window: int | None = None
    max_output_tokens: int | None = None
    strategy: StrategyName = "balanced"
    input_price_per_mtok: float | None = None
    output_price_per_mtok: float | None = None

    @property
    def split(self) -> Split:
        return STRATEGIES[self.strategy]


@dataclass(frozen=True, slots=True)
class ConversationConfig:
    keep_recent: int = 6  # newest messages kept verbatim (an assistant tool call and its results count as one)
    summarizer: str | None = None  # backend name; None = drop the oldest turns instead of summarising
    model: str | None = None  # model name sent to the summariser (default: its backend's model, else the request's)
    timeout_s: float = 10.0
    max_summary_tokens: int = 256
    cache_ttl_s: int = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class DocumentsConfig:
    max_tokens: int | None = None
    dedup: bool = True
    near_duplicate: float = 0.85  # estimated Jaccard similarity of word shingles at which a document is a copy


@dataclass(frozen=True, slots=True)
class SystemConfig:
    max_share: float | None = None  # of the input budget; None = never prune (only the route can ask for it)


@dataclass(frozen=True, slots=True)
class OrderingConfig:
    enabled: bool = True
    sort_tools: bool = True
    cache_breakpoints: bool = True  # Anthropic `cache_control` at the end of the static prefix


@dataclass(frozen=True, slots=True)
class ContextConfig:
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    conversation: ConversationConfig = field(default_factory=ConversationConfig)
    documents: DocumentsConfig = field(default_factory=DocumentsConfig)
    system: SystemConfig = field(default_factory=SystemConfig)
    ordering: OrderingConfig = field(default_factory=OrderingConfig)


def parse_context_config(route_raw: dict, path: str) -> ContextConfig | None:
    """Validate the route's context keys; `path` is the route's key path (`routes[0]`)."""
    keys = [k for k in ("budget", "compression", "ordering") if route_raw.get(k) not in (None, False)]
    if not keys:
        return None
    return ContextConfig(
        budget=_budget(route_raw.get("budget"), f"{path}.budget"),
        **_compression(route_raw.get("compression"), f"{path}.compression"),
        ordering=_ordering(route_raw.get("ordering"), f"{path}.ordering"),
    )


def _mapping(raw: Any, path: str, allowed: set[str]) -> dict:
    if raw is None or raw is True:
        return {}
    if not isinstance(raw, dict):
        raise PolicyError(path, f"must be a mapping with keys {', '.join(sorted(allowed))}")
    for key in raw:
        if key not in allowed:
            raise PolicyError(f"{path}.{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
    return raw


def _int(raw: dict, key: str, path: str, default: int | None, minimum: int) -> int | None:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PolicyError(f"{path}.{key}", f"must be an integer >= {minimum}, got {value!r}")
    return value


def _float(raw: dict, key: str, path: str, default: float | None, low: float, high: float) -> float | None:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise PolicyError(f"{path}.{key}", f"must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _bool(raw: dict, key: str, path: str, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PolicyError(f"{path}.{key}", f"must be true or false, got {value!r}")
    return value


def _str(raw: dict, key: str, path: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PolicyError(f"{path}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def _budget(raw: Any, path: str) -> BudgetConfig:
    m = _mapping(
        raw,
        path,
        {"context_window", "max_output_tokens", "strategy", "input_price_per_mtok", "output_price_per_mtok"},
    )
    strategy = m.get("strategy", "balanced")
    if strategy not in STRATEGIES:
        raise PolicyError(f"{path}.strategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    window = _int(m, "context_window", path, None, 16)
    max_output = _int(m, "max_output_tokens", path, None, 1)
    if window is not None and max_output is not None and max_output >= window:
        raise PolicyError(
            f"{path}.max_output_tokens", f"must be smaller than context_window ({max_output} >= {window})"
        )
    return BudgetConfig(
        context_window=window,
        max_output_tokens=max_output,
        strategy=strategy,
        input_price_per_mtok=_float(m, "input_price_per_mtok", path, None, 0.0, 1e6),
        output_price_per_mtok=_float(m, "output_price_per_mtok", path, None, 0.0, 1e6),
    )


def _compression(raw: Any, path: str) -> dict[str, Any]:
    m = _mapping(raw, path, {"conversation", "documents", "system"})
    cp, dp, sp = f"{path}.conversation", f"{path}.documents", f"{path}.system"
    c = _mapping(
        m.get("conversation"),
        cp,
        {"keep_recent", "summarizer", "model", "timeout_s", "max_summary_tokens", "cache_ttl_s"},
    )
    d = _mapping(m.get("documents"), dp, {"max_tokens", "dedup", "near_duplicate"})
    s = _mapping(m.get("system"), sp, {"max_share"})
    defaults_c, defaults_d, defaults_s = ConversationConfig(), DocumentsConfig(), SystemConfig()
    return {
        "conversation": ConversationConfig(
            keep_recent=_int(c, "keep_recent", cp, defaults_c.keep_recent, 0),  # type: ignore[arg-type]
            summarizer=_str(c, "summarizer", cp),
            model=_str(c, "model", cp),
            timeout_s=_float(c, "timeout_s", cp, defaults_c.timeout_s, 0.01, 600.0),  # type: ignore[arg-type]
            max_summary_tokens=_int(c, "max_summary_tokens", cp, defaults_c.max_summary_tokens, 16),  # type: ignore[arg-type]
            cache_ttl_s=_int(c, "cache_ttl_s", cp, defaults_c.cache_ttl_s, 1),  # type: ignore[arg-type]
        ),
        "documents": DocumentsConfig(
            max_tokens=_int(d, "max_tokens", dp, None, 1),
            dedup=_bool(d, "dedup", dp, defaults_d.dedup),
            near_duplicate=_float(d, "near_duplicate", dp, defaults_d.near_duplicate, 0.5, 1.0),  # type: ignore[arg-type]
        ),
        "system": SystemConfig(
            max_share=_float(s, "max_share", sp, defaults_s.max_share, 0.05, 1.0),
        ),
    }


def _ordering(raw: Any, path: str) -> OrderingConfig:
    if raw is False:
        return OrderingConfig(enabled=False)
    m = _mapping(raw, path, {"enabled", "sort_tools", "cache_breakpoints"})
    return OrderingConfig(
        enabled=_bool(m, "enabled", path, True),
        sort_tools=_bool(m, "sort_tools", path, True),
        cache_breakpoints=_bool(m, "cache_breakpoints", path, True),
    )
