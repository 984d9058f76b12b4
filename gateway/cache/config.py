"""A route's `cache:` section.

    cache:
      version: 3                                   # bump to invalidate every entry of the route
      exact: {ttl: 3600, store: deterministic}     # deterministic | always | never; `false` turns L1 off
      semantic: {threshold: 0.95, ttl: 3600, max_entries: 10000, verify: true, store: always}

Absent `cache` (or `false`) turns caching off for the route. `cache: true` or `{}` turns L1 on with its
defaults. L2 is opt-in (`semantic: true` or a mapping) because it answers with a near match, not an equal one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.config.errors import PolicyError

StoreMode = Literal["deterministic", "always", "never"]
STORE_MODES: tuple[str, ...] = ("deterministic", "always", "never")
MAX_TTL_S = 365 * 24 * 3600


@dataclass(frozen=True, slots=True)
class ExactConfig:
    ttl: float = 3600.0
    store: StoreMode = "deterministic"  # only temperature 0 or seeded requests by default


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    threshold: float = 0.95
    ttl: float = 3600.0
    max_entries: int = 10_000  # per scope, least recently used evicted first
    verify: bool = True
    # The scope already pins temperature and every other parameter, so a sampled answer is only ever
    # served to a request that asked for the same sampling.
    store: StoreMode = "always"


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
        raise PolicyError(path, "must be a mapping ({threshold, ttl, max_entries, verify, store}) or true/false")
    _reject_unknown(raw, {"threshold", "ttl", "max_entries", "verify", "store"}, path)
    default = SemanticConfig()
    threshold = raw.get("threshold", default.threshold)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 < threshold <= 1.0:
        raise PolicyError(f"{path}.threshold", f"must be a number in (0, 1], got {threshold!r}")
    max_entries = raw.get("max_entries", default.max_entries)
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        raise PolicyError(f"{path}.max_entries", f"must be a positive integer, got {max_entries!r}")
    verify = raw.get("verify", default.verify)
    if not isinstance(verify, bool):
        raise PolicyError(f"{path}.verify", f"must be true or false, got {verify!r}")
    return SemanticConfig(
        threshold=float(threshold),
        ttl=_ttl(raw.get("ttl", default.ttl), f"{path}.ttl"),
        max_entries=max_entries,
        verify=verify,
        store=_store(raw.get("store", default.store), f"{path}.store"),
    )


def _ttl(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL_S:
        raise PolicyError(path, f"must be a number of seconds in (0, {MAX_TTL_S}], got {value!r}")
    return float(value)


def _store(value: object, path: str) -> StoreMode:
    if value not in STORE_MODES:
        raise PolicyError(path, f"must be one of {', '.join(STORE_MODES)}, got {value!r}")
    return value  # type: ignore[return-value]


def _reject_unknown(raw: dict, allowed: set[str], path: str) -> None:
    for key in raw:
        if key not in allowed:
            raise PolicyError(f"{path}.{key}", f"unknown key; expected one of {', '.join(sorted(allowed))}")
