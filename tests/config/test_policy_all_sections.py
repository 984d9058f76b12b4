"""One checker for every section: errors in the cache, budget/compression/ordering and engine `options:` sections are
all named by `llm-gateway policy check` in one run (each with its line and a did-you-mean where one fits), and the
section parsers called on their own raise every error of their section at once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.backends.engine_options import parse_engine_options
from gateway.cache.config import parse_cache_config
from gateway.config.errors import PolicyErrors
from gateway.config.schema import BackendConfig
from gateway.context.config import parse_context_config

BAD = """\
backends:
  local:
    type: engine
    model: smollm2-135m
    options: {max_num_seqs: 0, devce: cpu, kv_cache_memory: lots}
routes:
  - match: {model: "smollm2*"}
    backends: [local]
    cache:
      exact: {ttl: 0, stor: always}
      semantic: {threshold: 2, judge: {model: gpt-4o-mini}}
    budget: {strategy: greedy, context_windw: 4096}
    compression: {conversation: {keep_recent: -1}, documents: {dedup: "yes"}}
    ordering: {sort_tool: false}
"""

EXPECTED = {  # key path -> (line, words the message must carry)
    "backends.local.options.max_num_seqs": (5, ">= 1"),
    "backends.local.options.devce": (5, "did you mean 'device'"),
    "backends.local.options.kv_cache_memory": (5, "not a size"),
    "routes[0].cache.exact.ttl": (10, "in (0, 31536000]"),
    "routes[0].cache.exact.stor": (10, "did you mean 'store'"),
    "routes[0].cache.semantic.threshold": (11, "in (0, 1]"),
    "routes[0].cache.semantic.judge.backend": (11, "required"),
    "routes[0].budget.strategy": (12, "must be one of balanced, context_heavy, output_heavy"),
    "routes[0].budget.context_windw": (12, "did you mean 'context_window'"),
    "routes[0].compression.conversation.keep_recent": (13, ">= 0"),
    "routes[0].compression.documents.dedup": (13, "true or false"),
    "routes[0].ordering.sort_tool": (14, "did you mean 'sort_tools'"),
}


def test_policy_check_names_every_section_error_in_one_run(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "check", str(path)],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )
    assert out.returncode == 1
    text = out.stdout + out.stderr
    for key, (line, words) in EXPECTED.items():
        matching = [row for row in text.splitlines() if f": {key}: " in row]
        assert matching, f"{key} not named in:\n{text}"
        assert f"bad.yaml:{line}:" in matching[0], matching[0]
        assert words in matching[0], matching[0]


@pytest.mark.parametrize(("parse", "paths"), [
    (lambda: parse_cache_config({"exact": {"ttl": -1, "store": "sometimes"}, "semantic": {"verify": "no"},
                                 "versoin": 2}, "r.cache"),
     ["r.cache.versoin", "r.cache.exact.ttl", "r.cache.exact.store", "r.cache.semantic.verify"]),
    (lambda: parse_context_config({"budget": {"context_window": 8, "max_output_tokens": 0},
                                   "compression": {"images": {}}, "ordering": {"enabled": 1}}, "r"),
     ["r.budget.context_window", "r.budget.max_output_tokens", "r.compression.images", "r.ordering.enabled"]),
    (lambda: parse_engine_options(BackendConfig(name="pool", type="engine", model="m",
                                                options={"device": "tpu", "block_size": 0, "load_weight": -1})),
     ["backends.pool.options.device", "backends.pool.options.block_size", "backends.pool.options.load_weight"]),
])
def test_section_parsers_alone_raise_all_their_errors(parse: Callable[[], object], paths: list[str]) -> None:
    with pytest.raises(PolicyErrors) as info:
        parse()
    assert sorted(e.path for e in info.value.errors) == sorted(paths)
    assert (info.value.path, info.value.message) == (info.value.errors[0].path, info.value.errors[0].message)
