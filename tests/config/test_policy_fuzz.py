"""Whatever YAML arrives, the loader answers with a Policy or with located PolicyErrors, never a crash."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config.loader import PolicyErrors, parse_policy

KEYS = ["type", "model", "url", "urls", "base_url", "api_key", "replicas", "weight", "name", "match", "backends",
        "routes", "retries", "timeout_s", "timeouts", "total", "cache", "exact", "semantic", "threshold", "budget",
        "strategy", "routing", "limits", "rpm", "tenants", "api_keys", "options", "headers", "fallbacks", "x"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "local", "openai", "engine", "anthropic", "http://h:1/v1", "*", "gpt-[", "${X:-1}", "$$"]),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12,
)
backend = st.fixed_dictionaries(
    {"type": st.sampled_from(["engine", "openai", "anthropic", "nope"])},
    optional={k: values for k in ("model", "base_url", "api_key", "replicas", "urls", "options", "headers")},
)
route = st.fixed_dictionaries(
    {"match": st.one_of(values, st.fixed_dictionaries({"model": st.sampled_from(["m", "gpt-*", "[", 3])})),
     "backends": st.one_of(values, st.lists(st.sampled_from(["local", "up", "zz"]), max_size=2))},
    optional={k: values for k in ("retries", "timeout_s", "timeouts", "routing", "cache", "budget", "compression",
                                   "ordering", "fallbacks", "backoff")},
)
policy = st.fixed_dictionaries(
    {"backends": st.one_of(values, st.dictionaries(st.sampled_from(["local", "up"]), backend, max_size=2)),
     "routes": st.one_of(values, st.lists(route, max_size=3))},
    optional={"tenants": values, "redis": values, "server": values, "extra": values},
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy)
def test_any_policy_yields_a_policy_or_located_errors(data: dict) -> None:
    text = yaml.safe_dump(data, sort_keys=False)
    try:
        parse_policy(text, "fuzz.yaml", env={"X": "2"})
    except PolicyErrors as e:
        assert e.errors
        for err in e.errors:
            assert err.filename == "fuzz.yaml" and err.line is not None and 1 <= err.line <= text.count("\n") + 1
            assert err.message
