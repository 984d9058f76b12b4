"""The `routes:` list of a policy: matching, backends and weights, retries, timeouts, and the sections that
other subsystems parse themselves (`cache:` by gateway.cache.config; `budget:`, `compression:`, `ordering:` by
gateway.context.config), imported when a route uses them."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection
from typing import Any

from gateway.backends.base import Timeouts
from gateway.config.fields import Checker, describe, did_you_mean
from gateway.config.schema import BackendConfig, Backoff, Route, RouteBackend
from gateway.config.yamltree import join

ROUTE_KEYS = (
    "name", "match", "backends", "fallbacks", "retries", "backoff", "timeout_s", "timeouts", "routing",
    "cache", "budget", "compression", "ordering",
)
CONTEXT_KEYS = ("budget", "compression", "ordering")
TIMEOUT_KEYS = ("connect", "first_byte", "total")


def parse_routes(
    raw: Any, declared: Collection[str], backends: dict[str, BackendConfig], check: Checker
) -> list[Route]:
    """`declared` holds every backend name written in the policy (valid or not), `backends` the valid ones."""
    if not isinstance(raw, list):
        check.error("routes", f"expected a list of routes (- match: {{model: ...}}), got {describe(raw)}")
        return []
    if not raw:
        check.error("routes", "at least one route is required")
    routes = [r for i, item in enumerate(raw) if (r := _route(item, i, declared, backends, check)) is not None]
    _check_reachable(routes, check)
    return routes


def _route(
    item: Any, i: int, declared: Collection[str], backends: dict[str, BackendConfig], check: Checker
) -> Route | None:
    path = join("routes", i)
    m = check.mapping(item, path, ROUTE_KEYS, required=("match", "backends"))
    if m is None:
        return None
    model = None
    if "match" in m:
        match = check.mapping(m["match"], join(path, "match"), ("model",), required=("model",))
        model = check.get_str(match, "model", join(path, "match")) if match is not None else None
        if model is not None:
            _check_glob(model, join(path, "match.model"), check)
    route_backends = _route_backends(m["backends"], join(path, "backends"), declared, check) if "backends" in m else []
    fallbacks = check.get_str_list(m, "fallbacks", path)
    for j, name in enumerate(fallbacks):
        if name not in declared:
            check.error(join(join(path, "fallbacks"), j), _unknown_backend(name, declared))
    retries = check.get_int(m, "retries", path, 0, minimum=0)
    strategy, prefix = _strategy(m, path, route_backends, backends, check)
    route = Route(
        model=model or "",
        backends=route_backends,
        fallbacks=fallbacks,
        retries=retries or 0,
        backoff=_backoff(m, path, check),
        timeouts=_timeouts(m, path, check),
        strategy=strategy,  # type: ignore[arg-type]
        prefix=prefix,
        cache=_cache(m, path, check),
        context=_context(m, path, check),
        index=i,
    )
    route.route_name = _route_name(m, path, model or "", check)
    summarizer = getattr(getattr(route.context, "conversation", None), "summarizer", None)
    if summarizer is not None and summarizer not in declared:
        check.error(join(path, "compression.conversation.summarizer"), _unknown_backend(summarizer, declared))
    judge = getattr(getattr(route.cache, "semantic", None), "judge", None)
    if judge is not None and judge.backend not in declared:
        check.error(join(path, "cache.semantic.judge.backend"), _unknown_backend(judge.backend, declared))
    return route if model is not None and route_backends else None


ROUTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # a metric label value


def _route_name(m: dict, path: str, model: str, check: Checker) -> str:
    """`name:` when given, else the model for an exact route, else the pattern with its glob characters
    spelled out (`gpt-4o*` -> `gpt-4o_any`): route labels stay stable and never carry a glob."""
    name = check.get_str(m, "name", path)
    if name is not None:
        if not ROUTE_NAME.match(name):
            check.error(join(path, "name"), f"route name {name!r} must be letters, digits, '_', '-' or '.'")
        return name
    if not any(c in model for c in "*?["):
        return model
    spelled = re.sub(r"\[[^\]]*\]", "_set_", model).replace("*", "_any_").replace("?", "_one_")
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.-]", "_", spelled)).strip("_") or "any"


def _route_backends(raw: Any, path: str, declared: Collection[str], check: Checker) -> list[RouteBackend]:
    if not isinstance(raw, list):
        check.error(path, f"expected a list of backend names or {{name, weight}}, got {describe(raw)}")
        return []
    if not raw:
        check.error(path, "at least one backend is required")
    out: list[RouteBackend] = []
    seen: set[str] = set()
    for j, item in enumerate(raw):
        item_path = join(path, j)
        if isinstance(item, str):
            name, weight, name_path = item, 1.0, item_path
        elif isinstance(item, dict):
            m = check.mapping(item, item_path, ("name", "weight"), required=("name",))
            name = check.get_str(m, "name", item_path) if m is not None else None
            weight = check.get_number(m, "weight", item_path, 1.0, minimum=0, exclusive=True) if m else None
            name_path = join(item_path, "name")
            if weight is None:
                continue
        else:
            check.error(item_path, f"expected a backend name or {{name, weight}}, got {describe(item)}")
            continue
        if name is None:
            continue
        if name not in declared:
            check.error(name_path, _unknown_backend(name, declared))
        elif name in seen:
            check.error(name_path, f"backend {name!r} is listed twice in this route")
        else:
            seen.add(name)
            out.append(RouteBackend(name=name, weight=weight))
    return out


def _unknown_backend(name: str, declared: Collection[str]) -> str:
    hint = did_you_mean(name, declared) or f" (defined: {', '.join(sorted(declared)) or 'none'})"
    return f"unknown backend {name!r}{hint}"


def _check_glob(pattern: str, path: str, check: Checker) -> None:
    if pattern != pattern.strip():
        check.error(path, f"model pattern {pattern!r} has leading or trailing spaces")
        return
    j = pattern.find("[")
    while j >= 0:
        k = j + 1
        k += pattern[k : k + 1] == "!"
        k += pattern[k : k + 1] == "]"  # a ']' first in the set is a literal
        close = pattern.find("]", k)
        if close < 0:
            check.error(path, f"bad glob {pattern!r}: unclosed '[' at position {j} (write [[] for a literal '[')")
            return
        j = pattern.find("[", close + 1)
    try:
        re.compile(fnmatch.translate(pattern))
    except re.error as e:
        check.error(path, f"bad glob {pattern!r}: {e}")


def _check_reachable(routes: list[Route], check: Checker) -> None:
    """Routes are tried in order, so one an earlier route always wins is a mistake worth naming. Route
    names must be unique: they are metric labels."""
    names: dict[str, int] = {}
    for route in routes:
        if route.name in names and route.model != routes[names[route.name]].model:
            check.error(join(join("routes", route.index), "name"), f"duplicate route name {route.name!r} (also "
                        f"routes[{names[route.name]}]); set `name:` on one of them")
        names.setdefault(route.name, route.index)
    for j, later in enumerate(routes):
        path = join(join("routes", later.index), "match.model")
        for earlier in routes[:j]:
            if earlier.model == later.model:
                check.error(path, f"duplicate route: routes[{earlier.index}] has the same pattern {later.model!r}")
                break
            catch_all = earlier.is_glob and set(earlier.model) == {"*"}
            if catch_all or (not later.is_glob and earlier.matches(later.model)):
                check.error(
                    path, f"never matched: routes[{earlier.index}] ({earlier.model!r}) matches it first; "
                    "put the more specific route first",
                )
                break


def _strategy(
    m: dict, path: str, route_backends: list[RouteBackend], backends: dict[str, BackendConfig], check: Checker
) -> tuple[str, Any]:
    """The `routing:` section, parsed by gateway.routing.options: (strategy, prefix options or None)."""
    if m.get("routing") is None:
        return "weighted", None
    from gateway.routing.options import parse_routing

    return parse_routing(m["routing"], path, route_backends, backends, check)


def _backoff(m: dict, path: str, check: Checker) -> Backoff:
    p = join(path, "backoff")
    raw = check.mapping(m.get("backoff"), p, ("base_s", "max_s"))
    d = Backoff()
    if raw is None:
        return d
    base = check.get_number(raw, "base_s", p, d.base_s, minimum=0)
    top = check.get_number(raw, "max_s", p, max(d.max_s, base or 0), minimum=0)
    if base is not None and top is not None and top < base:
        check.error(join(p, "max_s"), f"must be >= base_s ({base:g}), got {top:g}")
    return Backoff(base_s=base if base is not None else d.base_s, max_s=top if top is not None else d.max_s)


def _timeouts(m: dict, path: str, check: Checker) -> Timeouts:
    d = Timeouts()
    shorthand = check.get_number(m, "timeout_s", path, minimum=0, exclusive=True)
    p = join(path, "timeouts")
    raw = check.mapping(m.get("timeouts"), p, TIMEOUT_KEYS) or {}
    given = {k: check.get_number(raw, k, p, minimum=0, exclusive=True) for k in TIMEOUT_KEYS}
    if shorthand is not None and given["total"] is not None:
        check.error(join(path, "timeout_s"), "conflicts with timeouts.total: set only one of them")
    total = given["total"] or shorthand or d.total
    for key in ("connect", "first_byte"):
        value = given[key]
        if value is not None and value > total:
            check.error(join(p, key), f"{value:g}s exceeds the total timeout of {total:g}s")
    return Timeouts(
        connect=min(given["connect"] or d.connect, total),
        first_byte=min(given["first_byte"] or d.first_byte, total),
        total=total,
    )


def _cache(m: dict, path: str, check: Checker) -> Any:
    if "cache" not in m:
        return None
    try:
        from gateway.cache.config import parse_cache_config
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("gateway.cache"):
            raise
        check.error(join(path, "cache"), "this build has no cache subsystem (gateway.cache.config is missing)")
        return None
    return parse_cache_config(m["cache"], join(path, "cache"), check)


def _context(m: dict, path: str, check: Checker) -> Any:
    if not any(k in m for k in CONTEXT_KEYS):
        return None
    try:
        from gateway.context.config import parse_context_config
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("gateway.context"):
            raise
        key = next(k for k in CONTEXT_KEYS if k in m)
        check.error(join(path, key), "this build has no context subsystem (gateway.context.config is missing)")
        return None
    return parse_context_config(m, path, check)
