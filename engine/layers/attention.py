"""Paged attention: KV written into fixed-size blocks, read back through per-sequence block tables.

Tokens of one step are flattened: first one token per decoding sequence, then the prefill chunks.
The torch path runs all decodes as one padded SDPA call and each prefill chunk as its own call with a
bottom-right-aligned causal mask (query i sees cached keys plus new keys up to itself).
"""

from __future__ import annotations

import ctypes
import importlib.util
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from engine.layers.cpu_kernels import (
    KernelScratch,
    paged_decode_attention,
    paged_prefill_attention,
    prefill_kernel_fits,
)


@dataclass
class PrefillChunk:
    q_start: int  # offset of the chunk in the flattened batch
    q_len: int
    context_len: int  # keys visible to the last query: cached tokens + q_len
    block_table: torch.Tensor  # [ceil(context_len / block_size)] block ids


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] flat cache slot for each new token
    num_decodes: int  # the first num_decodes tokens are one-token decodes
    decode_block_tables: torch.Tensor  # [num_decodes, max_blocks], padded
    decode_context_lens: torch.Tensor  # [num_decodes]
    prefills: list[PrefillChunk]
    # Decodes sorted by context length and cut into groups, each padded only to its own longest
    # sequence: (start, end, block_tables, context_lens). Empty = one group from the fields above.
    decode_groups: list[tuple[int, int, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    # Varlen views of the prefill chunks, for kernels that take them (flash-attn).
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    prefill_block_tables: torch.Tensor | None = None


def flash_attn_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def select_attention_backend(device_type: str, flash_available: bool, block_size: int) -> str:
    """'flash_attn' on CUDA when installed and the block size fits its paged kernels, else 'torch_sdpa'."""
    if device_type == "cuda" and flash_available and block_size % 256 == 0:
        return "flash_attn"
    return "torch_sdpa"


class TorchPagedAttention:
    """SDPA over gathered blocks; works on CPU and as the CUDA fallback.

    Cache layout [Hkv, num_blocks, block_size, D]: gathering a sequence's blocks along dim 1 yields
    one contiguous [L, D] matrix per head, the layout SDPA's CPU kernel is fastest on.
    """

    def __init__(self, scale: float, workspace: GatherWorkspace | None = None,
                 decode_kernel: ctypes.CDLL | None = None) -> None:
        self.scale = scale
        self.workspace = workspace or GatherWorkspace()
        # engine/layers/paged_decode.c: decodes read K/V in place (meta then holds one padded table for all)
        self.decode_kernel = decode_kernel

    @staticmethod
    def kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple[int, ...]:
        return (num_kv_heads, num_blocks, block_size, head_dim)

    @staticmethod
    def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 slots: torch.Tensor) -> None:
        """Store each new token's K/V at its slot (block_id * block_size + offset)."""
        h, nb, bs, d = k_cache.shape
        k_cache.view(h, nb * bs, d).index_copy_(1, slots, k.transpose(0, 1))
        v_cache.view(h, nb * bs, d).index_copy_(1, slots, v.transpose(0, 1))

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, kv_stored: bool = False,
    ) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: [T, Hkv, D]; caches: [Hkv, num_blocks, block_size, D]. Returns [T, Hq, D].
        kv_stored: the caller has written k and v at their slots already (the fused C pass)."""
        if not kv_stored:
            self.write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
        out = torch.empty_like(q)
        nd = meta.num_decodes
        if nd and self.decode_kernel is not None:
            assert not meta.decode_groups and meta.decode_block_tables.shape[0] == nd  # one table row per decode
            out[:nd] = paged_decode_attention(self.decode_kernel, q[:nd], k_cache, v_cache,
                                              meta.decode_block_tables, meta.decode_context_lens, self.scale,
                                              self.workspace.kernel_scratch)
            nd = 0
        groups = meta.decode_groups or (
            [(0, nd, meta.decode_block_tables, meta.decode_context_lens)] if nd else []
        )
        for start, end, tables, lens in groups:
            out[start:end] = self._decode(q[start:end], k_cache, v_cache, tables, lens)
        # prefill_attention.c where it fits: every chunk's keys are in the cache by now (written above or by the
        # fused C pass), read in place
        lib = self.decode_kernel if self.decode_kernel is not None and prefill_kernel_fits(q, k_cache, v_cache) \
            else None
        for chunk in meta.prefills:
            qs, qe = chunk.q_start, chunk.q_start + chunk.q_len
            if lib is not None:
                paged_prefill_attention(lib, q[qs:qe], k_cache, v_cache, chunk.block_table, chunk.context_len,
                                        self.scale, out[qs:qe], self.workspace.kernel_scratch)
                continue
            qh = q[qs:qe].transpose(0, 1).unsqueeze(0)
            if chunk.context_len == chunk.q_len:  # nothing cached: attend over the fresh keys directly
                ks, vs, mask = k[qs:qe].transpose(0, 1), v[qs:qe].transpose(0, 1), None
            else:
                ks, vs = self.workspace.gather(k_cache, v_cache, chunk.block_table)
                ks, vs = ks[:, :chunk.context_len], vs[:, :chunk.context_len]
                mask = _bottom_right_causal(chunk.q_len, chunk.context_len, q.device)
            o = F.scaled_dot_product_attention(qh, ks.unsqueeze(0), vs.unsqueeze(0), attn_mask=mask,
                                               is_causal=mask is None, scale=self.scale, enable_gqa=True)
            out[qs:qe] = o.squeeze(0).transpose(0, 1)
        return out

    def _decode(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
        block_tables: torch.Tensor, context_lens: torch.Tensor,
    ) -> torch.Tensor:
        b, max_blocks = block_tables.shape
        h, _, block_size, d = k_cache.shape
        length = max_blocks * block_size
        keys, values = self.workspace.gather(k_cache, v_cache, block_tables.reshape(-1))
        keys = keys.view(h, b, length, d).transpose(0, 1)
        values = values.view(h, b, length, d).transpose(0, 1)
        positions = torch.arange(length, device=q.device)
        mask = (positions.unsqueeze(0) < context_lens.unsqueeze(1)).view(b, 1, 1, length)
        o = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values, attn_mask=mask, scale=self.scale,
                                           enable_gqa=True)
        return o.squeeze(2)


class FlashPagedAttention:
    """flash-attn's paged kernels (CUDA, block_size a multiple of 256)."""

    def __init__(self, scale: float) -> None:
        from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

        self.scale = scale
        self._varlen = flash_attn_varlen_func
        self._with_kvcache = flash_attn_with_kvcache

    @staticmethod
    def kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int) -> tuple[int, ...]:
        return (num_blocks, block_size, num_kv_heads, head_dim)

    @staticmethod
    def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 slots: torch.Tensor) -> None:
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k)
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
    ) -> torch.Tensor:
        self.write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
        out = torch.empty_like(q)
        nd = meta.num_decodes
        if nd:
            out[:nd] = self._with_kvcache(
                q[:nd].unsqueeze(1), k_cache, v_cache,
                cache_seqlens=meta.decode_context_lens.to(torch.int32),
                block_table=meta.decode_block_tables.to(torch.int32), softmax_scale=self.scale, causal=True,
            ).squeeze(1)
        if meta.prefills:
            assert meta.cu_seqlens_q is not None and meta.cu_seqlens_k is not None
            out[nd:] = self._varlen(
                q[nd:], k_cache, v_cache,
                cu_seqlens_q=meta.cu_seqlens_q, cu_seqlens_k=meta.cu_seqlens_k,
                max_seqlen_q=max(c.q_len for c in meta.prefills),
                max_seqlen_k=max(c.context_len for c in meta.prefills),
                softmax_scale=self.scale, causal=True, block_table=meta.prefill_block_tables,
            )
        return out


