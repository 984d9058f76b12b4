"""Context-economy metrics, registered once per app registry next to DESIGN.md's `gateway_tokens_total`
(which gets the kinds `saved_by_compression` and `cached_upstream` from this stage)."""

from __future__ import annotations

import weakref

from prometheus_client import Counter, Histogram

from gateway.metrics import LOOKUP_BUCKETS, Metrics


class ContextMetrics:
    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.tokens = metrics.tokens
        self.summaries = Counter(
            "gateway_context_summaries",
            "Conversation summaries by result: hit (cached), extended (cached prefix + new turns), miss, "
            "error, timeout, no_room",
            ["result"],
            registry=r,
        )
        self.dropped_messages = Counter(
            "gateway_context_dropped_messages",
            "History messages left out of the prompt, by reason: summarizer_failed, no_summarizer, over_budget",
            ["reason"],
            registry=r,
        )
        self.documents = Counter(
            "gateway_context_documents",
            "Retrieved documents by outcome: kept, truncated, duplicate, dropped",
            ["action"],
            registry=r,
        )
        self.breakpoints = Counter(
            "gateway_context_cache_breakpoints", "Anthropic cache_control breakpoints added", registry=r
        )
        self.assembly_seconds = Histogram(
            "gateway_context_assembly_seconds",
            "Time to count and assemble a prompt (summariser calls excluded)",
            buckets=LOOKUP_BUCKETS,
            registry=r,
        )
        self.saved_dollars = Counter(
            "gateway_context_saved_dollars",
            "Prompt cost saved by compression, at the route's or the model table's input price (USD)",
            registry=r,
        )
        self.rejected = Counter(
            "gateway_context_rejected", "Requests refused with context_length_exceeded", registry=r
        )


_by_metrics: weakref.WeakKeyDictionary[Metrics, ContextMetrics] = weakref.WeakKeyDictionary()


def context_metrics(metrics: Metrics) -> ContextMetrics:
    """One ContextMetrics per Metrics (a registry refuses the same name twice)."""
    found = _by_metrics.get(metrics)
    if found is None:
        found = _by_metrics[metrics] = ContextMetrics(metrics)
    return found
