"""Backfill: an exact hit whose semantic entry is missing writes it from the exact entry, off the request path.

Real embedder, real FAISS, real Redis, openai SDK as client.
"""

from __future__ import annotations

import redis

from tests.cache.gateway_helpers import admin, ask, policy, semantic_ready, settle, stage


def backfilled(srv) -> float:
    return stage(srv)._stores.labels("semantic", "backfilled")._value.get()


def test_entries_stored_while_l2_was_off_are_backfilled_on_their_exact_hit(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    before = serve_gateway(policy(up.url, cache="{exact: {ttl: 60}}"))  # the same route, L2 not yet on
    ask(before, "How do I make a sourdough starter?")
    srv = serve_gateway(policy(up.url))  # L2 on, same route, version and Redis
    semantic_ready(srv)
    no_store = {"Cache-Control": "no-store"}
    _, headers = ask(srv, "how do i make a sourdough starter", headers=no_store)
    assert headers["x-cache"] == "MISS"  # no semantic entry: the exact layer alone knows the question

    assert ask(srv, "How do I make a sourdough starter?", headers=no_store)[1]["x-cache"] == "HIT-EXACT"
    settle(srv)
    assert backfilled(srv) == 0  # a no-store request writes nothing, not even a backfill
    assert ask(srv, "How do I make a sourdough starter?")[1]["x-cache"] == "HIT-EXACT"
    settle(srv)
    assert backfilled(srv) == 1
    completion, headers = ask(srv, "how do i make a sourdough starter", headers=no_store)
    assert headers["x-cache"] == "HIT-SEMANTIC"
    assert completion.choices[0].message.content == "echo: How do I make a sourdough starter?"
    assert ask(srv, "How do I make a sourdough starter?")[1]["x-cache"] == "HIT-EXACT"
    settle(srv)
    assert backfilled(srv) == 1  # the entry is there now: no second write
    assert fake.request_count == 2  # the first question and the near-repeat asked before the backfill


def test_a_lost_semantic_store_is_rebuilt_from_exact_hits(fake_openai, serve_gateway, redis_url: str) -> None:
    fake, up = fake_openai
    first = serve_gateway(policy(up.url))
    semantic_ready(first)
    ask(first, "What is the tallest mountain in Africa?")
    settle(first)
    r = redis.Redis.from_url(redis_url)
    lost = [k for pattern in ("llmgw:cache:*:s:*", "llmgw:cache:*:si", "llmgw:cache:*:sl:*", "llmgw:cache:*:ss")
            for k in r.scan_iter(pattern)]
    assert lost
    r.delete(*lost)
    r.close()

    srv = serve_gateway(policy(up.url))  # a new process: loads what Redis holds, which is no semantic entry
    semantic_ready(srv)
    assert admin(srv, "GET", "/admin/cache/stats").json()["semantic_entries"] == 0
    assert ask(srv, "What is the tallest mountain in Africa?")[1]["x-cache"] == "HIT-EXACT"
    settle(srv)
    assert backfilled(srv) == 1
    stats = admin(srv, "GET", "/admin/cache/stats").json()
    assert stats["semantic_entries"] == 1 and stats["exact_entries"] == 1
    completion, headers = ask(srv, "what is the tallest mountain in africa", headers={"Cache-Control": "no-store"})
    assert headers["x-cache"] == "HIT-SEMANTIC"
    assert completion.choices[0].message.content == "echo: What is the tallest mountain in Africa?"
    assert fake.request_count == 1
