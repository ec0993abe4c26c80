/* Matrix products on the GPU through cuBLASLt, float32 accumulation always. Weights are
 * (OC, C) row-major: out = inp @ weight^T; backward accumulates (+=) into dweight (beta 1)
 * and writes (=) dinp (beta 0).
 *
 * Precisions (backend_gemm), matching cpu_matmul.c's rounding of the GEMM inputs:
 *  - float32: float32 inputs, CUBLAS_COMPUTE_32F (no TF32: the CPU reference is exact
 *    float32 products).
 *  - bf16 / fp16: each operand converted round-to-nearest-even into the scratch, then a
 *    16-bit-input GEMM with float32 output and accumulation (tensor cores).
 *  - fp8: each operand quantized with its per-tensor scale, saturating, to E4M3 (E5M2
 *    for the incoming gradient when dy_e5m2 is set), as precision.h defines. The fp8
 *    values are carried in bf16 (every E4M3 and E5M2 value is a bf16 value, exactly) and
 *    multiplied on the bf16 tensor cores; the dequantization 1/(scale_a scale_b) is the
 *    GEMM's alpha. The numbers are those of an fp8 GEMM; the speed is bf16's. A native
 *    E4M3/E5M2 cuBLASLt GEMM (TN layout, transposed operand copies, scale pointers) is
 *    the owed speed-up. The amax of each operand (max |x|, NaN ignored: a maximum is exact
 *    in any order, so the one atomicMax is deterministic) goes into the caller's running
 *    maximum (amax_acc, device memory: no synchronization; the trainer's way), or without
 *    one is copied back into the backend_gemm before the op returns, which synchronizes
 *    the stream.
 *
 * cuBLASLt's algorithm for a product is chosen once per (shape, types, transposes,
 * pointer alignment class) by its heuristic and cached, so the same call always runs the
 * same kernel; all of cuBLASLt's split-K reduction schemes are fixed-order, so results
 * are deterministic run to run. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.cuh"

/* 16-bit scratch regions start on 256-byte boundaries (128 halves). */
#define MM_ALIGN_HALVES 128

static size_t pad_halves(size_t n) {
    return (n + MM_ALIGN_HALVES - 1) / MM_ALIGN_HALVES * MM_ALIGN_HALVES;
}

size_t cuda_matmul_scratch_floats(backend *be, int N, int C, int OC, backend_prec prec) {
    (void)be;
    if (prec == BACKEND_PREC_FP32) return 0;
    /* 16-bit copies of inp (N, C), weight (OC, C) and dout (N, OC), and room to align. */
    size_t halves =
        pad_halves((size_t)N * C) + pad_halves((size_t)OC * C) + pad_halves((size_t)N * OC);
    return halves / 2 + 64;
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void to_fp16_kernel(__half *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

/* dst = fp8(src * scale) (saturating, RNE) as a bf16 value; *amax = max |src|. */
__global__ void to_fp8_in_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n, float scale,
                                      int e5m2, unsigned *amax) {
    __shared__ float sh[256];
    __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
    float m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = src[i], ax = fabsf(x);
        if (ax > m) m = ax; /* false for NaN */
        __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(__fmul_rn(x, scale), __NV_SATFINITE, fmt);
        __half_raw hr = __nv_cvt_fp8_to_halfraw(q, fmt);
        dst[i] = __float2bfloat16_rn(__half2float(__half(hr)));
    }
    m = cuda_block_max(m, sh);
    if (threadIdx.x == 0) atomicMax(amax, __float_as_uint(m)); /* m >= 0: bits order as values */
}

/* An operand as the GEMM takes it. */
typedef struct mm_operand {
    const void *ptr;
    cudaDataType_t type;
} mm_operand;

/* Prepares src (n floats) for precision p into dst (16-bit scratch); slot and fmt for fp8. */
static mm_operand mm_prepare(cuda_ctx *c, void *dst, const float *src, size_t n,
                             const backend_gemm *p, int slot, int e5m2) {
    mm_operand o = {src, CUDA_R_32F};
    if (p == NULL || p->prec == BACKEND_PREC_FP32) return o;
    unsigned grid = cuda_grid(n, 256);
    if (p->prec == BACKEND_PREC_BF16) {
        to_bf16_kernel<<<grid, 256, 0, c->stream>>>((__nv_bfloat16 *)dst, src, n);
        o.type = CUDA_R_16BF;
    } else if (p->prec == BACKEND_PREC_FP16) {
        to_fp16_kernel<<<grid, 256, 0, c->stream>>>((__half *)dst, src, n);
        o.type = CUDA_R_16F;
    } else {
        /* The caller's running maximum, or the backend's slots copied back after the call
         * (the float bits of values >= 0 order as unsigned integers). */
        unsigned *amax = p->amax_acc ? (unsigned *)(p->amax_acc + slot) : c->amax_dev + slot;
        to_fp8_in_bf16_kernel<<<grid, 256, 0, c->stream>>>((__nv_bfloat16 *)dst, src, n,
                                                           p->scale[slot], e5m2, amax);
        o.type = CUDA_R_16BF;
    }
    CUDA_LAUNCHED(c, "matmul operand conversion");
    o.ptr = dst;
    return o;
}

