"""`${VAR}` / `${VAR:-default}` / `$$` expansion, typed results, empty keys dropped, and the digest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.yamltree import ExpandError, expand_vars
from tests.config.policy_text import BACKENDS, ROUTES, error_at, parse


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A}", {"A": "x"}, "x"),
        ("pre-${A}-post", {"A": "x"}, "pre-x-post"),
        ("${A:-dflt}", {}, "dflt"),
        ("${A:-dflt}", {"A": ""}, "dflt"),  # empty counts as unset, as in the shell's :-
        ("${A:-dflt}", {"A": "set"}, "set"),
        ("${A:-}", {}, ""),
        ("${A:-http://h:1/v1}", {}, "http://h:1/v1"),
        ("$${A}", {"A": "x"}, "${A}"),
        ("cost $$5", {}, "cost $5"),
        ("pa$word", {}, "pa$word"),
        ("${A}${B}", {"A": "1", "B": "2"}, "12"),
    ],
)
def test_expand_vars(text: str, env: dict[str, str], expected: str) -> None:
    assert expand_vars(text, env) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${MISSING}", "environment variable MISSING is not set"),
        ("${1BAD}", "invalid variable reference '${1BAD}'"),
        ("${}", "invalid variable reference"),
        ("${A:-${B}}", "nested references are not supported"),
        ("${OPEN", "unclosed '${'"),
    ],
)
def test_expand_vars_errors(text: str, expected: str) -> None:
    with pytest.raises(ExpandError, match=expected.replace("$", r"\$").replace("{", r"\{").replace("}", r"\}")):
        expand_vars(text, {})


@given(st.text())
def test_doubled_dollars_round_trip(text: str) -> None:
    assert expand_vars(text.replace("$", "$$"), {}) == text


def test_lenient_expansion_keeps_unresolvable_references() -> None:
    assert expand_vars("a ${MISSING} ${B} ${1X", {"B": "b"}, strict=False) == "a ${MISSING} b ${1X"


def test_missing_variable_names_variable_file_line_and_key() -> None:
    text = BACKENDS.replace("{type: openai,", '{type: openai, api_key: "${OPENAI_API_KEY}",') + ROUTES
    text = text.replace('base_url: "http://127.0.0.1:9/v1"}', 'base_url: "http://127.0.0.1:9/v1"}   # <-')
    err = error_at(text, "backends.openai.api_key")
    assert "environment variable OPENAI_API_KEY is not set" in err.message
    assert "${OPENAI_API_KEY:-default}" in err.message


def test_missing_variable_reports_once_not_also_as_a_type_error() -> None:
    text = BACKENDS + ROUTES + "    retries: ${RETRIES}   # <-\n"
    err = error_at(text, "routes[0].retries")
    assert "RETRIES is not set" in err.message


def test_plain_scalars_are_retyped_after_expansion_quoted_ones_stay_strings() -> None:
    text = BACKENDS + ROUTES + "    retries: ${RETRIES:-2}\n    timeout_s: ${T}\n"
    route = parse(text, {"T": "12.5"}).routes[0]
    assert route.retries == 2 and route.timeouts.total == 12.5
    text = BACKENDS + ROUTES + '    retries: "${RETRIES:-2}"   # <-\n'
    assert "expected an integer, got a string '2'" in error_at(text, "routes[0].retries").message


def test_values_with_yaml_special_characters_survive_expansion() -> None:
    key = "sk-a#b: c 'd\" {e} [f]"
    text = BACKENDS.replace("{type: openai,", '{type: openai, api_key: "${KEY}",') + ROUTES
    assert parse(text, {"KEY": key}).backends["openai"].api_key == key


def test_empty_tenant_keys_are_dropped_not_accepted() -> None:
    text = BACKENDS + ROUTES + 'tenants:\n  - {name: a, api_keys: ["${TEAM_A_KEY:-}", "${TEAM_A_KEY2:-}", fixed]}\n'
    p = parse(text)
    assert p.tenants[0].api_keys == ["fixed"]
    assert parse(text, {"TEAM_A_KEY": "k1"}).tenants[0].api_keys == ["k1", "fixed"]


def test_literal_empty_tenant_key_is_dropped_too() -> None:
    text = BACKENDS + ROUTES + 'tenants:\n  - {name: a, api_keys: [""]}\nserver: {admin_keys: ["${ADMIN:-}"]}\n'
    p = parse(text)
    assert p.tenants[0].api_keys == [] and p.server.admin_keys == []


def test_references_in_comments_are_ignored() -> None:
    text = "# set ${SOMETHING_UNSET} before starting\n" + BACKENDS + ROUTES
    assert parse(text).routes[0].model == "smollm2*"


def test_default_redis_url_follows_redis_url_env() -> None:
    text = BACKENDS + ROUTES + 'redis: {url: "${REDIS_URL:-embedded}"}\n'
    assert parse(text).redis.url == "embedded"
    assert parse(text, {"REDIS_URL": "redis://10.0.0.5:6379/0"}).redis.url == "redis://10.0.0.5:6379/0"


def test_digest_covers_expanded_text() -> None:
    text = BACKENDS + ROUTES + "    retries: ${R:-1}\n"
    a = parse(text, {"R": "1"}).digest
    assert parse(text, {"R": "1"}).digest == a
    assert parse(text, {}).digest == a  # the default gives the same expanded text
    assert parse(text, {"R": "2"}).digest != a
    assert parse(text + "# a comment\n", {"R": "1"}).digest != a
