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
/* Threads only where the weights are big enough to pay for waking them (every decode linear of a 135M model is). */
#define PARALLEL_MIN_BYTES 262144

/* Weights are float32 (wbytes 4) or int8 (wbytes 1, `--quantization int8`: widened to float in registers and
   multiplied in float32 with x, so the result is the dequantised weight times x to float rounding; the
   per-channel scale is applied once per output, after the sum). Every function below takes `wbytes` as a
   constant from the two entry points, so each is compiled once per weight type with no branch left inside. */
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

#define INLINE static inline __attribute__((always_inline))

/* 8 weights from element i on, as floats */
INLINE vec8 load_w(const void *w, int64_t i, const int wbytes) {
    return wbytes == 4 ? load8((const float *)w + i) : load8_i8((const int8_t *)w + i);
}

INLINE float w_at(const void *w, int64_t i, const int wbytes) {
    return wbytes == 4 ? ((const float *)w)[i] : (float)((const int8_t *)w)[i];
}

/* The sum of output (i, j) finished: the k tail, the scale (int8), the bias. */
INLINE float finish(float s, const float *x, const void *w, const float *scale, const float *bias, int64_t k,
                    int64_t body, int64_t i, int64_t j, const int wbytes) {
    for (int64_t kk = body; kk < k; kk++) s += x[i * k + kk] * w_at(w, j * k + kk, wbytes);
    if (scale != NULL) s *= scale[j];
    return bias != NULL ? s + bias[j] : s;
}

/* One tile: MT rows of x against NT rows of W starting at w, results into y (row stride ldy). `prefetch`, when
   not NULL, is the next tile's W block (NT * K weights, contiguous): one 64-byte line of it is requested per
   16 weights of k per 4 bytes of weight, so it is all in flight by the time this tile is done. Inlined with
   constant MT, the accumulator arrays become registers. */
INLINE void tile(const float *x, const void *w, const float *scale, const float *bias, float *y, int64_t k,
                 int64_t ldy, const char *prefetch, const int mt, const int wbytes) {
    vec8 acc[MAX_MT][NT];
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < NT; j++) acc[i][j] = (vec8){0};
    const int64_t body = k - k % 16;
    for (int64_t kk = 0; kk < body; kk += 16) {
        if (prefetch != NULL)
            for (int l = 0; l < wbytes; l++) __builtin_prefetch(prefetch + kk * NT * wbytes + l * 64, 0, 0);
        for (int h = 0; h < 16; h += 8) {
            vec8 wv[NT];
            for (int j = 0; j < NT; j++) wv[j] = load_w(w, j * k + kk + h, wbytes);
            for (int i = 0; i < mt; i++) {
                const vec8 xv = load8(x + i * k + kk + h);
                for (int j = 0; j < NT; j++) acc[i][j] += xv * wv[j];
            }
        }
    }
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < NT; j++)
            y[i * ldy + j] = finish(hsum8(acc[i][j]), x, w, scale, bias, k, body, i, j, wbytes);
}

/* The last N % NT weight rows, one at a time (no model shape here has any; kept exact and simple). */
INLINE void tail_rows(const float *x, const void *w, const float *scale, const float *bias, float *y, int64_t m,
                      int64_t k, int64_t ldy, int64_t rows, const int wbytes) {
    const int64_t body = k - k % 8;
    for (int64_t j = 0; j < rows; j++)
        for (int64_t i = 0; i < m; i++) {
            vec8 acc = {0};
            for (int64_t kk = 0; kk < body; kk += 8) acc += load8(x + i * k + kk) * load_w(w, j * k + kk, wbytes);
            y[i * ldy + j] = finish(hsum8(acc), x, w, scale, bias, k, body, i, j, wbytes);
        }
}

/* Tile column t (NT weight rows) against every row of x. Called inside each entry point's parallel loop with a
   literal wbytes: OpenMP outlines its loop body before inlining, so a loop written once here, around a runtime
   wbytes, would keep the weight-type branch in the innermost loop. */
INLINE void tile_column(const float *x, const void *w, const float *scale, const float *bias, float *y, int64_t m,
                        int64_t n, int64_t k, int64_t t, int64_t tiles, const int wbytes) {
    const char *wt = (const char *)w + t * NT * k * wbytes;
    const char *next = t + 1 < tiles ? wt + NT * k * wbytes : NULL;
    const float *st = scale != NULL ? scale + t * NT : NULL;
    const float *bt = bias != NULL ? bias + t * NT : NULL;
    float *yt = y + t * NT;
    int64_t i = 0;
    /* The first row group streams W from memory (and prefetches the next tile); the rest find it in L1. */
    for (; i + MAX_MT <= m; i += MAX_MT)
        tile(x + i * k, wt, st, bt, yt + i * n, k, n, i == 0 ? next : NULL, MAX_MT, wbytes);
    if (m - i == 2) tile(x + i * k, wt, st, bt, yt + i * n, k, n, i == 0 ? next : NULL, 2, wbytes);
    if (m - i == 1) tile(x + i * k, wt, st, bt, yt + i * n, k, n, i == 0 ? next : NULL, 1, wbytes);
}

/* The rows past the last whole tile. */
INLINE void tail(const float *x, const void *w, const float *scale, const float *bias, float *y, int64_t m,
                 int64_t n, int64_t k, const int wbytes) {
    const int64_t done = n - n % NT;
    if (done < n)
        tail_rows(x, (const char *)w + done * k * wbytes, scale != NULL ? scale + done : NULL,
                  bias != NULL ? bias + done : NULL, y + done, m, k, n, n - done, wbytes);
}

void gemv_f32(const float *x, const float *w, const float *bias, float *y, int64_t m, int64_t n, int64_t k,
              int num_threads) {
    const int64_t tiles = n / NT;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (n * k * 4 >= PARALLEL_MIN_BYTES)
    for (int64_t t = 0; t < tiles; t++) tile_column(x, w, NULL, bias, y, m, n, k, t, tiles, 4);
    tail(x, w, NULL, bias, y, m, n, k, 4);
}

/* y[m, n] = (x[m, :] . q[n, :]) * scale[n] (+ bias[n]), q [N, K] int8 row-major: a quarter of the bytes streamed. */
void gemv_i8(const float *x, const int8_t *w, const float *scale, const float *bias, float *y, int64_t m, int64_t n,
             int64_t k, int num_threads) {
    const int64_t tiles = n / NT;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (n * k >= PARALLEL_MIN_BYTES)
    for (int64_t t = 0; t < tiles; t++) tile_column(x, w, scale, bias, y, m, n, k, t, tiles, 1);
    tail(x, w, scale, bias, y, m, n, k, 1);
}