class GatherWorkspace:
    """Reused destination of the K/V block gathers, shared by every layer of a model.

    A fresh tensor per gather is a fresh allocation of megabytes per layer per step; on CPU that memory comes
    from mmap and is page-faulted in on first touch, which cost more than the copy itself (profiled: 1.6 ms
    per decode-group gather vs 0.4 ms into a warm buffer). The buffers grow to the largest gather seen and stay.
    """

    def __init__(self) -> None:
        self.k = torch.empty(0)
        self.v = torch.empty(0)
        self.kernel_scratch = KernelScratch()  # the C decode kernel's working memory, shared the same way

    def gather(self, k_cache: torch.Tensor, v_cache: torch.Tensor,
               blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """([Hkv, n * block_size, D] keys, same values) of `blocks` in order; valid until the next gather."""
        h, _, bs, d = k_cache.shape
        n = blocks.numel()
        if k_cache.device.type != "cpu":
            # CUDA's caching allocator already reuses memory, and a buffer swapped for a bigger one would be
            # freed under a captured CUDA graph that still reads it
            return (k_cache.index_select(1, blocks).view(h, n * bs, d),
                    v_cache.index_select(1, blocks).view(h, n * bs, d))
        need = h * n * bs * d
        if self.k.numel() < need or self.k.dtype != k_cache.dtype:
            self.k = torch.empty(need, dtype=k_cache.dtype)
            self.v = torch.empty(need, dtype=v_cache.dtype)
        # index_select along the block dimension: far faster than advanced indexing on CPU
        keys = torch.index_select(k_cache, 1, blocks, out=self.k[:need].view(h, n, bs, d))
        values = torch.index_select(v_cache, 1, blocks, out=self.v[:need].view(h, n, bs, d))
        return keys.view(h, n * bs, d), values.view(h, n * bs, d)


def _bottom_right_causal(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """Query i (the (k_len - q_len + i)-th token) may see keys 0 .. k_len - q_len + i."""
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len)
