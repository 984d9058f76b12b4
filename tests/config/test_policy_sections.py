"""Route sections parsed by other subsystems (cache, context, engine options) get the file:line mapping too."""

from __future__ import annotations

from tests.config.policy_text import BACKENDS, ROUTES, error_at, parse


def test_cache_section_is_parsed_by_the_cache_subsystem() -> None:
    text = BACKENDS + ROUTES + "    cache:\n      exact: {ttl: 60}\n      semantic: {threshold: 0.9}\n"
    cache = parse(text).routes[0].cache
    assert cache is not None and cache.exact.ttl == 60 and cache.semantic.threshold == 0.9


def test_cache_error_is_mapped_to_its_line() -> None:
    text = BACKENDS + ROUTES + "    cache:\n      exact: {ttl: 60}\n      semantic: {threshold: 7}   # <-\n"
    err = error_at(text, "routes[0].cache.semantic.threshold")
    assert "(0, 1]" in err.message


def test_context_sections_are_parsed_by_the_context_subsystem() -> None:
    text = BACKENDS + ROUTES + "    budget: {context_window: 8192, max_output_tokens: 512}\n    ordering: false\n"
    ctx = parse(text).routes[0].context
    assert ctx is not None and ctx.budget.context_window == 8192 and ctx.ordering.enabled is False
    assert parse(BACKENDS + ROUTES).routes[0].context is None


def test_context_error_is_mapped_to_its_line() -> None:
    text = BACKENDS + ROUTES + "    budget:\n      strategy: greedy   # <-\n"
    assert "balanced" in error_at(text, "routes[0].budget.strategy").message


def test_summarizer_must_name_a_backend() -> None:
    text = BACKENDS + ROUTES + "    compression:\n      conversation: {keep_recent: 4, summarizer: lokal}   # <-\n"
    err = error_at(text, "routes[0].compression.conversation.summarizer")
    assert "unknown backend 'lokal'" in err.message and "did you mean 'local'" in err.message
    ok = parse(text.replace("lokal", "local")).routes[0].context
    assert ok is not None and ok.conversation.summarizer == "local"


def test_engine_options_are_validated_at_load() -> None:
    text = "backends:\n  local:\n    type: engine\n    model: smollm2-135m\n    options:\n      max_num_seqs: 0   # <-\n"
    assert ">= 1" in error_at(text + ROUTES, "backends.local.options.max_num_seqs").message
    text = text.replace("max_num_seqs: 0", "kv_cache_memory: 64MiB")
    assert parse(text + ROUTES).backends["local"].options == {"kv_cache_memory": "64MiB"}
