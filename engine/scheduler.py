"""Continuous batching under a token budget, chunked prefill, preemption by recompute.

There is no prefill or decode phase: each sequence has `num_computed_tokens` and the scheduler hands
out `num_tokens - num_computed_tokens` (clipped to the budget) per step. Running sequences go first,
decodes before prefill chunks, so a long prompt costs the others at most one chunk per step. When
blocks run out the newest running sequence is preempted (its blocks freed, recomputed later).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.block_manager import BlockManager
from engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]  # one-token steps (decodes, by length) first, then multi-token chunks
    num_tokens: list[int]
    num_decodes: int

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_chunked_prefill: bool) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = enable_chunked_prefill
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.prefix_cache_queries = 0  # prompt tokens looked up at admission
        self.prefix_cache_hits = 0  # of which found cached

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        budget = self.max_num_batched_tokens
        scheduled: dict[Sequence, int] = {}
        preempted = False
        # Running first: decodes (one token left) ahead of unfinished prefills.
        for seq in sorted(self.running, key=lambda s: s.num_tokens - s.num_computed_tokens != 1):
            if budget == 0:
                break
            if seq.status != SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            remaining = seq.num_tokens - seq.num_computed_tokens
            del seq.draft_token_ids[max(0, budget - remaining):]  # drafts only in what the budget leaves
            n = min(remaining + len(seq.draft_token_ids), budget)
            while not self.block_manager.allocate(seq, n):
                if seq.draft_token_ids:  # give up speculating before preempting anyone for it
                    seq.draft_token_ids.clear()
                    n = min(remaining, budget)
                    continue
                victim = max(self.running, key=lambda s: s.seq_id)
                self._preempt(victim)
                preempted = True
                budget += scheduled.pop(victim, 0)
                if victim is seq:
                    break
            else:
                scheduled[seq] = n
                budget -= n
        if not preempted:
            budget = self._admit_waiting(budget, scheduled)
        # Decodes first, shortest context first (the attention pads each group of decodes to its longest).
        items = sorted(scheduled.items(), key=lambda kv: (kv[1] != 1, kv[0].num_tokens if kv[1] == 1 else 0))
        return ScheduledBatch([s for s, _ in items], [n for _, n in items], sum(1 for _, n in items if n == 1))

    def _admit_waiting(self, budget: int, scheduled: dict[Sequence, int]) -> int:
        held: list[Sequence] = []
        while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.waiting.popleft()
            if self._waits_for_leader(seq):
                held.append(seq)
                continue
            cached = self.block_manager.find_cached_blocks(seq)
            num_cached = len(cached) * self.block_manager.block_size
            n = seq.num_tokens - num_cached
            if n > budget:
                # Without chunking a prompt waits for a whole budget, unless no budget could ever hold it.
                whole_budget_too_small = n > self.max_num_batched_tokens and not scheduled
                if not self.enable_chunked_prefill and not whole_budget_too_small:
                    self.waiting.appendleft(seq)
                    break
                n = budget
            if not self.block_manager.allocate(seq, n, cached):
                self.waiting.appendleft(seq)
                break
            seq.num_computed_tokens = num_cached
            if seq.num_cached_tokens is None:
                seq.num_cached_tokens = num_cached
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += num_cached
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            scheduled[seq] = n
            budget -= n
        self.waiting.extendleft(reversed(held))
        return budget

    def _waits_for_leader(self, seq: Sequence) -> bool:
        """Choices 1..n-1 of a request wait for choice 0's prompt, then reuse its cached blocks."""
        leader = seq.leader
        if leader is None or not self.block_manager.enable_prefix_caching or leader.is_finished:
            return False
        return leader.num_computed_tokens < leader.num_prompt_tokens

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free_sequence(seq)
        seq.draft_token_ids.clear()
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.running.remove(seq)
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def finish(self, seq: Sequence, reason: str) -> None:
        """Mark finished and free its blocks at once (also used for aborts)."""
        if seq.status == SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status == SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free_sequence(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
