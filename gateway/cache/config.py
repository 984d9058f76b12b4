"""A route's `cache:` section.

    cache:
      version: 3                                   # bump to invalidate every entry of the route
      exact: {ttl: 3600, store: deterministic}     # deterministic | always | never; `false` turns L1 off
      semantic:
        threshold: 0.95
        ttl: 3600
        max_entries: 10000
        verify: true
        store: always
        lookup_timeout_ms: 500                     # a lookup not answered by then is a miss (result="timeout")
        judge: {backend: small, model: gpt-4o-mini, timeout_ms: 800, min_confidence: 0.9, threshold: 0.8}

Absent `cache` (or `false`) turns caching off for the route. `cache: true` or `{}` turns L1 on with its
defaults. L2 is opt-in (`semantic: true` or a mapping) because it answers with a near match, not an equal one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.config.errors import PolicyError
from gateway.config.fields import did_you_mean

StoreMode = Literal["deterministic", "always", "never"]
STORE_MODES: tuple[str, ...] = ("deterministic", "always", "never")
MAX_TTL_S = 365 * 24 * 3600
MAX_TIMEOUT_MS = 60_000
DEFAULT_JUDGE_THRESHOLD = 0.8  # genuine rewordings mostly score 0.75-0.90 with MiniLM
SEMANTIC_KEYS = frozenset({"threshold", "ttl", "max_entries", "verify", "store", "lookup_timeout_ms", "judge"})
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
    threshold: float = 0.95
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


@dataclass(frozen=True, slots=True)
class CacheConfig:
    exact: ExactConfig | None = ExactConfig()
    semantic: SemanticConfig | None = None
    version: str = "1"

    @property
    def enabled(self) -> bool:
        return self.exact is not None or self.semantic is not None


def parse_cache_config(raw: object, path: str) -> CacheConfig | None:
    """Validate a route's `cache:` value; `path` is its key path (`routes[0].cache`) for error messages."""
    if raw is None or raw is False:
        return None
    if raw is True:
        return CacheConfig()
    if not isinstance(raw, dict):
        raise PolicyError(path, "must be a mapping with `exact`, `semantic`, `version`, or true/false")
    _reject_unknown(raw, {"exact", "semantic", "version"}, path)
    version = raw.get("version", "1")
    if isinstance(version, bool) or not isinstance(version, str | int) or str(version) == "":
        raise PolicyError(f"{path}.version", "must be a non-empty string or integer")
    exact = _parse_exact(raw.get("exact", True), f"{path}.exact")
    semantic = _parse_semantic(raw.get("semantic", False), f"{path}.semantic")
    config = CacheConfig(exact=exact, semantic=semantic, version=str(version))
    return config if config.enabled else None


def _parse_exact(raw: object, path: str) -> ExactConfig | None:
    if raw is False or raw is None:
        return None
    if raw is True:
        return ExactConfig()
    if not isinstance(raw, dict):
        raise PolicyError(path, "must be a mapping ({ttl, store}) or true/false")
    _reject_unknown(raw, {"ttl", "store"}, path)
    default = ExactConfig()
    return ExactConfig(
        ttl=_ttl(raw.get("ttl", default.ttl), f"{path}.ttl"),
        store=_store(raw.get("store", default.store), f"{path}.store"),
    )


def _parse_semantic(raw: object, path: str) -> SemanticConfig | None:
    if raw is False or raw is None:
        return None
    if raw is True:
        return SemanticConfig()
    if not isinstance(raw, dict):
        raise PolicyError(path, f"must be a mapping ({{{', '.join(sorted(SEMANTIC_KEYS))}}}) or true/false")
    _reject_unknown(raw, SEMANTIC_KEYS, path)
    default = SemanticConfig()
    threshold = _fraction(raw.get("threshold", default.threshold), f"{path}.threshold")
    max_entries = raw.get("max_entries", default.max_entries)
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        raise PolicyError(f"{path}.max_entries", f"must be a positive integer, got {max_entries!r}")
    verify = raw.get("verify", default.verify)
    if not isinstance(verify, bool):
        raise PolicyError(f"{path}.verify", f"must be true or false, got {verify!r}")
    judge = _parse_judge(raw.get("judge"), f"{path}.judge", threshold)
    if judge is not None and judge.threshold > threshold:
        raise PolicyError(f"{path}.judge.threshold",
                          f"must be at most semantic.threshold ({threshold:g}): the judge looks at the candidates "
                          f"below it, got {judge.threshold:g}")
    return SemanticConfig(
        threshold=threshold,
        ttl=_ttl(raw.get("ttl", default.ttl), f"{path}.ttl"),
        max_entries=max_entries,
        verify=verify,
        store=_store(raw.get("store", default.store), f"{path}.store"),
        lookup_timeout_ms=_timeout_ms(raw.get("lookup_timeout_ms", default.lookup_timeout_ms),
                                      f"{path}.lookup_timeout_ms"),
        judge=judge,
    )


def _parse_judge(raw: object, path: str, route_threshold: float) -> JudgeConfig | None:
    if raw is None or raw is False:
        return None
    if not isinstance(raw, dict):
        raise PolicyError(path, f"must be a mapping ({{{', '.join(sorted(JUDGE_KEYS))}}})")
    _reject_unknown(raw, JUDGE_KEYS, path)
    for key in ("backend", "model"):
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise PolicyError(f"{path}.{key}", f"is required: a non-empty string, got {value!r}")
    return JudgeConfig(
        backend=raw["backend"],
        model=raw["model"],
        timeout_ms=_timeout_ms(raw.get("timeout_ms", 800.0), f"{path}.timeout_ms"),
        min_confidence=_fraction(raw.get("min_confidence", 0.9), f"{path}.min_confidence"),
        threshold=_fraction(raw.get("threshold", min(DEFAULT_JUDGE_THRESHOLD, route_threshold)), f"{path}.threshold"),
    )


def _fraction(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value <= 1.0:
        raise PolicyError(path, f"must be a number in (0, 1], got {value!r}")
    return float(value)


def _timeout_ms(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT_MS:
        raise PolicyError(path, f"must be a number of milliseconds in (0, {MAX_TIMEOUT_MS}], got {value!r}")
    return float(value)


def _ttl(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL_S:
        raise PolicyError(path, f"must be a number of seconds in (0, {MAX_TTL_S}], got {value!r}")
    return float(value)


def _store(value: object, path: str) -> StoreMode:
    if value not in STORE_MODES:
        raise PolicyError(path, f"must be one of {', '.join(STORE_MODES)}, got {value!r}")
    return value  # type: ignore[return-value]


def _reject_unknown(raw: dict, allowed: set[str] | frozenset[str], path: str) -> None:
    for key in raw:
        if key not in allowed:
            raise PolicyError(f"{path}.{key}", f"unknown key{did_you_mean(str(key), allowed)}; expected one of "
                                               f"{', '.join(sorted(allowed))}")
