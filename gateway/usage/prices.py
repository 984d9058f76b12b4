"""What a model's tokens cost: the policy's `models:` entries first, then the built-in table.

The table is `gateway/context/models.py` (input, output and OpenAI's / DeepSeek's cached-input prices per
million tokens). Claude models follow Anthropic's published rule: a cache read costs 0.1x the input price and a
(5-minute) cache write 1.25x. A model found in neither, or with no price in the table (the bundled engine's
models), has no price: it costs 0 and its requests are flagged `unpriced`, never guessed. A route's
`budget.input_price_per_mtok` / `output_price_per_mtok` (the context stage's keys) still apply below `models:`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from gateway.config.schema import ModelPrice, Policy, Route
from gateway.context.models import lookup

ANTHROPIC_READ = 0.1  # cache read: 10 % of the input price
ANTHROPIC_WRITE = 1.25  # 5-minute cache write: a 25 % premium


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token (not per million), every field resolved."""

    input: float
    cached_input: float
    cache_write: float
    output: float


def rates_of(price: ModelPrice) -> Rates:
    cached = price.input if price.cached_input is None else price.cached_input
    write = price.input if price.cache_write is None else price.cache_write
    return Rates(price.input / 1e6, cached / 1e6, write / 1e6, price.output / 1e6)


def table_price(model: str) -> ModelPrice | None:
    """The built-in price of `model`, or None when the table has none."""
    info = lookup(model)
    if info is None or (not info.input_price and not info.output_price):
        return None
    if model.lower().startswith("claude"):
        return ModelPrice(info.input_price, info.output_price, info.input_price * ANTHROPIC_READ,
                          info.input_price * ANTHROPIC_WRITE)
    return ModelPrice(info.input_price, info.output_price, info.cached_price)


class PriceBook:
    """Prices for one policy, memoised per (route, model): the request path does a dict lookup."""

    def __init__(self, policy: Policy) -> None:
        self._exact = dict(policy.models)
        self._globs = [(name, p) for name, p in policy.models.items() if any(c in name for c in "*?[")]
        self._memo: dict[tuple[str, str], Rates | None] = {}

    def rates(self, route: Route, model: str) -> Rates | None:
        key = (route.name, model)
        try:
            return self._memo[key]
        except KeyError:
            pass
        if len(self._memo) > 4096:  # a glob route sees client-chosen names: keep the memo bounded
            self._memo.clear()
        price = self._resolve(route, model)
        rates = self._memo[key] = rates_of(price) if price is not None else None
        return rates

    def _resolve(self, route: Route, model: str) -> ModelPrice | None:
        price = self._exact.get(model)
        if price is None:
            price = next((p for name, p in self._globs if fnmatch.fnmatchcase(model, name)), None)
        if price is not None:
            return price
        table = table_price(model)
        budget = route.context.budget if route.context is not None else None
        if budget is None or (budget.input_price_per_mtok is None and budget.output_price_per_mtok is None):
            return table
        # the route's budget keys override the table's input and output prices, as the context stage reads them
        base = table or ModelPrice(0.0, 0.0)
        inp = base.input if budget.input_price_per_mtok is None else budget.input_price_per_mtok
        out = base.output if budget.output_price_per_mtok is None else budget.output_price_per_mtok
        return ModelPrice(inp, out, base.cached_input, base.cache_write)
