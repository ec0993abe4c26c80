/* The CPU backend's optimizer ops (backend.h: adamw, copy). */
#include <math.h>
#include <string.h>

#include "cpu_math.h"
#include "cpu_ops.h"
#include "precision.h"

CPU_CLONES void cpu_adamw_range(float *param, float *grad, float *m, float *v, size_t n,
                                const backend_adamw *a, int decay) {
    const float b1 = a->b1, b2 = a->b2, c1 = a->one_minus_b1, c2 = a->one_minus_b2;
    const float eps = a->eps, keep = decay ? a->keep : 1.0f, coef = a->grad_coef;
    const float step_size = a->step_size, inv_bc2_sqrt = a->inv_bc2_sqrt;
    if (coef != 1.0f)
        for (size_t i = 0; i < n; i++)
            grad[i] *= coef;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        float mi = b1 * m[i] + c1 * g;
        float vi = b2 * v[i] + c2 * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
        param[i] = param[i] * keep - step_size * mi / denom;
    }
}

void cpu_adamw(backend *be, float *param, float *grad, float *m, float *v, const backend_seg *segs,
               size_t nseg, const backend_adamw *a) {
    (void)be;
    for (size_t s = 0; s < nseg; s++) {
        size_t off = segs[s].offset;
        cpu_adamw_range(param + off, grad + off, m + off, v + off, segs[s].n, a, segs[s].decay);
    }
}

void cpu_copy_floats(backend *be, float *dst, const float *src, size_t n) {
    (void)be;
    if (n) memcpy(dst, src, n * sizeof *dst);
}

void cpu_pack_bf16(backend *be, uint16_t *dst, const float *src, size_t n) {
    (void)be;
    prec_bf16_bits_array(dst, src, n);
}

void cpu_unpack_bf16(backend *be, float *dst, const uint16_t *src, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}
