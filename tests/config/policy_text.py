"""Helpers for policy tests: parse YAML text and pick out errors by key path."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import pytest

from gateway.config.errors import PolicyError
from gateway.config.loader import PolicyErrors, parse_policy
from gateway.config.schema import Policy

FILENAME = "team.yaml"

BACKENDS = """\
backends:
  local: {type: engine, model: smollm2-135m}
  openai: {type: openai, base_url: "http://127.0.0.1:9/v1"}
"""
ROUTES = """\
routes:
  - match: {model: "smollm2*"}
    backends: [local]
"""


def parse(text: str, env: Mapping[str, str] | None = None) -> Policy:
    return parse_policy(textwrap.dedent(text), FILENAME, env=env or {})


def errors(text: str, env: Mapping[str, str] | None = None) -> list[PolicyError]:
    with pytest.raises(PolicyErrors) as info:
        parse(text, env)
    return info.value.errors


def line_of(text: str, marker: str = "# <-") -> int:
    """1-based line of the only line containing `marker`."""
    hits = [i + 1 for i, line in enumerate(textwrap.dedent(text).splitlines()) if marker in line]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def error_at(text: str, path: str, env: Mapping[str, str] | None = None, marker: str = "# <-") -> PolicyError:
    """The error for `path`; asserts it names the file and the marked line."""
    errs = errors(text, env)
    found = [e for e in errs if e.path == path]
    assert found, f"no error for {path}; got: {[str(e) for e in errs]}"
    err = found[0]
    assert err.filename == FILENAME
    assert err.line == line_of(text, marker), str(err)
    assert str(err).startswith(f"{FILENAME}:{err.line}: {path}: ")
    return err
