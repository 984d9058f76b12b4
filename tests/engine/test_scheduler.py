"""Scheduler: token budget, chunked prefill next to decodes, preemption newest-first, no deadlock."""

from __future__ import annotations

from engine.block_manager import BlockManager
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledBatch, Scheduler
from engine.sequence import Sequence, SequenceStatus

BS = 4


def make_seq(n_prompt: int, first_token: int = 1, max_tokens: int = 100) -> Sequence:
    prompt = [first_token + i % 7 for i in range(n_prompt)]
    return Sequence("r", 0, prompt, SamplingParams(max_tokens=max_tokens), BS, 10_000, None)


def run_step(sched: Scheduler, batch: ScheduledBatch) -> list[Sequence]:
    """What the engine does after the forward pass: advance, cache, append a token where due."""
    sampled = []
    for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
        seq.num_computed_tokens += n
        sched.block_manager.cache_full_blocks(seq)
        if seq.num_computed_tokens == seq.num_tokens:
            seq.append_token(5)
            sampled.append(seq)
    return sampled


def test_admits_within_max_num_seqs_and_budget() -> None:
    sched = Scheduler(BlockManager(100, BS), max_num_seqs=2, max_num_batched_tokens=10, enable_chunked_prefill=True)
    seqs = [make_seq(4), make_seq(4), make_seq(4)]
    for s in seqs:
        sched.add(s)
    batch = sched.schedule()
    assert batch.seqs == seqs[:2] and batch.num_tokens == [4, 4]
    assert len(sched.waiting) == 1


def test_long_prompt_is_chunked_and_never_stalls_decodes() -> None:
    sched = Scheduler(BlockManager(100, BS), max_num_seqs=4, max_num_batched_tokens=8, enable_chunked_prefill=True)
    short = make_seq(3)
    sched.add(short)
    run_step(sched, sched.schedule())  # short is now decoding
    long = make_seq(50, first_token=2)
    sched.add(long)
    chunks = 0
    while long.num_computed_tokens < long.num_prompt_tokens:
        batch = sched.schedule()
        assert batch.seqs[0] is short and batch.num_tokens[0] == 1, "the decode goes first, every step"
        assert batch.total_tokens <= 8
        run_step(sched, batch)
        chunks += 1
    assert chunks == -(-50 // 7)


def test_without_chunking_a_prompt_waits_for_a_whole_budget() -> None:
    sched = Scheduler(BlockManager(100, BS), max_num_seqs=4, max_num_batched_tokens=8, enable_chunked_prefill=False)
    a, b = make_seq(5), make_seq(5, first_token=3)
    sched.add(a)
    sched.add(b)
    batch = sched.schedule()
    assert batch.seqs == [a]  # b (5 tokens) does not fit the remaining 3 and is not chunked
    run_step(sched, batch)
    batch = sched.schedule()
    assert batch.seqs == [a, b] and batch.num_tokens == [1, 5]


def test_without_chunking_an_oversized_prompt_still_runs_alone() -> None:
    sched = Scheduler(BlockManager(100, BS), max_num_seqs=4, max_num_batched_tokens=8, enable_chunked_prefill=False)
    big = make_seq(20)
    sched.add(big)
    steps = 0
    while big.num_computed_tokens < 20:
        run_step(sched, sched.schedule())
        steps += 1
    assert steps == 3


def test_preempts_newest_first_and_recomputes() -> None:
    sched = Scheduler(BlockManager(4, BS), max_num_seqs=4, max_num_batched_tokens=64, enable_chunked_prefill=True)
    old, new = make_seq(7), make_seq(7, first_token=3)  # 2 blocks each: the cache is full after admission
    sched.add(old)
    sched.add(new)
    run_step(sched, sched.schedule())
    assert old.num_tokens == 8 and new.num_tokens == 8
    run_step(sched, sched.schedule())  # token 8 computed; each now needs a third block
    batch = sched.schedule()
    assert sched.num_preemptions == 1
    assert new.status == SequenceStatus.WAITING and new.num_computed_tokens == 0 and new.block_table == []
    assert batch.seqs == [old] and sched.waiting[0] is new
    while old.num_tokens < 16:
        run_step(sched, batch)
        batch = sched.schedule()
    sched.finish(old, "length")
    batch = sched.schedule()
    assert batch.seqs == [new] and batch.num_tokens == [new.num_tokens]  # recomputes prompt + outputs


def test_lone_sequence_that_outgrows_the_cache_preempts_itself_without_deadlock() -> None:
    sched = Scheduler(BlockManager(2, BS), max_num_seqs=4, max_num_batched_tokens=64, enable_chunked_prefill=True)
    seq = make_seq(8)
    sched.add(seq)
    run_step(sched, sched.schedule())
    batch = sched.schedule()  # needs a third block that does not exist
    assert batch.seqs == [] and seq.status == SequenceStatus.WAITING
    assert sched.block_manager.num_free_blocks == 2


def test_prefix_hits_are_counted_at_admission() -> None:
    sched = Scheduler(BlockManager(100, BS), max_num_seqs=4, max_num_batched_tokens=64, enable_chunked_prefill=True)
    first = make_seq(10)
    sched.add(first)
    run_step(sched, sched.schedule())
    second = make_seq(10)
    sched.add(second)
    batch = sched.schedule()
    assert second.num_cached_tokens == 8 and batch.num_tokens[-1] == 2
    assert sched.prefix_cache_queries == 20 and sched.prefix_cache_hits == 8


def test_n_siblings_wait_for_the_leader_prompt_then_share_its_blocks() -> None:
    bm = BlockManager(100, BS)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=64, enable_chunked_prefill=True)
    leader, sibling = make_seq(12), make_seq(12)
    sibling.leader = leader
    sched.add(leader)
    sched.add(sibling)
    batch = sched.schedule()
    assert batch.seqs == [leader]
    run_step(sched, batch)
    batch = sched.schedule()
    assert sibling in batch.seqs and sibling.num_cached_tokens == 8
    assert sibling.block_table[:2] == leader.block_table[:2]
    assert bm.blocks[leader.block_table[0]].ref_count == 2
