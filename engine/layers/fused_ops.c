/* RMSNorm with the residual add before it, as one pass (CPU, float32), built with paged_decode.c.

   In torch this is a chain of ops, each a full pass over memory (add, pow, mean, add, rsqrt, mul, mul), twice per
   layer; fused, each row is read and written once. Arithmetic follows the reference implementation (Hugging
   Face's LlamaRMSNorm); only the summation order of the mean differs. (SwiGLU stays in torch: a fused C
   silu-and-multiply with scalar expf was measured slower than torch's vectorised silu.) */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float vec8 __attribute__((vector_size(32)));

static inline vec8 load8(const float *p) {
    vec8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Rows in parallel only when there is enough work to pay for waking the other threads (a decode step's
   rows are small). */
#define PARALLEL_MIN_FLOATS 65536

/* residual += delta (skipped when delta is NULL), then out = weight * (residual * rsqrt(mean(residual^2) + eps));
   all [rows, dim] contiguous, weight [dim]. */
void add_rms_norm(float *residual, const float *delta, const float *weight, float *out, int64_t rows, int64_t dim,
                  float eps, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if (rows * dim >= PARALLEL_MIN_FLOATS)
    for (int64_t r = 0; r < rows; r++) {
        float *x = residual + r * dim;
        if (delta != NULL) {
            const float *d = delta + r * dim;
            for (int64_t i = 0; i < dim; i++) x[i] += d[i];
        }
        vec8 acc = {0};
        const int64_t body = dim - dim % 8;
        for (int64_t i = 0; i < body; i += 8) {
            const vec8 v = load8(x + i);
            acc += v * v;
        }
        float sum = 0.f;
        for (int l = 0; l < 8; l++) sum += acc[l];
        for (int64_t i = body; i < dim; i++) sum += x[i] * x[i];
        const float scale = 1.f / sqrtf(sum / (float)dim + eps);
        float *o = out + r * dim;
        for (int64_t i = 0; i < dim; i++) o[i] = weight[i] * (x[i] * scale);
    }
}

/* Rotary embedding and the KV-cache store of one attention layer, as one pass over its qkv projection.

   In torch this is ~15 ops a layer (split, cat and neg for rotate_half, four products, two sums, two transposed
   index_copy_ into the cache), each a pass over memory or, for a decode step's few rows, mostly dispatch cost.
   The arithmetic is the reference's, rounding included: x * cos + rotate_half(x) * sin with each product rounded
   and then summed, so fused multiply-adds are kept out of this function (the library is built with
   -ffp-contract=fast). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
static void rope_head(float *x, const float *c, const float *s, int64_t half) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * c[i] + (-b) * s[i];
        x[i + half] = b * c[i + half] + a * s[i + half];
    }
}

/* qkv: [tokens, (num_heads + 2 * num_kv_heads) * head_dim], each row q heads, k heads, v heads; q and k are
   rotated in place. cos, sin: [tokens, head_dim], each token's row. k_cache, v_cache: [num_kv_heads,
   cache_slots, head_dim]; token t's k and v go to slot slots[t] (0 <= slots[t] < cache_slots, checked by the
   caller). */
void rope_store_kv(float *qkv, const float *cos, const float *sin, const int64_t *slots, float *k_cache,
                   float *v_cache, int64_t tokens, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                   int64_t cache_slots, int num_threads) {
    const int64_t width = (num_heads + 2 * num_kv_heads) * head_dim;
#pragma omp parallel for num_threads(num_threads) if (tokens * width >= PARALLEL_MIN_FLOATS)
    for (int64_t t = 0; t < tokens; t++) {
        float *row = qkv + t * width;
        const float *c = cos + t * head_dim, *s = sin + t * head_dim;
        for (int64_t h = 0; h < num_heads + num_kv_heads; h++) rope_head(row + h * head_dim, c, s, head_dim / 2);
        const float *k = row + num_heads * head_dim, *v = k + num_kv_heads * head_dim;
        for (int64_t h = 0; h < num_kv_heads; h++) {
            const int64_t at = (h * cache_slots + slots[t]) * head_dim;
            memcpy(k_cache + at, k + h * head_dim, sizeof(float) * head_dim);
            memcpy(v_cache + at, v + h * head_dim, sizeof(float) * head_dim);
        }
    }
}
