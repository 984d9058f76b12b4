"""A route's `cache:` section.

    cache:
      version: 3                                   # bump to invalidate every entry of the route
      exact: {ttl: 3600, store: deterministic}     # deterministic | always | never; `false` turns L1 off
      semantic:
        threshold: 0.80                            # chosen on the tune half of tests/data/semantic_eval.jsonl
        ttl: 3600
        max_entries: 10000
        verify: true
        store: always
        lookup_timeout_ms: 500                     # a lookup not answered by then is a miss (result="timeout")
        judge: {backend: small, model: gpt-4o-mini, timeout_ms: 800, min_confidence: 0.9, threshold: 0.65}
        max_wrong: 0.01                            # error budget: share of served hits allowed to be wrong
        explore: {floor: 0.02, cap: 0.2}           # share of would-be hits sent upstream to learn; false: none

Absent `cache` (or `false`) turns caching off for the route. `cache: true` or `{}` turns L1 on with its
defaults. L2 is opt-in (`semantic: true` or a mapping) because it answers with a near match, not an equal one.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from gateway.config.fields import Checker, describe, run_checked
from gateway.config.yamltree import join

StoreMode = Literal["deterministic", "always", "never"]
STORE_MODES: tuple[str, ...] = ("deterministic", "always", "never")
MAX_TTL_S = 365 * 24 * 3600
MAX_TIMEOUT_MS = 60_000
# Genuine rewordings mostly score 0.6-0.9 with MiniLM; the route's default (0.80) serves verified candidates
# from there up, so a judge looks at the band below it.
DEFAULT_JUDGE_THRESHOLD = 0.65
EXACT_KEYS = frozenset({"ttl", "store"})
SEMANTIC_KEYS = frozenset({"threshold", "ttl", "max_entries", "verify", "store", "lookup_timeout_ms", "judge",
                           "max_wrong", "explore"})
EXPLORE_KEYS = frozenset({"floor", "cap"})
JUDGE_KEYS = frozenset({"backend", "model", "timeout_ms", "min_confidence", "threshold"})


@dataclass(frozen=True, slots=True)
class ExactConfig:
    ttl: float = 3600.0
    store: StoreMode = "deterministic"  # only temperature 0 or seeded requests by default


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    """An LLM asked "do these two questions have the same answer?" about candidates below the route's threshold."""

    backend: str  # a backend of the policy (checked by the route parser)
    model: str
    timeout_ms: float = 800.0  # a judge slower than this is a miss (result="timeout")
    min_confidence: float = 0.9  # P(yes) needed to serve (from logprobs; a plain-text "yes" counts as 1.0)
    threshold: float = DEFAULT_JUDGE_THRESHOLD  # candidates from here up to the route's threshold go to the judge


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    # Chosen with the verifier on the tune half of tests/data/semantic_eval.jsonl (figures: bench/RESULTS.md;
    # `llm-gateway cache calibrate` for your own traffic).
    threshold: float = 0.80
    ttl: float = 3600.0
    max_entries: int = 10_000  # per scope, least recently used evicted first
    verify: bool = True
    # The scope already pins temperature and every other parameter, so a sampled answer is only ever
    # served to a request that asked for the same sampling.
    store: StoreMode = "always"
    # Every lookup's deadline: queueing behind other tenants' embeddings included. Past it the request goes on
    # as a miss, so no tenant can hold another's request at the cache.
    lookup_timeout_ms: float = 500.0
    judge: JudgeConfig | None = None
    # The error budget (learning.py): a would-be hit is served while the route's estimated wrong rate, plus one
    # standard deviation, stays within it; `null` turns learning off (the static threshold and verifier only).
    max_wrong: float | None = 0.01
    explore_floor: float = 0.02  # would-be hits always sent upstream to check the cache
    explore_cap: float = 0.2  # at most this share, while the estimate nears the budget


@dataclass(frozen=True, slots=True)
class CacheConfig:
    exact: ExactConfig | None = ExactConfig()
    semantic: SemanticConfig | None = None
    version: str = "1"

    @property
    def enabled(self) -> bool:
        return self.exact is not None or self.semantic is not None


def parse_cache_config(raw: object, path: str, check: Checker | None = None) -> CacheConfig | None:
    """Validate a route's `cache:` value; `path` is its key path (`routes[0].cache`) for error messages. Errors go to
    the policy loader's `check`, or standalone are raised together (PolicyErrors)."""
    return run_checked(lambda c: _parse_cache(raw, path, c), check)


def _parse_cache(raw: object, path: str, check: Checker) -> CacheConfig | None:
    if raw is None or raw is False:
        return None
    if raw is True:
        return CacheConfig()
    if not isinstance(raw, dict):
        check.error(path, f"must be a mapping with `exact`, `semantic`, `version`, or true/false, got {describe(raw)}")
        return None
    check.mapping(raw, path, ("exact", "semantic", "version"))
    version = raw.get("version", "1")
    if isinstance(version, bool) or not isinstance(version, str | int) or str(version) == "":
        check.error(join(path, "version"), f"must be a non-empty string or integer, got {describe(version)}")
    exact = _parse_exact(raw.get("exact", True), join(path, "exact"), check)
    semantic = _parse_semantic(raw.get("semantic", False), join(path, "semantic"), check)
    config = CacheConfig(exact=exact, semantic=semantic, version=str(version))
    return config if config.enabled else None


