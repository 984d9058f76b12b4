/* Decode attention straight from the paged KV cache (CPU, float32), built at first use by cpu_kernels.py.

   One query token per sequence attends over its cached keys, read block by block through its block table:
   no gathered copy of K/V (the torch path copies every key and value into a buffer and SDPA reads it again,
   three passes over the cache where this makes one). Work items are (sequence, KV head) pairs, each serving
   the query heads that share that KV head (grouped-query attention). Softmax is two-pass: scores for the whole
   context first, then their max, then exp (vectorised, ~1 ulp) and sum, as a reference implementation does.
   Dot products keep 8 running partial sums (one vector register) in a fixed order: no -ffast-math.

   Memory, not arithmetic, bounds this kernel: a block is a few KiB somewhere in a cache of hundreds of MiB,
   and the hardware prefetcher stops at each one's end (it was measured reading the cache at ~6 GB/s of the
   box's ~20). So the next block's keys (values) are prefetched while the current one is scored (summed), and
   the next work item's keys while this one's values are summed. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 0, 2)
#else
#define PREFETCH(p) ((void)(p))
#endif

#define KEYS 8
#define AHEAD 4 /* blocks requested ahead of the one in use, in each pass */
#define LINE_FLOATS 16 /* a 64-byte cache line */

/* 8 floats as one value (GCC/clang vector extension): one AVX register, two NEON ones. Plain C loops over
   [8][8] accumulators were left scalar by gcc 12 (measured ~5 GFLOP/s); these compile to packed FMAs. */
typedef float vec8 __attribute__((vector_size(32)));

