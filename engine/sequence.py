"""One sequence being generated: its tokens, progress, blocks and output state."""

from __future__ import annotations

import itertools
from enum import Enum
from typing import Any

import torch

from engine.block_manager import hash_block_tokens, hash_prompt_blocks
from engine.detokenizer import IncrementalDetokenizer
from engine.sampling_params import SamplingParams

_counter = itertools.count()


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(self, request_id: str, index: int, prompt_token_ids: list[int], params: SamplingParams,
                 block_size: int, max_len: int, detokenizer: IncrementalDetokenizer | None) -> None:
        self.seq_id = next(_counter)  # arrival order: higher = newer (preempted first)
        self.request_id = request_id
        self.index = index  # choice index when n > 1
        self.params = params
        self.block_size = block_size
        self.max_len = max_len  # prompt + output may not exceed this (window or cache size)
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.block_hashes = hash_prompt_blocks(self.token_ids, block_size)
        self.block_table: list[int] = []
        self.num_computed_tokens = 0
        self.num_registered_blocks = 0  # see BlockManager.cache_full_blocks
        self.num_cached_tokens: int | None = None  # prefix-cache hit at first admission
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.detokenizer = detokenizer
        self.generator: torch.Generator | None = None
        if params.seed is not None:
            self.generator = torch.Generator().manual_seed(params.seed + index)
        self.logprobs: list[dict] = []  # entries not yet handed out
        self.num_emitted_tokens = 0  # output tokens already reported in a RequestOutput
        self.leader: Sequence | None = None  # choice 0 of the same request, when this is choice 1..n-1
        # xgrammar GrammarMatcher when the output is constrained: it has accepted exactly the output tokens,
        # so preemption by recompute (which keeps the tokens) leaves it valid.
        self.matcher: Any = None
        # Speculative proposals for this step only (engine/spec_decode.py): scheduled and verified after the
        # last real token, then cleared; never set while the sequence waits or prefills.
        self.draft_token_ids: list[int] = []

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
        if len(self.token_ids) % self.block_size == 0:
            parent = self.block_hashes[-1] if self.block_hashes else None
            self.block_hashes.append(hash_block_tokens(parent, self.token_ids[-self.block_size:]))

    def check_stop(self, token_id: int, eos_token_ids: set[int]) -> str | None:
        """The finish reason after `token_id` was appended, or None to keep going."""
        p = self.params
        if not p.ignore_eos and token_id in eos_token_ids:
            return "stop"
        if token_id in p.stop_token_ids:
            return "stop"
        if self.detokenizer is not None and self.detokenizer.add(token_id):
            return "stop"
        if p.max_tokens is not None and self.num_output_tokens >= p.max_tokens:
            return "length"
        if self.num_tokens >= self.max_len:
            return "length"
        return None
