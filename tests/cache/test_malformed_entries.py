"""What Redis hands back that is not what the gateway stored (another program's value under a cache key, a
value cut short, a namespace-set member of another shape) is a miss, or skipped, never a 500."""

from __future__ import annotations

import httpx
import redis

from gateway.cache import keyspace as ks
from tests.cache.gateway_helpers import admin

POLICY = """
tenants:
  - {{name: team-a, api_keys: [key-a]}}
backends:
  up: {{type: openai, base_url: "{upstream}/v1", api_key: sk-up}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
    cache: {{exact: {{ttl: 60}}}}
"""


def ask(srv) -> httpx.Response:
    return httpx.post(srv.url + "/v1/chat/completions", headers={"Authorization": "Bearer key-a"}, timeout=30,
                      json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "temperature": 0})


def test_malformed_exact_entries_are_misses(fake_openai, serve_gateway, redis_url: str) -> None:
    _, up = fake_openai
    srv = serve_gateway(POLICY.format(upstream=up.url))
    assert ask(srv).headers["X-Cache"] == "MISS"
    assert ask(srv).headers["X-Cache"] == "HIT-EXACT"
    with redis.Redis.from_url(redis_url) as r:
        entries = [k for k in r.scan_iter(match=ks.NAMESPACED) if b":x:" in k]
        assert len(entries) == 1
        for value in (b"not json", b'{"at": 1.0', b"[1, 2]", b'{"c": {}}', b"123", b'{"c": {}, "at": 1.0}',
                      b'{"c": {"choices": [1]}, "at": 1.0}', b'{"c": [], "at": "yesterday"}'):
            r.set(entries[0], value)
            got = ask(srv)
            # before: 500 (ValueError, KeyError, TypeError, AttributeError), or a 200 without choices
            assert got.status_code == 200, (value, got.text)
            assert got.headers["X-Cache"] == "MISS" and got.json()["choices"][0]["message"]["content"] == "echo: hi"
            r.set(entries[0], value)  # the miss stored a good entry again: spoil it for the next value


def test_malformed_namespace_members_are_skipped_by_stats_and_purge(fake_openai, serve_gateway,
                                                                   redis_url: str) -> None:
    _, up = fake_openai
    srv = serve_gateway(POLICY.format(upstream=up.url))
    assert ask(srv).status_code == 200
    with redis.Redis.from_url(redis_url) as r:
        r.sadd(ks.NAMESPACES, b"not json", b'["only", "two"]', b'{"a": 1}')
    stats = admin(srv, "GET", "/admin/cache/stats")
    assert stats.status_code == 200, stats.text  # before: 500
    assert stats.json()["exact_entries"] == 1
    purged = admin(srv, "DELETE", "/admin/cache")
    assert purged.status_code == 200, purged.text  # before: 500
    assert purged.json()["deleted"] == 1
    assert ask(srv).headers["X-Cache"] == "MISS"
