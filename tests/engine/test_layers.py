"""Layers: RoPE scaling vs transformers, paged attention vs dense attention, backend selection."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
import torch.nn.functional as F

from engine.cuda_graph import capture_sizes, capture_widths, graph_batch_size, use_cuda_graphs
from engine.layers.attention import (
    AttentionMetadata,
    PrefillChunk,
    TorchPagedAttention,
    select_attention_backend,
)
from engine.layers.rotary import RotaryEmbedding, rope_inv_freq

SCALINGS = [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "beta_fast": 16, "beta_slow": 2},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: f"{s['rope_type']}-{s['factor']}")
def test_rope_scaling_matches_transformers(scaling: dict) -> None:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    theta = 500000.0
    config = LlamaConfig(hidden_size=512, num_attention_heads=8, max_position_embeddings=32768,
                         rope_parameters={**scaling, "rope_theta": theta})
    expected_freq, expected_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, torch.device("cpu"))
    inv_freq, factor = rope_inv_freq(64, theta, scaling)
    torch.testing.assert_close(inv_freq, expected_freq.float())
    assert factor == pytest.approx(expected_factor)


def test_unknown_rope_type_is_rejected() -> None:
    with pytest.raises(ValueError, match="unsupported rope_scaling type 'longrope'"):
        rope_inv_freq(64, 10000.0, {"rope_type": "longrope", "factor": 2.0})


def test_rotary_rotates_pairs_by_position() -> None:
    rope = RotaryEmbedding(8, 16, 10000.0, None)
    q = torch.zeros(1, 1, 8)
    q[0, 0, 0] = 1.0  # first of the (0, 4) pair
    rotated, _ = rope(torch.tensor([3]), q, q[:, :, :8].clone())
    assert rotated[0, 0, 0].item() == pytest.approx(math.cos(3.0))
    assert rotated[0, 0, 4].item() == pytest.approx(math.sin(3.0))


def dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int) -> torch.Tensor:
    """Plain attention of queries at positions q_offset.. over all keys, causal, GQA by repetition."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = torch.arange(k.shape[0]).unsqueeze(0) <= (torch.arange(q.shape[0]) + q_offset).unsqueeze(1)
    o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask)
    return o.transpose(0, 1)


def test_paged_attention_with_cached_prefix_and_decodes_matches_dense() -> None:
    torch.manual_seed(0)
    bs, hq, hkv, d = 4, 6, 2, 8
    k_cache = torch.zeros(TorchPagedAttention.kv_cache_shape(20, bs, hkv, d))
    v_cache = torch.zeros_like(k_cache)
    attn = TorchPagedAttention(d**-0.5)
    # Sequence A: 9 tokens, 6 cached in blocks [7, 2], then a 3-token chunk (bottom-right alignment).
    # Sequence B: 5 tokens cached in blocks [4, 11], decoding its 6th token.
    ka, va = torch.randn(9, hkv, d), torch.randn(9, hkv, d)
    kb, vb = torch.randn(6, hkv, d), torch.randn(6, hkv, d)
    qa, qb = torch.randn(3, hq, d), torch.randn(1, hq, d)
    table_a, table_b = [7, 2, 15], [4, 11]

    def slots(table: list[int], positions: range) -> list[int]:
        return [table[p // bs] * bs + p % bs for p in positions]

    for table, keys, values, n in ((table_a, ka, va, 6), (table_b, kb, vb, 5)):
        attn.write_kv(k_cache, v_cache, keys[:n], values[:n], torch.tensor(slots(table, range(n))))
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots(table_b, range(5, 6)) + slots(table_a, range(6, 9))),
        num_decodes=1, decode_block_tables=torch.tensor([table_b]), decode_context_lens=torch.tensor([6]),
        prefills=[PrefillChunk(1, 3, 9, torch.tensor(table_a))],
    )
    out = attn.forward(torch.cat([qb, qa]), torch.cat([kb[5:], ka[6:]]), torch.cat([vb[5:], va[6:]]),
                       k_cache, v_cache, meta)
    torch.testing.assert_close(out[0:1], dense_reference(qb, kb, vb, 5))
    meta.decode_groups = [(0, 1, torch.tensor([table_b + [0, 0]]), torch.tensor([6]))]  # padded group
    grouped = attn.forward(torch.cat([qb, qa]), torch.cat([kb[5:], ka[6:]]), torch.cat([vb[5:], va[6:]]),
                           k_cache, v_cache, meta)
    torch.testing.assert_close(grouped, out)
    torch.testing.assert_close(out[1:], dense_reference(qa, ka, va, 6))
    naive_top_left = dense_reference(qa, ka, va, 0)  # the wrong (top-left) alignment must differ
    assert not torch.allclose(out[1:], naive_top_left)


