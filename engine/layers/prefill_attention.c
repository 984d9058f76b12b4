/* Prefill attention straight from the paged KV cache (CPU, float32, head_dim 64), built with paged_decode.c.

   A prefill chunk's queries attend causally over every key of their sequence up to themselves: the cached ones
   and the chunk's own, all already stored in the cache by rope_store_kv. torch's CPU flash SDPA ran these at
   35-45 GFLOP/s on an AMD AVX-512 host (its inner products go through MKL, slow on AMD), against oneDNN's ~218 for the
   projections around it: ~2 s of the mixed 32-request workload's 12 s of prefill. Here each work item is a tile
   of QUERY_TILE query positions of one KV head, with every query head of that KV head (grouped-query attention):
   group * QUERY_TILE rows scored against the tile's visible keys as register tiles of vector FMAs, an exact
   two-pass softmax per row (max, then exp (vectorised, ~1 ulp) and sum, as the decode kernel), then the
   weighted sum of values, divided by the row's sum at the end. Keys are first transposed once per chunk
   ([Hkv, D, keys], shared by all items) so scores vectorise over keys with no horizontal sums; values are read
   in place through the block table. Sums keep a fixed order (no -ffast-math): another order than SDPA's, so
   results differ from it in the last bits only. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16 /* floats per vector: one AVX-512 register */
#else
#define VW 8 /* one AVX register, two NEON ones */
#endif
typedef float vecf __attribute__((vector_size(VW * 4)));
typedef int veci __attribute__((vector_size(VW * 4)));

#define HEAD_DIM 64
#define DV (HEAD_DIM / VW)  /* vectors per head row */
#define QUERY_TILE 8        /* query positions per work item */
/* Register tiles: SCORE_ROWS * 2 accumulators of scores, OUT_ROWS * DV of outputs. AVX-512 has 32 registers;
   AVX2's 16 take fewer rows (a build with -mno-avx512f on an AMD host: L=512 2.35 -> 2.12 ms with 6 and 2
   instead of 8 and 3; SDPA ran 3.7-3.9 ms there) */
#define SCORE_ROWS (VW == 16 ? 8 : 6)
#define SCORE_KEYS (2 * VW) /* keys per register tile of scores */
#define OUT_ROWS (VW == 16 ? 6 : 2)

