"""The route's `cache:` section: defaults, layer switches, and a clear PolicyError (with key path) per bad value."""

from __future__ import annotations

import pytest

from gateway.cache.config import CacheConfig, ExactConfig, SemanticConfig, parse_cache_config
from gateway.config.errors import PolicyError

P = "routes[0].cache"


def test_absent_or_false_turns_caching_off() -> None:
    assert parse_cache_config(None, P) is None
    assert parse_cache_config(False, P) is None
    assert parse_cache_config({"exact": False}, P) is None  # both layers off is off


def test_true_and_empty_mapping_mean_exact_only_with_defaults() -> None:
    assert parse_cache_config(True, P) == CacheConfig(exact=ExactConfig(), semantic=None)
    assert parse_cache_config({}, P) == CacheConfig(exact=ExactConfig(), semantic=None)


def test_full_section() -> None:
    cfg = parse_cache_config({
        "version": 3, "exact": {"ttl": 60, "store": "always"},
        "semantic": {"threshold": 0.9, "ttl": 30.5, "max_entries": 5, "verify": False, "store": "never"},
    }, P)
    assert cfg == CacheConfig(
        exact=ExactConfig(ttl=60.0, store="always"),
        semantic=SemanticConfig(threshold=0.9, ttl=30.5, max_entries=5, verify=False, store="never"),
        version="3",
    )


def test_semantic_true_uses_defaults_and_exact_can_be_off() -> None:
    cfg = parse_cache_config({"exact": False, "semantic": True}, P)
    assert cfg is not None and cfg.exact is None
    assert cfg.semantic == SemanticConfig(threshold=0.80, ttl=3600.0, max_entries=10_000, verify=True)


@pytest.mark.parametrize(("raw", "path"), [
    ("yes", P),
    ({"exactly": {}}, f"{P}.exactly"),
    ({"version": ""}, f"{P}.version"),
    ({"version": True}, f"{P}.version"),
    ({"exact": 5}, f"{P}.exact"),
    ({"exact": {"ttl": 0}}, f"{P}.exact.ttl"),
    ({"exact": {"ttl": -1}}, f"{P}.exact.ttl"),
    ({"exact": {"ttl": "1h"}}, f"{P}.exact.ttl"),
    ({"exact": {"ttl": True}}, f"{P}.exact.ttl"),
    ({"exact": {"store": "sometimes"}}, f"{P}.exact.store"),
    ({"exact": {"size": 1}}, f"{P}.exact.size"),
    ({"semantic": "on"}, f"{P}.semantic"),
    ({"semantic": {"threshold": 0}}, f"{P}.semantic.threshold"),
    ({"semantic": {"threshold": 1.5}}, f"{P}.semantic.threshold"),
    ({"semantic": {"threshold": "high"}}, f"{P}.semantic.threshold"),
    ({"semantic": {"max_entries": 0}}, f"{P}.semantic.max_entries"),
    ({"semantic": {"max_entries": 2.5}}, f"{P}.semantic.max_entries"),
    ({"semantic": {"verify": "yes"}}, f"{P}.semantic.verify"),
    ({"semantic": {"ttl": 10**9}}, f"{P}.semantic.ttl"),
    ({"semantic": {"store": "maybe"}}, f"{P}.semantic.store"),
])
def test_bad_values_name_their_key(raw: object, path: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_cache_config(raw, P)
    assert e.value.path == path


def test_policy_loader_reports_cache_errors_with_line() -> None:
    from gateway.config.loader import parse_policy

    text = """
backends:
  up: {type: openai, base_url: "http://127.0.0.1:9/v1"}
routes:
  - match: {model: m}
    backends: [up]
    cache:
      semantic: {threshold: 2}
"""
    with pytest.raises(PolicyError) as e:
        parse_policy(text, "p.yaml")
    assert "routes[0].cache.semantic.threshold" in str(e.value)
    assert e.value.line == 8