def _on_off(raw: object, path: str, keys: Collection[str], check: Checker) -> dict | bool:
    """A layer's value: true/false (null is false), or a mapping of `keys` (unknown ones reported)."""
    if raw is None or isinstance(raw, bool):
        return bool(raw)
    if not isinstance(raw, dict):
        check.error(path, f"must be a mapping ({{{', '.join(sorted(keys))}}}) or true/false, got {describe(raw)}")
        return False
    check.mapping(raw, path, keys)
    return raw


def _parse_exact(raw: object, path: str, check: Checker) -> ExactConfig | None:
    m = _on_off(raw, path, EXACT_KEYS, check)
    if not isinstance(m, dict):
        return ExactConfig() if m else None
    default = ExactConfig()
    return ExactConfig(ttl=_ttl(m, path, default.ttl, check), store=_store(m, path, default.store, check))


def _parse_semantic(raw: object, path: str, check: Checker) -> SemanticConfig | None:
    m = _on_off(raw, path, SEMANTIC_KEYS, check)
    if not isinstance(m, dict):
        return SemanticConfig() if m else None
    d = SemanticConfig()
    threshold = _fraction(m, "threshold", path, d.threshold, check)
    judge = _parse_judge(m.get("judge"), join(path, "judge"), threshold, check)
    if judge is not None and judge.threshold > threshold:
        check.error(join(join(path, "judge"), "threshold"),
                    f"must be at most semantic.threshold ({threshold:g}): the judge looks at the candidates "
                    f"below it, got {judge.threshold:g}")
    return SemanticConfig(
        threshold=threshold,
        ttl=_ttl(m, path, d.ttl, check),
        max_entries=check.get_int(m, "max_entries", path, d.max_entries, minimum=1) or d.max_entries,
        verify=check.get_bool(m, "verify", path, d.verify),
        store=_store(m, path, d.store, check),
        lookup_timeout_ms=_timeout_ms(m, "lookup_timeout_ms", path, d.lookup_timeout_ms, check),
        judge=judge,
        max_wrong=_max_wrong(m, path, d.max_wrong, check),
        **_explore(m.get("explore", True), join(path, "explore"), d, check),
    )


def _max_wrong(m: dict, path: str, default: float | None, check: Checker) -> float | None:
    if "max_wrong" in m and m["max_wrong"] is None:
        return None
    return _fraction(m, "max_wrong", path, default or 0.01, check)


def _explore(raw: object, path: str, d: SemanticConfig, check: Checker) -> dict[str, float]:
    """`explore: false` (no exploration), true (the defaults) or {floor, cap}, 0 <= floor <= cap <= 1."""
    m = _on_off(raw, path, EXPLORE_KEYS, check)
    if not isinstance(m, dict):
        return {"explore_floor": d.explore_floor if m else 0.0, "explore_cap": d.explore_cap if m else 0.0}
    floor = check.get_number(m, "floor", path, d.explore_floor, minimum=0.0, maximum=1.0)
    cap = check.get_number(m, "cap", path, max(d.explore_cap, floor or 0.0), minimum=0.0, maximum=1.0)
    floor = d.explore_floor if floor is None else floor
    cap = d.explore_cap if cap is None else cap
    if cap < floor:
        check.error(join(path, "cap"), f"must be at least explore.floor ({floor:g}), got {cap:g}")
    return {"explore_floor": floor, "explore_cap": max(cap, floor)}


def _parse_judge(raw: object, path: str, route_threshold: float, check: Checker) -> JudgeConfig | None:
    if raw is None or raw is False:
        return None
    if not isinstance(raw, dict):
        check.error(path, f"must be a mapping ({{{', '.join(sorted(JUDGE_KEYS))}}}), got {describe(raw)}")
        return None
    check.mapping(raw, path, JUDGE_KEYS, required=[k for k in ("backend", "model") if raw.get(k) is None])
    backend = check.get_str(raw, "backend", path)
    model = check.get_str(raw, "model", path)
    if backend is None or model is None:
        return None
    return JudgeConfig(
        backend=backend,
        model=model,
        timeout_ms=_timeout_ms(raw, "timeout_ms", path, 800.0, check),
        min_confidence=_fraction(raw, "min_confidence", path, 0.9, check),
        threshold=_fraction(raw, "threshold", path, min(DEFAULT_JUDGE_THRESHOLD, route_threshold), check),
    )


def _fraction(m: dict, key: str, path: str, default: float, check: Checker) -> float:
    value = check.get_number(m, key, path, default, minimum=0.0, exclusive=True, maximum=1.0)
    return default if value is None else value


def _timeout_ms(m: dict, key: str, path: str, default: float, check: Checker) -> float:
    value = check.get_number(m, key, path, default, minimum=0.0, exclusive=True, maximum=MAX_TIMEOUT_MS)
    return default if value is None else value


def _ttl(m: dict, path: str, default: float, check: Checker) -> float:
    value = check.get_number(m, "ttl", path, default, minimum=0.0, exclusive=True, maximum=MAX_TTL_S)
    return default if value is None else value


def _store(m: dict, path: str, default: StoreMode, check: Checker) -> StoreMode:
    return check.get_choice(m, "store", path, STORE_MODES, default)  # type: ignore[return-value]
