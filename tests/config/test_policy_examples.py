"""The embedded default policy and the worked examples in policies/ all load, and say what they promise."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.loader import DEFAULT_POLICY, PolicyErrors, load_policy

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
KEYS = {"OPENAI_API_KEY": "sk-test", "DEEPSEEK_API_KEY": "sk-ds", "ANTHROPIC_API_KEY": "sk-ant"}


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    for name in ("REDIS_URL", "TEAM_A_KEY", "BATCH_KEY", "ENGINE_1_URL", "ENGINE_2_URL", "ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_default_policy_is_the_embedded_engine_open_with_caches(keys: None) -> None:
    p = load_policy(DEFAULT_POLICY)
    assert list(p.backends) == ["local"]
    local = p.backends["local"]
    assert (local.type, local.model, local.replicas, local.urls) == ("engine", "smollm2-135m", 1, [])
    route = p.route_for("smollm2-135m")
    assert route is not None and route.backends[0].name == "local"
    assert route.cache is not None and route.cache.exact is not None and route.cache.semantic is not None
    assert p.tenants == [] and p.redis.url == "embedded"


def test_default_policy_follows_redis_url(keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://10.1.2.3:6379/0")
    assert load_policy(DEFAULT_POLICY).redis.url == "redis://10.1.2.3:6379/0"


def test_policies_default_is_a_link_to_the_embedded_default() -> None:
    link = POLICIES / "default.yaml"
    assert link.is_symlink() and link.resolve() == DEFAULT_POLICY.resolve()


def test_cli_serves_the_same_embedded_default() -> None:
    from gateway.cli import default_policy_path

    assert default_policy_path().resolve() == DEFAULT_POLICY.resolve()


@pytest.mark.parametrize("name", ["default.yaml", "openai.yaml", "anthropic.yaml", "engine-pool.yaml", "full.yaml"])
def test_every_example_loads(name: str, keys: None) -> None:
    p = load_policy(POLICIES / name)
    assert p.routes and p.backends and p.source.endswith(name)


def test_openai_example(keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    p = load_policy(POLICIES / "openai.yaml")
    assert p.route_for("gpt-4o").fallbacks == ["deepseek-for-gpt"]
    assert p.backends["deepseek-for-gpt"].model == "deepseek-chat"
    llama = p.route_for("meta-llama/Llama-3.1-8B-Instruct")
    assert [(b.name, b.weight) for b in llama.backends] == [("vllm-a", 3.0), ("vllm-b", 1.0)]
    assert all(t.api_keys == [] for t in p.tenants)  # unset keys are dropped
    monkeypatch.setenv("TEAM_A_KEY", "team-a-secret")
    assert load_policy(POLICIES / "openai.yaml").tenants[0].api_keys == ["team-a-secret"]


def test_openai_example_names_the_missing_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(PolicyErrors) as info:
        load_policy(POLICIES / "openai.yaml")
    text = str(info.value)
    assert "OPENAI_API_KEY is not set" in text and "DEEPSEEK_API_KEY is not set" in text


def test_engine_pool_example(keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    p = load_policy(POLICIES / "engine-pool.yaml")
    route = p.route_for("smollm2-135m")
    assert route.strategy == "prefix_aware" and route.context is not None and route.cache.semantic is not None
    assert p.backends["pool"].urls == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    monkeypatch.setenv("ENGINE_1_URL", "http://engine-1:8001")
    assert load_policy(POLICIES / "engine-pool.yaml").backends["pool"].urls[0] == "http://engine-1:8001"


def test_anthropic_example(keys: None) -> None:
    p = load_policy(POLICIES / "anthropic.yaml")
    assert p.backends["claude"].type == "anthropic" and p.backends["claude"].api_key == "sk-ant"
    assert p.route_for("claude-sonnet-4-0").context.ordering.cache_breakpoints is True


def test_full_example_sets_every_top_level_and_route_key(keys: None) -> None:
    from gateway.config.loader import BACKEND_KEYS, TOP_KEYS
    from gateway.config.route_parser import ROUTE_KEYS
    from gateway.config.yamltree import read_tree

    data = read_tree((POLICIES / "full.yaml").read_text(), {**KEYS}).data
    assert set(data) == set(TOP_KEYS)
    used = {key for route in data["routes"] for key in route}
    assert used == set(ROUTE_KEYS)
    assert {key for backend in data["backends"].values() for key in backend} == set(BACKEND_KEYS)
    p = load_policy(POLICIES / "full.yaml")
    assert p.server.max_body_bytes == 10485760 and p.tenants[0].limits.tpm == 200000
