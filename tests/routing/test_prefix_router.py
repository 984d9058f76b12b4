"""The prefix router's choice logic: longest cached prefix, Dynamo's block cost, SGLang's imbalance override,
and the KV mirror (snapshot, stored, removed, optimistic entries that expire)."""

from __future__ import annotations

import pytest

from gateway.routing.prefix import OPTIMISTIC_TTL_S, PrefixRouter

B = 16


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(*names: str, **kw: object) -> PrefixRouter:
    router = PrefixRouter(B, **kw)  # type: ignore[arg-type]
    for n in names:
        router.add_replica(n)
    return router


def busy(router: PrefixRouter, name: str, requests: int, blocks_each: int = 1) -> None:
    state = router.replicas[name]
    state.inflight += requests
    state.active_blocks += requests * blocks_each


def test_longest_cached_prefix_wins_when_load_is_equal() -> None:
    router = make("a", "b", "c")
    hashes = [11, 12, 13, 14]
    router.apply_snapshot("a", [11])
    router.apply_snapshot("b", [11, 12, 13])
    router.apply_snapshot("c", [12, 13, 14])  # not a prefix: block 0 missing, so it holds nothing usable
    decision = router.choose(hashes, 4 * B + 5)
    assert decision.replica == "b"
    assert decision.cached_blocks == 3
    assert router.cached_blocks("c", hashes) == 0
    assert decision.reason == "prefix"


def test_cost_is_prefill_blocks_plus_active_blocks() -> None:
    """Dynamo's worked example: W1 = 8 + 10, W2 = 5 + 5 (chosen), W3 = 2 + 9."""
    router = make("w1", "w2", "w3")
    hashes = list(range(100, 110))  # 10 full blocks, 160 tokens + 1 partial token below
    router.apply_snapshot("w1", hashes[:2])   # 8 blocks + the tail left to prefill
    router.apply_snapshot("w2", hashes[:5])
    router.apply_snapshot("w3", hashes[:8])
    busy(router, "w1", 1, 10)
    busy(router, "w2", 1, 5)
    busy(router, "w3", 1, 9)
    num_tokens = 10 * B
    decision = router.choose(hashes, num_tokens)
    assert decision.replica == "w2"
    assert decision.cost == pytest.approx(5 + 5)


def test_overlap_weight_scales_the_prefill_term() -> None:
    hashes = list(range(1, 9))
    for weight, expected in ((1.0, "idle"), (4.0, "cached")):
        router = make("cached", "idle", overlap_weight=weight)
        router.apply_snapshot("cached", hashes)
        busy(router, "cached", 2, 10)  # 20 active blocks
        # cached: w*1 + 20; idle: w*8 + 0
        assert router.choose(hashes, 8 * B).replica == expected


def test_a_full_hit_still_prefills_the_last_token() -> None:
    router = make("a")
    hashes = [1, 2]
    router.apply_snapshot("a", hashes)
    decision = router.choose(hashes, 2 * B)  # the prompt is exactly two full blocks, both cached
    assert decision.cost == pytest.approx(1.0)  # one block holding the last token is recomputed


def test_imbalance_override_sends_to_the_least_loaded() -> None:
    router = make("hot", "cold")
    hashes = [1, 2, 3]
    router.apply_snapshot("hot", hashes)
    busy(router, "hot", 100)
    busy(router, "cold", 30)  # 100 - 30 > 64 and 100 > 1.5 * 30
    decision = router.choose(hashes, 3 * B + 1)
    assert (decision.replica, decision.reason) == ("cold", "imbalance")


def test_no_override_when_the_relative_gap_is_small() -> None:
    router = make("hot", "cold")
    hashes = list(range(1, 41))
    router.apply_snapshot("hot", hashes)
    busy(router, "hot", 200)
    busy(router, "cold", 140)  # gap 60 < 64
    first = router.choose(hashes, 40 * B + 1)
    assert (first.reason, first.replica) == ("prefix", "cold")  # 140 + 41 < 200 + 1
    busy(router, "hot", 10)
    busy(router, "cold", 5)  # gap 65 > 64 but 210 < 1.5 * 145
    decision = router.choose(hashes, 40 * B + 1)
    assert decision.reason == "prefix"
    assert decision.replica == "cold"  # by cost: 145 active + 41 to prefill < 210 active + 1


def test_removed_and_snapshot_events_update_the_mirror() -> None:
    router = make("a", "b")
    hashes = [7, 8, 9]
    router.apply_event("a", {"type": "snapshot", "block_size": B, "block_hashes": [7, 8]})
    router.apply_event("a", {"type": "stored", "block_hashes": [9], "parent_hash": 8})
    assert router.cached_blocks("a", hashes) == 3
    router.apply_event("a", {"type": "removed", "block_hashes": [8]})
    assert router.cached_blocks("a", hashes) == 1  # the chain breaks at the removed block
    router.apply_event("a", {"type": "snapshot", "block_size": B, "block_hashes": []})
    assert router.cached_blocks("a", hashes) == 0
    router.apply_event("a", {"type": "heartbeat"})  # ignored
    assert router.choose(hashes, 3 * B + 1).replica == "a"  # equal cost: name order decides


def test_routing_predicts_blocks_until_the_engine_confirms_or_they_expire() -> None:
    clock = Clock()
    router = make("a", "b", clock=clock)
    hashes = [21, 22, 23]
    first = router.choose(hashes, 3 * B + 2)
    ticket = router.start(first, hashes, 3 * B + 2)
    router.finish(ticket)
    # a second request with the same prefix follows the first before any event arrived
    assert router.choose(hashes, 3 * B + 2).replica == first.replica
    assert router.cached_blocks(first.replica, hashes) == 3
    router.apply_stored(first.replica, hashes[:2])  # the engine confirmed two of them
    clock.now += OPTIMISTIC_TTL_S + 1
    assert router.cached_blocks(first.replica, hashes) == 2  # the unconfirmed prediction expired


def test_inflight_bookkeeping_and_double_finish() -> None:
    router = make("a", "b")
    d = router.choose([], 40)
    t = router.start(d, [], 40)
    assert router.replicas[d.replica].inflight == 1
    assert router.replicas[d.replica].active_blocks == 3
    router.finish(t)
    router.finish(t)
    assert router.replicas[d.replica].inflight == 0
    assert router.replicas[d.replica].active_blocks == 0


def test_unhealthy_replicas_are_skipped_until_they_return() -> None:
    router = make("a", "b")
    router.apply_snapshot("a", [1, 2])
    router.set_healthy("a", False)
    assert router.choose([1, 2], 2 * B + 1).replica == "b"
    router.set_healthy("a", True)
    assert router.choose([1, 2], 2 * B + 1).replica == "a"  # a blip keeps the mirror; a restart's snapshot resets it
    router.set_healthy("a", False)
    router.set_healthy("b", False)
    with pytest.raises(LookupError):
        router.choose([1], B + 1)


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PrefixRouter(0)


def test_cold_prefixes_spread_to_the_emptier_cache() -> None:
    router = make("a", "b")
    router.apply_snapshot("a", [1, 2, 3])
    assert router.choose([50, 51], 2 * B + 1).replica == "b"  # same cost; b caches less
    router.apply_snapshot("b", [4, 5, 6, 7])
    assert router.choose([60, 61], 2 * B + 1).replica == "a"
