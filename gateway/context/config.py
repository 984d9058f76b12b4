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

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.config.fields import Checker, run_checked
from gateway.config.yamltree import join

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

BUDGET_KEYS = ("context_window", "max_output_tokens", "strategy", "input_price_per_mtok", "output_price_per_mtok")
CONVERSATION_KEYS = ("keep_recent", "summarizer", "model", "timeout_s", "max_summary_tokens", "cache_ttl_s")


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


def parse_context_config(route_raw: dict, path: str, check: Checker | None = None) -> ContextConfig | None:
    """Validate the route's context keys; `path` is the route's key path (`routes[0]`). Errors go to the policy
    loader's `check`, or standalone are raised together (PolicyErrors)."""
    return run_checked(lambda c: _parse(route_raw, path, c), check)


def _parse(route_raw: dict, path: str, check: Checker) -> ContextConfig | None:
    keys = [k for k in ("budget", "compression", "ordering") if route_raw.get(k) not in (None, False)]
    if not keys:
        return None
    return ContextConfig(
        budget=_budget(route_raw.get("budget"), join(path, "budget"), check),
        **_compression(route_raw.get("compression"), join(path, "compression"), check),
        ordering=_ordering(route_raw.get("ordering"), join(path, "ordering"), check),
    )


def _mapping(raw: Any, path: str, allowed: Collection[str], check: Checker) -> dict:
    """A section's mapping (null, true and false read as empty: defaults); unknown keys reported with a hint."""
    if isinstance(raw, bool):
        raw = None
    return check.mapping(raw, path, allowed) or {}


def _or(value: Any, default: Any) -> Any:
    """A checker read that failed (None, error recorded) falls back to the default; the policy is refused anyway."""
    return default if value is None else value


def _budget(raw: Any, path: str, check: Checker) -> BudgetConfig:
    m = _mapping(raw, path, BUDGET_KEYS, check)
    window = check.get_int(m, "context_window", path, None, minimum=16)
    max_output = check.get_int(m, "max_output_tokens", path, None, minimum=1)
    if window is not None and max_output is not None and max_output >= window:
        check.error(
            join(path, "max_output_tokens"), f"must be smaller than context_window ({max_output} >= {window})"
        )
    return BudgetConfig(
        context_window=window,
        max_output_tokens=max_output,
        strategy=check.get_choice(m, "strategy", path, STRATEGIES, "balanced"),  # type: ignore[arg-type]
        input_price_per_mtok=check.get_number(m, "input_price_per_mtok", path, None, minimum=0.0, maximum=1e6),
        output_price_per_mtok=check.get_number(m, "output_price_per_mtok", path, None, minimum=0.0, maximum=1e6),
    )


def _compression(raw: Any, path: str, check: Checker) -> dict[str, Any]:
    m = _mapping(raw, path, ("conversation", "documents", "system"), check)
    cp, dp, sp = join(path, "conversation"), join(path, "documents"), join(path, "system")
    c = _mapping(m.get("conversation"), cp, CONVERSATION_KEYS, check)
    d = _mapping(m.get("documents"), dp, ("max_tokens", "dedup", "near_duplicate"), check)
    s = _mapping(m.get("system"), sp, ("max_share",), check)
    dc, dd = ConversationConfig(), DocumentsConfig()
    return {
        "conversation": ConversationConfig(
            keep_recent=_or(check.get_int(c, "keep_recent", cp, dc.keep_recent, minimum=0), dc.keep_recent),
            summarizer=check.get_str(c, "summarizer", cp),
            model=check.get_str(c, "model", cp),
            timeout_s=_or(check.get_number(c, "timeout_s", cp, dc.timeout_s, minimum=0.01, maximum=600.0),
                          dc.timeout_s),
            max_summary_tokens=_or(check.get_int(c, "max_summary_tokens", cp, dc.max_summary_tokens, minimum=16),
                                   dc.max_summary_tokens),
            cache_ttl_s=_or(check.get_int(c, "cache_ttl_s", cp, dc.cache_ttl_s, minimum=1), dc.cache_ttl_s),
        ),
        "documents": DocumentsConfig(
            max_tokens=check.get_int(d, "max_tokens", dp, None, minimum=1),
            dedup=check.get_bool(d, "dedup", dp, dd.dedup),
            near_duplicate=_or(check.get_number(d, "near_duplicate", dp, dd.near_duplicate, minimum=0.5,
                                                maximum=1.0), dd.near_duplicate),
        ),
        "system": SystemConfig(max_share=check.get_number(s, "max_share", sp, None, minimum=0.05, maximum=1.0)),
    }


def _ordering(raw: Any, path: str, check: Checker) -> OrderingConfig:
    if raw is False:
        return OrderingConfig(enabled=False)
    m = _mapping(raw, path, ("enabled", "sort_tools", "cache_breakpoints"), check)
    return OrderingConfig(
        enabled=check.get_bool(m, "enabled", path, True),
        sort_tools=check.get_bool(m, "sort_tools", path, True),
        cache_breakpoints=check.get_bool(m, "cache_breakpoints", path, True),
    )