/* The largest of 16, 8, 4, 2 bytes dividing the address. */
static int align_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    return (u % 16 == 0) ? 16 : (u % 8 == 0) ? 8 : (u % 4 == 0) ? 4 : 2;
}

static int key_eq(const cuda_lt_key *a, const cuda_lt_key *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

static void lt_fail(cuda_ctx *c, const char *what, cublasStatus_t s) {
    cuda_record(c, -3 /* BT_EIO */, what, cublasLtGetStatusString(s));
}

/* D (m, n; column-major, ldd; float32) = alpha op(A) op(B) + beta D, in cuBLAS's
 * column-major terms. */
static void lt_matmul(cuda_ctx *c, cublasOperation_t opa, cublasOperation_t opb, int m, int n,
                      int k, mm_operand A, int lda, mm_operand B, int ldb, float *D, int ldd,
                      float alpha, float beta) {
    if (m == 0 || n == 0) return;
    if (k == 0) { /* an empty product: D = beta D */
        if (beta == 0.0f)
            cuda_check(c, cudaMemset2DAsync(D, (size_t)ldd * 4, 0, (size_t)m * 4, n, c->stream),
                       "matmul: cudaMemset2DAsync");
        return;
    }
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t s = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&la, A.type, opa == CUBLAS_OP_N ? m : k,
                                       opa == CUBLAS_OP_N ? k : m, lda);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&lb, B.type, opb == CUBLAS_OP_N ? k : n,
                                       opb == CUBLAS_OP_N ? n : k, ldb);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd);
    if (s != CUBLAS_STATUS_SUCCESS) {
        lt_fail(c, "matmul: cuBLASLt descriptors", s);
        goto done;
    }
    {
        cuda_lt_key key;
        memset(&key, 0, sizeof key);
        key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
        key.opa = opa, key.opb = opb, key.atype = A.type, key.btype = B.type;
        key.accumulate = beta != 0.0f;
        int aa = align_of(A.ptr), ab = align_of(B.ptr), ad = align_of(D);
        key.align = aa | ab << 8 | ad << 16;
        cuda_lt_entry *e = NULL;
        for (int i = 0; i < CUDA_LT_CACHE; i++)
            if (c->lt_cache[i].valid && key_eq(&c->lt_cache[i].key, &key)) {
                e = &c->lt_cache[i];
                break;
            }
        if (e == NULL) {
            uint32_t a32 = (uint32_t)aa, b32 = (uint32_t)ab, d32 = (uint32_t)ad;
            s = cublasLtMatmulPreferenceCreate(&pref);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(
                    pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->lt_workspace_bytes,
                    sizeof c->lt_workspace_bytes);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(
                    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32, sizeof a32);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(
                    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32, sizeof b32);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(
                    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d32, sizeof d32);
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulPreferenceSetAttribute(
                    pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d32, sizeof d32);
            cublasLtMatmulHeuristicResult_t res;
            int found = 0;
            if (s == CUBLAS_STATUS_SUCCESS)
                s = cublasLtMatmulAlgoGetHeuristic(c->lt, desc, la, lb, ld, ld, pref, 1, &res,
                                                   &found);
            if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
                char msg[160];
                snprintf(msg, sizeof msg, "no algorithm for m %d n %d k %d (types %d x %d): %s", m,
                         n, k, (int)A.type, (int)B.type,
                         s != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(s) : "none found");
                cuda_record(c, -7 /* BT_EUNSUPPORTED */, "matmul: cublasLtMatmulAlgoGetHeuristic",
                            msg);
                goto done;
            }
            e = &c->lt_cache[c->lt_next];
            c->lt_next = (c->lt_next + 1) % CUDA_LT_CACHE;
            e->key = key;
            e->algo = res.algo;
            e->valid = 1;
        }
        s = cublasLtMatmul(c->lt, desc, &alpha, A.ptr, la, B.ptr, lb, &beta, D, ld, D, ld, &e->algo,
                           c->lt_workspace, c->lt_workspace_bytes, c->stream);
        if (s != CUBLAS_STATUS_SUCCESS) lt_fail(c, "matmul: cublasLtMatmul", s);
    }
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
}

/* The three 16-bit regions of the scratch: inp, weight, dout. */
typedef struct mm_scratch {
    void *x, *w, *dy;
} mm_scratch;

