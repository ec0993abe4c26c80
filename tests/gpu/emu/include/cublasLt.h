/* CPU emulation (cuda_emu_core.h): cuBLASLt as worker/cuda uses it: descriptors and layouts checked
 * for shape, the product a column-major triple loop in double. The heuristic refuses fp8
 * products outside the rules cuBLASLt documents for its fp8 kernels (Hopper): A transposed
 * and B not ("TN"), both operands fp8 and not both E5M2, m, n, k and the leading
 * dimensions multiples of 16, A and B 16-byte aligned. */
#pragma once
#include <cstdio>
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_fp8.h"
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum {
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
    CUDA_R_8F_E4M3 = 28,
    CUDA_R_8F_E5M2 = 29
} cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;
typedef void *cublasLtHandle_t;
struct emu_desc {
    int opa, opb;
};
struct emu_layout {
    cudaDataType_t t;
    uint64_t rows, cols;
    int64_t ld;
};
typedef emu_desc *cublasLtMatmulDesc_t;
typedef emu_layout *cublasLtMatrixLayout_t;
struct emu_pref {
    uint32_t align_a, align_b;
};
typedef emu_pref *cublasLtMatmulPreference_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (void *)1;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t) {
    return CUBLAS_STATUS_SUCCESS;
}
inline const char *cublasLtGetStatusString(cublasStatus_t) {
    return "emulated cublasLt status";
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c,
                                               cudaDataType_t s) {
    if (c != CUBLAS_COMPUTE_32F || s != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new emu_desc{0, 0};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                     cublasLtMatmulDescAttributes_t a,
                                                     const void *v, size_t n) {
    if (n != 4) return CUBLAS_STATUS_NOT_SUPPORTED;
    int x;
    memcpy(&x, v, 4);
    if (a == CUBLASLT_MATMUL_DESC_TRANSA)
        d->opa = x;
    else
        d->opb = x;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t,
                                                 uint64_t rows, uint64_t cols, int64_t ld) {
    if ((int64_t)rows > ld) return CUBLAS_STATUS_NOT_SUPPORTED; /* as cuBLASLt: ld >= rows */
    *l = new emu_layout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new emu_pref{1, 1};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a,
                                                           const void *v, size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n != 8) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n != 4) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES) memcpy(&p->align_a, v, 4);
    if (a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES) memcpy(&p->align_b, v, 4);
    return CUBLAS_STATUS_SUCCESS;
}
inline bool emu_is_fp8(cudaDataType_t t) {
    return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}
/* Whether cuBLASLt's fp8 kernels take the product (see the top of this file). */
inline bool emu_fp8_ok(const emu_desc *d, const emu_layout *la, const emu_layout *lb,
                       const emu_layout *ld, const emu_pref *p) {
    if (!emu_is_fp8(la->t) || !emu_is_fp8(lb->t)) return false;
    if (la->t == CUDA_R_8F_E5M2 && lb->t == CUDA_R_8F_E5M2) return false;
    if (d->opa != CUBLAS_OP_T || d->opb != CUBLAS_OP_N) return false;
    size_t k = la->rows;
    return ld->rows % 16 == 0 && ld->cols % 16 == 0 && k % 16 == 0 && la->ld % 16 == 0 &&
           lb->ld % 16 == 0 && p->align_a >= 16 && p->align_b >= 16;
}
inline cublasStatus_t
cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t la,
                               cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t,
                               cublasLtMatrixLayout_t ld, cublasLtMatmulPreference_t p, int,
                               cublasLtMatmulHeuristicResult_t *r, int *found) {
    memset(r, 0, sizeof *r);
    bool fp8 = emu_is_fp8(la->t) || emu_is_fp8(lb->t);
    *found = !fp8 || emu_fp8_ok(d, la, lb, ld, p);
    return CUBLAS_STATUS_SUCCESS;
}
inline double emu_elem(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2)
        return prec_fp8_decode(((const uint8_t *)p)[i], t == CUDA_R_8F_E5M2);
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F) return prec_fp16_from_bits(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Column-major element (r, c) of op(M). */
inline double emu_op(const void *p, const emu_layout *l, int op, size_t r, size_t c) {
    return op == CUBLAS_OP_N ? emu_elem(p, l->t, r + c * l->ld) : emu_elem(p, l->t, c + r * l->ld);
}
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha,
                                     const void *A, cublasLtMatrixLayout_t la, const void *B,
                                     cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                                     cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                                     const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t q) {
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t m = ld->rows, n = ld->cols;
    size_t k = d->opa == CUBLAS_OP_N ? la->cols : la->rows;
    size_t ka = k, kb = d->opb == CUBLAS_OP_N ? lb->rows : lb->cols;
    size_t ma = d->opa == CUBLAS_OP_N ? la->rows : la->cols;
    size_t nb = d->opb == CUBLAS_OP_N ? lb->cols : lb->rows;
    if (ka != kb || ma != m || nb != n || lc->rows != m || lc->cols != n) {
        fprintf(stderr, "emu cublasLtMatmul: shape mismatch m %zu/%zu n %zu/%zu k %zu/%zu\n", m, ma,
                n, nb, ka, kb);
        abort();
    }
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            double s = 0;
            for (size_t x = 0; x < k; x++)
                s += emu_op(A, la, d->opa, i, x) * emu_op(B, lb, d->opb, x, j);
            float *dp = (float *)D + i + j * ld->ld;
            float cv = ((const float *)C)[i + j * lc->ld];
            *dp = (float)(al * s) + (be != 0.0f ? be * cv : 0.0f);
        }
    emu::queued(q);
    return CUBLAS_STATUS_SUCCESS;
}
