/* Small-M float32 matrix product for the decode linears (CPU), built with paged_decode.c and fused_ops.c.

   y[m, n] = x[m, :] . w[n, :] (+ bias[n]), x [M, K], w [N, K] (nn.Linear's layout), y [M, N], all contiguous.
   At decode M is the batch (1-16 rows) and the product is bound by streaming W from memory: MKL and oneDNN read
   it here at 5-7 GB/s where a plain pass reads 17-23 GB/s. This kernel reads each weight row once for all M rows
   of x (x stays in L1/L2), NT weight rows at a time against MT rows of x (MT * NT vector accumulators, FMA), the
   threads splitting N, the next tile of W prefetched while this one is multiplied. Sums run in 8 lanes, each in
   k order, then the lanes are added: another order than MKL's, so results differ in the last bits only. */
#include <stdint.h>
#include <string.h>

typedef float vec8 __attribute__((vector_size(32)));

static inline vec8 load8(const float *p) {
    vec8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float hsum8(vec8 v) {
    float s = 0.f;
    for (int l = 0; l < 8; l++) s += v[l];
    return s;
}

#define NT 4     /* weight rows per tile: one contiguous NT * K block of W */
#define MAX_MT 3 /* x rows per tile: MT * NT accumulators + NT weight vectors fit AVX2's 16 registers */
/* Threads only where the product is big enough to pay for waking them (every decode linear of a 135M model is). */
#define PARALLEL_MIN_FLOATS 65536

/* One tile: MT rows of x against NT rows of W starting at w, results into y (row stride ldy). `prefetch`, when
   not NULL, is the next tile's W block (NT * K floats, contiguous): one cache line of it is requested per weight
   row per 16 floats of k, so it is all in flight by the time this tile is done. Inlined with constant MT, the
   accumulator arrays become registers. */
static inline __attribute__((always_inline)) void tile(const float *x, const float *w, const float *bias, float *y,
                                                       int64_t k, int64_t ldy, const float *prefetch, const int mt) {
    vec8 acc[MAX_MT][NT];
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < NT; j++) acc[i][j] = (vec8){0};
    const int64_t body = k - k % 16;
    for (int64_t kk = 0; kk < body; kk += 16) {
        if (prefetch != NULL)
            for (int j = 0; j < NT; j++) __builtin_prefetch(prefetch + (kk * NT) + j * 16, 0, 0);
        for (int h = 0; h < 16; h += 8) {
            vec8 wv[NT];
            for (int j = 0; j < NT; j++) wv[j] = load8(w + j * k + kk + h);
            for (int i = 0; i < mt; i++) {
                const vec8 xv = load8(x + i * k + kk + h);
                for (int j = 0; j < NT; j++) acc[i][j] += xv * wv[j];
            }
        }
    }
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < NT; j++) {
            float s = hsum8(acc[i][j]);
            for (int64_t kk = body; kk < k; kk++) s += x[i * k + kk] * w[j * k + kk];
            y[i * ldy + j] = bias != NULL ? s + bias[j] : s;
        }
}

/* The last N % NT weight rows, one at a time (no model shape here has any; kept exact and simple). */
static void tail_rows(const float *x, const float *w, const float *bias, float *y, int64_t m, int64_t k,
                      int64_t ldy, int64_t rows) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t i = 0; i < m; i++) {
            vec8 acc = {0};
            const int64_t body = k - k % 8;
            for (int64_t kk = 0; kk < body; kk += 8) acc += load8(x + i * k + kk) * load8(w + j * k + kk);
            float s = hsum8(acc);
            for (int64_t kk = body; kk < k; kk++) s += x[i * k + kk] * w[j * k + kk];
            y[i * ldy + j] = bias != NULL ? s + bias[j] : s;
        }
}

void gemv_f32(const float *x, const float *w, const float *bias, float *y, int64_t m, int64_t n, int64_t k,
              int num_threads) {
    const int64_t tiles = n / NT;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (n * k >= PARALLEL_MIN_FLOATS)
    for (int64_t t = 0; t < tiles; t++) {
        const float *wt = w + t * NT * k;
        const float *next = t + 1 < tiles ? wt + NT * k : NULL;
        const float *bt = bias != NULL ? bias + t * NT : NULL;
        float *yt = y + t * NT;
        int64_t i = 0;
        /* The first row group streams W from memory (and prefetches the next tile); the rest find it in L1. */
        for (; i + MAX_MT <= m; i += MAX_MT) tile(x + i * k, wt, bt, yt + i * n, k, n, i == 0 ? next : NULL, MAX_MT);
        if (m - i == 2) tile(x + i * k, wt, bt, yt + i * n, k, n, i == 0 ? next : NULL, 2);
        if (m - i == 1) tile(x + i * k, wt, bt, yt + i * n, k, n, i == 0 ? next : NULL, 1);
    }
    if (n % NT)
        tail_rows(x, w + tiles * NT * k, bias != NULL ? bias + tiles * NT : NULL, y + tiles * NT, m, k, n, n % NT);
}