static inline vec8 load8(const float *p) {
    vec8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline vec8 splat8(float x) { return (vec8){x, x, x, x, x, x, x, x}; }

static inline float sum8(vec8 v) {
    float s = 0.f;
    for (int l = 0; l < 8; l++) s += v[l];
    return s;
}

typedef int ivec8 __attribute__((vector_size(32)));

#if defined(__clang__)
#define SHUFFLE8(a, b, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define SHUFFLE8(a, b, ...) __builtin_shuffle((a), (b), (ivec8){__VA_ARGS__})
#endif

/* lanes (a0+a1, b0+b1, a2+a3, b2+b3, ...): one step of folding two vectors' horizontal sums into one */
static inline vec8 fold_pairs(vec8 a, vec8 b) {
    return SHUFFLE8(a, b, 0, 8, 2, 10, 4, 12, 6, 14) + SHUFFLE8(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
}

/* the horizontal sums of 8 vectors as one vector (lane j: the sum of v[j]'s lanes), a tree of shuffles and adds
   instead of eight scalar sum8() chains, each a serial run of dependent adds */
static inline vec8 sums8(const vec8 v[8]) {
    const vec8 s01 = fold_pairs(v[0], v[1]), s23 = fold_pairs(v[2], v[3]);
    const vec8 s45 = fold_pairs(v[4], v[5]), s67 = fold_pairs(v[6], v[7]);
    /* lanes 0-3: v0..v3 over their low 4 lanes, lanes 4-7: the same over the high 4 */
    const vec8 a = SHUFFLE8(s01, s23, 0, 1, 8, 9, 4, 5, 12, 13) + SHUFFLE8(s01, s23, 2, 3, 10, 11, 6, 7, 14, 15);
    const vec8 b = SHUFFLE8(s45, s67, 0, 1, 8, 9, 4, 5, 12, 13) + SHUFFLE8(s45, s67, 2, 3, 10, 11, 6, 7, 14, 15);
    return SHUFFLE8(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + SHUFFLE8(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
}

/* select8 and exp8: e^x of 8 lanes (vec_exp.c: Cephes' polynomial, ~1 ulp, 0 below -87.3). The scalar expf loop
   was ~11 % of the kernel at batch 32 (measured by leaving it out). With sums8: the kernel alone at batch 32,
   330 keys, 30 layers' caches cycled, 2.47 -> 1.91 ms per layer (best of 12, interleaved). */
#define VEXP_F vec8
#define VEXP_I ivec8
#define VEXP_SPLAT splat8
#define VEXP exp8
#define VEXP_SELECT select8
#include "vec_exp.c"

/* scores of `n` (<= KEYS) consecutive keys (rows of `k`) against one query: 8 running partial sums per key,
   then the tail of head_dim beyond a multiple of 8 */
static inline void dot_keys(const float *q, const float *k, int64_t n, int64_t head_dim, float *out, float scale) {
    vec8 acc[KEYS] = {0};
    const int64_t body = head_dim - head_dim % 8;
    for (int64_t i = 0; i < body; i += 8) {
        const vec8 qv = load8(q + i);
        for (int64_t j = 0; j < n; j++) acc[j] += qv * load8(k + j * head_dim + i);
    }
    if (n == KEYS && body == head_dim) {
        const vec8 r = sums8(acc) * splat8(scale);
        memcpy(out, &r, sizeof r);
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        float s = sum8(acc[j]);
        for (int64_t i = body; i < head_dim; i++) s += q[i] * k[j * head_dim + i];
        out[j] = s * scale;
    }
}

#if defined(__AVX512F__)
#define VW 16 /* floats per wide vector: one AVX-512 register */
#else
#define VW 8
#endif
/* The value pass for the common head size keeps each head's sums in registers (WIDE_HEAD_DIM / VW vectors);
   axpy() below, for any head size, loads and stores them again for every key. */
#define WIDE_HEAD_DIM 64
typedef float vecw __attribute__((vector_size(VW * 4)));

static inline vecw loadw(const float *p) {
    vecw v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* a += p * v over head_dim floats */
static inline void axpy(float *a, float p, const float *v, int64_t head_dim) {
    const int64_t body = head_dim - head_dim % 8;
    const vec8 pv = splat8(p);
    for (int64_t d = 0; d < body; d += 8) {
        vec8 x = load8(a + d) + pv * load8(v + d);
        memcpy(a + d, &x, sizeof x);
    }
    for (int64_t d = body; d < head_dim; d++) a[d] += p * v[d];
}

static void prefetch_rows(const float *p, int64_t n_floats) {
    for (int64_t i = 0; i < n_floats; i += LINE_FLOATS) PREFETCH(p + i);
}

/* q, out: [B, Hq, D]; k_cache, v_cache: [Hkv, num_blocks, block_size, D]; block_tables: [B, max_blocks]
   (int64); context_lens: [B] (int64, keys each query sees, its own included, <= max_blocks * block_size,
   checked by the caller);
   scratch: num_threads * group * (max_blocks * block_size + D) floats, the scores and sums of each thread
   (the caller owns it, so nothing here allocates or can fail). */
void paged_decode_attention(const float *q, const float *k_cache, const float *v_cache,
                            const int64_t *block_tables, const int64_t *context_lens, float *out, float *scratch,
                            int64_t batch, int64_t num_heads, int64_t num_kv_heads, int64_t num_blocks,
                            int64_t block_size, int64_t head_dim, int64_t max_blocks, float scale,
                            int num_threads) {
    const int64_t group = num_heads / num_kv_heads;
    const int64_t head_stride = num_blocks * block_size * head_dim; /* one KV head's slab of the cache */
    const int64_t block_floats = block_size * head_dim;
    const int64_t row = max_blocks * block_size; /* one query head's scores */
#pragma omp parallel num_threads(num_threads)
    {
        int thread = 0;
#ifdef _OPENMP
        thread = omp_get_thread_num();
#endif
        float *scores = scratch + (int64_t)thread * group * (row + head_dim);
        float *acc = scores + group * row;
        int nthreads = 1;
#ifdef _OPENMP
        nthreads = omp_get_num_threads();
#endif
        /* Items dealt round-robin (decodes come sorted by length, so the threads' shares stay even), which tells
           each thread its next item: that item's key blocks are requested while this one's values are summed.
           Without it the memory system sat idle through each item's softmax and value pass (the values were
           already in L2): the kernel alone, batch 24, contexts 60-640, 30 layers' caches cycled, 0.81-0.84 ->
           0.69-0.71 ms per layer (16 -> 19-20 GB/s; dynamic scheduling before). */
        const int64_t items = batch * num_kv_heads;
        for (int64_t item = thread; item < items; item += nthreads) {
            const int64_t b = item / num_kv_heads, kvh = item % num_kv_heads;
            const int64_t len = context_lens[b];
            const int64_t nblocks = (len + block_size - 1) / block_size;
            const int64_t *table = block_tables + b * max_blocks;
            const float *kh = k_cache + kvh * head_stride, *vh = v_cache + kvh * head_stride;
            const int64_t next = item + nthreads;
            const int64_t next_b = next < items ? next / num_kv_heads : b;
            const int64_t next_blocks = next < items ? (context_lens[next_b] + block_size - 1) / block_size : 0;
            const int64_t *next_table = block_tables + next_b * max_blocks;
            const float *next_kh = k_cache + (next % num_kv_heads) * head_stride;
            /* Blocks are requested AHEAD blocks before their use within each pass (keys, then values: the first
               values while the last keys are scored), and the next item's keys all through this one's value
               pass. Before, every key block was requested at the item's start and each value block beside its
               key block: the kernel alone, batch 24, contexts 60-640, 30 layers' caches cycled, 0.52 -> 0.47
               ms per layer (26 -> 29 GB/s; AHEAD 8: 0.49). Asking for the next item's first blocks only, near
               the end, measured 0.59: its keys are better requested early and many at a time. */
            for (int64_t blk = 0; blk < nblocks && blk < AHEAD; blk++)
                prefetch_rows(kh + table[blk] * block_floats, block_floats);
            /* keys block by block: within a block they are contiguous, and 8 keys' dot products run side by
               side (independent sums the CPU overlaps) */
            for (int64_t blk = 0; blk < nblocks; blk++) {
                const float *kb = kh + table[blk] * block_floats;
                const int64_t t0 = blk * block_size;
                const int64_t n = len - t0 < block_size ? len - t0 : block_size;
                if (blk + AHEAD < nblocks) prefetch_rows(kh + table[blk + AHEAD] * block_floats, block_floats);
                if (blk + AHEAD >= nblocks && blk + AHEAD - nblocks < nblocks) /* the first values, near the end */
                    prefetch_rows(vh + table[blk + AHEAD - nblocks] * block_floats, block_floats);
                for (int64_t g = 0; g < group; g++) {
                    const float *qv = q + (b * num_heads + kvh * group + g) * head_dim;
                    float *s = scores + g * row + t0;
                    int64_t j = 0;
                    for (; j + KEYS <= n; j += KEYS) dot_keys(qv, kb + j * head_dim, KEYS, head_dim, s + j, scale);
                    if (j < n) dot_keys(qv, kb + j * head_dim, n - j, head_dim, s + j, scale);
                }
            }
            for (int64_t g = 0; g < group; g++) {
                float *s = scores + g * row;
                float m = -INFINITY;
                for (int64_t t = 0; t < len; t++) m = s[t] > m ? s[t] : m;
                vec8 sums = {0};
                int64_t t = 0;
                for (; t + 8 <= len; t += 8) {
                    const vec8 e = exp8(load8(s + t) - splat8(m));
                    memcpy(s + t, &e, sizeof e);
                    sums += e;
                }
                float sum = sum8(sums);
                for (; t < len; t++) {
                    s[t] = expf(s[t] - m);
                    sum += s[t];
                }
                const float inv = 1.f / sum;
                for (t = 0; t < len; t++) s[t] *= inv;
            }
            if (head_dim == WIDE_HEAD_DIM) {
                /* one head at a time, its sums in registers; the same products and order as axpy's, so the
                   same results. The kernel alone, batch 24, contexts 60-640, 30 layers' caches cycled: 0.72-0.75
                   -> 0.53-0.56 ms per layer (axpy's sums went through memory: a store-to-load round trip per key
                   and head). */
                for (int64_t g = 0; g < group; g++) {
                    vecw a[WIDE_HEAD_DIM / VW] = {{0}};
                    const float *p = scores + g * row;
                    for (int64_t blk = 0; blk < nblocks; blk++) {
                        const int64_t step = g * nblocks + blk, steps = group * nblocks;
                        for (int64_t nk = step * next_blocks / steps; nk < (step + 1) * next_blocks / steps; nk++)
                            prefetch_rows(next_kh + next_table[nk] * block_floats, block_floats);
                        if (g == 0 && blk + AHEAD < nblocks) /* later heads find the values in L2 */
                            prefetch_rows(vh + table[blk + AHEAD] * block_floats, block_floats);
                        const float *vb = vh + table[blk] * block_floats;
                        const int64_t t0 = blk * block_size;
                        const int64_t n = len - t0 < block_size ? len - t0 : block_size;
                        for (int64_t j = 0; j < n; j++) {
                            const vecw zero = {0};
                            const vecw pj = p[t0 + j] - zero; /* a broadcast (0 + p would cost an add) */
                            for (int i = 0; i < WIDE_HEAD_DIM / VW; i++)
                                a[i] += pj * loadw(vb + j * head_dim + i * VW);
                        }
                    }
                    memcpy(out + (b * num_heads + kvh * group + g) * head_dim, a, sizeof a);
                }
                continue;
            }
            memset(acc, 0, sizeof(float) * group * head_dim);
            for (int64_t blk = 0; blk < nblocks; blk++) {
                const float *vb = vh + table[blk] * block_floats;
                if (blk + AHEAD < nblocks) prefetch_rows(vh + table[blk + AHEAD] * block_floats, block_floats);
                /* the next item's key blocks, spread evenly over this pass */
                for (int64_t nk = blk * next_blocks / nblocks; nk < (blk + 1) * next_blocks / nblocks; nk++)
                    prefetch_rows(next_kh + next_table[nk] * block_floats, block_floats);
                const int64_t t0 = blk * block_size;
                const int64_t n = len - t0 < block_size ? len - t0 : block_size;
                for (int64_t j = 0; j < n; j++) {
                    const float *v = vb + j * head_dim;
                    for (int64_t g = 0; g < group; g++)
                        axpy(acc + g * head_dim, scores[g * row + t0 + j], v, head_dim);
                }
            }
            for (int64_t g = 0; g < group; g++)
                memcpy(out + (b * num_heads + kvh * group + g) * head_dim, acc + g * head_dim,
                       sizeof(float) * head_dim);
        }
    }
}