def test_backend_selection() -> None:
    assert select_attention_backend("cpu", True, 256) == "torch_sdpa"
    assert select_attention_backend("cuda", False, 256) == "torch_sdpa"
    assert select_attention_backend("cuda", True, 16) == "torch_sdpa"  # flash-attn paging needs 256-token blocks
    assert select_attention_backend("cuda", True, 256) == "flash_attn"


def test_cuda_graph_selection() -> None:
    assert use_cuda_graphs("cuda", enforce_eager=False)
    assert not use_cuda_graphs("cuda", enforce_eager=True)
    assert not use_cuda_graphs("cpu", enforce_eager=False)
    sizes = capture_sizes(64)
    assert sizes == [1, 2, 4, 8, 16, 32, 48, 64]
    assert capture_sizes(5) == [1, 2, 4, 5]
    assert graph_batch_size(3, sizes) == 4 and graph_batch_size(64, sizes) == 64
    assert graph_batch_size(65, sizes) is None
    widths = capture_widths(512)  # SmolLM2's 8k window in 16-token blocks
    assert widths == [8, 32, 128, 512]
    assert graph_batch_size(9, widths) == 32 and graph_batch_size(512, widths) == 512
    assert capture_widths(8) == [8] and capture_widths(5) == [5]


@pytest.mark.parametrize("d", [20, 64])  # 20: the generic loops and their tails; 64: the wide value pass
def test_c_decode_kernel_matches_gathered_sdpa(d: int) -> None:
    """The in-place C decode kernel (scattered blocks, GQA, ragged lengths incl. a partial last block) agrees
    with the torch gather + SDPA path to float rounding."""
    from engine.layers.cpu_kernels import load_library, paged_decode_attention

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the engine runs the torch path")
    lib = load_library()
    assert lib is not None  # a compiler is here: a failed build must not pass as "no compiler"
    torch.manual_seed(0)
    hkv, hq, nb, bs = 2, 6, 40, 16
    k_cache, v_cache = torch.randn(hkv, nb, bs, d), torch.randn(hkv, nb, bs, d)
    lens = torch.tensor([1, 7, 13, 45])  # 8-key groups, their remainders and a partial last block
    tables = torch.randperm(nb)[:4 * 3].view(4, 3).contiguous()
    q = torch.randn(4, hq, d)
    want = TorchPagedAttention(d**-0.5)._decode(q, k_cache, v_cache, tables, lens)
    got = paged_decode_attention(lib, q, k_cache, v_cache, tables, lens, d**-0.5)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_c_decode_kernel_refuses_inputs_that_do_not_fit_the_cache() -> None:
    """The C side trusts every size it is given: a wrong head size, batch or head grouping is a ValueError in
    Python, never an out-of-bounds read."""
    from engine.layers.cpu_kernels import load_library, paged_decode_attention

    lib = load_library()
    if lib is None:
        pytest.skip("no C kernel here")
    k_cache = v_cache = torch.zeros(2, 8, 16, 20)
    tables, lens = torch.zeros(3, 2, dtype=torch.int64), torch.ones(3, dtype=torch.int64)
    for q, t, n in ((torch.zeros(3, 6, 24), tables, lens),  # head size 24 against a cache of 20
                    (torch.zeros(3, 5, 20), tables, lens),  # 5 query heads over 2 KV heads
                    (torch.zeros(3, 6, 20), tables[:2], lens),  # fewer block tables than sequences
                    (torch.zeros(3, 6, 20), tables, lens.int())):  # lengths not int64
        with pytest.raises(ValueError):
            paged_decode_attention(lib, q, k_cache, v_cache, t, n, 0.2)


