"""CUDA graphs for decode steps: captured once per (batch size, block-table width), replayed with static input
buffers."""

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


def capture_widths(max_blocks: int) -> list[int]:
    """Block-table widths to capture: 8, 32, 128, ... (x4) and max_blocks itself.

    A decode step gathers and attends over width * block_size keys per sequence, so graphs captured only at the
    model's whole window made every step pay for 8k keys a sequence: 440 tok/s at batch 64 on an H200, where
    the model's own work is a few milliseconds a step.
    """
    widths = []
    width = 8
    while width < max_blocks:
        widths.append(width)
        width *= 4
    return widths + [max_blocks]


def graph_batch_size(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest captured size that holds `num_seqs` (a batch, or a table width), or None (run eagerly)."""
    return next((s for s in sizes if s >= num_seqs), None)


class DecodeGraphs:
    def __init__(self, model: LlamaForCausalLM, max_num_seqs: int, max_blocks: int, scratch_block: int,
                 block_size: int, device: torch.device) -> None:
        self.model = model
        self.sizes = capture_sizes(max_num_seqs)
        self.widths = capture_widths(max_blocks)
        self.scratch_block = scratch_block
        self.scratch_slot = scratch_block * block_size
        n = self.sizes[-1]
        self.input_ids = torch.zeros(n, dtype=torch.long, device=device)
        self.positions = torch.zeros(n, dtype=torch.long, device=device)
        self.slots = torch.full((n,), self.scratch_slot, dtype=torch.long, device=device)
        self.block_tables = torch.full((n, max_blocks), scratch_block, dtype=torch.long, device=device)
        self.context_lens = torch.ones(n, dtype=torch.long, device=device)
        self.max_blocks = max_blocks
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._capture()

    def _meta(self, bs: int, width: int) -> AttentionMetadata:
        return AttentionMetadata(self.slots[:bs], bs, self.block_tables[:bs, :width], self.context_lens[:bs], [])

    @torch.inference_mode()
    def _capture(self) -> None:
        pool = None
        for width in reversed(self.widths):  # largest first so smaller graphs reuse its memory pool
            for bs in reversed(self.sizes):
                meta = self._meta(bs, width)
                self.model(self.input_ids[:bs], self.positions[:bs], meta)  # warm-up outside capture
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool):
                    out = self.model(self.input_ids[:bs], self.positions[:bs], meta)
                pool = graph.pool()
                self.graphs[bs, width] = (graph, out)
        torch.cuda.synchronize()

    def can_run(self, num_seqs: int) -> bool:
        return graph_batch_size(num_seqs, self.sizes) is not None

    def run(self, input_ids: list[int], positions: list[int], slots: list[int],
            block_tables: list[list[int]], context_lens: list[int]) -> torch.Tensor:
        n = len(input_ids)
        bs = graph_batch_size(n, self.sizes)
        width = graph_batch_size(max(len(t) for t in block_tables), self.widths)
        assert bs is not None and width is not None
        padded = [t + [self.scratch_block] * (width - len(t)) for t in block_tables]
        self.input_ids[:n].copy_(torch.tensor(input_ids), non_blocking=True)
        self.positions[:n].copy_(torch.tensor(positions), non_blocking=True)
        self.slots[:n].copy_(torch.tensor(slots), non_blocking=True)
        self.block_tables[:n, :width].copy_(torch.tensor(padded), non_blocking=True)
        self.context_lens[:n].copy_(torch.tensor(context_lens), non_blocking=True)
        self.slots[n:bs].fill_(self.scratch_slot)
        self.block_tables[n:bs, :width].fill_(self.scratch_block)
        self.context_lens[n:bs].fill_(1)
        self.positions[n:bs].zero_()
        graph, out = self.graphs[bs, width]
        graph.replay()
        return out[:n]
