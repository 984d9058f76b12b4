"""CUDA graphs for decode steps: captured once per batch size, replayed with static input buffers."""

from __future__ import annotations

import torch

from engine.layers.attention import AttentionMetadata
from engine.models.llama import LlamaForCausalLM


def use_cuda_graphs(device_type: str, enforce_eager: bool) -> bool:
    return device_type == "cuda" and not enforce_eager


def capture_sizes(max_num_seqs: int) -> list[int]:
    """Batch sizes to capture: 1, 2, 4, 8, then every 16 up to max_num_seqs (which is always included)."""
    sizes = [s for s in (1, 2, 4, 8) if s < max_num_seqs] + list(range(16, max_num_seqs, 16))
    return sorted(set(sizes + [max_num_seqs]))


def graph_batch_size(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest captured size that holds `num_seqs`, or None (run eagerly)."""
    return next((s for s in sizes if s >= num_seqs), None)


class DecodeGraphs:
    def __init__(self, model: LlamaForCausalLM, max_num_seqs: int, max_blocks: int, scratch_block: int,
                 block_size: int, device: torch.device) -> None:
        self.model = model
        self.sizes = capture_sizes(max_num_seqs)
        self.scratch_block = scratch_block
        self.scratch_slot = scratch_block * block_size
        n = self.sizes[-1]
        self.input_ids = torch.zeros(n, dtype=torch.long, device=device)
        self.positions = torch.zeros(n, dtype=torch.long, device=device)
        self.slots = torch.full((n,), self.scratch_slot, dtype=torch.long, device=device)
        self.block_tables = torch.full((n, max_blocks), scratch_block, dtype=torch.long, device=device)
        self.context_lens = torch.ones(n, dtype=torch.long, device=device)
        self.max_blocks = max_blocks
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._capture()

    def _meta(self, bs: int) -> AttentionMetadata:
        return AttentionMetadata(self.slots[:bs], bs, self.block_tables[:bs], self.context_lens[:bs], [])

    @torch.inference_mode()
    def _capture(self) -> None:
        pool = None
        for bs in reversed(self.sizes):  # largest first so smaller graphs reuse its memory pool
            self.model(self.input_ids[:bs], self.positions[:bs], self._meta(bs))  # warm-up outside capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool):
                out = self.model(self.input_ids[:bs], self.positions[:bs], self._meta(bs))
            pool = graph.pool()
            self.graphs[bs] = (graph, out)
        torch.cuda.synchronize()

    def can_run(self, num_seqs: int) -> bool:
        return graph_batch_size(num_seqs, self.sizes) is not None

    def run(self, input_ids: list[int], positions: list[int], slots: list[int],
            block_tables: list[list[int]], context_lens: list[int]) -> torch.Tensor:
        n = len(input_ids)
        bs = graph_batch_size(n, self.sizes)
        assert bs is not None
        padded = [t + [self.scratch_block] * (self.max_blocks - len(t)) for t in block_tables]
        self.input_ids[:n].copy_(torch.tensor(input_ids), non_blocking=True)
        self.positions[:n].copy_(torch.tensor(positions), non_blocking=True)
        self.slots[:n].copy_(torch.tensor(slots), non_blocking=True)
        self.block_tables[:n].copy_(torch.tensor(padded), non_blocking=True)
        self.context_lens[:n].copy_(torch.tensor(context_lens), non_blocking=True)
        self.slots[n:bs].fill_(self.scratch_slot)
        self.block_tables[n:bs].fill_(self.scratch_block)
        self.context_lens[n:bs].fill_(1)
        self.positions[n:bs].zero_()
        graph, out = self.graphs[bs]
        graph.replay()
        return out[:n]
