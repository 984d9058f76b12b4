"""`GET /admin/usage?tenant=&route=&since=&until=`: totals, per tenant, per route, per model and per hour.

since / until: ISO 8601 (a naive time is UTC) or unix seconds; by default the last 24 hours. Hours are
whole: an hour is counted when any part of it falls in [since, until).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import bad_request
from gateway.usage.ledger import COST_KINDS, NANO, SAVED_LAYERS
from gateway.usage.store import HOUR_S, UsageStore, hours_between

DEFAULT_SPAN_S = 86400
COUNTS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "unpriced_requests")


def parse_time(value: str | None, name: str, default: float) -> float:
    if not value:
        return default
    try:
        return float(value)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"'{name}' must be ISO 8601 or unix seconds, got {value!r}.", name, "invalid_value") from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


class Totals:
    """Sums of the stored metrics (integers) for one slice."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n: dict[str, int] = defaultdict(int)

    def json(self) -> dict[str, Any]:
        n = self.n
        saved = {layer: n["saved:" + layer] / NANO for layer in SAVED_LAYERS}
        costs = {kind: n["cost:" + kind] / NANO for kind in COST_KINDS}
        out: dict[str, Any] = {k: n[k] for k in COUNTS}
        out["hits"] = {"exact": n["hits:exact"], "semantic": n["hits:semantic"]}
        out["spent_usd"] = n["spent"] / NANO
        out["saved_usd"] = saved
        out["saving_costs_usd"] = costs
        out["net_saved_usd"] = (sum(n["saved:" + x] for x in SAVED_LAYERS) - sum(n["cost:" + x] for x in COST_KINDS)) / NANO
        return out


async def usage_report(store: UsageStore, query: Mapping[str, str], now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    until = parse_time(query.get("until"), "until", now)
    since = parse_time(query.get("since"), "since", until - DEFAULT_SPAN_S)
    if since >= until:
        raise bad_request("'since' must be before 'until'.", "since", "invalid_value")
    tenant, route = query.get("tenant") or None, query.get("route") or None
    await store.flush()  # this process's pending figures first
    first, last = hours_between(since, until)
    total, tenants, routes, models = Totals(), defaultdict(Totals), defaultdict(Totals), defaultdict(Totals)
    hours: dict[int, Totals] = defaultdict(Totals)
    for name in [tenant] if tenant else await store.tenants():
        for hour, counts in await store.read(name, first, last):
            for field, value in counts.items():
                r, model, metric = orjson.loads(field)
                if route is not None and r != route:
                    continue
                for t in (total, tenants[name], routes[r], models[model], hours[hour]):
                    t.n[metric] += value
    return {
        "tenant": tenant, "route": route, "since": iso(since), "until": iso(until),
        "totals": total.json(),
        "tenants": {k: v.json() for k, v in sorted(tenants.items())},
        "routes": {k: v.json() for k, v in sorted(routes.items())},
        "models": {k: v.json() for k, v in sorted(models.items())},
        "series": [{"hour": iso(h * HOUR_S), **hours[h].json()} for h in sorted(hours)],
    }
