"""The request's way through the gateway: one RequestContext, a list of stages around the backend call.

A stage sees the request before the backend (it may answer it, as a cache hit does, or rewrite what is
forwarded, as context economy does) and sees the complete, successful response after it (to store it or
count it). Streams are assembled by the handler, so `after` always gets one chat.completion dict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from gateway.usage.ledger import Ledger

if TYPE_CHECKING:
    import aiohttp
    import redis.asyncio as aioredis

    from gateway.backends.base import BackendPool
    from gateway.cache.stage import CacheLookup
    from gateway.config.schema import Policy, Route, TenantConfig
    from gateway.context.budget import BudgetReport
    from gateway.metrics import Metrics


# The one vocabulary for endpoints, from handlers to routing and backends: the OpenAI path's last part.
# Cache keys hash these strings (gateway/cache/keys.py), so the values are part of every stored key.
Endpoint = Literal["chat.completions", "completions", "embeddings"]
CHAT: Final = "chat.completions"
COMPLETIONS: Final = "completions"
EMBEDDINGS: Final = "embeddings"


@dataclass(slots=True)
class CacheControl:
    """Request `Cache-Control`: no_cache skips the lookup (still stores), no_store never stores."""

    no_cache: bool = False
    no_store: bool = False
    max_age: float | None = None

    @classmethod
    def parse(cls, header: str | None) -> CacheControl:
        cc = cls()
        if not header:
            return cc
        for part in header.split(","):
            name, _, value = part.strip().partition("=")
            name = name.lower()
            if name == "no-cache":
                cc.no_cache = True
            elif name == "no-store":
                cc.no_store = True
            elif name == "max-age":
                try:
                    cc.max_age = max(0.0, float(value.strip().strip('"')))
                except ValueError:
                    continue
        return cc


@dataclass(slots=True)
class RequestContext:
    request_id: str
    endpoint: Endpoint
    body: dict[str, Any]  # the client's request as sent (parsed); cache keys use this, never mutate it
    forward_body: dict[str, Any]  # what goes to the backend; stages may replace or edit it
    model: str
    stream: bool
    include_usage: bool
    tenant: TenantConfig
    route: Route
    policy: Policy
    headers: Mapping[str, str]
    cache_control: CacheControl
    response_headers: dict[str, str] = field(default_factory=dict)
    # What a stage's `before` learnt that its `after` reuses, one typed field per stage:
    cache_lookup: CacheLookup | None = None  # the cache stage's keys and query embedding, for the store
    budget_report: BudgetReport | None = None  # the context stage's assembly, for the savings it counts
    # The request's dollars (gateway/usage/): the cache stage marks exploration with `usage.ledger.explore`
    ledger: Ledger = field(default_factory=Ledger)
    started: float = field(default_factory=time.perf_counter)


class Stage(Protocol):
    endpoints: frozenset[Endpoint]  # the endpoints it serves; the gateway runs it for these only

    async def before(self, ctx: RequestContext) -> dict | None:
        """Return a complete chat.completion dict to answer from (a cache hit), or None to go on."""
        ...

    async def after(self, ctx: RequestContext, completion: dict) -> None:
        """Called once with the complete successful response. Must not raise."""
        ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class Resources:
    """What the app owns and lends to stages; built once at start-up."""

    redis: aioredis.Redis
    metrics: Metrics
    data_dir: Path
    get_policy: Callable[[], Policy]
    backends: BackendPool
    http: aiohttp.ClientSession
