/* Decode attention straight from the paged KV cache (CPU, float32), built at first use by cpu_kernels.py.

   One query token per sequence attends over its cached keys, read block by block through its block table:
   no gathered copy of K/V (the torch path copies every key and value into a buffer and SDPA reads it again,
   three passes over the cache where this makes one). Work items are (sequence, KV head) pairs, each serving
   the query heads that share that KV head (grouped-query attention). Softmax is exact: scores for the whole
   context first, then their max, then exp and sum, as a reference implementation does. Dot products keep 8
   running partial sums, an order the compiler can vectorise without -ffast-math. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define LANES 8

static float dot(const float *a, const float *b, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0.f;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

#define KEYS 8

/* scores of KEYS consecutive keys (rows of `k`) against one query, each summed in dot()'s order */
static void dot_keys(const float *q, const float *k, int64_t head_dim, float *out, float scale) {
    float acc[KEYS][LANES] = {{0}};
    for (int64_t i = 0; i + LANES <= head_dim; i += LANES)
        for (int j = 0; j < KEYS; j++)
            for (int l = 0; l < LANES; l++) acc[j][l] += q[i + l] * k[j * head_dim + i + l];
    for (int j = 0; j < KEYS; j++) {
        float s = 0.f;
        for (int l = 0; l < LANES; l++) s += acc[j][l];
        for (int64_t i = head_dim - head_dim % LANES; i < head_dim; i++) s += q[i] * k[j * head_dim + i];
        out[j] = s * scale;
    }
}

/* q, out: [B, Hq, D]; k_cache, v_cache: [Hkv, num_blocks, block_size, D]; block_tables: [B, max_blocks]
   (int64); context_lens: [B] (int64, keys each query sees, its own included). */
void paged_decode_attention(const float *q, const float *k_cache, const float *v_cache,
                            const int64_t *block_tables, const int64_t *context_lens, float *out,
                            int64_t batch, int64_t num_heads, int64_t num_kv_heads, int64_t num_blocks,
                            int64_t block_size, int64_t head_dim, int64_t max_blocks, float scale,
                            int num_threads) {
    const int64_t group = num_heads / num_kv_heads;
    const int64_t head_stride = num_blocks * block_size * head_dim; /* one KV head's slab of the cache */
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads)
    for (int64_t item = 0; item < batch * num_kv_heads; item++) {
        const int64_t b = item / num_kv_heads, kvh = item % num_kv_heads;
        const int64_t len = context_lens[b];
        const int64_t *table = block_tables + b * max_blocks;
        const float *kh = k_cache + kvh * head_stride, *vh = v_cache + kvh * head_stride;
        float *scores = malloc(sizeof(float) * group * (len > 0 ? len : 1));
        float *acc = calloc(group * head_dim, sizeof(float));
        /* keys block by block: within a block they are contiguous, and 8 keys' dot products run side by
           side (independent sums the CPU overlaps) */
        for (int64_t t0 = 0; t0 < len; t0 += block_size) {
            const float *kb = kh + table[t0 / block_size] * block_size * head_dim;
            const int64_t n = len - t0 < block_size ? len - t0 : block_size;
            for (int64_t g = 0; g < group; g++) {
                const float *qv = q + (b * num_heads + kvh * group + g) * head_dim;
                float *s = scores + g * len + t0;
                int64_t j = 0;
                for (; j + KEYS <= n; j += KEYS) dot_keys(qv, kb + j * head_dim, head_dim, s + j, scale);
                for (; j < n; j++) s[j] = dot(qv, kb + j * head_dim, (int)head_dim) * scale;
            }
        }
        for (int64_t g = 0; g < group; g++) {
            float *s = scores + g * len;
            float m = -INFINITY;
            for (int64_t t = 0; t < len; t++) m = s[t] > m ? s[t] : m;
            float sum = 0.f;
            for (int64_t t = 0; t < len; t++) {
                s[t] = expf(s[t] - m);
                sum += s[t];
            }
            const float inv = 1.f / sum;
            for (int64_t t = 0; t < len; t++) s[t] *= inv;
        }
        for (int64_t t = 0; t < len; t++) {
            const float *v = vh + (table[t / block_size] * block_size + t % block_size) * head_dim;
            for (int64_t g = 0; g < group; g++) {
                const float p = scores[g * len + t];
                float *a = acc + g * head_dim;
                for (int64_t d = 0; d < head_dim; d++) a[d] += p * v[d];
            }
        }
        for (int64_t g = 0; g < group; g++) {
            float *o = out + (b * num_heads + kvh * group + g) * head_dim;
            for (int64_t d = 0; d < head_dim; d++) o[d] = acc[g * head_dim + d];
        }
        free(scores);
        free(acc);
    }
}
