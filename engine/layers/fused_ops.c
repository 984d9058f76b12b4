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