static inline vecf loadv(const float *p) {
    vecf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void storev(float *p, vecf v) { memcpy(p, &v, sizeof v); }

/* x in every lane, as one broadcast: x - 0 is x for every x (0 + x is not, for x = -0, so it cost an add) */
static inline vecf splat(float x) {
    const vecf zero = {0};
    return x - zero;
}

#define VEXP_F vecf
#define VEXP_I veci
#define VEXP_SPLAT splat
#define VEXP expv
#define VEXP_SELECT selectv
#include "vec_exp.c" /* expv: e^x, x <= 0, as the decode kernel's exp8 at this file's width */

static inline int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

/* scores[r][t] = scale * q_r . key t for SCORE_ROWS rows and keys [0, keys) (a multiple of SCORE_KEYS), from the
   transposed keys kt [HEAD_DIM][stride] */
static void score_rows(const float *const *q, const float *kt, int64_t stride, int64_t keys, float *scores,
                       int64_t row_floats, float scale) {
    for (int64_t t = 0; t < keys; t += SCORE_KEYS) {
        vecf acc[SCORE_ROWS][2] = {{{0}}};
        for (int64_t d = 0; d < HEAD_DIM; d++) {
            const vecf k0 = loadv(kt + d * stride + t), k1 = loadv(kt + d * stride + t + VW);
            for (int r = 0; r < SCORE_ROWS; r++) {
                const vecf qd = splat(q[r][d]);
                acc[r][0] += qd * k0;
                acc[r][1] += qd * k1;
            }
        }
        for (int r = 0; r < SCORE_ROWS; r++) {
            storev(scores + r * row_floats + t, acc[r][0] * scale);
            storev(scores + r * row_floats + t + VW, acc[r][1] * scale);
        }
    }
}

/* out_r = (sum over keys t < keys of p_r[t] * value t) * inv[r] for OUT_ROWS rows; values through the table */
static void weigh_values(const float *p, int64_t row_floats, const float *vh, const int64_t *table,
                         int64_t block_size, int64_t keys, float *const *out, const float *inv) {
    vecf acc[OUT_ROWS][DV] = {{{0}}};
    for (int64_t t0 = 0; t0 < keys; t0 += block_size) {
        const float *vb = vh + table[t0 / block_size] * block_size * HEAD_DIM;
        const int64_t n = keys - t0 < block_size ? keys - t0 : block_size;
        for (int64_t j = 0; j < n; j++) {
            vecf v[DV];
            for (int i = 0; i < DV; i++) v[i] = loadv(vb + j * HEAD_DIM + i * VW);
            for (int r = 0; r < OUT_ROWS; r++) {
                const vecf pr = splat(p[r * row_floats + t0 + j]);
                for (int i = 0; i < DV; i++) acc[r][i] += pr * v[i];
            }
        }
    }
    for (int r = 0; r < OUT_ROWS; r++)
        for (int i = 0; i < DV; i++) storev(out[r] + i * VW, acc[r][i] * inv[r]);
}

/* q: the chunk's queries, token i's head h at q + i * q_stride + h * HEAD_DIM (token i sits at position
   context_len - q_len + i); out: the same layout with out_stride. k_cache, v_cache: [Hkv, num_blocks, block_size,
   HEAD_DIM]; block_table: the sequence's blocks, covering context_len keys (checked by the caller).
   scratch: prefill_scratch_floats(...) floats (the caller owns it: nothing here allocates). */
void paged_prefill_attention(const float *q, int64_t q_stride, const float *k_cache, const float *v_cache,
                             const int64_t *block_table, float *out, int64_t out_stride, float *scratch,
                             int64_t q_len, int64_t context_len, int64_t num_heads, int64_t num_kv_heads,
                             int64_t num_blocks, int64_t block_size, float scale, int num_threads) {
    const int64_t group = num_heads / num_kv_heads;
    const int64_t head_stride = num_blocks * block_size * HEAD_DIM;
    const int64_t keys_pad = round_up(context_len, SCORE_KEYS);
    const int64_t tile_rows = round_up(QUERY_TILE * group, SCORE_ROWS * OUT_ROWS);
    float *kt = scratch; /* [Hkv][HEAD_DIM][keys_pad] */
    float *thread_scores = kt + num_kv_heads * HEAD_DIM * keys_pad;
    const int64_t first = context_len - q_len; /* position of the chunk's first query */
#pragma omp parallel num_threads(num_threads)
    {
#pragma omp for schedule(static)
        for (int64_t item = 0; item < num_kv_heads * (keys_pad / block_size + 1); item++) {
            const int64_t h = item % num_kv_heads, t0 = item / num_kv_heads * block_size;
            if (t0 >= keys_pad) continue;
            float *dst = kt + h * HEAD_DIM * keys_pad;
            const int64_t t1 = t0 + block_size < keys_pad ? t0 + block_size : keys_pad;
            const int64_t real = (t1 < context_len ? t1 : context_len) - t0; /* keys of the block, then padding */
            const float *kb = k_cache + h * head_stride + (real > 0 ? block_table[t0 / block_size] : 0) * block_size
                              * HEAD_DIM;
            /* d outer: each d's keys land as one contiguous run (a key at a time wrote a line per d: 17 % of
               the kernel); the block's reads stay in L1 */
            for (int64_t d = 0; d < HEAD_DIM; d++) {
                float *row = dst + d * keys_pad;
                for (int64_t j = 0; j < t1 - t0; j++) row[t0 + j] = j < real ? kb[j * HEAD_DIM + d] : 0.f;
            }
        }
        int thread = 0;
#ifdef _OPENMP
        thread = omp_get_thread_num();
#endif
        float *scores = thread_scores + (int64_t)thread * tile_rows * (keys_pad + 1);
        float *inv = scores + tile_rows * keys_pad;
        const int64_t tiles = (q_len + QUERY_TILE - 1) / QUERY_TILE;
        /* the tiles nearest the chunk's end see the most keys: dealt first, so the threads finish together */
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < num_kv_heads * tiles; item++) {
            const int64_t h = item % num_kv_heads, tile = tiles - 1 - item / num_kv_heads;
            const int64_t i0 = tile * QUERY_TILE;
            const int64_t i1 = i0 + QUERY_TILE < q_len ? i0 + QUERY_TILE : q_len;
            const int64_t rows = (i1 - i0) * group; /* row r: query i0 + r / group, head h * group + r % group */
            /* register tiles run past the last row: those rows repeat it, scored and weighed like it, never stored */
            const int64_t rows_pad = round_up(rows, OUT_ROWS);
            const int64_t keys = first + i1;        /* keys the tile's last query sees */
            const int64_t keys_tile = round_up(keys, SCORE_KEYS);
            const float *qrow[SCORE_ROWS * OUT_ROWS];
            float *orow[SCORE_ROWS * OUT_ROWS];
            for (int64_t r0 = 0; r0 < rows_pad; r0 += SCORE_ROWS) {
                for (int r = 0; r < SCORE_ROWS; r++) {
                    const int64_t rr = r0 + r < rows ? r0 + r : rows - 1;
                    qrow[r] = q + (i0 + rr / group) * q_stride + (h * group + rr % group) * HEAD_DIM;
                }
                score_rows(qrow, kt + h * HEAD_DIM * keys_pad, keys_pad, keys_tile, scores + r0 * keys_pad,
                           keys_pad, scale);
            }
            for (int64_t r = 0; r < rows_pad; r++) {
                float *s = scores + r * keys_pad;
                const int64_t rr = r < rows ? r : rows - 1;
                const int64_t seen = first + i0 + rr / group + 1; /* causal: keys 0 .. its own position */
                for (int64_t t = seen; t < keys_tile; t++) s[t] = -INFINITY;
                vecf mv = splat(-INFINITY);
                for (int64_t t = 0; t < keys_tile; t += VW) {
                    const vecf x = loadv(s + t);
                    mv = selectv(x > mv, x, mv);
                }
                float m = mv[0];
                for (int l = 1; l < VW; l++) m = mv[l] > m ? mv[l] : m;
                vecf sums = {0};
                for (int64_t t = 0; t < keys_tile; t += VW) {
                    const vecf e = expv(loadv(s + t) - m);
                    storev(s + t, e);
                    sums += e;
                }
                float sum = 0.f;
                for (int l = 0; l < VW; l++) sum += sums[l];
                inv[r] = 1.f / sum;
            }
            for (int64_t r0 = 0; r0 < rows_pad; r0 += OUT_ROWS) {
                float sink[OUT_ROWS][HEAD_DIM]; /* rows past the tile land here and are dropped */
                for (int r = 0; r < OUT_ROWS; r++) {
                    const int64_t rr = r0 + r;
                    orow[r] = rr < rows ? out + (i0 + rr / group) * out_stride + (h * group + rr % group) * HEAD_DIM
                                        : sink[r];
                }
                weigh_values(scores + r0 * keys_pad, keys_pad, v_cache + h * head_stride, block_table, block_size,
                             keys, orow, inv + r0);
            }
        }
    }
}

/* floats of scratch paged_prefill_attention needs for a chunk whose sequence has context_len keys */
int64_t prefill_scratch_floats(int64_t context_len, int64_t num_heads, int64_t num_kv_heads, int num_threads) {
    const int64_t keys_pad = round_up(context_len, SCORE_KEYS);
    const int64_t tile_rows = round_up(QUERY_TILE * (num_heads / num_kv_heads), SCORE_ROWS * OUT_ROWS);
    return num_kv_heads * HEAD_DIM * keys_pad + (int64_t)num_threads * tile_rows * (keys_pad + 1);
}
