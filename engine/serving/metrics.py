"""The engine's Prometheus metrics (the `engine_*` names in DESIGN.md).

Gauges and counters are read from the engine's latest `EngineStats` at scrape time (the step loop already
keeps cumulative totals, so no second copy can drift); TTFT and TPOT are histograms observed per request.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from types import MethodType
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from engine.llm_engine import EngineStats

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

StatsSource = Callable[[], "EngineStats | None"]


class _StatsCollector(Collector):
    def __init__(self, source: StatsSource) -> None:
        # A bound method (an engine's `stats`) is held weakly: the registry may outlive the engine (a gateway's
        # registry across a policy reload that drops the engine), and must not keep its weights alive.
        self._source: Callable[[], StatsSource | None] = (
            weakref.WeakMethod(source) if isinstance(source, MethodType) else lambda: source
        )

    def collect(self) -> Iterator[Metric]:
        source = self._source()
        stats: Any = source() if source is not None else None
        if stats is None:  # no stats yet, or the engine is gone
            return
        gauges = (
            ("engine_requests_running", "Requests in the running batch", stats.running),
            ("engine_requests_waiting", "Requests waiting to be scheduled", stats.waiting),
            ("engine_kv_cache_usage_ratio", "Fraction of KV blocks in use", stats.kv_cache_usage_ratio),
            ("engine_kv_cache_free_blocks", "KV blocks free (cached-but-unreferenced count as free)",
             stats.num_free_blocks),
            ("engine_kv_cache_total_blocks", "KV blocks in the cache", stats.num_total_blocks),
            ("engine_spec_decode_acceptance_ratio", "Speculative draft tokens accepted / verified",
             stats.spec_acceptance_rate),
        )
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=float(value))
        counters = (
            ("engine_prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
             stats.prefix_cache_queries),
            ("engine_prefix_cache_hits", "Prompt tokens found in the prefix cache", stats.prefix_cache_hits),
            ("engine_preemptions", "Requests preempted (recomputed later)", stats.preemptions),
            ("engine_prompt_tokens", "Prompt tokens processed", stats.prompt_tokens),
            ("engine_generation_tokens", "Tokens generated", stats.generation_tokens),
            ("engine_spec_decode_draft_tokens", "Speculative draft tokens verified", stats.spec_draft_tokens),
            ("engine_spec_decode_accepted_tokens", "Speculative draft tokens accepted", stats.spec_accepted_tokens),
        )
        for name, doc, value in counters:
            yield CounterMetricFamily(name, doc, value=float(value))


class EngineMetrics:
    """Every engine metric, on `registry` (a fresh one unless given, e.g. the gateway's).

    Use `EngineMetrics.on(registry)` for a shared registry: a registry takes each metric name once, so an
    engine that replaces another (a policy reload) reuses the same metrics and rebinds the stats source.
    """

    @classmethod
    def on(cls, registry: CollectorRegistry) -> EngineMetrics:
        # Kept on the registry itself: a map keyed by registries (even a weak one) would hold each registry,
        # through its value, and with it the last engine bound to it, for the life of the process.
        metrics = getattr(registry, "_engine_metrics", None)
        if metrics is None:
            metrics = cls(registry)
            registry._engine_metrics = metrics  # type: ignore[attr-defined]
        return metrics

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.ttft = Histogram(
            "engine_ttft_seconds", "Time from arrival to first token", buckets=TTFT_BUCKETS, registry=self.registry
        )
        self.tpot = Histogram(
            "engine_tpot_seconds", "Time per output token after the first", buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self._collector: _StatsCollector | None = None

    def bind_stats(self, source: StatsSource) -> None:
        """Expose the engine's stats (called once, by the AsyncEngine that owns them); a bound method is held
        weakly, so the metrics never keep its object alive."""
        if self._collector is not None:
            self.registry.unregister(self._collector)
        self._collector = _StatsCollector(source)
        self.registry.register(self._collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
