"""L2 through the gateway: real embedder, real FAISS, real Redis, openai SDK client."""

from __future__ import annotations

import pytest

from tests.cache.gateway_helpers import admin, ask, policy, semantic_ready, settle, store, until, user


def test_near_repeat_is_a_semantic_hit_with_similarity(gw) -> None:
    fake, srv = gw
    store(srv, "What is the capital of France?")
    completion, headers = ask(srv, "what is the capital of France")
    assert headers["x-cache"] == "HIT-SEMANTIC"
    assert 0.9 <= float(headers["x-cache-similarity"]) <= 1.0
    assert completion.choices[0].message.content == "echo: What is the capital of France?"
    assert fake.request_count == 1


def test_look_alike_traps_are_misses(gw) -> None:
    fake, srv = gw
    store(srv, "What is the capital of Austria?")
    for trap in ("What is the capital of Australia?", "What is not the capital of Austria?"):
        completion, headers = ask(srv, trap)
        assert headers["x-cache"] == "MISS"
        assert completion.choices[0].message.content == f"echo: {trap}"


def test_multi_turn_chats_sharing_the_last_message_never_collide(gw) -> None:
    fake, srv = gw
    last = user("How many people live there?")
    paris = [*user("Tell me about Paris."), {"role": "assistant", "content": "Paris is in France."}, *last]
    tokyo = [*user("Tell me about Tokyo."), {"role": "assistant", "content": "Tokyo is in Japan."}, *last]
    store(srv, paris)
    _, headers = ask(srv, tokyo)
    assert headers["x-cache"] == "MISS"
    assert ask(srv, paris)[1]["x-cache"] == "HIT-EXACT"


def test_two_tenants_never_share_a_semantic_entry(gw) -> None:
    fake, srv = gw
    store(srv, "Explain the theory of relativity.", key="key-a")
    _, hb = ask(srv, "Please explain the theory of relativity.", key="key-b")
    assert hb["x-cache"] == "MISS"
    _, ha = ask(srv, "Please explain the theory of relativity.", key="key-a")
    assert ha["x-cache"] == "HIT-SEMANTIC"


def test_sampling_parameters_scope_semantic_entries(gw) -> None:
    fake, srv = gw
    store(srv, "Write a poem about the ocean.", temperature=0.7)
    assert ask(srv, "Write a poem about the ocean", temperature=0.2)[1]["x-cache"] == "MISS"
    assert ask(srv, "Write a poem about the ocean", temperature=0.7)[1]["x-cache"] == "HIT-SEMANTIC"


def test_threshold_header_may_only_raise_the_threshold(gw) -> None:
    fake, srv = gw
    store(srv, "How do I reset my password?")
    paraphrase = "How can I reset my password?"  # not a near-repeat: normalisation leaves it below 0.999
    assert ask(srv, paraphrase, headers={"X-Cache-Threshold": "0.999"})[1]["x-cache"] == "MISS"
    low = ask(srv, "How do I reset my password", headers={"X-Cache-Threshold": "0.1"})[1]
    assert low["x-cache"] == "HIT-SEMANTIC" and float(low["x-cache-similarity"]) >= 0.9


@pytest.mark.parametrize("value", ["high", "1.5", "-0.2", "nan"])
def test_bad_threshold_header_is_a_400(gw, value: str) -> None:
    import openai

    fake, srv = gw
    with pytest.raises(openai.BadRequestError) as e:
        ask(srv, "anything", headers={"X-Cache-Threshold": value})
    assert e.value.status_code == 400
    assert e.value.body["code"] == "invalid_cache_threshold"
    assert "X-Cache-Threshold" in e.value.body["message"]
    assert fake.request_count == 0


def test_max_age_applies_to_semantic_entries(gw) -> None:
    import time

    fake, srv = gw
    store(srv, "Give me three ideas for a birthday party.")
    time.sleep(0.2)
    near = "Give me three ideas for a birthday party!"
    assert ask(srv, near, headers={"Cache-Control": "max-age=0"})[1]["x-cache"] == "MISS"
    other = "give me three ideas for a birthday party"
    assert ask(srv, other, headers={"Cache-Control": "max-age=600"})[1]["x-cache"] == "HIT-SEMANTIC"


def test_semantic_hits_never_extend_the_ttl(gw, redis_url) -> None:
    import redis

    fake, srv = gw
    store(srv, "What does DNA stand for?")
    r = redis.Redis.from_url(redis_url)
    (key,) = list(r.scan_iter("llmgw:cache:*:s:*"))
    before = r.pttl(key)
    for _ in range(3):
        assert ask(srv, "What does DNA stand for", headers={"Cache-Control": "no-store"})[1]["x-cache"] == \
            "HIT-SEMANTIC"
    settle(srv)
    assert 0 < r.pttl(key) <= before
    r.close()


def test_semantic_entries_expire(fake_openai, serve_gateway) -> None:
    import time

    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, cache="{exact: false, semantic: {threshold: 0.9, ttl: 4}}"))
    semantic_ready(srv)
    store(srv, "List the planets in the solar system.")
    assert ask(srv, "List the planets in the solar system")[1]["x-cache"] == "HIT-SEMANTIC"
    time.sleep(4.1)
    assert ask(srv, "List the planets in the solar system.")[1]["x-cache"] == "MISS"
    settle(srv)  # the same question stored again: the entry comes back with a new TTL
    assert ask(srv, "list the planets in the solar system")[1]["x-cache"] == "HIT-SEMANTIC"


