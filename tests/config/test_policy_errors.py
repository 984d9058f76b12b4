"""Every class of policy error names the file, the line and the key path, and all errors come back at once."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gateway.config.errors import PolicyError
from gateway.config.loader import PolicyErrors, load_policy
from tests.config.policy_text import BACKENDS, ROUTES, error_at, errors, line_of, parse


def test_unknown_top_level_key_suggests_the_right_one() -> None:
    text = BACKENDS + ROUTES + "tenant:   # <-\n  - {name: a}\n"
    err = error_at(text, "tenant")
    assert "unknown key 'tenant'" in err.message and "did you mean 'tenants'" in err.message


def test_unknown_route_key_suggests_the_right_one() -> None:
    text = BACKENDS + ROUTES + "    retires: 2   # <-\n"
    err = error_at(text, "routes[0].retires")
    assert "did you mean 'retries'" in err.message


def test_unknown_backend_key_without_close_match_lists_allowed() -> None:
    text = "backends:\n  local:\n    type: engine\n    model: smollm2-135m\n    colour: blue   # <-\n" + ROUTES
    err = error_at(text, "backends.local.colour")
    assert "allowed:" in err.message and "replicas" in err.message


@pytest.mark.parametrize(
    ("line", "path", "expected"),
    [
        ("    retries: two   # <-\n", "routes[0].retries", "expected an integer, got a string 'two'"),
        ("    timeout_s: 60s   # <-\n", "routes[0].timeout_s", "expected a number, got a string '60s'"),
        ("    retries: true   # <-\n", "routes[0].retries", "expected an integer, got a boolean true"),
        ("    fallbacks: local   # <-\n", "routes[0].fallbacks", "expected a list of strings"),
        ("    routing: prefix_aware   # <-\n", "routes[0].routing", "expected a mapping, got a string"),
    ],
)
def test_wrong_types(line: str, path: str, expected: str) -> None:
    assert expected in error_at(BACKENDS + ROUTES + line, path).message


def test_match_model_must_be_a_string() -> None:
    text = BACKENDS + "routes:\n  - match: {model: 42}   # <-\n    backends: [local]\n"
    assert "expected a string, got an integer 42" in error_at(text, "routes[0].match.model").message


def test_route_naming_unknown_backend() -> None:
    text = BACKENDS + "routes:\n  - match: {model: m}\n    backends: [locl]   # <-\n"
    err = error_at(text, "routes[0].backends[0]")
    assert "unknown backend 'locl'" in err.message and "did you mean 'local'" in err.message


def test_weighted_entry_naming_unknown_backend() -> None:
    text = BACKENDS + "routes:\n  - match: {model: m}\n    backends:\n      - {name: zzz, weight: 2}   # <-\n"
    err = error_at(text, "routes[0].backends[0].name")
    assert "unknown backend 'zzz'" in err.message and "defined: local, openai" in err.message


def test_route_naming_unknown_fallback() -> None:
    text = BACKENDS + ROUTES + "    fallbacks:\n      - opena   # <-\n"
    assert "did you mean 'openai'" in error_at(text, "routes[0].fallbacks[0]").message


def test_backend_listed_twice_in_a_route() -> None:
    text = BACKENDS + "routes:\n  - match: {model: m}\n    backends:\n      - local\n      - local   # <-\n"
    assert "listed twice" in error_at(text, "routes[0].backends[1]").message


def test_duplicate_tenant_api_key_is_named_without_echoing_the_key() -> None:
    text = BACKENDS + ROUTES + textwrap.dedent("""\
        tenants:
          - {name: a, api_keys: [sk-secret-1]}
          - name: b
            api_keys:
              - sk-secret-1   # <-
        """)
    err = error_at(text, "tenants[1].api_keys[0]")
    assert "duplicate API key" in err.message and "tenant 'a'" in err.message
    assert "sk-secret-1" not in str(err)


def test_duplicate_tenant_name() -> None:
    text = BACKENDS + ROUTES + "tenants:\n  - {name: a, api_keys: [k1]}\n  - {name: a, api_keys: [k2]}   # <-\n"
    assert "duplicate tenant name 'a'" in error_at(text, "tenants[1].name").message


def test_tenant_limits_must_be_positive() -> None:
    text = BACKENDS + ROUTES + "tenants:\n  - name: a\n    limits:\n      rpm: 0   # <-\n"
    assert "must be >= 1, got 0" in error_at(text, "tenants[0].limits.rpm").message


@pytest.mark.parametrize("pattern", ["gpt-[4", "gpt-[!"])
def test_bad_glob(pattern: str) -> None:
    text = BACKENDS + f'routes:\n  - match: {{model: "{pattern}"}}   # <-\n    backends: [local]\n'
    assert "unclosed '['" in error_at(text, "routes[0].match.model").message


def test_glob_with_spaces_around() -> None:
    text = BACKENDS + 'routes:\n  - match: {model: " gpt-* "}   # <-\n    backends: [local]\n'
    assert "leading or trailing spaces" in error_at(text, "routes[0].match.model").message


@pytest.mark.parametrize("weight", ["0", "-1.5"])
def test_weight_must_be_positive(weight: str) -> None:
    text = BACKENDS + f"routes:\n  - match: {{model: m}}\n    backends:\n      - {{name: local, weight: {weight}}}   # <-\n"
    assert "must be > 0" in error_at(text, "routes[0].backends[0].weight").message


@pytest.mark.parametrize(
    ("line", "path", "expected"),
    [
        ("    retries: -1   # <-\n", "routes[0].retries", "must be >= 0, got -1"),
        ("    timeout_s: -5   # <-\n", "routes[0].timeout_s", "must be > 0"),
        ("    timeout_s: 0   # <-\n", "routes[0].timeout_s", "must be > 0"),
        ("    timeouts: {connect: -1}   # <-\n", "routes[0].timeouts.connect", "must be > 0"),
        ("    timeouts: {first_byte: 90, total: 30}   # <-\n", "routes[0].timeouts.first_byte", "exceeds the total"),
        ("    backoff: {base_s: -0.1}   # <-\n", "routes[0].backoff.base_s", "must be >= 0"),
        ("    backoff: {base_s: 2, max_s: 1}   # <-\n", "routes[0].backoff.max_s", "must be >= base_s"),
    ],
)
def test_negative_retries_timeouts_and_backoff(line: str, path: str, expected: str) -> None:
    assert expected in error_at(BACKENDS + ROUTES + line, path).message


def test_timeout_shorthand_conflicts_with_total() -> None:
    text = BACKENDS + ROUTES + "    timeout_s: 30   # <-\n    timeouts: {total: 40}\n"
    assert "set only one" in error_at(text, "routes[0].timeout_s").message


@pytest.mark.parametrize(
    ("backend", "path", "expected"),
    [
        ("  up: {type: openai, api_key: k}   # <-\n", "backends.up.base_url", "openai backends need base_url"),
        ("  claude: {type: anthropic}   # <-\n", "backends.claude.api_key", "anthropic backends need api_key"),
        ("  eng: {type: engine, replicas: 2}   # <-\n", "backends.eng.model", "need model (to serve) or urls"),
        ("  eng: {type: engine, base_url: 'http://x:1'}   # <-\n", "backends.eng.base_url", "take urls"),
        ("  up: {type: openai, base_url: 'http://x:1', replicas: 2}   # <-\n", "backends.up.replicas",
         "only engine backends take 'replicas'"),
        ("  eng: {type: engine, urls: ['http://x:1'], replicas: 2}   # <-\n", "backends.eng.replicas", "already run"),
        ("  up: {type: openai, base_url: 'ftp://x/v1'}   # <-\n", "backends.up.base_url", "http:// or https://"),
        ("  eng: {type: engine, urls: ['x:8001']}   # <-\n", "backends.eng.urls[0]", "http:// or https://"),
        ("  up: {type: opneai, base_url: 'http://x:1'}   # <-\n", "backends.up.type", "did you mean 'openai'"),
        ("  up: {base_url: 'http://x:1'}   # <-\n", "backends.up.type", "required key is missing"),
        ("  'bad name': {type: engine, model: m}   # <-\n", "backends.bad name", "must be letters, digits"),
        ("  eng: {type: engine, model: m, replicas: 0}   # <-\n", "backends.eng.replicas", "must be >= 1"),
        ("  up: {type: openai, base_url: 'http://x:1', headers: {X-A: [1]}}   # <-\n", "backends.up.headers.X-A",
         "header values must be strings"),
    ],
)
def test_backend_type_requirements(backend: str, path: str, expected: str) -> None:
    text = BACKENDS + backend + ROUTES
    assert expected in error_at(text, path).message


def test_anthropic_key_that_expands_empty_is_refused() -> None:
    text = BACKENDS + '  claude: {type: anthropic, api_key: "${ANTHROPIC_API_KEY:-}"}   # <-\n' + ROUTES
    assert "non-empty api_key" in error_at(text, "backends.claude.api_key").message


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "localhost:6379", "memcached://x"])
def test_bad_redis_url_scheme(url: str) -> None:
    text = BACKENDS + ROUTES + f'redis:\n  url: "{url}"   # <-\n'
    assert "redis://, rediss:// or unix://" in error_at(text, "redis.url").message


def test_redis_timeout_must_be_positive() -> None:
    text = BACKENDS + ROUTES + "redis:\n  timeout_ms: 0   # <-\n"
    assert "must be > 0" in error_at(text, "redis.timeout_ms").message


def test_unknown_strategy_and_prefix_aware_on_anthropic() -> None:
    text = BACKENDS + ROUTES + "    routing: {strategy: least-loaded}   # <-\n"
    assert "did you mean 'least_loaded'" in error_at(text, "routes[0].routing.strategy").message
    text = BACKENDS + "routes:\n  - match: {model: m}\n    backends: [openai]\n    routing: {strategy: prefix_aware}\n"
    assert parse(text).routes[0].strategy == "prefix_aware"  # openai-compatible pools route by an approximate view
    text = BACKENDS.replace("backends:\n", "backends:\n  claude: {type: anthropic, api_key: k}\n") + \
        "routes:\n  - match: {model: m}\n    backends: [claude]\n    routing: {strategy: prefix_aware}   # <-\n"
    assert "anthropic backend" in error_at(text, "routes[0].routing.strategy").message


def test_duplicate_yaml_key() -> None:
    text = BACKENDS + ROUTES + "    retries: 1\n    retries: 2   # <-\n"
    assert "duplicate key 'retries'" in error_at(text, "routes[0].retries").message


def test_yaml_syntax_error_has_its_line() -> None:
    text = BACKENDS + ROUTES + "    fallbacks: [local\n    retries: 1   # <-\n"
    errs = errors(text)
    assert len(errs) == 1 and errs[0].line == line_of(text) and "YAML syntax error" in errs[0].message


def test_empty_and_non_mapping_policies() -> None:
    assert "policy is empty" in errors("# nothing here\n")[0].message
    assert "expected a mapping, got a list" in errors("- a\n- b\n")[0].message


def test_required_sections() -> None:
    paths = {e.path: e.message for e in errors("redis: {url: embedded}\n")}
    assert paths == {"backends": "required key is missing", "routes": "required key is missing"}
    err = error_at(BACKENDS + "routes: []   # <-\n", "routes")
    assert "at least one route" in err.message
    text = BACKENDS + "routes:\n  - match: {model: m}\n    backends: []   # <-\n"
    assert "at least one backend" in error_at(text, "routes[0].backends").message


def test_missing_match_model_points_at_match() -> None:
    text = BACKENDS + "routes:\n  - match: {}   # <-\n    backends: [local]\n"
    assert error_at(text, "routes[0].match.model").message == "required key is missing"


def test_route_shadowed_by_earlier_glob_and_duplicates() -> None:
    text = BACKENDS + ROUTES + "  - match: {model: smollm2-135m}   # <-\n    backends: [local]\n"
    assert "never matched: routes[0] ('smollm2*')" in error_at(text, "routes[1].match.model").message
    text = BACKENDS + ROUTES + "  - match: {model: 'smollm2*'}   # <-\n    backends: [local]\n"
    assert "duplicate route" in error_at(text, "routes[1].match.model").message
    text = BACKENDS + "routes:\n  - match: {model: '*'}\n    backends: [local]\n  - match: {model: 'gpt-*'}   # <-\n    backends: [openai]\n"
    assert "never matched" in error_at(text, "routes[1].match.model").message


def test_all_errors_are_collected_and_sorted_by_line() -> None:
    text = """\
    backends:
      local: {type: engine}
    routes:
      - match: {model: m}
        backends: [nope]
        retries: -3
    tenants: 5
    """
    errs = errors(text)
    assert [e.path for e in errs] == ["backends.local.model", "routes[0].backends[0]", "routes[0].retries", "tenants"]
    assert [e.line for e in errs] == [2, 5, 6, 7]
    with pytest.raises(PolicyErrors) as info:
        parse(text)
    assert str(info.value).count("\n") == 3 and str(info.value).startswith("team.yaml:2: backends.local.model: ")


def test_valid_policy_builds_every_field() -> None:
    text = """\
    redis: {url: "redis://127.0.0.1:6390/2", timeout_ms: 20}
    server: {data_dir: /tmp/gw-data, max_body_bytes: 1000, admin_keys: [adm]}
    tenants:
      - {name: team-a, api_keys: [ka1, ka2], limits: {rpm: 600, tpm: 200000}}
    backends:
      local: {type: engine, model: smollm2-135m, replicas: 2, options: {max_num_seqs: 8}}
      pool: {type: engine, urls: ["http://e1:8001", "http://e2:8001"]}
      openai: {type: openai, base_url: "https://api.openai.com/v1", api_key: sk, model: gpt-4o-mini,
               headers: {OpenAI-Organization: org-1, X-Num: 7}, max_connections: 20}
      claude: {type: anthropic, api_key: ak, models: [claude-3-5-haiku], options: {anthropic_version: "2023-06-01"}}
    routes:
      - match: {model: "smollm2*"}
        backends: [local, {name: pool, weight: 3}]
        routing: {strategy: prefix_aware}
      - match: {model: "gpt-*"}
        backends: [{name: openai, weight: 1}]
        fallbacks: [local]
        retries: 2
        backoff: {base_s: 0.2, max_s: 1}
        timeout_s: 30
      - match: {model: "claude-*"}
        backends: [claude]
        timeouts: {connect: 2, first_byte: 10, total: 120}
    """
    p = parse(text)
    assert p.redis.url == "redis://127.0.0.1:6390/2" and p.redis.timeout_ms == 20
    assert str(p.server.data_dir) == "/tmp/gw-data" and p.server.max_body_bytes == 1000
    assert p.server.admin_keys == ["adm"]
    assert p.tenants[0].name == "team-a" and p.tenants[0].api_keys == ["ka1", "ka2"]
    assert (p.tenants[0].limits.rpm, p.tenants[0].limits.tpm) == (600, 200000)
    assert p.backends["local"].replicas == 2 and p.backends["local"].options == {"max_num_seqs": 8}
    assert p.backends["pool"].urls == ["http://e1:8001", "http://e2:8001"]
    assert p.backends["openai"].headers == {"OpenAI-Organization": "org-1", "X-Num": "7"}
    assert p.backends["openai"].max_connections == 20 and p.backends["openai"].model == "gpt-4o-mini"
    assert p.backends["claude"].options == {"anthropic_version": "2023-06-01"}
    r0, r1, r2 = p.routes
    assert [(b.name, b.weight) for b in r0.backends] == [("local", 1.0), ("pool", 3.0)]
    assert r0.strategy == "prefix_aware" and r1.strategy == "weighted" and r2.index == 2
    assert (r1.retries, r1.fallbacks, r1.backoff.base_s, r1.backoff.max_s) == (2, ["local"], 0.2, 1.0)
    assert (r1.timeouts.connect, r1.timeouts.first_byte, r1.timeouts.total) == (5.0, 30.0, 30.0)
    assert (r2.timeouts.connect, r2.timeouts.first_byte, r2.timeouts.total) == (2.0, 10.0, 120.0)
    assert p.route_for("gpt-4o") is r1 and p.route_for("smollm2-135m") is r0 and p.route_for("llama") is None
    assert p.source == "team.yaml" and len(p.digest) == 64


def test_yaml_anchors_and_merge_keys_work() -> None:
    text = "x-common: &common {retries: 2, timeout_s: 20}\n"
    # unknown top-level keys are refused, so anchors live inside the routes themselves
    assert "unknown key 'x-common'" in errors(text + BACKENDS + ROUTES)[0].message
    text = BACKENDS + textwrap.dedent("""\
        routes:
          - &base
            match: {model: a}
            backends: [local]
            retries: 3
          - <<: *base
            match: {model: b}
        """)
    p = parse(text)
    assert [r.model for r in p.routes] == ["a", "b"] and p.routes[1].retries == 3


def test_recursive_alias_is_an_error_not_a_hang() -> None:
    text = BACKENDS + ROUTES + "tenants: &t [*t]\n"
    assert any("recursive alias" in e.message for e in errors(text))


def test_unquoted_reference_in_flow_mapping_gets_a_hint() -> None:
    text = BACKENDS + ROUTES + "    timeouts: {total: ${T}}   # <-\n"
    err = errors(text, {"T": "5"})[0]
    assert err.line == line_of(text) and "must be quoted, or written in block style" in err.message


def test_load_policy_resolves_relative_data_dir_next_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "p.yaml"
    path.parent.mkdir()
    path.write_text(BACKENDS + ROUTES + "server: {data_dir: state}\n")
    p = load_policy(path)
    assert p.server.data_dir == tmp_path / "conf" / "state" and p.source == str(path)


def test_load_policy_unreadable_or_binary_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyErrors) as info:
        load_policy(tmp_path / "missing.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'missing.yaml'}: cannot read policy")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(binary)
