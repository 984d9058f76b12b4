"""Prometheus metrics of the gateway (names from DESIGN.md), one registry per app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from gateway.config.schema import Policy

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
LOOKUP_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)

# Known label values, created at 0 before their first event: a counter that appears only at its first event
# hides that event from rate() and increase(), and dashboards show "no data" instead of 0.
UPSTREAM_ERROR_REASONS = (
    "connect", "timeout", "status_429", "status_4xx", "status_5xx", "protocol", "shed", "tenant_share",
)
REDIS_COMPONENTS = ("limits", "cache", "cache_store", "cache_semantic", "context")
RELOAD_RESULTS = ("ok", "error")
# Upstream answers that are the client's own mistake (a bad parameter, a prompt too long): the request's 4xx,
# not a fault of the upstream, so they stay out of gateway_upstream_errors_total.
CLIENT_ERROR_STATUSES = frozenset({400, 404, 413, 422})


class Inflight:
    """An in-flight count read by its gauge at scrape time: inc/dec are plain int steps on the request path
    instead of a locked gauge update each (the event loop is the only writer)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def inc(self) -> None:
        self.n += 1

    def dec(self) -> None:
        self.n -= 1


class Metrics:
    """Every gateway metric. Subsystems that need more register them on `self.registry`."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gateway_requests", "Requests answered", ["route", "backend", "status"], registry=r
        )
        self.request_duration = Histogram(
            "gateway_request_duration_seconds", "Request latency", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.ttft = Histogram(
            "gateway_ttft_seconds", "Time to first streamed token", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.tpot = Histogram(
            "gateway_tpot_seconds", "Time per output token of streams", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.cache_lookups = Counter(
            "gateway_cache_lookups", "Cache lookups", ["layer", "result"], registry=r
        )
        self.cache_lookup_seconds = Histogram(
            "gateway_cache_lookup_seconds", "Cache lookup time", ["layer"], buckets=LOOKUP_BUCKETS, registry=r
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens by kind: prompt, completion, cached_upstream, saved_by_cache, saved_by_compression",
            ["kind"],
            registry=r,
        )
        self.backend_inflight = Gauge(
            "gateway_backend_inflight", "Requests in flight per backend", ["backend"], registry=r
        )
        self.backend_queued = Gauge(
            "gateway_backend_queued", "Requests waiting for a slot per backend (max_inflight reached)", ["backend"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors", "Upstream errors", ["backend", "reason"], registry=r
        )
        self.policy_reloads = Counter(
            "gateway_policy_reloads", "Policy reload attempts", ["result"], registry=r
        )
        self.redis_errors = Counter(
            "gateway_redis_errors", "Redis operations that failed and were skipped", ["component"], registry=r
        )
        self.rate_limited = Counter(
            "gateway_rate_limited", "Requests refused by tenant limits", ["tenant", "limit"], registry=r
        )
        self.rate_limit_fallbacks = Counter(
            "gateway_rate_limit_fallbacks", "Rate-limit decisions made by one process alone (Redis slow or down)",
            ["result"], registry=r,
        )

        # Children of the hottest label sets, resolved once: `labels()` costs a lock and a dict build per call.
        self.prompt_tokens = self.tokens.labels("prompt")
        self.completion_tokens = self.tokens.labels("completion")
        self._children: dict[tuple, tuple] = {}
        self._stream_children: dict[str, tuple] = {}
        self._inflight: dict[str, Inflight] = {}

    def prepare(self, policy: Policy) -> None:
        """Create every label set the policy makes known (at start-up and on each policy apply)."""
        for result in RELOAD_RESULTS:
            self.policy_reloads.labels(result)
        for component in REDIS_COMPONENTS:
            self.redis_errors.labels(component)
        for result in ("admitted", "refused"):
            self.rate_limit_fallbacks.labels(result)
        for name in policy.backends:
            self.backend_inflight.labels(name)
            self.backend_queued.labels(name)
            for reason in UPSTREAM_ERROR_REASONS:
                self.upstream_errors.labels(name, reason)
        for tenant in policy.tenants:
            for limit in ("rpm", "tpm"):
                if getattr(tenant.limits, limit):
                    self.rate_limited.labels(tenant.name, limit)
        for kind in ("prompt", "completion", "saved_by_cache", "saved_by_compression"):
            self.tokens.labels(kind)
        for route in policy.routes:
            self.request_duration.labels(route.name)
            self.ttft.labels(route.name)
            self.tpot.labels(route.name)
            self.requests.labels(route.name, route.backends[0].name, "200")
            self.requests.labels(route.name, "none", "500")
        self.requests.labels("none", "none", "400")

    def count_upstream_error(self, backend: str, reason: str, status: int) -> bool:
        """Count a backend failure unless it is the client's own mistake; True when counted."""
        if reason in ("bad_request", "unsupported") or (reason == "status_4xx" and status in CLIENT_ERROR_STATUSES):
            return False
        self.upstream_errors.labels(backend, reason).inc()
        return True

    def observe_request(self, route: str, backend: str, status: str, seconds: float) -> None:
        key = (route, backend, status)
        pair = self._children.get(key)
        if pair is None:
            pair = self._children[key] = (
                self.requests.labels(route, backend, status), self.request_duration.labels(route)
            )
        pair[0].inc()
        pair[1].observe(seconds)

    def inflight(self, backend: str) -> Inflight:
        """The in-flight count of `backend`, shared by every object that calls for that backend (a reloaded
        backend keeps counting the requests its predecessor still has in flight)."""
        count = self._inflight.get(backend)
        if count is None:
            count = self._inflight[backend] = Inflight()
            self.backend_inflight.labels(backend).set_function(lambda: count.n)
        return count

    def stream_timings(self, route: str) -> tuple:
        """The (ttft, tpot) histogram children of a route, resolved once per route."""
        pair = self._stream_children.get(route)
        if pair is None:
            pair = self._stream_children[route] = (self.ttft.labels(route), self.tpot.labels(route))
        return pair

    def render(self) -> bytes:
        return generate_latest(self.registry)
