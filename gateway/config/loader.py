"""Build a validated `Policy` from YAML: `parse_policy(text)` and `load_policy(path)`.

Every problem is collected (not just the first) and raised together as `PolicyErrors`, each naming the file,
line and key path. Policies are never mutated after they are built: the app swaps one reference on reload.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.config.errors import PolicyError, PolicyErrors
from gateway.config.fields import Checker
from gateway.config.route_parser import parse_routes
from gateway.config.schema import (
    BackendConfig,
    Limits,
    ModelPrice,
    OpsConfig,
    Policy,
    RedisConfig,
    ServerConfig,
    TenantConfig,
)
from gateway.config.yamltree import expand_vars, join, read_tree

TOP_KEYS = ("redis", "server", "tenants", "backends", "routes", "auth", "models")
REDIS_KEYS = ("url", "timeout_ms", "mode")
REDIS_SCHEMES = ("redis", "rediss", "unix")
REDIS_MODES = ("auto", "single", "cluster")  # auto: the seed node's `INFO cluster` decides
SERVER_KEYS = (
    "data_dir", "max_body_bytes", "admin_keys", "max_header_bytes", "max_headers", "header_timeout_s", "ops",
    "max_messages",
)
OPS_KEYS = ("auth", "keys", "host", "port")
OPS_AUTH = ("open", "admin", "key")
TENANT_KEYS = ("name", "api_keys", "limits")
LIMIT_KEYS = ("rpm", "tpm", "usd_per_day", "usd_per_month")
MODEL_PRICE_KEYS = ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok")
BACKEND_TYPES = ("openai", "anthropic", "engine")
BACKEND_KEYS = (
    "type", "base_url", "api_key", "model", "models", "replicas", "urls", "max_connections", "headers", "options",
    "max_inflight", "max_queued", "tenant_share",
)
ENGINE_ONLY_KEYS = ("replicas", "urls")
BACKEND_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # appears in metric labels and X-Backend


DEFAULT_POLICY = Path(__file__).with_name("default.yaml")  # the embedded default (package data)


def load_policy(path: str | Path) -> Policy:
    """Read and parse a policy file; relative `server.data_dir` resolves against the file's directory."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyErrors([PolicyError("", f"cannot read policy: {e.strerror or e}", str(path))]) from e
    except UnicodeDecodeError as e:
        raise PolicyErrors([PolicyError("", f"policy is not UTF-8 text: {e}", str(path))]) from e
    return parse_policy(text, str(path), base_dir=p.resolve().parent)


