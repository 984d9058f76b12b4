"""The policy as plain dataclasses. `gateway.config.loader` builds and validates them from YAML.

Route sections owned by other subsystems are parsed by those subsystems' own functions (called by the
loader): `gateway.cache.config.parse_cache_config` for `cache:` and
`gateway.context.config.parse_context_config` for `budget:`, `compression:` and `ordering:`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gateway.backends.base import Timeouts

if TYPE_CHECKING:
    from gateway.cache.config import CacheConfig
    from gateway.context.config import ContextConfig
    from gateway.routing.approx import PoolOptions

BackendType = Literal["openai", "anthropic", "engine"]
Strategy = Literal["weighted", "least_loaded", "prefix_aware"]


@dataclass(slots=True)
class RedisConfig:
    url: str = "embedded"  # "embedded" starts a private redis-server under data_dir; else redis:// or rediss://
    timeout_ms: float = 5.0  # budget for cache lookups and limit checks before failing open
    mode: str = "auto"  # auto (ask the seed node `INFO cluster`) | single | cluster (redis-py's cluster client)


@dataclass(slots=True)
class OpsConfig:
    """Who may read /ready and /metrics, and where they are served."""

    auth: Literal["open", "admin", "key"] = "open"  # admin: admin keys only; key: `keys` or admin keys
    keys: list[str] = field(default_factory=list)  # Bearer keys for /ready and /metrics (auth: key)
    host: str | None = None  # with port: serve /ready and /metrics on their own listener, not the main one
    port: int | None = None


def default_data_dir() -> Path:
    """The running user's data dir, as of the policy's load (not of this module's import)."""
    return Path("~/.local/share/llm-gateway").expanduser()


@dataclass(slots=True)
class ServerConfig:
    data_dir: Path = field(default_factory=default_data_dir)
    max_body_bytes: int = 10 * 1024 * 1024
    admin_keys: list[str] = field(default_factory=list)
    max_header_bytes: int = 8190  # one request line or header line; longer ones get a 400 envelope
    max_headers: int = 64  # header lines per request: with max_header_bytes it bounds the total header size
    header_timeout_s: float = 15.0  # a connection idle this long, or still sending its headers, is closed
    # Messages of a chat request (prompts or inputs of a batched completions or embeddings request): every stage
    # walks them on the event loop, so their count bounds how long one request can hold it. More: a 400.
    max_messages: int = 2048
    ops: OpsConfig = field(default_factory=OpsConfig)


@dataclass(slots=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    usd_per_day: float | None = None  # spend budget per UTC day (gateway/usage/budget.py)
    usd_per_month: float | None = None  # spend budget per UTC calendar month

    @property
    def has_budget(self) -> bool:
        return bool(self.usd_per_day or self.usd_per_month)


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million tokens. Cached input: prompt tokens the provider's (or engine's) prefix cache served;
    cache write: prompt tokens written to Anthropic's cache (its premium). None: the input price."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


@dataclass(slots=True)
class TenantConfig:
    name: str
    api_keys: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)


@dataclass(slots=True)
class BackendConfig:
    name: str
    type: BackendType
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None  # engine: the model to serve; upstreams: rewrite the forwarded model name
    models: list[str] = field(default_factory=list)  # models this backend lists when it cannot be asked
    replicas: int = 1  # engine: 1 runs in-process, more spawns replica processes
    urls: list[str] = field(default_factory=list)  # engine: connect to running replicas instead
    max_connections: int = 100
    max_inflight: int | None = None  # requests in flight at once (engine default: 64 per replica); None: no cap
    max_queued: int = 0  # requests waiting for a slot beyond max_inflight; more are shed (503 or fallback)
    tenant_share: float = 1.0  # the part of those slots and queue places one tenant may hold; beyond it, 429
    headers: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # type-specific extras (engine args, anthropic_version)


@dataclass(slots=True)
class RouteBackend:
    name: str
    weight: float = 1.0


@dataclass(slots=True)
class Backoff:
    base_s: float = 0.1
    max_s: float = 2.0


@dataclass(slots=True)
class Route:
    model: str  # exact name or glob (fnmatch) matched against the request's model
    backends: list[RouteBackend]
    fallbacks: list[str] = field(default_factory=list)
    retries: int = 0
    backoff: Backoff = field(default_factory=Backoff)
    timeouts: Timeouts = field(default_factory=Timeouts)
    strategy: Strategy = "weighted"
    prefix: PoolOptions | None = None  # prefix_aware options (gateway.routing.options parses `routing:`)
    cache: CacheConfig | None = None
    context: ContextConfig | None = None
    index: int = 0  # position in the policy, for names and metrics
    route_name: str = ""  # `name:` in the policy; route_parser derives one from the pattern when absent

    @property
    def name(self) -> str:
        """The route's stable name (metric label `route`): never a glob pattern."""
        return self.route_name or self.model

    @property
    def is_glob(self) -> bool:
        return any(c in self.model for c in "*?[")

    def matches(self, model: str) -> bool:
        return model == self.model or (self.is_glob and fnmatch.fnmatchcase(model, self.model))


@dataclass(slots=True)
class Policy:
    routes: list[Route]
    backends: dict[str, BackendConfig]
    tenants: list[TenantConfig] = field(default_factory=list)
    # `models:` price overrides by model name or glob (gateway/usage/prices.py reads them before its table)
    models: dict[str, ModelPrice] = field(default_factory=dict)
    redis: RedisConfig = field(default_factory=RedisConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    auth_open: bool = False  # `auth: {open: true}`: the policy says openly that it wants no API keys
    source: str = "<policy>"  # file name it came from
    digest: str = ""  # sha256 of the expanded text; changes on every content change

    def route_for(self, model: str) -> Route | None:
        for route in self.routes:
            if route.matches(model):
                return route
        return None