static mm_scratch scratch_regions(float *scratch, int N, int C, int OC) {
    uintptr_t base = ((uintptr_t)scratch + 255) / 256 * 256;
    mm_scratch r;
    r.x = (void *)base;
    r.w = (void *)(base + 2 * pad_halves((size_t)N * C));
    r.dy = (void *)((uintptr_t)r.w + 2 * pad_halves((size_t)OC * C));
    return r;
}

static int is_fp8(const backend_gemm *p) {
    return p != NULL && p->prec == BACKEND_PREC_FP8;
}

static int prec_ok(cuda_ctx *c, const backend_gemm *p) {
    if (p == NULL || (p->prec >= BACKEND_PREC_FP32 && p->prec <= BACKEND_PREC_FP16)) return 1;
    cuda_record(c, -1 /* BT_EINVAL */, "matmul", "unknown backend_prec");
    return 0;
}

/* Clears the amax slots before an fp8 call's conversions. */
static void amax_begin(cuda_ctx *c) {
    cuda_check(c, cudaMemsetAsync(c->amax_dev, 0, BACKEND_FP8_SLOTS * sizeof(unsigned), c->stream),
               "matmul: amax reset");
}

/* Copies the amaxes of the slots in mask back into p (synchronizes). */
static void amax_end(cuda_ctx *c, backend_gemm *p, unsigned mask) {
    cuda_check(c,
               cudaMemcpyAsync(c->amax_host, c->amax_dev, BACKEND_FP8_SLOTS * sizeof(unsigned),
                               cudaMemcpyDeviceToHost, c->stream),
               "matmul: amax copy");
    cuda_check(c, cudaStreamSynchronize(c->stream), "matmul: amax sync");
    for (int s = 0; s < BACKEND_FP8_SLOTS; s++)
        if (mask & (1u << s)) {
            float f;
            memcpy(&f, &c->amax_host[s], sizeof f);
            p->amax[s] = f;
        }
}

/* 1 / (sa sb): the dequantization of an fp8 product; 1 otherwise. */
static float dequant(const backend_gemm *p, int sa, int sb) {
    if (!is_fp8(p)) return 1.0f;
    return (float)(1.0 / ((double)p->scale[sa] * (double)p->scale[sb]));
}

void cuda_matmul_forward(backend *be, float *out, const float *inp, const float *weight, int N,
                         int C, int OC, backend_gemm *p, float *scratch) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (!prec_ok(c, p)) return;
    mm_scratch r = scratch_regions(scratch, N, C, OC);
    int copy_amax = is_fp8(p) && p->amax_acc == NULL;
    if (copy_amax) amax_begin(c);
    mm_operand x = mm_prepare(c, r.x, inp, (size_t)N * C, p, BACKEND_FP8_X, 0);
    mm_operand w = mm_prepare(c, r.w, weight, (size_t)OC * C, p, BACKEND_FP8_W, 0);
    /* out^T (OC, N) = W (C, OC col-major)^T X^T (C, N) */
    lt_matmul(c, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, x, C, out, OC,
              dequant(p, BACKEND_FP8_X, BACKEND_FP8_W), 0.0f);
    if (copy_amax) amax_end(c, p, 1u << BACKEND_FP8_X | 1u << BACKEND_FP8_W);
}

void cuda_matmul_backward(backend *be, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int N, int C, int OC,
                          backend_gemm *p, float *scratch) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (!prec_ok(c, p)) return;
    mm_scratch r = scratch_regions(scratch, N, C, OC);
    int e5m2 = p != NULL && p->dy_e5m2;
    unsigned mask = 1u << BACKEND_FP8_DY | 1u << BACKEND_FP8_X;
    int copy_amax = is_fp8(p) && p->amax_acc == NULL;
    if (copy_amax) amax_begin(c);
    mm_operand dy = mm_prepare(c, r.dy, dout, (size_t)N * OC, p, BACKEND_FP8_DY, e5m2);
    if (dinp != NULL) {
        mm_operand w = mm_prepare(c, r.w, weight, (size_t)OC * C, p, BACKEND_FP8_W, 0);
        /* dinp^T (C, N) = W (C, OC col-major) dy^T (OC, N) */
        lt_matmul(c, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dy, OC, dinp, C,
                  dequant(p, BACKEND_FP8_DY, BACKEND_FP8_W), 0.0f);
        mask |= 1u << BACKEND_FP8_W;
    }
    mm_operand x = mm_prepare(c, r.x, inp, (size_t)N * C, p, BACKEND_FP8_X, 0);
    /* dweight^T (C, OC) += X^T (C, N) (dy^T (OC, N))^T */
    lt_matmul(c, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, x, C, dy, OC, dweight, C,
              dequant(p, BACKEND_FP8_DY, BACKEND_FP8_X), 1.0f);
    if (copy_amax) amax_end(c, p, mask);
}