def parse_policy(
    text: str, filename: str = "<policy>", *, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> Policy:
    """Parse and validate policy YAML. Raises PolicyErrors listing every problem with file, line and key."""
    env = os.environ if env is None else env
    tree = read_tree(text, env)
    check = Checker()
    policy: Policy | None = None
    if tree.data is None and not tree.errors:
        check.error("", "policy is empty: it needs at least `backends:` and `routes:`")
    elif tree.data is not None:
        policy = _build(tree.data, check, base_dir)
    errors = tree.errors + [e for e in check.errors if e.path not in tree.bad_paths]
    if errors:
        for e in errors:
            e.filename = filename
            if e.line is None:
                e.line = tree.line_for(e.path)
        errors.sort(key=lambda e: (e.line or 0, e.path))
        raise PolicyErrors(errors)
    assert policy is not None
    policy.source = filename
    policy.digest = hashlib.sha256(expand_vars(text, env, strict=False).encode()).hexdigest()
    return policy


def _build(data: Any, check: Checker, base_dir: Path | None) -> Policy | None:
    top = check.mapping(data, "", TOP_KEYS, required=("backends", "routes"))
    if top is None:
        return None
    redis = _redis(top.get("redis"), check)
    server = _server(top.get("server"), check, base_dir)
    tenants = _tenants(top.get("tenants"), check)
    backends = _backends(top.get("backends"), check)
    raw_backends = top.get("backends")
    declared = [str(k) for k in raw_backends] if isinstance(raw_backends, dict) else []
    routes = parse_routes(top.get("routes"), declared, backends, check) if "routes" in top else []
    auth_open = _auth(top.get("auth"), tenants, check)
    return Policy(routes=routes, backends=backends, tenants=tenants, models=_models(top.get("models"), check),
                  redis=redis, server=server, auth_open=auth_open)


def _models(raw: Any, check: Checker) -> dict[str, ModelPrice]:
    """`models: {NAME: {input_per_mtok, output_per_mtok, cached_input_per_mtok, cache_write_per_mtok}}`: the
    one place a policy sets prices; NAME is a model name or a glob. Input and output are required, so a typo
    never prices a model at 0 by accident."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        check.error("models", "expected a mapping of model names to prices ({NAME: {input_per_mtok: ...}})")
        return {}
    out: dict[str, ModelPrice] = {}
    for name, entry in raw.items():
        path = join("models", str(name))
        e = check.mapping(entry, path, MODEL_PRICE_KEYS, required=("input_per_mtok", "output_per_mtok"))
        if e is None:
            continue
        prices = [check.get_number(e, k, path, None, minimum=0.0, maximum=1e6) for k in MODEL_PRICE_KEYS]
        if prices[0] is not None and prices[1] is not None:
            out[str(name)] = ModelPrice(prices[0], prices[1], prices[2], prices[3])
    return out


def _auth(raw: Any, tenants: list[TenantConfig], check: Checker) -> bool:
    """`auth: {open: true}` says the policy means to have no API keys: only such a policy may replace a keyed
    one on hot reload (a reload that silently drops every key would open the gateway)."""
    m = check.mapping(raw, "auth", ("open",))
    if m is None:
        return False
    open_ = check.get_bool(m, "open", "auth")
    keyed = [t.name for t in tenants if t.api_keys]
    if open_ and keyed:
        check.error("auth.open", f"open: true, but tenants have API keys ({', '.join(keyed)}); remove one or the other")
    return open_


def _redis(raw: Any, check: Checker) -> RedisConfig:
    m = check.mapping(raw, "redis", REDIS_KEYS)
    if m is None:
        return RedisConfig()
    cfg = RedisConfig()
    url = check.get_str(m, "url", "redis", cfg.url)
    if url and url != "embedded" and urlsplit(url).scheme not in REDIS_SCHEMES:
        check.error("redis.url", f"expected 'embedded' or a redis://, rediss:// or unix:// URL, got {url!r}")
    elif url:
        cfg.url = url
    cfg.timeout_ms = check.get_number(m, "timeout_ms", "redis", cfg.timeout_ms, minimum=0, exclusive=True) or 5.0
    cfg.mode = check.get_choice(m, "mode", "redis", REDIS_MODES, cfg.mode)
    if cfg.mode == "cluster" and cfg.url == "embedded":
        check.error("redis.mode", "mode: cluster needs a redis:// URL of a cluster node (the embedded Redis is one server)")
    return cfg


def _server(raw: Any, check: Checker, base_dir: Path | None) -> ServerConfig:
    m = check.mapping(raw, "server", SERVER_KEYS)
    cfg = ServerConfig()
    if m is None:
        return cfg
    data_dir = check.get_str(m, "data_dir", "server")
    if data_dir:
        p = Path(data_dir).expanduser()
        cfg.data_dir = p if p.is_absolute() or base_dir is None else base_dir / p
    max_body = check.get_int(m, "max_body_bytes", "server", cfg.max_body_bytes, minimum=1)
    cfg.max_body_bytes = max_body or cfg.max_body_bytes
    cfg.admin_keys = check.get_str_list(m, "admin_keys", "server", drop_empty=True)
    cfg.max_header_bytes = check.get_int(m, "max_header_bytes", "server", cfg.max_header_bytes, minimum=256) \
        or cfg.max_header_bytes
    cfg.max_headers = check.get_int(m, "max_headers", "server", cfg.max_headers, minimum=8) or cfg.max_headers
    cfg.header_timeout_s = check.get_number(m, "header_timeout_s", "server", cfg.header_timeout_s, minimum=0,
                                            exclusive=True) or cfg.header_timeout_s
    cfg.max_messages = check.get_int(m, "max_messages", "server", cfg.max_messages, minimum=1) or cfg.max_messages
    cfg.ops = _ops(m.get("ops"), cfg.admin_keys, check)
    return cfg


def _ops(raw: Any, admin_keys: list[str], check: Checker) -> OpsConfig:
    p = "server.ops"
    m = check.mapping(raw, p, OPS_KEYS)
    cfg = OpsConfig()
    if m is None:
        return cfg
    cfg.auth = check.get_choice(m, "auth", p, OPS_AUTH, "open")  # type: ignore[assignment]
    cfg.keys = check.get_str_list(m, "keys", p, drop_empty=True)
    cfg.host = check.get_str(m, "host", p)
    cfg.port = check.get_int(m, "port", p, minimum=1)
    if cfg.port is not None and cfg.port > 65535:
        check.error(join(p, "port"), f"must be <= 65535, got {cfg.port}")
    if cfg.auth == "admin" and not admin_keys:
        check.error(join(p, "auth"), "auth: admin needs server.admin_keys")
    if cfg.auth == "key" and not cfg.keys:
        check.error(join(p, "keys"), "auth: key needs at least one key here")
    if cfg.host is not None and cfg.port is None:
        check.error(join(p, "port"), "host needs a port (the ops listener's)")
    return cfg


def _tenants(raw: Any, check: Checker) -> list[TenantConfig]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        check.error("tenants", "expected a list of tenants (- name: ..., api_keys: [...])")
        return []
    tenants: list[TenantConfig] = []
    names: dict[str, int] = {}
    key_owner: dict[str, str] = {}
    for i, item in enumerate(raw):
        path = join("tenants", i)
        m = check.mapping(item, path, TENANT_KEYS, required=("name",))
        if m is None:
            continue
        name = check.get_str(m, "name", path)
        if name is not None:
            if name in names:
                check.error(join(path, "name"), f"duplicate tenant name {name!r} (also tenants[{names[name]}])")
            names.setdefault(name, i)
        keys = check.get_str_list(m, "api_keys", path, drop_empty=True)
        for k, key in enumerate(keys):
            if key in key_owner:  # never echo the key itself: messages end up in logs
                check.error(join(join(path, "api_keys"), k), f"duplicate API key: also a key of {key_owner[key]}")
            else:
                key_owner[key] = f"tenant {name!r}" if name else path
        limits = Limits()
        lm = check.mapping(m.get("limits"), join(path, "limits"), LIMIT_KEYS)
        if lm is not None:
            limits.rpm = check.get_int(lm, "rpm", join(path, "limits"), minimum=1)
            limits.tpm = check.get_int(lm, "tpm", join(path, "limits"), minimum=1)
            limits.usd_per_day = check.get_number(lm, "usd_per_day", join(path, "limits"), minimum=0, exclusive=True)
            limits.usd_per_month = check.get_number(lm, "usd_per_month", join(path, "limits"), minimum=0,
                                                    exclusive=True)
        tenants.append(TenantConfig(name=name or f"tenant-{i}", api_keys=list(dict.fromkeys(keys)), limits=limits))
    return tenants


def _backends(raw: Any, check: Checker) -> dict[str, BackendConfig]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        check.error("backends", f"expected a mapping of backend names to settings, got a {type(raw).__name__}")
        return {}
    if not raw:
        check.error("backends", "at least one backend is required")
    out: dict[str, BackendConfig] = {}
    for name, item in raw.items():
        path = join("backends", name)
        if not BACKEND_NAME.match(name):
            check.error(path, f"backend name {name!r} must be letters, digits, '_', '-' or '.'")
        m = check.mapping(item, path, BACKEND_KEYS, required=("type",))
        if m is None:
            continue
        cfg = _backend(name, m, path, check)
        if cfg is not None:
            out[name] = cfg
    return out


def _backend(name: str, m: dict[str, Any], path: str, check: Checker) -> BackendConfig | None:
    if m.get("type") is None:
        if "type" in m:
            check.error(join(path, "type"), f"must be one of {', '.join(BACKEND_TYPES)}")
        return None
    btype = check.get_choice(m, "type", path, BACKEND_TYPES, "")
    if not btype:
        return None
    cfg = BackendConfig(name=name, type=btype)  # type: ignore[arg-type]
    cfg.base_url = check.get_str(m, "base_url", path)
    check.check_http_url(cfg.base_url, join(path, "base_url"))
    cfg.api_key = check.get_str(m, "api_key", path, nonempty=False) or None  # "" (unset env) means no key
    cfg.model = check.get_str(m, "model", path)
    cfg.models = check.get_str_list(m, "models", path)
    cfg.replicas = check.get_int(m, "replicas", path, 1, minimum=1) or 1
    cfg.urls = check.get_str_list(m, "urls", path)
    for i, url in enumerate(cfg.urls):
        check.check_http_url(url, join(join(path, "urls"), i))
    cfg.max_connections = check.get_int(m, "max_connections", path, 100, minimum=1) or 100
    _caps(cfg, m, path, check)
    cfg.headers = _headers(m.get("headers"), join(path, "headers"), check)
    options = check.mapping(m.get("options"), join(path, "options"), allowed=_AnyKey())
    cfg.options = dict(options or {})
    if btype != "engine":
        for key in ENGINE_ONLY_KEYS:
            if key in m:
                check.error(join(path, key), f"only engine backends take {key!r} (this one is type {btype})")
    if btype == "openai" and "base_url" not in m:
        check.error(join(path, "base_url"), "openai backends need base_url (e.g. https://api.openai.com/v1)")
    elif btype == "anthropic" and "api_key" in m and not cfg.api_key:
        check.error(join(path, "api_key"), "anthropic backends need a non-empty api_key (its variable is empty)")
    elif btype == "anthropic" and "api_key" not in m:
        check.error(join(path, "api_key"), 'anthropic backends need api_key (e.g. "${ANTHROPIC_API_KEY}")')
    elif btype == "engine":
        if "base_url" in m:
            check.error(join(path, "base_url"), "engine backends take urls: [...] (running replicas), not base_url")
        if not cfg.model and not cfg.urls:
            check.error(join(path, "model"), "engine backends need model (to serve) or urls (running replicas)")
        if cfg.urls and "replicas" in m:
            check.error(join(path, "replicas"), "replicas spawns engines; with urls the replicas already run")
        _check_engine_options(cfg, check)
    return cfg


def _caps(cfg: BackendConfig, m: dict[str, Any], path: str, check: Checker) -> None:
    """max_inflight / max_queued / tenant_share. Engines are capped by default (per replica); 0 turns a cap off."""
    from gateway.backends.admission import ENGINE_INFLIGHT_PER_REPLICA, ENGINE_QUEUED_PER_REPLICA

    replicas = len(cfg.urls) or cfg.replicas
    engine = cfg.type == "engine"
    inflight = check.get_int(m, "max_inflight", path, ENGINE_INFLIGHT_PER_REPLICA * replicas if engine else 0,
                             minimum=0)
    queued = check.get_int(m, "max_queued", path, ENGINE_QUEUED_PER_REPLICA * replicas if engine else 0, minimum=0)
    cfg.max_inflight = inflight or None
    cfg.max_queued = queued or 0
    if "max_queued" in m and not cfg.max_inflight:
        check.error(join(path, "max_queued"), "max_queued needs max_inflight (the queue is for its slots)")
    # The part of those slots and queue places one tenant may hold (1: no per-tenant cap).
    cfg.tenant_share = check.get_number(m, "tenant_share", path, 1.0, minimum=0, exclusive=True, maximum=1) or 1.0
    if "tenant_share" in m and not cfg.max_inflight:
        check.error(join(path, "tenant_share"), "tenant_share needs max_inflight (it is a share of those slots)")


def _check_engine_options(cfg: BackendConfig, check: Checker) -> None:
    """Engine options are the engine backend's to define; validating them here lets `policy check` see them."""
    from gateway.backends.engine_options import parse_engine_options

    parse_engine_options(cfg, check)


def _headers(raw: Any, path: str, check: Checker) -> dict[str, str]:
    from gateway.backends.http_client import header_problem

    m = check.mapping(raw, path, allowed=_AnyKey())
    out: dict[str, str] = {}
    for key, value in (m or {}).items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            check.error(join(path, key), "header values must be strings")
        elif (problem := header_problem(str(key), str(value).strip())) is not None:
            check.error(join(path, key), f"header {problem}")
        else:
            out[key] = str(value)
    return out


class _AnyKey(tuple):
    """An `allowed` collection that admits every key (free-form mappings such as headers and options)."""

    def __contains__(self, item: object) -> bool:
        return True
