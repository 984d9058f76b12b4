"""A route's `routing:` section: the strategy and, for prefix_aware, the approximate router's options.

    routing:
      strategy: prefix_aware     # weighted (default) | least_loaded | prefix_aware
      block_chars: 64            # characters per hashed block of the rendered request (about 16 tokens)
      cache_tokens: 1000000      # what each server's prefix cache holds, in tokens, unless the backend's
                                 # `options.prefix_cache_tokens` says otherwise
      evicted_ratio: 0.5         # an answer reporting fewer cached tokens than this share of the prediction
                                 # means the server evicted: the view drops what is older
      health_check_s: 5          # readiness poll of each backend; a failing one leaves the choice, its view cleared
      load_weight: 0.35          # one request routed lately (in flight: half) costs load_weight * mean request blocks
      shared_weight: 0.25        # blocks of a prefix conversations branch from (a shared system prompt) cost this
                                 # much to prefill elsewhere: copying it spreads new conversations
      overlap_weight: 1.0        # weight of the blocks left to prefill
      balance_abs: 64            # least-loaded wins when max - min in-flight > balance_abs ...
      balance_rel: 1.5           # ... and max > balance_rel * min

Engine backends route across their own replicas from KV events (their `options:` hold the same weights); on
a route with several backends, prefix_aware picks among the backends with this approximate view.
"""

from __future__ import annotations

from typing import Any

from gateway.config.fields import Checker
from gateway.config.schema import BackendConfig, RouteBackend
from gateway.config.yamltree import join
from gateway.routing.approx import PoolOptions
from gateway.routing.choice import Balance

STRATEGIES = ("weighted", "least_loaded", "prefix_aware")
PREFIX_KEYS = ("block_chars", "cache_tokens", "evicted_ratio", "health_check_s", "load_weight", "shared_weight",
               "overlap_weight", "balance_abs", "balance_rel")
CAPACITY_OPTION = "prefix_cache_tokens"  # per backend, under its `options:`


def parse_routing(
    raw: Any, path: str, route_backends: list[RouteBackend], backends: dict[str, BackendConfig], check: Checker
) -> tuple[str, PoolOptions | None]:
    """(strategy, prefix options or None); errors go to `check` with their key paths."""
    p = join(path, "routing")
    m = check.mapping(raw, p, ("strategy", *PREFIX_KEYS))
    if m is None:
        return "weighted", None
    strategy = check.get_choice(m, "strategy", p, STRATEGIES, "weighted")
    if strategy != "prefix_aware":
        for key in PREFIX_KEYS:
            if key in m:
                check.error(join(p, key), "applies only to strategy: prefix_aware")
        return strategy, None
    for b in route_backends:
        cfg = backends.get(b.name)
        if cfg is not None and cfg.type == "anthropic":
            check.error(join(p, "strategy"), f"prefix_aware routes to servers that keep their own prefix caches "
                        f"(openai-compatible or engine backends); {b.name!r} is an anthropic backend, whose "
                        "prompt cache follows cache_control breakpoints, not the replica")
    d, db = PoolOptions(), Balance()
    block_chars = check.get_int(m, "block_chars", p, d.block_chars, minimum=8)
    cache_tokens = check.get_int(m, "cache_tokens", p, d.cache_tokens, minimum=1)
    evicted_ratio = _fraction(check, m, "evicted_ratio", p, d.evicted_ratio)
    health = check.get_number(m, "health_check_s", p, d.health_check_s, minimum=0, exclusive=True)
    balance = Balance(
        overlap_weight=_num(check.get_number(m, "overlap_weight", p, db.overlap_weight, minimum=0), db.overlap_weight),
        load_weight=_num(check.get_number(m, "load_weight", p, db.load_weight, minimum=0), db.load_weight),
        shared_weight=_num(_fraction(check, m, "shared_weight", p, db.shared_weight), db.shared_weight),
        balance_abs=int(_num(check.get_int(m, "balance_abs", p, db.balance_abs, minimum=0), db.balance_abs)),
        balance_rel=_num(check.get_number(m, "balance_rel", p, db.balance_rel, minimum=1), db.balance_rel),
    )
    capacity: dict[str, int] = {}
    for b in route_backends:
        cfg = backends.get(b.name)
        value = (cfg.options or {}).get(CAPACITY_OPTION) if cfg is not None else None
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            check.error(f"backends.{b.name}.options.{CAPACITY_OPTION}", f"expected a positive integer (tokens), "
                        f"got {value!r}")
        else:
            capacity[b.name] = value
    return strategy, PoolOptions(
        block_chars=block_chars or d.block_chars, cache_tokens=cache_tokens or d.cache_tokens,
        capacity_tokens=tuple(capacity.items()), evicted_ratio=_num(evicted_ratio, d.evicted_ratio),
        health_check_s=_num(health, d.health_check_s), balance=balance,
    )


def _fraction(check: Checker, m: dict, key: str, path: str, default: float) -> float | None:
    value = check.get_number(m, key, path, default, minimum=0)
    if value is not None and value > 1:
        check.error(join(path, key), f"must be <= 1, got {value:g}")
        return None
    return value


def _num(value: float | None, default: float) -> float:
    return default if value is None else value
