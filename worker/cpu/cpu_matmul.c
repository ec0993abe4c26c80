/* Matrix products on the CPU: cblas_sgemm, with the GEMM inputs first rounded to the
 * precision the GPUs compute in (precision.h emulates bf16, fp16 and fp8 exactly), float32
 * accumulation always. Weights are (OC, C) row-major: out = inp @ weight^T.
 * Backward accumulates (+=) into dweight and writes (=) dinp. */
#include <cblas.h>

#include "cpu_ops.h"
#include "precision.h"

size_t cpu_matmul_scratch_floats(backend *be, int N, int C, int OC, backend_prec prec) {
    (void)be;
    if (prec == BACKEND_PREC_FP32) return 0;
    /* Rounded copies of inp (N, C), weight (OC, C) and, in backward, dout (N, OC). */
    return (size_t)N * C + (size_t)OC * C + (size_t)N * OC;
}

/* The operand as the GEMM sees it: src itself in float32, else its rounded copy in dst.
 * In fp8 the amax of src is recorded in p->amax[slot]. */
static const float *operand(float *dst, const float *src, size_t n, backend_gemm *p, int slot,
                            prec_fp8_format fmt) {
    if (p == NULL || p->prec == BACKEND_PREC_FP32) return src;
    if (p->prec == BACKEND_PREC_BF16) {
        prec_bf16_round_array(dst, src, n);
        return dst;
    }
    if (p->prec == BACKEND_PREC_FP16) {
        prec_fp16_round_array(dst, src, n);
        return dst;
    }
    float amax = prec_fp8_qdq_array(dst, src, n, p->scale[slot], fmt);
    if (p->amax_acc == NULL)
        p->amax[slot] = amax;
    else if (amax > p->amax_acc[slot]) /* false for NaN, as the CUDA kernel's maximum */
        p->amax_acc[slot] = amax;
    return dst;
}

void cpu_matmul_forward(backend *be, float *out, const float *inp, const float *weight, int N,
                        int C, int OC, backend_gemm *p, float *scratch) {
    (void)be;
    size_t nx = (size_t)N * C;
    const float *x = operand(scratch, inp, nx, p, BACKEND_FP8_X, PREC_E4M3);
    const float *w = operand(scratch + nx, weight, (size_t)OC * C, p, BACKEND_FP8_W, PREC_E4M3);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, x, C, w, C, 0.0f, out, OC);
}

void cpu_matmul_backward(backend *be, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC,
                         backend_gemm *p, float *scratch) {
    (void)be;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C;
    prec_fp8_format dy_fmt = (p != NULL && p->dy_e5m2) ? PREC_E5M2 : PREC_E4M3;
    const float *dy = operand(scratch + nx + nw, dout, (size_t)N * OC, p, BACKEND_FP8_DY, dy_fmt);
    if (dinp != NULL) {
        const float *w = operand(scratch + nx, weight, nw, p, BACKEND_FP8_W, PREC_E4M3);
        /* dinp (N, C) = dout (N, OC) @ weight (OC, C) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dy, OC, w, C, 0.0f,
                    dinp, C);
    }
    const float *x = operand(scratch, inp, nx, p, BACKEND_FP8_X, PREC_E4M3);
    /* dweight (OC, C) += dout^T (OC, N) @ inp (N, C) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dy, OC, x, C, 1.0f,
                dweight, C);
}
