"""The semantic side of tests/cache/test_malformed_entries.py: what Redis hands back under the L2 keys that the
gateway did not write (another program's value, one cut short, a stream event of another shape) is a miss or is
skipped, never a 500, a loader that retries for good (the gateway never ready) or a dead event follower."""

from __future__ import annotations

import base64
import logging

import httpx
import numpy as np
import pytest
import redis

from gateway.cache import keyspace as ks
from gateway.cache.embedder import DIM
from gateway.cache.keys import namespace_id
from tests.cache.gateway_helpers import ask, policy, semantic_ready, settle, stage, store, until
from tests.helpers import ServerThread

SEMANTIC_ONLY = "{exact: false, semantic: {threshold: 0.9, ttl: 60}}"
NS = namespace_id("team-a", "fake-model")
NO_STORE = {"Cache-Control": "no-store"}


def post(srv: ServerThread, text: str, **headers: str) -> httpx.Response:
    """A raw chat request: a status other than 200 is seen as such (the SDK would raise on it)."""
    return httpx.post(srv.url + "/v1/chat/completions", timeout=30,
                      headers={"Authorization": "Bearer key-a", **headers},
                      json={"model": "fake-model", "temperature": 0, "messages": [{"role": "user", "content": text}]})


def entry_ids(r: redis.Redis) -> list[bytes]:
    return r.zrange(ks.semantic_index(NS), 0, -1)


def ready(srv: ServerThread) -> bool:
    return httpx.get(srv.url + "/ready", timeout=10).status_code == 200


def test_a_foreign_completion_is_a_miss_and_a_good_entry_is_served_after(fake_openai, serve_gateway,
                                                                          redis_url: str) -> None:
    _, up = fake_openai
    srv = serve_gateway(policy(up.url, cache=SEMANTIC_ONLY))
    semantic_ready(srv)
    question, paraphrase = "How do I boil an egg?", "How do I boil an egg"
    store(srv, question)
    assert ask(srv, paraphrase)[1]["x-cache"] == "HIT-SEMANTIC"
    counts = stage(srv).counts
    with redis.Redis.from_url(redis_url) as r:
        [eid] = entry_ids(r)
        key = ks.semantic_entry(NS, eid.decode())
        for value in (b"not json", b'{"choices": [{"finish_reason": "st', b"[1, 2]", b"123", b'"text"', b"{}",
                      b'{"choices": []}', b'{"choices": [1]}', b'{"choices": 5}', b'{"choices": "abc"}',
                      b'{"choices": [{"message": {"content": "cut"}}]}',
                      b'{"choices": [{"finish_reason": "content_filter"}]}',
                      b'{"choices": [{"finish_reason": "stop"}], "error": {"message": "x"}}',
                      b'{"choices": [{"finish_reason": "stop"}], "usage": [1]}'):
            r.hset(key, "c", value)
            errors = counts[("semantic", "error")]
            got = post(srv, paraphrase, **NO_STORE)  # no-store: the miss must not leave an entry of its own
            # before: 500 (JSONDecodeError, AttributeError), or a 200 replaying the value (no choices)
            assert got.status_code == 200, (value, got.text)
            assert got.headers["X-Cache"] == "MISS", value
            assert got.json()["choices"][0]["message"]["content"] == f"echo: {paraphrase}", value
            assert counts[("semantic", "error")] == errors + 1, value  # counted as the exact side counts it
            # dropped from the local index, as an entry gone from Redis is: the next lookup does not read it
            assert post(srv, paraphrase, **NO_STORE).headers["X-Cache"] == "MISS"
            assert counts[("semantic", "error")] == errors + 1, value
            # the question asked again is answered by the backend and stored over the foreign value ...
            assert post(srv, question).headers["X-Cache"] == "MISS"
            settle(srv)
            # ... and that good entry is served after
            completion, headers = ask(srv, paraphrase, headers=NO_STORE)
            assert headers["x-cache"] == "HIT-SEMANTIC", value
            assert completion.choices[0].message.content == f"echo: {question}"


def _vector(values: np.ndarray) -> bytes:
    return base64.b64encode(values.astype(np.float32).tobytes())


def _meta(text: str = "a foreign entry", **doc: object) -> bytes:
    import orjson

    return orjson.dumps({"scope": "some-scope", "text": text, "at": 1.0, "exp": 4e9, **doc})