/* int8 weights (`--quantization int8`): y[m, n] = (x[m, :] . q[n, :]) * scale[n] (+ bias[n]), q [N, K] int8
   row-major, x float32. The same tiling, threads and prefetch as gemv_f32, a quarter of the bytes streamed: each
   8 weights are widened int8 -> int32 -> float (vpmovsxbd, vcvtdq2ps) and multiplied in float32 with x, so the
   result is the dequantised weight times x to float rounding (activations are not quantised). The per-channel
   scale is applied once per output, after the sum. */
#ifdef __AVX2__
#include <immintrin.h>
/* GCC spells the generic int8 -> float vector conversion as 8 scalar ones (2x slower than fp32 end to end):
   AVX2's sign-extend and convert instead */
static inline vec8 load8_i8(const int8_t *p) {
    int64_t bits;
    memcpy(&bits, p, sizeof bits);
    return (vec8)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bits)));
}
#else
typedef signed char i8x8 __attribute__((vector_size(8)));
static inline vec8 load8_i8(const int8_t *p) {
    i8x8 v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, vec8);
}
#endif

static inline __attribute__((always_inline)) void tile_i8(const float *x, const int8_t *w, const float *scale,
                                                          const float *bias, float *y, int64_t k, int64_t ldy,
                                                          const int8_t *prefetch, const int mt) {
    vec8 acc[MAX_MT][NT];
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < NT; j++) acc[i][j] = (vec8){0};
    const int64_t body = k - k % 16;
    for (int64_t kk = 0; kk < body; kk += 16) {
        /* the next tile's NT * K bytes, one 64-byte line per 16 k (NT * 16 bytes): all requested by the end */
        if (prefetch != NULL) __builtin_prefetch(prefetch + kk * NT, 0, 0);
        for (int h = 0; h < 16; h += 8) {
            vec8 wv[NT];
            for (int j = 0; j < NT; j++) wv[j] = load8_i8(w + j * k + kk + h);
            for (int i = 0; i < mt; i++) {
                const vec8 xv = load8(x + i * k + kk + h);
                for (int j = 0; j < NT; j++) acc[i][j] += xv * wv[j];
            }
        }
    }
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < NT; j++) {
            float s = hsum8(acc[i][j]);
            for (int64_t kk = body; kk < k; kk++) s += x[i * k + kk] * (float)w[j * k + kk];
            s *= scale[j];
            y[i * ldy + j] = bias != NULL ? s + bias[j] : s;
        }
}

static void tail_rows_i8(const float *x, const int8_t *w, const float *scale, const float *bias, float *y,
                         int64_t m, int64_t k, int64_t ldy, int64_t rows) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t i = 0; i < m; i++) {
            vec8 acc = {0};
            const int64_t body = k - k % 8;
            for (int64_t kk = 0; kk < body; kk += 8) acc += load8(x + i * k + kk) * load8_i8(w + j * k + kk);
            float s = hsum8(acc);
            for (int64_t kk = body; kk < k; kk++) s += x[i * k + kk] * (float)w[j * k + kk];
            s *= scale[j];
            y[i * ldy + j] = bias != NULL ? s + bias[j] : s;
        }
}

void gemv_i8(const float *x, const int8_t *w, const float *scale, const float *bias, float *y, int64_t m, int64_t n,
             int64_t k, int num_threads) {
    const int64_t tiles = n / NT;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (n * k >= 4 * PARALLEL_MIN_FLOATS)
    for (int64_t t = 0; t < tiles; t++) {
        const int8_t *wt = w + t * NT * k;
        const int8_t *next = t + 1 < tiles ? wt + NT * k : NULL;
        const float *st = scale + t * NT;
        const float *bt = bias != NULL ? bias + t * NT : NULL;
        float *yt = y + t * NT;
        int64_t i = 0;
        for (; i + MAX_MT <= m; i += MAX_MT)
            tile_i8(x + i * k, wt, st, bt, yt + i * n, k, n, i == 0 ? next : NULL, MAX_MT);
        if (m - i == 2) tile_i8(x + i * k, wt, st, bt, yt + i * n, k, n, i == 0 ? next : NULL, 2);
        if (m - i == 1) tile_i8(x + i * k, wt, st, bt, yt + i * n, k, n, i == 0 ? next : NULL, 1);
    }
    if (n % NT)
        tail_rows_i8(x, w + tiles * NT * k, scale + tiles * NT, bias != NULL ? bias + tiles * NT : NULL,
                     y + tiles * NT, m, k, n, n % NT);
}
