"""The route's budget / compression / ordering sections: defaults, overrides, and errors that name the key."""

from __future__ import annotations

import pytest

from gateway.config.errors import PolicyError
from gateway.context.config import parse_context_config


def test_absent_sections_mean_no_context_work() -> None:
    assert parse_context_config({"model": "gpt-4o", "backends": ["openai"]}, "routes[0]") is None
    assert parse_context_config({"budget": None, "ordering": False}, "routes[0]") is None


def test_full_section_is_read() -> None:
    cfg = parse_context_config(
        {
            "budget": {"context_window": 8192, "max_output_tokens": 512, "strategy": "context_heavy",
                       "input_price_per_mtok": 2.5},
            "compression": {
                "conversation": {"keep_recent": 4, "summarizer": "local", "timeout_s": 3, "max_summary_tokens": 100},
                "documents": {"max_tokens": 3000, "dedup": False, "near_duplicate": 0.9},
                "system": {"max_share": 0.3},
            },
            "ordering": {"enabled": True, "sort_tools": False},
        },
        "routes[0]",
    )
    assert cfg is not None
    assert (cfg.budget.context_window, cfg.budget.max_output_tokens, cfg.budget.strategy) == (8192, 512, "context_heavy")
    assert cfg.budget.split.documents == 0.65 and cfg.budget.input_price_per_mtok == 2.5
    assert (cfg.conversation.keep_recent, cfg.conversation.summarizer, cfg.conversation.timeout_s) == (4, "local", 3.0)
    assert (cfg.documents.max_tokens, cfg.documents.dedup, cfg.documents.near_duplicate) == (3000, False, 0.9)
    assert cfg.system.max_share == 0.3
    assert cfg.ordering.enabled and not cfg.ordering.sort_tools and cfg.ordering.cache_breakpoints


def test_one_section_turns_on_defaults_for_the_others() -> None:
    cfg = parse_context_config({"ordering": True}, "routes[2]")
    assert cfg is not None and cfg.budget.strategy == "balanced" and cfg.conversation.summarizer is None
    off = parse_context_config({"budget": {"strategy": "output_heavy"}, "ordering": False}, "routes[2]")
    assert off is not None and not off.ordering.enabled and off.budget.split.output == 0.5


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"budget": {"strategy": "greedy"}}, "routes[1].budget.strategy"),
        ({"budget": {"context_window": "big"}}, "routes[1].budget.context_window"),
        ({"budget": {"context_window": 1000, "max_output_tokens": 1000}}, "routes[1].budget.max_output_tokens"),
        ({"budget": {"windw": 10}}, "routes[1].budget.windw"),
        ({"budget": [1, 2]}, "routes[1].budget"),
        ({"compression": {"conversation": {"keep_recent": -1}}}, "routes[1].compression.conversation.keep_recent"),
        ({"compression": {"conversation": {"summarizer": ""}}}, "routes[1].compression.conversation.summarizer"),
        ({"compression": {"documents": {"dedup": "yes"}}}, "routes[1].compression.documents.dedup"),
        ({"compression": {"documents": {"near_duplicate": 0.1}}}, "routes[1].compression.documents.near_duplicate"),
        ({"compression": {"system": {"max_share": 2}}}, "routes[1].compression.system.max_share"),
        ({"compression": {"images": {}}}, "routes[1].compression.images"),
        ({"ordering": {"enabled": 1}}, "routes[1].ordering.enabled"),
    ],
)
def test_bad_values_name_their_key(raw: dict, path: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_context_config(raw, "routes[1]")
    assert err.value.path == path
    assert err.value.message


def test_policy_loader_reports_file_line_and_key() -> None:
    from gateway.config.loader import PolicyErrors, parse_policy

    text = """
backends:
  up: {type: openai, base_url: "http://127.0.0.1:9/v1"}
routes:
  - match: {model: "gpt-*"}
    backends: [up]
    budget: {strategy: greedy}
    compression: {conversation: {summarizer: nowhere}}
"""
    with pytest.raises(PolicyErrors) as err:
        parse_policy(text, "p.yaml")
    rendered = str(err.value)
    assert "p.yaml:7" in rendered and "routes[0].budget.strategy" in rendered and "greedy" in rendered
    ok = parse_policy(text.replace("greedy", "output_heavy").replace("nowhere", "up"), "p.yaml")
    assert ok.routes[0].context.budget.strategy == "output_heavy"
    assert ok.routes[0].context.conversation.summarizer == "up"
