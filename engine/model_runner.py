"""Loads the model, owns the paged KV cache, turns a scheduled batch into one forward pass and samples."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import math
from functools import cache

import torch

from engine.config import EngineConfig
from engine.cuda_graph import DecodeGraphs, use_cuda_graphs
from engine.guided import GrammarRuntime, StepMasks
from engine.layers.attention import (
    AttentionMetadata,
    FlashPagedAttention,
    PrefillChunk,
    TorchPagedAttention,
    flash_attn_available,
    select_attention_backend,
)
from engine.layers.cpu_kernels import load_library, report_kernels
from engine.layers.linear import calibrate_kernel_rows, pack_linear_weights, packing_available
from engine.layers.quant import quantize_model
from engine.loader import load_weights
from engine.loader.dummy import init_dummy_weights
from engine.models.config import ModelConfig
from engine.models.llama import LlamaForCausalLM
from engine.sampler import SampleResult, sample
from engine.scheduler import ScheduledBatch
from engine.sequence import Sequence
from engine.spec_decode import verify

log = logging.getLogger(__name__)

DECODE_GROUP_SIZE = 16  # decodes per padded attention call on the torch path
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def num_kv_blocks(config: EngineConfig, model_config: ModelConfig, device: torch.device) -> int:
    """Blocks that fit the KV budget: kv_cache_memory on CPU, a fraction of free memory on GPU."""
    block_bytes = model_config.kv_bytes_per_token(DTYPES[config.dtype].itemsize) * config.block_size
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * config.gpu_memory_utilization)
    else:
        budget = config.kv_cache_memory
    blocks = budget // block_bytes
    if blocks < 1:
        raise ValueError(f"KV cache budget of {budget} bytes holds no block of {block_bytes} bytes")
    return blocks


# glibc mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's ceiling on 64-bit


@cache  # process-wide: set once, however many runners a process builds (replicas, tests)
def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks of up to 32 MiB for reuse instead of returning them to the OS.

    A CPU forward pass allocates and frees the same multi-megabyte activations every layer of every step. By
    default glibc serves such sizes with fresh mmaps (and trims its heap back), so each one is page-faulted in
    again on first touch: profiled on the mixed 32-request workload, prefill took 27.6 s with the defaults and
    22.2 s with freed memory kept. Process-wide and harmless elsewhere (memory stays at its peak, which a
    server reaches anyway). False where the C library is not glibc.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**30))


_MADV_HUGEPAGE = 14  # Linux
_HUGE_PAGE = 2 * 2**20


def zeros_on_huge_pages(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.zeros, on CPU laid out on 2 MiB transparent huge pages where Linux allows them.

    The decode kernel reads each sequence's KV blocks, a few KiB each, scattered over a cache of hundreds of MiB:
    with 4 KiB pages nearly every block costs a TLB miss, and under a hypervisor a nested page walk (measured on
    this VM: the kernel alone 4.4 -> 3.1 ms per layer at batch 32). The hint must precede the first touch, so
    the memory is advised before it is zeroed. Elsewhere (not Linux, THP off) it is plain zeroed memory.
    """
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    numel = math.prod(shape)
    buf = torch.empty(numel + _HUGE_PAGE // dtype.itemsize, dtype=dtype)
    start = (-buf.data_ptr()) % _HUGE_PAGE // dtype.itemsize  # the first 2 MiB boundary inside the buffer
    tensor = buf[start:start + numel].view(shape)
    length = numel * dtype.itemsize // _HUGE_PAGE * _HUGE_PAGE
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.madvise(ctypes.c_void_p(tensor.data_ptr()), ctypes.c_size_t(length), _MADV_HUGEPAGE)
    return tensor.zero_()


def kernels_not_used(device: torch.device, dtype: torch.dtype, c_kernels: bool) -> str:
    """Why the CPU C kernels do not apply (empty when they do)."""
    if device.type != "cpu":
        return f"device {device.type}"
    if dtype != torch.float32:
        return f"dtype {str(dtype).removeprefix('torch.')}"
    return "" if c_kernels else "c_kernels=False"


class ModelRunner:
    def __init__(self, config: EngineConfig, model_path: str, model_config: ModelConfig, max_model_len: int) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        self.dtype = DTYPES[config.dtype]
        if self.device.type == "cpu" and not keep_freed_memory():
            log.info("mallopt unavailable: CPU activations are page-faulted in afresh each step")
        self.block_size = config.block_size
        self.model_config = model_config
        model = LlamaForCausalLM.create_empty(model_config, max_model_len, torch.device("cpu"))
        if config.load_format == "dummy":
            init_dummy_weights(model)
        else:
            model.load_weights(load_weights(model_path))
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        quantize_model(self.model, config.quantization)  # after .to(): int8 layers keep their own dtypes
        # after quantize_model: only layers still float32 get packed; decode-sized inputs (a few rows) go to the
        # C small-M kernel when it builds (engine/layers/gemv.c)
        cpu_fp32 = self.device.type == "cpu" and self.dtype == torch.float32
        pack_linear_weights(self.model, pack=config.pack_weights and packing_available(self.device, self.dtype),
                            kernel=load_library() if cpu_fp32 and config.c_kernels else None)
        calibrate_kernel_rows(self.model)  # where both paths exist: which one serves how many rows, on this host
        self.model.rotary.build_tables(self.device)  # cos/sin tables stay in float32
        backend = select_attention_backend(self.device.type, flash_attn_available(), config.block_size)
        attention = FlashPagedAttention if backend == "flash_attn" else TorchPagedAttention
        # CPU fp32: decodes attend straight from the paged cache (no K/V gather) when the C kernel builds
        self.decode_kernel = load_library() if backend == "torch_sdpa" and cpu_fp32 and config.c_kernels else None
        self.model.set_attention(attention, self.decode_kernel)
        if self.decode_kernel is not None:  # the same library: residual adds fused into the norms
            self.model.set_cpu_kernels(self.decode_kernel)
        # One line saying what runs: a silent torch fallback (no compiler in an image) costs several times the
        # decode time, so it is a WARNING.
        report_kernels(log, wanted=cpu_fp32 and config.c_kernels and backend == "torch_sdpa",
                       why_not=kernels_not_used(self.device, self.dtype, config.c_kernels))
        self.attention_backend = backend
        self.num_blocks = num_kv_blocks(config, model_config, self.device)
        self.scratch_block = self.num_blocks  # one extra block: padded slots of CUDA-graph batches write here
        shape = (model_config.num_layers, *attention.kv_cache_shape(
            self.num_blocks + 1, config.block_size, model_config.num_kv_heads, model_config.head_dim))
        self.k_cache = zeros_on_huge_pages(shape, self.dtype, self.device)
        self.v_cache = zeros_on_huge_pages(shape, self.dtype, self.device)
        self.model.bind_kv_cache(list(self.k_cache.unbind(0)), list(self.v_cache.unbind(0)))
        self.max_blocks_per_seq = -(-max_model_len // config.block_size)
        self.graphs: DecodeGraphs | None = None
        self.grammar: GrammarRuntime | None = None  # set by the engine on the first constrained request
        self._masks: StepMasks | None = None
        if use_cuda_graphs(self.device.type, config.enforce_eager):
            self.graphs = DecodeGraphs(self.model, config.max_num_seqs, self.max_blocks_per_seq, self.scratch_block,
                                       config.block_size, self.device)

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> SampleResult | None:
        """Run the batch; sample one token for each sequence whose scheduled tokens reach its end."""
        input_ids, positions, slots = [], [], []
        bs = self.block_size
        decode_tables, decode_lens, prefills, sample_rows = [], [], [], []
        offset = 0
        spec: list[tuple[Sequence, int]] = []  # speculating sequences and their first row in spec_rows
        spec_rows: list[int] = []
        for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
            start = seq.num_computed_tokens
            table = seq.block_table
            draft = seq.draft_token_ids
            if draft:  # verify: rows for the last real token and each draft token, all in this pass
                input_ids.extend(seq.token_ids[start:])
                input_ids.extend(draft)
                spec.append((seq, len(spec_rows)))
                spec_rows.extend(range(offset + n - len(draft) - 1, offset + n))
            else:
                input_ids.extend(seq.token_ids[start:start + n])
            positions.extend(range(start, start + n))
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
            if n == 1:
                decode_tables.append(table)
                decode_lens.append(start + 1)
            else:
                used = table[: -(-(start + n) // bs)]
                prefills.append(PrefillChunk(offset, n, start + n, torch.tensor(used, device=self.device)))
            offset += n
            if start + n == seq.num_tokens and not draft:
                sample_rows.append(offset - 1)
        sampled = [s for s, n in zip(batch.seqs, batch.num_tokens, strict=True)
                   if s.num_computed_tokens + n == s.num_tokens and not s.draft_token_ids]
        # Grammar masks depend only on tokens already accepted: fill them while the forward pass runs.
        masking = self._start_masks(sampled)
        if self.graphs is not None and not prefills and self.graphs.can_run(len(decode_tables)):
            hidden = self.graphs.run(input_ids, positions, slots, decode_tables, decode_lens)
        else:
            meta = self._metadata(slots, decode_tables, decode_lens, prefills)
            ids = torch.tensor(input_ids, device=self.device)
            pos = torch.tensor(positions, device=self.device)
            needed = sample_rows + spec_rows
            if prefills and len(needed) < len(input_ids):
                # a prefill chunk samples from its last row at most: the model's last layer runs past attention
                # for the rows read below only, which then sit at 0..len(needed)-1 in that order
                hidden = self.model(ids, pos, meta, torch.tensor(needed, dtype=torch.long, device=self.device))
                sample_rows = list(range(len(sample_rows)))
                spec_rows = list(range(len(sample_rows), len(needed)))
            else:
                hidden = self.model(ids, pos, meta)
        if not sample_rows and not spec:
            return None
        result = SampleResult([], [])
        if sample_rows:
            logits = self.model.compute_logits(self._rows(hidden, sample_rows))
            if masking:
                assert self._masks is not None
                self._masks.apply(logits)
            result = sample(logits, [s.params for s in sampled], [s.generator for s in sampled])
        if spec:
            spec_logits = self.model.compute_logits(self._rows(hidden, spec_rows))
            result.spec_token_ids = [
                verify(spec_logits[first:first + len(s.draft_token_ids) + 1], s.draft_token_ids, s.params, s.generator)
                for s, first in spec]
        return result

    def _rows(self, hidden: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """hidden[rows]; all of hidden, uncopied, when rows are exactly its rows in order (a decode step)."""
        if rows == list(range(hidden.shape[0])):
            return hidden
        return hidden.index_select(0, torch.tensor(rows, device=self.device))

    def _start_masks(self, sampled: list) -> bool:
        if self.grammar is None or not any(s.matcher is not None for s in sampled):
            return False
        if self._masks is None:
            self._masks = StepMasks(self.grammar, self.config.max_num_seqs)
        return self._masks.start([s.matcher for s in sampled])

    def _padded_tables(self, tables: list[list[int]], lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max((-(-n // self.block_size) for n in lens), default=0)
        padded = [t[:width] + [self.scratch_block] * (width - len(t[:width])) for t in tables]
        return (torch.tensor(padded, dtype=torch.long, device=self.device).view(len(padded), width),
                torch.tensor(lens, dtype=torch.long, device=self.device))

    def _metadata(self, slots: list[int], decode_tables: list[list[int]], decode_lens: list[int],
                  prefills: list[PrefillChunk]) -> AttentionMetadata:
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, device=self.device),
            num_decodes=len(decode_tables),
            decode_block_tables=torch.zeros(0, 0, dtype=torch.long),
            decode_context_lens=torch.zeros(0, dtype=torch.long),
            prefills=prefills,
        )
        if self.attention_backend == "flash_attn" or self.decode_kernel is not None:
            meta.decode_block_tables, meta.decode_context_lens = self._padded_tables(decode_tables, decode_lens)
            # the C kernel reads len keys through the table: every length must fit its (padded) table
            assert not decode_lens or max(decode_lens) <= meta.decode_block_tables.shape[1] * self.config.block_size
        else:
            # The scheduler sorts decodes by length; groups padded to their own longest keep padding small.
            for start in range(0, len(decode_tables), DECODE_GROUP_SIZE):
                end = min(start + DECODE_GROUP_SIZE, len(decode_tables))
                tables, lens = self._padded_tables(decode_tables[start:end], decode_lens[start:end])
                meta.decode_groups.append((start, end, tables, lens))
        if self.attention_backend == "flash_attn" and prefills:
            cu_q, cu_k = [0], [0]
            for c in prefills:
                cu_q.append(cu_q[-1] + c.q_len)
                cu_k.append(cu_k[-1] + c.context_len)
            tables = torch.nn.utils.rnn.pad_sequence([c.block_table for c in prefills], batch_first=True)
            meta.cu_seqlens_q = torch.tensor(cu_q, dtype=torch.int32, device=self.device)
            meta.cu_seqlens_k = torch.tensor(cu_k, dtype=torch.int32, device=self.device)
            meta.prefill_block_tables = tables.to(torch.int32)
        return meta
