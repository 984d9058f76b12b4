"""Paged KV blocks: ref counts, chained prefix hashes over full blocks, lazy LRU eviction, KV events.

A block is `used` while some sequence references it and `free` otherwise. Free blocks keep their hash
(and stay findable) until popped for reuse: that pop is the eviction. Unhashed blocks are freed to the
front of the free queue (reused first); hashed ones to the back, so the least recently used cached
block is evicted first.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence as Seq
from typing import Protocol

from engine.kv_events import KVEvent

ROOT_PARENT = b"\x00" * 8


def hash_block_tokens(parent_hash: int | None, token_ids: Seq[int]) -> int:
    """Chained block hash: H(parent hash, this block's tokens); stable across processes."""
    parent = ROOT_PARENT if parent_hash is None else parent_hash.to_bytes(8, "little")
    digest = hashlib.blake2b(parent + array("I", token_ids).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def hash_prompt_blocks(token_ids: Seq[int], block_size: int) -> list[int]:
    """Hashes of every full block of `token_ids`, in order (what a router needs to mirror the engine)."""
    hashes: list[int] = []
    parent: int | None = None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block_tokens(parent, token_ids[start:start + block_size])
        hashes.append(parent)
    return hashes


class BlockOwner(Protocol):
    """What the block manager needs from a sequence."""

    token_ids: list[int]
    block_table: list[int]
    block_hashes: list[int]  # hashes of the full blocks of token_ids, extended as tokens are appended
    num_computed_tokens: int
    num_registered_blocks: int  # leading blocks of block_table already offered to the prefix cache


class Block:
    __slots__ = ("block_id", "ref_count", "block_hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: int | None = None
        self.token_ids: tuple[int, ...] = ()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV cache must hold at least one block, got {num_blocks}")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.used: set[int] = set()
        self.hash_to_block: dict[int, int] = {}
        self.events: list[KVEvent] = []

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_cached_blocks(self, seq: BlockOwner) -> list[int]:
        """Longest run of cached full blocks of the sequence, never covering its last token."""
        if not self.enable_prefix_caching:
            return []
        max_blocks = (len(seq.token_ids) - 1) // self.block_size
        hits: list[int] = []
        for i, h in enumerate(seq.block_hashes[:max_blocks]):
            block_id = self.hash_to_block.get(h)
            if block_id is None:
                break
            start = i * self.block_size
            if self.blocks[block_id].token_ids != tuple(seq.token_ids[start:start + self.block_size]):
                break  # a hash collision: treat as a miss
            hits.append(block_id)
        return hits

    def allocate(self, seq: BlockOwner, num_new_tokens: int, cached_blocks: list[int] | None = None) -> bool:
        """Give the sequence blocks for its computed tokens plus `num_new_tokens`; False if they do not fit."""
        cached_blocks = cached_blocks or []
        total = seq.num_computed_tokens + len(cached_blocks) * self.block_size + num_new_tokens
        new_needed = self.blocks_needed(total) - len(seq.block_table) - len(cached_blocks)
        revived = sum(1 for b in cached_blocks if self.blocks[b].ref_count == 0)
        if new_needed + revived > len(self.free):
            return False
        for block_id in cached_blocks:
            self._touch(block_id)
        seq.block_table.extend(cached_blocks)
        for _ in range(max(new_needed, 0)):
            seq.block_table.append(self._pop_free())
        return True

    def cache_full_blocks(self, seq: BlockOwner) -> None:
        """Register the sequence's computed full blocks under their chained hashes; record `stored` events."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_hashes))
        run: list[int] = []  # indexes of newly registered, consecutive blocks (one event per run)
        for i in range(seq.num_registered_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            h = seq.block_hashes[i]
            if block.block_hash is not None or h in self.hash_to_block:
                # Already cached (a prefix hit), or another sequence computed the same block first:
                # that copy stays private and is freed like any unhashed block.
                self._emit_stored(seq, run)
                run = []
                continue
            block.block_hash = h
            block.token_ids = tuple(seq.token_ids[i * self.block_size:(i + 1) * self.block_size])
            self.hash_to_block[h] = block.block_id
            run.append(i)
        self._emit_stored(seq, run)
        seq.num_registered_blocks = max(seq.num_registered_blocks, num_full)

    def _emit_stored(self, seq: BlockOwner, run: list[int]) -> None:
        if not run:
            return
        first, last = run[0], run[-1]
        parent = seq.block_hashes[first - 1] if first else None
        tokens = seq.token_ids[first * self.block_size:(last + 1) * self.block_size]
        self.events.append(KVEvent("stored", [seq.block_hashes[i] for i in run], parent, list(tokens), self.block_size))

    def free_sequence(self, seq: BlockOwner) -> None:
        """Drop the sequence's references, tail first so its longest prefixes are evicted first."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0, f"block {block_id} freed more often than referenced"
            if block.ref_count == 0:
                self.used.discard(block_id)
                self.free[block_id] = None
                if block.block_hash is None:
                    self.free.move_to_end(block_id, last=False)
        seq.block_table.clear()
        seq.num_registered_blocks = 0

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only possible when no block is in use."""
        if self.used:
            return False
        removed = [b.block_hash for b in self.blocks if b.block_hash is not None]
        for block in self.blocks:
            block.block_hash, block.token_ids = None, ()
        self.hash_to_block.clear()
        if removed:
            self.events.append(KVEvent("removed", removed))
        return True

    def drain_events(self) -> list[KVEvent]:
        events, self.events = self.events, []
        return events

    def usage(self) -> float:
        return len(self.used) / len(self.blocks)

    def _touch(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free[block_id]
            self.used.add(block_id)
        block.ref_count += 1

    def _pop_free(self) -> int:
        block_id, _ = self.free.popitem(last=False)
        block = self.blocks[block_id]
        if block.block_hash is not None:  # lazy eviction of a cached block
            if self.hash_to_block.get(block.block_hash) == block_id:
                del self.hash_to_block[block.block_hash]
            self.events.append(KVEvent("removed", [block.block_hash]))
            block.block_hash, block.token_ids = None, ()
        block.ref_count = 1
        self.used.add(block_id)
        return block_id
