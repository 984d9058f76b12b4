"""Block manager invariants (hypothesis state machine) and prefix-cache behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine.block_manager import BlockManager, hash_block_tokens, hash_prompt_blocks

BS = 4


@dataclass(eq=False)
class FakeSeq:
    token_ids: list[int]
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_registered_blocks: int = 0

    def __post_init__(self) -> None:
        self.block_hashes = hash_prompt_blocks(self.token_ids, BS)

    def append(self, token: int) -> None:
        self.token_ids.append(token)
        if len(self.token_ids) % BS == 0:
            parent = self.block_hashes[-1] if self.block_hashes else None
            self.block_hashes.append(hash_block_tokens(parent, self.token_ids[-BS:]))


def admit(bm: BlockManager, seq: FakeSeq) -> bool:
    cached = bm.find_cached_blocks(seq)
    n = len(seq.token_ids) - len(cached) * BS
    if not bm.allocate(seq, n, cached):
        return False
    seq.num_computed_tokens = len(seq.token_ids)
    bm.cache_full_blocks(seq)
    return True


class BlockManagerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.bm = BlockManager(12, BS)
        self.live: list[FakeSeq] = []

    # Small alphabets and a few shared prefixes, so hits, revivals and evictions all happen.
    @rule(prefix=st.sampled_from([[], [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]]),
          tail=st.lists(st.integers(0, 3), min_size=1, max_size=9))
    def add(self, prefix: list[int], tail: list[int]) -> None:
        seq = FakeSeq(prefix + tail)
        cached = self.bm.find_cached_blocks(seq)
        assert len(cached) * BS <= len(seq.token_ids) - 1, "a hit must leave the last token to compute"
        referenced = {b for b in range(self.bm.num_blocks) if self.bm.blocks[b].ref_count > 0}
        snapshot = {b: (self.bm.blocks[b].block_hash, self.bm.blocks[b].token_ids) for b in referenced}
        if admit(self.bm, seq):
            self.live.append(seq)
        for b, state in snapshot.items():  # eviction never touches a referenced block
            assert (self.bm.blocks[b].block_hash, self.bm.blocks[b].token_ids) == state

    @precondition(lambda self: self.live)
    @rule(data=st.data(), token=st.integers(0, 3))
    def decode(self, data: st.DataObject, token: int) -> None:
        seq = data.draw(st.sampled_from(self.live))
        seq.append(token)
        if self.bm.allocate(seq, 1):
            seq.num_computed_tokens += 1
            self.bm.cache_full_blocks(seq)
        else:
            seq.token_ids.pop()
            if len(seq.block_hashes) * BS > len(seq.token_ids):
                seq.block_hashes.pop()

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.live))
        self.live.remove(seq)
        self.bm.free_sequence(seq)
        assert seq.block_table == []

    @invariant()
    def ref_counts_match_tables(self) -> None:
        counts = [0] * self.bm.num_blocks
        for seq in self.live:
            for b in seq.block_table:
                counts[b] += 1
        assert counts == [blk.ref_count for blk in self.bm.blocks]
        assert all(c >= 0 for c in counts)

    @invariant()
    def each_block_free_xor_used(self) -> None:
        free, used = set(self.bm.free), self.bm.used
        assert not free & used
        assert free | used == set(range(self.bm.num_blocks))
        assert all((self.bm.blocks[b].ref_count > 0) == (b in used) for b in range(self.bm.num_blocks))

    @invariant()
    def hashes_point_at_exact_tokens(self) -> None:
        for h, b in self.bm.hash_to_block.items():
            block = self.bm.blocks[b]
            assert block.block_hash == h and len(block.token_ids) == BS
        for seq in self.live:  # every registered block of a live sequence holds that sequence's tokens
            for i, b in enumerate(seq.block_table):
                block = self.bm.blocks[b]
                if block.block_hash is not None:
                    assert block.token_ids == tuple(seq.token_ids[i * BS:(i + 1) * BS])
                    assert block.block_hash == seq.block_hashes[i]

    @invariant()
    def tables_cover_computed_tokens(self) -> None:
        for seq in self.live:
            assert len(seq.block_table) == -(-seq.num_computed_tokens // BS)


TestBlockManagerMachine = BlockManagerMachine.TestCase
TestBlockManagerMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_chained_hash_depends_on_parent_and_tokens() -> None:
    a = hash_block_tokens(None, [1, 2, 3, 4])
    assert a == hash_block_tokens(None, [1, 2, 3, 4])
    assert a != hash_block_tokens(None, [1, 2, 3, 5])
    assert hash_block_tokens(a, [5, 6, 7, 8]) != hash_block_tokens(None, [5, 6, 7, 8])
    assert hash_prompt_blocks([1, 2, 3, 4, 5, 6, 7, 8, 9], 4) == [a, hash_block_tokens(a, [5, 6, 7, 8])]


def test_hit_never_covers_last_token_and_only_full_blocks() -> None:
    bm = BlockManager(8, BS)
    first = FakeSeq(list(range(8)))
    assert admit(bm, first)
    same = FakeSeq(list(range(8)))  # identical 2-block prompt: only the first block may hit
    assert len(bm.find_cached_blocks(same)) == 1
    longer = FakeSeq(list(range(9)))
    assert len(bm.find_cached_blocks(longer)) == 2


def test_freed_cached_blocks_are_reused_then_evicted_lru() -> None:
    bm = BlockManager(4, BS)
    a = FakeSeq([1, 1, 1, 1, 9])
    assert admit(bm, a)
    bm.free_sequence(a)
    assert bm.num_free_blocks == 4
    again = FakeSeq([1, 1, 1, 1, 7])
    assert len(bm.find_cached_blocks(again)) == 1  # still cached while free
    bm.drain_events()
    big = FakeSeq([2] * 16)  # needs all 4 blocks: evicts the cached one
    assert admit(bm, big)
    events = bm.drain_events()
    removed = [h for e in events if e.kind == "removed" for h in e.block_hashes]
    assert removed == [a.block_hashes[0]]
    assert bm.find_cached_blocks(FakeSeq([1, 1, 1, 1, 7])) == []


def test_unhashed_blocks_are_reused_before_cached_ones() -> None:
    bm = BlockManager(4, BS)
    cached = FakeSeq([3, 3, 3, 3, 3])  # one full (cached) block and one partial block
    assert admit(bm, cached)
    bm.free_sequence(cached)
    fresh = FakeSeq([5, 5])
    assert admit(bm, fresh)
    assert bm.find_cached_blocks(FakeSeq([3, 3, 3, 3, 0])) != []


def test_stored_events_carry_chain_and_tokens() -> None:
    bm = BlockManager(8, BS)
    seq = FakeSeq(list(range(10)))
    assert admit(bm, seq)
    (event,) = bm.drain_events()
    assert event.kind == "stored" and event.parent_hash is None
    assert event.block_hashes == seq.block_hashes[:2] and event.token_ids == list(range(8))
    seq.append(10)
    seq.append(11)
    assert bm.allocate(seq, 2)
    seq.num_computed_tokens = 12
    bm.cache_full_blocks(seq)
    (event,) = bm.drain_events()
    assert event.parent_hash == seq.block_hashes[1] and event.block_hashes == [seq.block_hashes[2]]


def test_allocation_failure_changes_nothing() -> None:
    bm = BlockManager(2, BS)
    seq = FakeSeq(list(range(12)))
    assert not bm.allocate(seq, 12)
    assert seq.block_table == [] and bm.num_free_blocks == 2 and not bm.used


def test_prefix_caching_off_never_hits() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=False)
    assert admit(bm, FakeSeq(list(range(9))))
    assert bm.find_cached_blocks(FakeSeq(list(range(9)))) == [] and not bm.hash_to_block


def test_duplicate_blocks_stay_private_and_events_stay_contiguous() -> None:
    bm = BlockManager(16, BS)
    a, b = FakeSeq(list(range(12))), FakeSeq(list(range(12)))
    for seq in (a, b):  # both computed before either registered: no hit for b
        assert bm.allocate(seq, 12)
        seq.num_computed_tokens = 12
    bm.cache_full_blocks(a)
    bm.cache_full_blocks(b)
    (event,) = bm.drain_events()
    assert event.block_hashes == a.block_hashes[:3]
    assert all(bm.blocks[x].block_hash is None for x in b.block_table)
    bm.free_sequence(b)
    assert len(bm.find_cached_blocks(FakeSeq(list(range(13))))) == 3
