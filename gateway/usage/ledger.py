"""One request's dollars: spent upstream, saved per layer, and what saving cost (the judge, exploration).

Layers saved: `exact` and `semantic` (a cache hit saves what the answer it replayed cost, from its stored usage
at today's prices), `prefix` (prompt tokens the provider's or engine's prefix cache served: the cached-input
discount), `compression` (prompt tokens the context stage removed, at the input price). Costs of saving:
`judge` (the semantic cache's judge calls, charged to the request whose lookup asked) and `exploration` (an
upstream call the semantic cache made although it had a hit, to learn from it: its whole cost). Net savings =
the layers' sum minus those costs. Judge calls and explored requests are spent as well: spent is every dollar
paid upstream on the request's behalf.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from gateway.usage.prices import Rates

SAVED_LAYERS: Final = ("exact", "semantic", "prefix", "compression")
COST_KINDS: Final = ("judge", "exploration")
NANO = 1e9  # stored and summed as integer nano-dollars: exact sums in Redis and across processes


def _int(x: Any) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else 0


@dataclass(slots=True, frozen=True)
class Tokens:
    """An OpenAI usage object read defensively (Anthropic's arrive translated: cache reads as cached_tokens,
    cache writes as cache_write_tokens, both inside prompt_tokens)."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    written: int = 0

    @classmethod
    def of(cls, usage: Any) -> Tokens:
        if not isinstance(usage, dict):
            return cls()
        details = usage.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        prompt = _int(usage.get("prompt_tokens"))
        cached = min(_int(details.get("cached_tokens")), prompt)
        written = min(_int(details.get("cache_write_tokens")), prompt - cached)
        return cls(prompt, _int(usage.get("completion_tokens")), cached, written)

    def cost(self, r: Rates) -> float:
        fresh = self.prompt - self.cached - self.written
        return fresh * r.input + self.cached * r.cached_input + self.written * r.cache_write + self.completion * r.output

    def prefix_saving(self, r: Rates) -> float:
        """The cached-input discount: what the cached tokens would have cost at the full input price, less
        what they cost. (A cache write's premium is spent, not a negative saving.)"""
        return self.cached * max(0.0, r.input - r.cached_input)


@dataclass(slots=True)
class Ledger:
    """Dollars of one request. Filled by the accounting when the request ends (and by the judge while it runs)."""

    spent: float = 0.0
    saved: dict[str, float] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    tokens: Tokens = field(default_factory=Tokens)
    unpriced: bool = False  # the model has no price: its dollars are 0, and says so
    explored: bool = False  # set by the cache stage: this upstream call was exploration (see `explore`)
    settled: bool = False  # recorded once; a second settle (a cancel racing the end) does nothing

    def add_saved(self, layer: str, usd: float) -> None:
        if usd > 0:
            self.saved[layer] = self.saved.get(layer, 0.0) + usd

    def add_cost(self, kind: str, usd: float, spent: bool = True) -> None:
        """A cost of saving (judge, exploration); `spent`: not counted in `spent` yet (a judge call is not, an
        explored request's own upstream call is)."""
        if usd > 0:
            self.costs[kind] = self.costs.get(kind, 0.0) + usd
            if spent:
                self.spent += usd

    @property
    def net_saved(self) -> float:
        return sum(self.saved.values()) - sum(self.costs.values())

    def header(self) -> str:
        """The `X-Cost-USD` response header."""
        text = f"spent={self.spent:.8f}; saved={self.net_saved:.8f}"
        return text + "; unpriced" if self.unpriced else text


# The ledger of the request this task serves, for code that has no RequestContext (the judge, deep in the
# semantic lookup). The handler sets it; a task the request starts inherits it.
current: ContextVar[Ledger | None] = ContextVar("gateway_usage_ledger", default=None)


def charge_judge(usd: float) -> None:
    """A judge call's cost, charged to the request whose lookup made it (nothing outside a request)."""
    ledger = current.get()
    if ledger is not None:
        ledger.add_cost("judge", usd)


def explore(ledger: Ledger | None) -> None:
    """The hook for the semantic cache's exploration: call it (with `ctx.ledger`) when a would-be hit is sent
    upstream to learn from. The upstream call's whole cost is then also counted as a cost of saving."""
    if ledger is not None:
        ledger.explored = True