def test_scope_size_is_bounded_by_lru(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, cache="{exact: false, semantic: {threshold: 0.9, max_entries: 2}}"))
    semantic_ready(srv)
    store(srv, "How do I boil an egg?")
    store(srv, "How do I tie a tie?")
    assert ask(srv, "How do I boil an egg")[1]["x-cache"] == "HIT-SEMANTIC"  # egg is now the most recent
    store(srv, "How do I change a flat tire?")  # evicts the least recently used: the tie
    assert ask(srv, "How do I tie a tie", headers={"Cache-Control": "no-store"})[1]["x-cache"] == "MISS"
    assert ask(srv, "How do I boil an egg")[1]["x-cache"] == "HIT-SEMANTIC"
    stats = admin(srv, "GET", "/admin/cache/stats").json()
    assert stats["semantic_entries"] == 2


def test_purge_by_tenant_and_by_model(gw) -> None:
    fake, srv = gw
    for key in ("key-a", "key-b"):
        store(srv, "What is the speed of light?", key=key)
        store(srv, "What is the speed of sound?", key=key, model="fake-model-2")
    stats = admin(srv, "GET", "/admin/cache/stats").json()
    assert stats["exact_entries"] == 4 and stats["semantic_entries"] == 2
    assert {(n["tenant"], n["model"]) for n in stats["namespaces"]} == {
        ("team-a", "fake-model"), ("team-a", "fake-model-2"), ("team-b", "fake-model"), ("team-b", "fake-model-2")}

    purged = admin(srv, "DELETE", "/admin/cache?tenant=team-a").json()
    assert purged["deleted"] == 3  # two exact entries and one semantic entry of team-a
    keep_out = {"Cache-Control": "no-store"}
    assert ask(srv, "What is the speed of light?", key="key-a", headers=keep_out)[1]["x-cache"] == "MISS"
    assert ask(srv, "what is the speed of light", key="key-a", headers=keep_out)[1]["x-cache"] == "MISS"
    assert ask(srv, "What is the speed of light?", key="key-b")[1]["x-cache"] == "HIT-EXACT"
    assert ask(srv, "what is the speed of light", key="key-b")[1]["x-cache"] == "HIT-SEMANTIC"

    purged = admin(srv, "DELETE", "/admin/cache?model=fake-model-2").json()
    assert purged["deleted"] == 1  # team-b's speed-of-sound entry (team-a's went with the tenant)
    assert ask(srv, "What is the speed of sound?", key="key-b", model="fake-model-2",
               headers=keep_out)[1]["x-cache"] == "MISS"
    assert ask(srv, "What is the speed of light?", key="key-b")[1]["x-cache"] == "HIT-EXACT"


def test_admin_endpoints_need_the_admin_key(gw) -> None:
    fake, srv = gw
    assert admin(srv, "GET", "/admin/cache/stats", key="key-a").status_code in (401, 403)
    response = admin(srv, "DELETE", "/admin/cache", key="key-a")
    assert response.status_code in (401, 403) and "error" in response.json()


def test_stats_report_process_counters(gw) -> None:
    fake, srv = gw
    store(srv, "What is an API?")
    ask(srv, "What is an API ?")
    stats = admin(srv, "GET", "/admin/cache/stats").json()
    process = stats["process"]
    assert process["embedder"] == "ready (onnx/int8)"  # the default runner, named
    assert process["lookups"]["semantic"]["hit"] >= 1
    assert process["semantic_indexed"] >= 1
    assert process["timings"]["embed_ms_per_batch"] > 0


def test_two_gateways_share_both_layers(fake_openai, serve_gateway, redis_url) -> None:
    fake, up = fake_openai
    one = serve_gateway(policy(up.url))
    two = serve_gateway(policy(up.url))
    semantic_ready(one)
    semantic_ready(two)
    store(one, "How do I make pancakes?")
    assert ask(two, "How do I make pancakes?")[1]["x-cache"] == "HIT-EXACT"
    # the entry reaches the other process through the events stream (no-store: a miss while waiting for it
    # must not leave an exact entry of the paraphrase behind)
    def semantic_hit() -> tuple | None:
        completion, headers = ask(two, "how do I make pancakes", headers={"Cache-Control": "no-store"})
        return (completion, headers) if headers["x-cache"] == "HIT-SEMANTIC" else None

    found = until(semantic_hit, 30)
    assert found is not None
    assert found[0].choices[0].message.content == "echo: How do I make pancakes?"  # the answer stored by `one`


def test_a_gateway_started_later_loads_existing_entries(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    one = serve_gateway(policy(up.url))
    semantic_ready(one)
    store(one, "Why is the sky blue?")
    late = serve_gateway(policy(up.url))
    semantic_ready(late)
    _, headers = ask(late, "why is the sky blue")
    assert headers["x-cache"] == "HIT-SEMANTIC"
