"""The accounting the handlers call: one request's dollars from its usage, into metrics, Redis and a header.

`settle_upstream` (an answer from a backend, or a stream's end, cut or not) and `settle_hit` (an L1 / L2 hit)
are synchronous and cheap (a memoised price, a few multiplications, dict updates, counter increments): the
per-hour totals go to Redis in the background (store.py) and only a tenant with a budget awaits Redis, in
`charge`. Each request is settled once (`Ledger.settled`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import Counter

from gateway.auth import OPEN_TENANT
from gateway.usage.budget import Budgets
from gateway.usage.ledger import COST_KINDS, NANO, SAVED_LAYERS, Ledger, Tokens
from gateway.usage.prices import PriceBook, Rates
from gateway.usage.store import UsageStore

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.config.schema import Policy
    from gateway.metrics import Metrics
    from gateway.pipeline import RequestContext

HIT_LAYERS = {"HIT-EXACT": "exact", "HIT-SEMANTIC": "semantic"}


class UsageMetrics:
    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.spend = Counter("gateway_spend_usd", "Dollars paid upstream (requests, judge calls, exploration)",
                             ["tenant", "route", "model"], registry=r)
        self.saved = Counter("gateway_saved_usd", "Dollars saved, gross, by layer (exact, semantic, prefix, "
                             "compression)", ["tenant", "route", "model", "layer"], registry=r)
        self.saving_costs = Counter("gateway_saving_cost_usd", "Dollars that saving cost (judge, exploration): "
                                    "net savings = saved - this", ["tenant", "route", "model", "kind"], registry=r)
        self.unpriced = Counter("gateway_unpriced_requests", "Requests whose model has no price (counted as $0)",
                                ["route", "model"], registry=r)
        self._children: dict[tuple[str, str, str], tuple] = {}

    def prepare(self, policy: Policy) -> None:
        """Every label set the policy makes known, at 0: each tenant on each exact-name route."""
        tenants = [t.name for t in policy.tenants] or [OPEN_TENANT.name]
        for route in policy.routes:
            if not route.is_glob:
                for tenant in tenants:
                    self.children(tenant, route.name, route.model)

    def children(self, tenant: str, route: str, model: str) -> tuple:
        """(spend, {layer: saved}, {kind: cost}), resolved once per label set: labels() takes a lock."""
        key = (tenant, route, model)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = (
                self.spend.labels(tenant, route, model),
                {layer: self.saved.labels(tenant, route, model, layer) for layer in SAVED_LAYERS},
                {kind: self.saving_costs.labels(tenant, route, model, kind) for kind in COST_KINDS},
            )
        return found


class Accounting:
    def __init__(self, redis: aioredis.Redis, metrics: Metrics, timeout_s: float) -> None:
        self.metrics = UsageMetrics(metrics)
        self.store = UsageStore(redis, metrics, timeout_s)
        self.budgets = Budgets(redis, metrics, timeout_s)
        self._book: tuple[Policy, PriceBook] | None = None

    def prepare(self, policy: Policy) -> None:
        self._book = (policy, PriceBook(policy))
        self.metrics.prepare(policy)
        self.budgets.metrics.prepare(policy)

    def _rates(self, ctx: RequestContext, answered: object = None) -> Rates | None:
        book = self._book[1] if self._book is not None and self._book[0] is ctx.policy else PriceBook(ctx.policy)
        rates = book.rates(ctx.route, ctx.model)
        if rates is None and isinstance(answered, str) and answered and answered != ctx.model:
            rates = book.rates(ctx.route, answered)  # an alias the table lacks, answered as a dated snapshot
        return rates

    def settle_upstream(self, ctx: RequestContext, usage: object, answered_model: object = None) -> Ledger:
        """An upstream answer's (or a stream's end's) cost and the savings that came with it."""
        ledger = ctx.ledger
        if ledger.settled:
            return ledger
        tokens = ledger.tokens = Tokens.of(usage)
        rates = self._rates(ctx, answered_model)
        if rates is None:
            ledger.unpriced = True
        else:
            cost = tokens.cost(rates)
            ledger.spent += cost
            ledger.add_saved("prefix", tokens.prefix_saving(rates))
            report = ctx.budget_report
            if report is not None and report.saved > 0:
                ledger.add_saved("compression", report.saved * rates.input)
            if ledger.explored:  # a would-be hit sent upstream to learn: the whole call is a cost of saving
                ledger.add_cost("exploration", cost, spent=False)
        self._record(ctx, ledger, None)
        return ledger

    def settle_hit(self, ctx: RequestContext, hit: dict) -> Ledger:
        """A cache hit saved what the answer it replayed cost: its stored usage at today's prices."""
        ledger = ctx.ledger
        if ledger.settled:
            return ledger
        layer = HIT_LAYERS.get(ctx.response_headers.get("X-Cache", ""), "exact")
        rates = self._rates(ctx, hit.get("model"))
        if rates is None:
            ledger.unpriced = True
        else:
            ledger.add_saved(layer, Tokens.of(hit.get("usage")).cost(rates))
        self._record(ctx, ledger, layer)
        return ledger

    async def charge(self, ctx: RequestContext) -> None:
        """The request's spend against its tenant's budgets (only a tenant with one awaits anything)."""
        if ctx.tenant.limits.has_budget and ctx.ledger.spent > 0:
            await self.budgets.charge(ctx.tenant, ctx.ledger.spent, time.time())

    def _record(self, ctx: RequestContext, ledger: Ledger, hit: str | None) -> None:
        ledger.settled = True
        tenant, route, model = ctx.tenant.name, ctx.route.name, ctx.model
        spend, saved, costs = self.metrics.children(tenant, route, model)
        figures = {"requests": 1}
        if ledger.spent:
            spend.inc(ledger.spent)
            figures["spent"] = round(ledger.spent * NANO)
        for layer, usd in ledger.saved.items():
            saved[layer].inc(usd)
            figures["saved:" + layer] = round(usd * NANO)
        for kind, usd in ledger.costs.items():
            costs[kind].inc(usd)
            figures["cost:" + kind] = round(usd * NANO)
        if hit is not None:
            figures["hits:" + hit] = 1
        else:
            t = ledger.tokens
            figures.update(prompt_tokens=t.prompt, completion_tokens=t.completion, cached_tokens=t.cached)
        if ledger.unpriced:
            self.metrics.unpriced.labels(route, model).inc()
            figures["unpriced_requests"] = 1
        self.store.add(tenant, route, model, figures, time.time())
        ctx.response_headers["X-Cost-USD"] = ledger.header()
