"""The prefix router's choice logic: longest cached prefix against queue cost, shared prefixes, SGLang's
imbalance override, and the KV mirror (snapshot, stored, removed, optimistic entries that expire)."""

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


def test_a_cached_history_outweighs_a_request_more_in_flight() -> None:
    """The old rule (prefill blocks + active blocks) gave a 30-block cached history away to a replica one request
    less busy; a queued request now costs load_weight * mean request size, and the history stays."""
    router = make("a", "b")
    hashes = list(range(1, 31))
    router.apply_snapshot("a", hashes)
    busy(router, "a", 1, 31)
    decision = router.choose(hashes, 30 * B + 5)
    assert (decision.replica, decision.reason, decision.override) == ("a", "prefix", False)


def test_a_deep_queue_outweighs_a_short_prefix() -> None:
    router = make("a", "b")
    hashes = list(range(1, 11))
    router.apply_snapshot("a", hashes[:1])
    busy(router, "a", 6)
    decision = router.choose(hashes, 10 * B + 1)
    assert (decision.replica, decision.reason) == ("b", "load")


def test_overlap_weight_scales_the_prefill_term() -> None:
    hashes = list(range(1, 9))
    for weight, expected in ((0.1, "idle"), (4.0, "cached")):
        router = make("cached", "idle", overlap_weight=weight)
        router.apply_snapshot("cached", hashes)
        busy(router, "cached", 4)
        assert router.choose(hashes, 8 * B).replica == expected


def test_new_conversations_spread_off_a_shared_prefix_while_old_ones_stay() -> None:
    """Blocks that conversations branch from (a shared system prompt) are cheap to copy; a history is not."""
    router = make("a", "b", load_weight=1.0)
    system = list(range(1, 21))
    first = [*system, *range(101, 111)]  # a conversation ten blocks past the system prompt
    second = [*system, 201, 202]
    for hashes in (first, second):  # both conversations start on a, which then holds the system prompt
        router.apply_snapshot("a", sorted(set(router.replicas["a"].confirmed) | set(hashes)))
        router.branches.observe(hashes)
    busy(router, "a", 2)
    third = [*system, 301, 302]
    assert router.branches.shared_depth(third) == len(system)
    assert router.choose(third, 22 * B + 1).replica == "b"  # a new conversation: the system prompt is copied
    later = [*first, 111, 112]
    assert router.choose(later, 32 * B + 1).replica == "a"  # an old one: its history stays where it is


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
    assert (decision.replica, decision.reason, decision.override) == ("cold", "load", True)


def test_no_override_when_the_relative_gap_is_small() -> None:
    router = make("hot", "cold")
    hashes = list(range(1, 41))
    router.apply_snapshot("hot", hashes)
    busy(router, "hot", 200)
    busy(router, "cold", 140)  # gap 60 < 64
    assert not router.choose(hashes, 40 * B + 1).override
    busy(router, "hot", 10)
    busy(router, "cold", 5)  # gap 65 > 64 but 210 < 1.5 * 145
    assert not router.choose(hashes, 40 * B + 1).override


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