@pytest.mark.parametrize("bs", [16, 24, 256])  # blocks that tile the kernel's key tiles, that do not, one > a tile
@pytest.mark.parametrize("hq,hkv", [(9, 3), (4, 4), (8, 2)])  # SmolLM2's grouping, none, one of 4
def test_c_prefill_kernel_matches_masked_sdpa(hq: int, hkv: int, bs: int) -> None:
    """prefill_attention.c (keys and values read in place through a scattered block table, causal, GQA) agrees
    with SDPA over the gathered keys to float rounding: fresh prompts and chunks after a cached prefix, chunks
    shorter and longer than a query tile, contexts ending inside a block; q and out as strided row views."""
    from engine.layers.cpu_kernels import load_library, paged_prefill_attention

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the engine runs the torch path")
    lib = load_library()
    assert lib is not None
    torch.manual_seed(0)
    nb, d = -(-640 // bs) * 2, 64
    k_cache, v_cache = torch.randn(hkv, nb, bs, d), torch.randn(hkv, nb, bs, d)
    for context, q_len in ((1, 1), (5, 5), (37, 37), (129, 129), (300, 45), (300, 1), (17, 9), (640, 200)):
        table = torch.randperm(nb)[:-(-context // bs)]
        keys = k_cache[:, table].reshape(hkv, -1, d)[:, :context]
        values = v_cache[:, table].reshape(hkv, -1, d)[:, :context]
        qkv = torch.randn(q_len, (hq + 2 * hkv) * d)
        q = qkv[:, :hq * d].view(q_len, hq, d)
        mask = torch.ones(q_len, context, dtype=torch.bool).tril(diagonal=context - q_len)
        want = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), keys.unsqueeze(0),
                                              values.unsqueeze(0), attn_mask=mask, scale=d**-0.5,
                                              enable_gqa=True)[0].transpose(0, 1)
        out = torch.full((q_len + 3, hq, d), float("nan"))
        paged_prefill_attention(lib, q, k_cache, v_cache, table, context, d**-0.5, out[2:2 + q_len])
        assert torch.allclose(out[2:2 + q_len], want, atol=1e-5, rtol=1e-5), (context, q_len)
        assert out[:2].isnan().all() and out[2 + q_len:].isnan().all()  # nothing written outside its rows


def test_forward_takes_the_c_prefill_kernel_and_agrees_with_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """TorchPagedAttention.forward with the C library (prefill_attention.c for every chunk) against the same
    call without it (SDPA): a fresh prompt and a chunk after a cached prefix in one step, keys written by
    forward itself or already stored."""
    import engine.layers.attention as attention_module
    from engine.layers import cpu_kernels
    from engine.layers.cpu_kernels import load_library

    lib = load_library()
    if lib is None:
        pytest.skip("no C kernel here")
    torch.manual_seed(0)
    bs, hq, hkv, d = 16, 9, 3, 64
    k_cache = torch.zeros(TorchPagedAttention.kv_cache_shape(32, bs, hkv, d))
    v_cache = torch.zeros_like(k_cache)
    table_a, table_b = list(range(0, 6)), list(range(10, 16))  # A: 40 fresh tokens; B: 50 cached, then 30
    kb, vb = torch.randn(80, hkv, d), torch.randn(80, hkv, d)

    def slots(table: list[int], positions: range) -> list[int]:
        return [table[p // bs] * bs + p % bs for p in positions]

    TorchPagedAttention(d**-0.5).write_kv(k_cache, v_cache, kb[:50], vb[:50], torch.tensor(slots(table_b, range(50))))
    ka, va = torch.randn(40, hkv, d), torch.randn(40, hkv, d)
    q = torch.randn(70, hq, d)
    k, v = torch.cat([ka, kb[50:]]), torch.cat([va, vb[50:]])
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots(table_a, range(40)) + slots(table_b, range(50, 80))),
        num_decodes=0, decode_block_tables=torch.zeros(0, 1, dtype=torch.long),
        decode_context_lens=torch.zeros(0, dtype=torch.long),
        prefills=[PrefillChunk(0, 40, 40, torch.tensor(table_a)), PrefillChunk(40, 30, 80, torch.tensor(table_b))],
    )
    torch_path = TorchPagedAttention(d**-0.5)
    want = torch_path.forward(q, k, v, k_cache.clone(), v_cache.clone(), meta)
    calls = []
    real = cpu_kernels.paged_prefill_attention

    def counted(*args: object, **kwargs: object) -> None:
        calls.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(attention_module, "paged_prefill_attention", counted)
    kernel_path = TorchPagedAttention(d**-0.5, decode_kernel=lib)
    for kv_stored in (False, True):  # written by forward, or already in the caches
        kc, vc = k_cache.clone(), v_cache.clone()
        if kv_stored:
            torch_path.write_kv(kc, vc, k, v, meta.slot_mapping)
        got = kernel_path.forward(q, k, v, kc, vc, meta, kv_stored=kv_stored)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(calls) == 4  # both chunks, both times: the kernel path was taken


def test_c_prefill_kernel_refuses_inputs_that_do_not_fit() -> None:
    """A table too short for the context, a block id outside the cache, a head size or grouping the kernel is not
    built for: ValueError in Python, never an out-of-bounds read."""
    from engine.layers.cpu_kernels import load_library, paged_prefill_attention

    lib = load_library()
    if lib is None:
        pytest.skip("no C kernel here")
    k_cache = v_cache = torch.zeros(2, 8, 16, 64)
    table = torch.arange(4)
    for q, t, context in ((torch.zeros(10, 6, 64), table[:2], 40),  # 2 blocks hold 32 keys, not 40
                          (torch.zeros(10, 6, 64), torch.tensor([0, 8]), 20),  # block 8 of 8
                          (torch.zeros(10, 5, 64), table, 20),  # 5 query heads over 2 KV heads
                          (torch.zeros(10, 6, 32), table, 20),  # head size 32
                          (torch.zeros(10, 6, 64), table, 9),  # more queries than the context
                          (torch.zeros(10, 6, 64), table.int(), 20)):  # table not int64
        with pytest.raises(ValueError):
            paged_prefill_attention(lib, q, k_cache, v_cache, t, context, 0.125, torch.zeros_like(q))


def test_fused_add_norm_matches_torch() -> None:
    """fused_ops.c: residual add + RMSNorm agree with the torch ops they replace."""
    from engine.layers.cpu_kernels import add_rms_norm, load_library
    from engine.layers.norm import RMSNorm

    lib = load_library()
    if lib is None:
        pytest.skip("no C kernel here")
    torch.manual_seed(0)
    norm = RMSNorm(20, 1e-5)  # 20: not a multiple of 8, the tail loop runs too
    norm.weight.data = torch.randn(20)
    residual, delta = torch.randn(5, 20), torch.randn(5, 20)
    want_sum = residual + delta
    got = add_rms_norm(lib, residual, delta, norm.weight.detach(), norm.eps)
    torch.testing.assert_close(residual, want_sum)  # added in place
    torch.testing.assert_close(got, norm(want_sum))
    torch.testing.assert_close(add_rms_norm(lib, residual, None, norm.weight.detach(), norm.eps), norm(residual))


def test_fused_rotary_and_kv_store_match_torch_bitwise() -> None:
    """fused_ops.c: rotary on q and k (in place in the qkv projection) and the KV-cache store give exactly what
    apply_rotary and write_kv give (same roundings: no fused multiply-add), from 1 row (decode) to a prefill
    chunk big enough to run threaded; slots outside the cache are a ValueError, not a wild write."""
    from engine.layers.cpu_kernels import load_library, rope_store_kv
    from engine.layers.rotary import apply_rotary

    lib = load_library()
    if lib is None:
        pytest.skip("no C kernel here")
    torch.manual_seed(0)
    hq, hkv, d, nb, bs = 6, 2, 64, 48, 16
    rope = RotaryEmbedding(d, 1024, 10000.0, None)
    for t in (1, 5, 700):
        qkv = torch.randn(t, (hq + 2 * hkv) * d)
        slots = torch.randperm(nb * bs)[:t]
        cos, sin = rope.lookup(torch.randint(0, 1024, (t,)), torch.float32)
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        want_q, want_k = apply_rotary(q.view(t, hq, d), k.view(t, hkv, d), cos, sin)
        want_kc, want_vc = torch.zeros(hkv, nb, bs, d), torch.zeros(hkv, nb, bs, d)
        TorchPagedAttention.write_kv(want_kc, want_vc, want_k, v.view(t, hkv, d), slots)
        k_cache, v_cache = torch.zeros(hkv, nb, bs, d), torch.zeros(hkv, nb, bs, d)
        rope_store_kv(lib, qkv, cos.view(t, d), sin.view(t, d), slots, k_cache, v_cache, hq)
        assert torch.equal(q.view(t, hq, d), want_q) and torch.equal(k.view(t, hkv, d), want_k)
        assert torch.equal(k_cache, want_kc) and torch.equal(v_cache, want_vc)
    with pytest.raises(ValueError):
        rope_store_kv(lib, qkv[:1], cos[:1].view(1, d), sin[:1].view(1, d), torch.tensor([nb * bs]), k_cache,
                      v_cache, hq)


def test_stale_kernel_builds_are_removed_only_when_unused_for_a_week(tmp_path) -> None:
    import os
    import time

    from engine.layers.cpu_kernels import STALE_AFTER_S, _remove_stale

    keep, recent, old = (tmp_path / f"cpu_kernels-{n}.so" for n in ("keep", "recent", "old"))
    for path in (keep, recent, old):
        path.write_bytes(b"")
    week_ago = time.time() - STALE_AFTER_S - 60
    os.utime(old, (week_ago, week_ago))
    os.utime(keep, (week_ago, week_ago))
    _remove_stale(keep)
    assert keep.exists() and recent.exists()  # another checkout's fresh build may be about to load
    assert not old.exists()