GOOD_V = _vector(np.ones(DIM) / np.sqrt(DIM))
# (v, m) of hashes under entry keys of the loaded namespace: none of them an entry the gateway wrote
MALFORMED_ENTRIES: list[tuple[bytes, bytes]] = [
    (GOOD_V, b"not json"),
    (GOOD_V, b"[1, 2, 3]"),
    (GOOD_V, b'{"scope": "s", "text": "t"}'),  # no store or expiry time
    (GOOD_V, _meta(exp="tomorrow")),
    (GOOD_V, _meta(at=None)),
    (GOOD_V, _meta(text=5)),
    (GOOD_V, _meta(scope=["s"])),
    (GOOD_V, _meta(exp=True)),
    (b"!!! not base64 !!!", _meta()),
    (base64.b64encode(b"abc"), _meta()),  # not a whole number of float32s
    (_vector(np.ones(8)), _meta()),  # another dimension
    (_vector(np.full(DIM, np.nan)), _meta()),
]
FOREIGN_MEMBERS = [b"not json", b'["only", "two"]', b'{"a": 1}', b"[1, 2, 3]", b"\xff\xfe"]


@pytest.mark.parametrize("foreign", ["namespace members", "entries"])
def test_foreign_members_and_malformed_entries_do_not_stop_loading(foreign: str, fake_openai, serve_gateway,
                                                                   redis_url: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    _, up = fake_openai
    first = serve_gateway(policy(up.url, cache=SEMANTIC_ONLY))
    semantic_ready(first)
    store(first, "Why is the sky blue?")
    store(first, "How many legs does a spider have?")
    with redis.Redis.from_url(redis_url) as r:
        if foreign == "namespace members":
            r.sadd(ks.NAMESPACES, *FOREIGN_MEMBERS)
        else:
            for i, (v, m) in enumerate(MALFORMED_ENTRIES):
                r.hset(ks.semantic_entry(NS, f"foreign{i}"), mapping={"v": v, "m": m, "c": b"{}"})
                r.zadd(ks.semantic_index(NS), {f"foreign{i}": 4e9})
            r.set(ks.semantic_entry(NS, "a-string"), b"not a hash")  # WRONGTYPE for HMGET
            r.zadd(ks.semantic_index(NS), {"a-string": 4e9, b"\xff\xfe": 4e9})  # a member that is not UTF-8
    caplog.set_level(logging.WARNING, logger="gateway.cache")
    late = serve_gateway(policy(up.url, cache=SEMANTIC_ONLY))  # loads what the first one and the rest stored
    # before: the load raised on the first foreign value and was retried for good, /ready a 503 naming it
    assert until(lambda: ready(late), 60), httpx.get(late.url + "/ready", timeout=10).text
    assert len(stage(late).worker.indexes) == 2  # the gateway's own two entries, nothing else
    for text in ("why is the sky blue", "How many legs does a spider have"):
        assert ask(late, text, headers=NO_STORE)[1]["x-cache"] == "HIT-SEMANTIC", text
    skipped = [rec for rec in caplog.records if "skipped" in rec.getMessage()]
    assert len(skipped) == 1, [rec.getMessage() for rec in skipped]  # one line per load, not one per entry
    assert "failed" not in caplog.text


def test_a_malformed_event_is_skipped_and_the_next_one_applied(fake_openai, serve_gateway, redis_url: str) -> None:
    _, up = fake_openai
    follower = serve_gateway(policy(up.url, cache=SEMANTIC_ONLY))
    writer = serve_gateway(policy(up.url, cache=SEMANTIC_ONLY))
    semantic_ready(follower)
    semantic_ready(writer)
    with redis.Redis.from_url(redis_url) as r:
        for v, m in MALFORMED_ENTRIES:
            r.xadd(ks.EVENTS, {"op": "add", "ns": NS, "id": "foreign", "m": m, "v": v})
        r.xadd(ks.EVENTS, {"op": "add", "ns": NS})  # no id, metadata or vector
        r.xadd(ks.EVENTS, {"op": "add", "ns": NS, "id": b"\xff", "m": _meta(), "v": GOOD_V})
        r.xadd(ks.EVENTS, {b"\xff": b"\xfe", "op": b"\xff"})  # a field name that is not UTF-8
        r.xadd(ks.EVENTS, {"op": "del", "ns": NS, "ids": b"\xff,\xfe"})
    # the next good event: an entry the other gateway stores, which reaches this one only by the stream
    store(writer, "How do I make pancakes?")

    def semantic_hit() -> bool:
        return ask(follower, "how do I make pancakes", headers=NO_STORE)[1]["x-cache"] == "HIT-SEMANTIC"

    # before: the follower died on the first malformed event and never applied another
    assert until(semantic_hit, 30)
    assert len(stage(follower).worker.indexes) == 1
    assert stage(follower).semantic._sync_task is not None and not stage(follower).semantic._sync_task.done()
