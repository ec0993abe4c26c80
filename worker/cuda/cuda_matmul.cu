/* Matrix products on the GPU through cuBLASLt, float32 accumulation always. Weights are
 * (OC, C) row-major: out = inp @ weight^T; backward accumulates (+=) into dweight (beta 1)
 * and writes (=) dinp (beta 0).
 *
 * Precisions (backend_gemm), matching cpu_matmul.c's rounding of the GEMM inputs:
 *  - float32: float32 inputs, CUBLAS_COMPUTE_32F (no TF32: the CPU reference is exact
 *    float32 products).
 *  - bf16 / fp16: each operand converted round-to-nearest-even into the scratch (the bf16
 *    conversion is also backend.h's pack_bf16 for transfers), then a
 *    16-bit-input GEMM with float32 output and accumulation (tensor cores).
 *  - fp8: each operand quantized with its per-tensor scale, saturating, to E4M3 (E5M2
 *    for the incoming gradient when dy_e5m2 is set), as precision.h defines, and
 *    multiplied on the fp8 tensor cores with float32 output and accumulation: E4M3 x
 *    E4M3 forward, E4M3 x E5M2 backward. cuBLASLt's fp8 kernels take only the "TN"
 *    layout (both operands contiguous along the summed dimension), so the backward
 *    quantizes W, X and dY into transposed copies as well (one pass each, through shared
 *    memory). The dequantization 1/(scale_a scale_b) is the GEMM's alpha: the scales are
 *    the caller's host values (its delayed-scaling history), and a host alpha is the
 *    same product as cuBLASLt's per-operand scale pointers without a device copy of
 *    them. cuBLASLt's fp8 kernels want every dimension a multiple of 16: rows N that are
 *    not (an expert's rows, say) are padded with zero rows to Np, the next multiple, in
 *    the quantized copies (the sums over rows gain only zeros), and the products over Np
 *    rows are written to the scratch and their first N rows copied out. Shapes the fp8
 *    kernels do not take (C or OC not a multiple of 16, or no
 *    algorithm from cuBLASLt's heuristic) run the same numbers with the fp8 values
 *    carried in bf16 (every E4M3 and E5M2 value is a bf16 value, exactly) on the bf16
 *    tensor cores; so does every product with BATON_CUDA_FP8=carried in the environment
 *    (read when the backend starts). cuda_fp8_gemm_counts tells which ran. The amax of each
 *    operand (max |x|, NaN ignored: a maximum is exact in any order, so the one
 *    atomicMax is deterministic) goes into the caller's running maximum (amax_acc,
 *    device memory: no synchronization; the trainer's way), or without one is copied
 *    back into the backend_gemm before the op returns, which synchronizes the stream.
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

#include "cuda_backend.h"
#include "cuda_internal.cuh"

/* 16-bit scratch regions start on 256-byte boundaries (128 halves). */
#define MM_ALIGN_HALVES 128

static size_t pad_halves(size_t n) {
    return (n + MM_ALIGN_HALVES - 1) / MM_ALIGN_HALVES * MM_ALIGN_HALVES;
}

/* The rows of an fp8 product's quantized copies: N padded to a multiple of 16. */
static int fp8_rows(int N) {
    return (N + 15) / 16 * 16;
}

size_t cuda_matmul_scratch_floats(backend *be, int N, int C, int OC, backend_prec prec) {
    (void)be;
    if (prec == BACKEND_PREC_FP32) return 0;
    /* 16-bit copies of inp (N, C), weight (OC, C) and dout (N, OC), and room to align;
     * under fp8 for Np rows, and a last 16-row block's float product (16, max(C, OC)):
     * never less for fewer rows, as callers sized for their most rows rely on */
    size_t R = prec == BACKEND_PREC_FP8 ? (size_t)fp8_rows(N) : (size_t)N;
    size_t halves = pad_halves(R * C) + pad_halves((size_t)OC * C) + pad_halves(R * OC);
    size_t tail = prec == BACKEND_PREC_FP8 ? 16 * (size_t)(C > OC ? C : OC) + 64 : 0;
    return halves / 2 + 64 + tail;
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void from_bf16_kernel(float *dst, const __nv_bfloat16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* backend.h's bf16 packing: the very conversion a bf16 product applies to its operands
 * (mm_prepare), so a tensor packed for transfer rounds as the product would round it. */
void cuda_pack_bf16(backend *be, uint16_t *dst, const float *src, size_t n) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (n == 0) return;
    to_bf16_kernel<<<cuda_grid(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)dst, src, n);
    CUDA_LAUNCHED(c, "pack_bf16");
}

void cuda_unpack_bf16(backend *be, float *dst, const uint16_t *src, size_t n) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (n == 0) return;
    from_bf16_kernel<<<cuda_grid(n, 256), 256, 0, c->stream>>>(dst, (const __nv_bfloat16 *)src, n);
    CUDA_LAUNCHED(c, "unpack_bf16");
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

#define Q_TILE 32 /* fp8_quant_kernel's tiles: Q_TILE x Q_TILE, blocks of Q_TILE x 8 threads */

/* q = fp8(src * scale) (saturating, RNE) for src (rows, cols) row-major, written to dst
 * (rows_pad, cols: rows_pad >= rows, the rows past rows zero) and/or to dst_t (cols,
 * rows_pad: the transpose), whichever is not NULL; *amax = max(*amax, max |src|). The
 * block walks 32 x 32 tiles, staged in shared memory so that the transposed writes are
 * as contiguous as the reads. */
__global__ void fp8_quant_kernel(__nv_fp8_storage_t *dst, __nv_fp8_storage_t *dst_t,
                                 const float *src, int rows, int rows_pad, int cols, float scale,
                                 int e5m2, unsigned *amax) {
    __shared__ __nv_fp8_storage_t tile[Q_TILE][Q_TILE + 1];
    __shared__ float sh[Q_TILE * 8];
    __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
    int tx = threadIdx.x % Q_TILE, ty = threadIdx.x / Q_TILE;
    size_t tcols = ((size_t)cols + Q_TILE - 1) / Q_TILE;
    size_t tiles = ((size_t)rows_pad + Q_TILE - 1) / Q_TILE * tcols;
    float m = 0.0f;
    for (size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        int r0 = (int)(t / tcols) * Q_TILE, c0 = (int)(t % tcols) * Q_TILE;
        for (int i = ty; i < Q_TILE; i += 8) {
            int r = r0 + i, col = c0 + tx;
            if (r >= rows_pad || col >= cols) continue;
            __nv_fp8_storage_t q = 0; /* +0 in E4M3 and E5M2: the padding rows */
            if (r < rows) {
                float x = src[(size_t)r * cols + col], ax = fabsf(x);
                if (ax > m) m = ax; /* false for NaN */
                q = __nv_cvt_float_to_fp8(__fmul_rn(x, scale), __NV_SATFINITE, fmt);
            }
            if (dst != NULL) dst[(size_t)r * cols + col] = q;
            tile[i][tx] = q;
        }
        if (dst_t == NULL) continue; /* the same for the whole block */
        __syncthreads();
        for (int i = ty; i < Q_TILE; i += 8) {
            int col = c0 + i, r = r0 + tx;
            if (col < cols && r < rows_pad) dst_t[(size_t)col * rows_pad + r] = tile[tx][i];
        }
        __syncthreads();
    }
    m = cuda_block_max(m, sh);
    if (threadIdx.x == 0) atomicMax(amax, __float_as_uint(m)); /* m >= 0: bits order as values */
}

/* An operand as the GEMM takes it. */
typedef struct mm_operand {
    const void *ptr;
    cudaDataType_t type;
} mm_operand;

/* Where an fp8 operand's amax goes: the caller's running maximum, or the backend's slots
 * copied back after the call (the float bits of values >= 0 order as unsigned integers). */
static unsigned *amax_slot(cuda_ctx *c, const backend_gemm *p, int slot) {
    return p->amax_acc ? (unsigned *)(p->amax_acc + slot) : c->amax_dev + slot;
}

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
        to_fp8_in_bf16_kernel<<<grid, 256, 0, c->stream>>>(
            (__nv_bfloat16 *)dst, src, n, p->scale[slot], e5m2, amax_slot(c, p, slot));
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

/* One product D (m, n; column-major, ldd; float32) = alpha op(A) op(B) + beta D, in
 * cuBLAS's column-major terms, and the cuBLASLt objects describing it. */
typedef struct lt_gemm {
    cublasOperation_t opa, opb;
    int m, n, k;
    mm_operand A;
    int lda;
    mm_operand B;
    int ldb;
    float *D;
    int ldd;
    float alpha, beta;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo; /* a copy: a later lt_setup may reuse the cache entry */
} lt_gemm;

static lt_gemm lt_make(cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k,
                       mm_operand A, int lda, mm_operand B, int ldb, float *D, int ldd, float alpha,
                       float beta) {
    lt_gemm g;
    memset(&g, 0, sizeof g);
    g.opa = opa, g.opb = opb, g.m = m, g.n = n, g.k = k;
    g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.D = D, g.ldd = ldd;
    g.alpha = alpha, g.beta = beta;
    return g;
}

static void lt_release(lt_gemm *g) {
    if (g->ld) cublasLtMatrixLayoutDestroy(g->ld);
    if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->desc) cublasLtMatmulDescDestroy(g->desc);
    g->ld = g->lb = g->la = NULL, g->desc = NULL;
}

static cublasStatus_t lt_describe(lt_gemm *g) {
    cublasStatus_t s = cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->opa,
                                           sizeof g->opa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->opb,
                                           sizeof g->opb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&g->la, g->A.type, g->opa == CUBLAS_OP_N ? g->m : g->k,
                                       g->opa == CUBLAS_OP_N ? g->k : g->m, g->lda);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&g->lb, g->B.type, g->opb == CUBLAS_OP_N ? g->k : g->n,
                                       g->opb == CUBLAS_OP_N ? g->n : g->k, g->ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&g->ld, CUDA_R_32F, g->m, g->n, g->ldd);
    return s;
}

/* cuBLASLt's heuristic's algorithm for g's key (a = b = d: alignments), or none found. */
static cublasStatus_t lt_heuristic(cuda_ctx *c, lt_gemm *g, uint32_t a, uint32_t b, uint32_t d,
                                   cublasLtMatmulHeuristicResult_t *res, int *found) {
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        const void *v;
        size_t n;
    } set[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->lt_workspace_bytes,
         sizeof c->lt_workspace_bytes},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a, sizeof a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b, sizeof b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d, sizeof d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d, sizeof d},
    };
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
    for (size_t i = 0; s == CUBLAS_STATUS_SUCCESS && i < sizeof set / sizeof set[0]; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, set[i].attr, set[i].v, set[i].n);
    *found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(c->lt, g->desc, g->la, g->lb, g->ld, g->ld, pref, 1, res,
                                           found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return s;
}

/* Describes g and finds its algorithm (cached per key). Returns 0 when g can run, 1 when
 * cuBLASLt has no algorithm for it (recorded as an error unless may_refuse; a refusal is
 * cached too), -1 on a failure (recorded). */
static int lt_setup(cuda_ctx *c, lt_gemm *g, int may_refuse) {
    cublasStatus_t s = lt_describe(g);
    if (s != CUBLAS_STATUS_SUCCESS) {
        lt_fail(c, "matmul: cuBLASLt descriptors", s);
        return -1;
    }
    cuda_lt_key key;
    memset(&key, 0, sizeof key);
    key.m = g->m, key.n = g->n, key.k = g->k, key.lda = g->lda, key.ldb = g->ldb;
    key.ldd = g->ldd, key.opa = g->opa, key.opb = g->opb;
    key.atype = g->A.type, key.btype = g->B.type, key.accumulate = g->beta != 0.0f;
    int aa = align_of(g->A.ptr), ab = align_of(g->B.ptr), ad = align_of(g->D);
    key.align = aa | ab << 8 | ad << 16;
    const cuda_lt_entry *hit = NULL;
    for (int i = 0; i < CUDA_LT_CACHE && hit == NULL; i++)
        if (c->lt_cache[i].valid && key_eq(&c->lt_cache[i].key, &key)) hit = &c->lt_cache[i];
    if (hit == NULL) {
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        s = lt_heuristic(c, g, (uint32_t)aa, (uint32_t)ab, (uint32_t)ad, &res, &found);
        if (s != CUBLAS_STATUS_SUCCESS && !may_refuse) {
            lt_fail(c, "matmul: cublasLtMatmulAlgoGetHeuristic", s);
            return -1;
        }
        cuda_lt_entry *e = &c->lt_cache[c->lt_next];
        c->lt_next = (c->lt_next + 1) % CUDA_LT_CACHE;
        e->key = key;
        e->refused = s != CUBLAS_STATUS_SUCCESS || found == 0;
        if (!e->refused) e->algo = res.algo;
        e->valid = 1;
        hit = e;
        if (e->refused && may_refuse) /* once per shape: the fallback's cost shows why */
            fprintf(stderr,
                    "baton-cuda: cuBLASLt has no algorithm for m %d n %d k %d, types %d x %d, "
                    "alignments %d/%d/%d bytes (status %d): carried in bf16\n",
                    g->m, g->n, g->k, (int)g->A.type, (int)g->B.type, aa, ab, ad, (int)s);
    }
    if (!hit->refused) {
        g->algo = hit->algo;
        return 0;
    }
    if (!may_refuse) {
        char msg[160];
        snprintf(msg, sizeof msg, "no algorithm for m %d n %d k %d (types %d x %d)", g->m, g->n,
                 g->k, (int)g->A.type, (int)g->B.type);
        cuda_record(c, -7 /* BT_EUNSUPPORTED */, "matmul: cublasLtMatmulAlgoGetHeuristic", msg);
    }
    return 1;
}

static void lt_launch(cuda_ctx *c, const lt_gemm *g) {
    cublasStatus_t s = cublasLtMatmul(c->lt, g->desc, &g->alpha, g->A.ptr, g->la, g->B.ptr, g->lb,
                                      &g->beta, g->D, g->ld, g->D, g->ld, &g->algo, c->lt_workspace,
                                      c->lt_workspace_bytes, c->stream);
    if (s != CUBLAS_STATUS_SUCCESS) lt_fail(c, "matmul: cublasLtMatmul", s);
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
    lt_gemm g = lt_make(opa, opb, m, n, k, A, lda, B, ldb, D, ldd, alpha, beta);
    if (lt_setup(c, &g, 0) == 0) lt_launch(c, &g);
    lt_release(&g);
}

/* The three 16-bit regions of the scratch: inp, weight, dout (for R rows: N, or under
 * fp8 Np), and under fp8 a last 16-row block's float product (tail). */
typedef struct mm_scratch {
    void *x, *w, *dy;
    float *tail;
} mm_scratch;

static mm_scratch scratch_regions(float *scratch, int N, int C, int OC, backend_prec prec) {
    uintptr_t base = ((uintptr_t)scratch + 255) / 256 * 256;
    size_t R = prec == BACKEND_PREC_FP8 ? (size_t)fp8_rows(N) : (size_t)N;
    mm_scratch r;
    r.x = (void *)base;
    r.w = (void *)(base + 2 * pad_halves(R * C));
    r.dy = (void *)((uintptr_t)r.w + 2 * pad_halves((size_t)OC * C));
    r.tail = (float *)(((uintptr_t)r.dy + 2 * pad_halves(R * OC) + 255) / 256 * 256);
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

/* ---- the weight cache (backend.h: backend_gemm.wcache) --------------------------------- */

/* The conversions a cache holds: region A the weight as the products take it (16-bit, or
 * E4M3 bytes; one at a time), region B (fp8 only) its E4M3 transpose for the backward.
 * Under fp8 with C and OC multiples of 16 (every product of such a weight runs on the fp8
 * tensor cores, unless BATON_CUDA_FP8=carried or cuBLASLt refuses one; the rows are padded)
 * region A holds the E4M3 bytes only: 2 bytes per parameter in all instead of 3; a
 * 16-bit conversion such a weight still needs goes to the call's scratch, not kept. */
enum { WC_16 = 1u, WC_FP8 = 2u, WC_FP8_T = 4u };

static int wcache_fp8_only(const cuda_ctx *c, backend_prec prec, int C, int OC) {
    return prec == BACKEND_PREC_FP8 && !c->fp8_carried && C % 16 == 0 && OC % 16 == 0;
}

/* Region A's bytes (region B, fp8 only, follows it). */
static size_t wcache_region_a(const cuda_ctx *c, backend_prec prec, int C, int OC) {
    size_t n = (size_t)OC * C;
    return wcache_fp8_only(c, prec, C, OC) ? 2 * pad_halves((n + 1) / 2) : 2 * pad_halves(n);
}

size_t cuda_matmul_wcache_floats(backend *be, int C, int OC, backend_prec prec) {
    if (prec == BACKEND_PREC_FP32 || C <= 0 || OC <= 0) return 0;
    cuda_ctx *c = cuda_ctx_of(be);
    size_t bytes = wcache_region_a(c, prec, C, OC);
    if (prec == BACKEND_PREC_FP8) bytes += 2 * pad_halves(((size_t)OC * C + 1) / 2);
    return bytes / sizeof(float) + 64; /* and room to align */
}

static int wcache_usable(const backend_gemm *p) {
    return p != NULL && p->wcache != NULL && (!is_fp8(p) || p->amax_acc != NULL);
}

/* Where conversion `form` of weight (OC, C) goes: its place in p's cache (*have: it is
 * there already, converted this step) or, without a cache, scratch. */
static void *weight_at(const cuda_ctx *c, const backend_gemm *p, const float *weight, int OC, int C,
                       unsigned form, void *scratch, int *have) {
    *have = 0;
    if (!wcache_usable(p) || (form == WC_16 && wcache_fp8_only(c, p->prec, C, OC))) return scratch;
    uintptr_t a = ((uintptr_t)p->wcache + 255) / 256 * 256;
    *have = p->wcache_w == weight && (p->wcache_forms & form) != 0;
    return form == WC_FP8_T ? (void *)(a + wcache_region_a(c, p->prec, C, OC)) : (void *)a;
}

/* After the conversion into p's cache is enqueued: the cache holds it (region A one form). */
static void weight_held(const cuda_ctx *c, backend_gemm *p, const float *weight, int OC, int C,
                        unsigned form) {
    if (!wcache_usable(p) || (form == WC_16 && wcache_fp8_only(c, p->prec, C, OC))) return;
    if (p->wcache_w != weight) p->wcache_forms = 0, p->wcache_w = weight;
    if (form != WC_FP8_T) p->wcache_forms &= WC_FP8_T;
    p->wcache_forms |= form;
}

/* The weight as a 16-bit (or float32) operand: from the cache, or converted into it or
 * into scratch. */
static mm_operand mm_weight(cuda_ctx *c, backend_gemm *p, const float *weight, int OC, int C,
                            void *scratch) {
    int have;
    void *dst = weight_at(c, p, weight, OC, C, WC_16, scratch, &have);
    if (p == NULL || p->prec == BACKEND_PREC_FP32 || !have) {
        mm_operand o = mm_prepare(c, dst, weight, (size_t)OC * C, p, BACKEND_FP8_W, 0);
        if (p != NULL && p->prec != BACKEND_PREC_FP32) weight_held(c, p, weight, OC, C, WC_16);
        return o;
    }
    mm_operand o = {dst, p->prec == BACKEND_PREC_FP16 ? CUDA_R_16F : CUDA_R_16BF};
    return o;
}

/* ---- fp8 products on the fp8 tensor cores ---------------------------------------------- */

/* Whether an fp8 product of these sizes may try the fp8 kernels: every dimension is the
 * summed one of some product, and the fp8 kernels want it (and so each leading dimension
 * and the scratch offsets) a multiple of 16; the rows N are padded to one. */
static int fp8_native_shape(const cuda_ctx *c, const backend_gemm *p, int N, int C, int OC) {
    return is_fp8(p) && !c->fp8_carried && N > 0 && C > 0 && OC > 0 && C % 16 == 0 &&
           OC % 16 == 0; /* N: padded (fp8_rows) */
}

static cudaDataType_t fp8_type(int e5m2) {
    return e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* Quantizes src (rows, cols) into dst and/or its transpose dst_t (fp8 bytes), with
 * rows_pad rows (zero past rows). */
static void fp8_quant(cuda_ctx *c, void *dst, void *dst_t, const float *src, int rows, int rows_pad,
                      int cols, const backend_gemm *p, int slot, int e5m2) {
    size_t tiles =
        ((size_t)rows_pad + Q_TILE - 1) / Q_TILE * (((size_t)cols + Q_TILE - 1) / Q_TILE);
    fp8_quant_kernel<<<cuda_grid(tiles, 1), Q_TILE * 8, 0, c->stream>>>(
        (__nv_fp8_storage_t *)dst, (__nv_fp8_storage_t *)dst_t, src, rows, rows_pad, cols,
        p->scale[slot], e5m2, amax_slot(c, p, slot));
    CUDA_LAUNCHED(c, "matmul fp8 quantization");
}

/* D (N, m) row-major = the TN product of A (k x m) and B's N rows (k each, ldb apart,
 * padded with zero rows to Np), in the fp8 kernels' 16-row blocks: rows [0, n16) straight
 * into D, the last partial block's 16 rows into the scratch's tail and its N - n16 rows
 * copied after them. */
typedef struct rows_gemm {
    lt_gemm body, tail;
    int n16, rest, m;
    float *d, *t;
} rows_gemm;

/* Sets both products up (refusals allowed): 0, 1 when cuBLASLt has no fp8 algorithm for
 * one, -1 on a failure. */
static int rows_setup(cuda_ctx *c, rows_gemm *g, int m, int N, int k, mm_operand a, int lda,
                      mm_operand b, int ldb, float *d, float *tail, float alpha) {
    memset(g, 0, sizeof *g);
    g->n16 = N / 16 * 16, g->rest = N - g->n16, g->m = m, g->d = d, g->t = tail;
    int rc = 0;
    if (g->n16 > 0) {
        g->body = lt_make(CUBLAS_OP_T, CUBLAS_OP_N, m, g->n16, k, a, lda, b, ldb, d, m, alpha, 0);
        rc = lt_setup(c, &g->body, 1);
    }
    if (rc == 0 && g->rest > 0) {
        mm_operand bt = {(const char *)b.ptr + (size_t)g->n16 * ldb, b.type};
        g->tail = lt_make(CUBLAS_OP_T, CUBLAS_OP_N, m, 16, k, a, lda, bt, ldb, tail, m, alpha, 0);
        rc = lt_setup(c, &g->tail, 1);
    }
    return rc;
}

static void rows_launch(cuda_ctx *c, const rows_gemm *g) {
    if (g->n16 > 0) lt_launch(c, &g->body);
    if (g->rest == 0) return;
    lt_launch(c, &g->tail);
    cuda_check(c,
               cudaMemcpyAsync(g->d + (size_t)g->n16 * g->m, g->t,
                               (size_t)g->rest * g->m * sizeof(float), cudaMemcpyDeviceToDevice,
                               c->stream),
               "matmul: cudaMemcpyAsync (fp8 rows)");
}

static void rows_release(rows_gemm *g) {
    lt_release(&g->body);
    lt_release(&g->tail);
}

/* out^T (OC, N) = W (C, OC col-major)^T X^T (C, N), both E4M3 with C contiguous: the TN
 * layout as it is, X padded to Np rows (rows_gemm). Returns 0 when cuBLASLt has no fp8
 * algorithm (nothing was run). */
static int fp8_forward(cuda_ctx *c, float *out, const float *inp, const float *weight, int N, int C,
                       int OC, backend_gemm *p, mm_scratch r) {
    int have_w, Np = fp8_rows(N);
    void *wq = weight_at(c, p, weight, OC, C, WC_FP8, r.w, &have_w);
    mm_operand w = {wq, CUDA_R_8F_E4M3}, x = {r.x, CUDA_R_8F_E4M3};
    rows_gemm g;
    int rc = rows_setup(c, &g, OC, N, C, w, C, x, C, out, r.tail,
                        dequant(p, BACKEND_FP8_X, BACKEND_FP8_W));
    if (rc == 0) {
        fp8_quant(c, r.x, NULL, inp, N, Np, C, p, BACKEND_FP8_X, 0);
        if (!have_w) fp8_quant(c, wq, NULL, weight, OC, OC, C, p, BACKEND_FP8_W, 0);
        weight_held(c, p, weight, OC, C, WC_FP8);
        rows_launch(c, &g);
        c->fp8_gemms[0]++;
    }
    rows_release(&g);
    return rc != 1;
}

/* The backward's two products in the TN layout, from transposed fp8 copies (Np rows,
 * the padding zero: it adds nothing to dweight):
 *   dinp^T (C, N) = Wt (OC, C col-major)^T dy^T (OC, N)      [Wt: W^T row-major (C, OC);
 *                                                             rows_gemm]
 *   dweight^T (C, OC) += Xt (Np, C col-major)^T dyt (Np, OC) [Xt: (C, Np), dyt: (OC, Np)]
 * The scratch's regions hold Xt, Wt, and dy beside dyt. Returns 0 when cuBLASLt has no
 * fp8 algorithm for either product (nothing was run). */
static int fp8_backward(cuda_ctx *c, float *dinp, float *dweight, const float *dout,
                        const float *inp, const float *weight, int N, int C, int OC,
                        backend_gemm *p, mm_scratch r) {
    int e5m2 = p->dy_e5m2, have_wt, Np = fp8_rows(N);
    void *dyt = (char *)r.dy + (size_t)Np * OC;
    void *wq = weight_at(c, p, weight, OC, C, WC_FP8_T, r.w, &have_wt);
    mm_operand wt = {wq, CUDA_R_8F_E4M3}, xt = {r.x, CUDA_R_8F_E4M3};
    mm_operand dy = {r.dy, fp8_type(e5m2)}, dyT = {dyt, fp8_type(e5m2)};
    rows_gemm gi;
    memset(&gi, 0, sizeof gi);
    lt_gemm gw = lt_make(CUBLAS_OP_T, CUBLAS_OP_N, C, OC, Np, xt, Np, dyT, Np, dweight, C,
                         dequant(p, BACKEND_FP8_DY, BACKEND_FP8_X), 1.0f);
    int rc = lt_setup(c, &gw, 1);
    if (rc == 0 && dinp != NULL)
        rc = rows_setup(c, &gi, C, N, OC, wt, OC, dy, OC, dinp, r.tail,
                        dequant(p, BACKEND_FP8_DY, BACKEND_FP8_W));
    if (rc == 0) {
        fp8_quant(c, dinp != NULL ? r.dy : NULL, dyt, dout, N, Np, OC, p, BACKEND_FP8_DY, e5m2);
        fp8_quant(c, NULL, r.x, inp, N, Np, C, p, BACKEND_FP8_X, 0);
        if (dinp != NULL) {
            if (!have_wt) fp8_quant(c, NULL, wq, weight, OC, OC, C, p, BACKEND_FP8_W, 0);
            weight_held(c, p, weight, OC, C, WC_FP8_T);
            rows_launch(c, &gi);
            c->fp8_gemms[0]++;
        }
        lt_launch(c, &gw);
        c->fp8_gemms[0]++;
    }
    rows_release(&gi);
    lt_release(&gw);
    return rc != 1;
}

void cuda_fp8_gemm_counts(backend *be, long *native, long *carried) {
    cuda_ctx *c = cuda_ctx_of(be);
    *native = c->fp8_gemms[0];
    *carried = c->fp8_gemms[1];
}

/* ---- the ops ----------------------------------------------------------------------------- */

void cuda_matmul_forward(backend *be, float *out, const float *inp, const float *weight, int N,
                         int C, int OC, backend_gemm *p, float *scratch) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (!prec_ok(c, p)) return;
    mm_scratch r = scratch_regions(scratch, N, C, OC, p != NULL ? p->prec : BACKEND_PREC_FP32);
    int copy_amax = is_fp8(p) && p->amax_acc == NULL;
    if (copy_amax) amax_begin(c);
    if (!fp8_native_shape(c, p, N, C, OC) || !fp8_forward(c, out, inp, weight, N, C, OC, p, r)) {
        mm_operand x = mm_prepare(c, r.x, inp, (size_t)N * C, p, BACKEND_FP8_X, 0);
        mm_operand w = mm_weight(c, p, weight, OC, C, r.w);
        /* out^T (OC, N) = W (C, OC col-major)^T X^T (C, N) */
        lt_matmul(c, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, x, C, out, OC,
                  dequant(p, BACKEND_FP8_X, BACKEND_FP8_W), 0.0f);
        if (is_fp8(p)) c->fp8_gemms[1]++;
    }
    if (copy_amax) amax_end(c, p, 1u << BACKEND_FP8_X | 1u << BACKEND_FP8_W);
}

void cuda_matmul_backward(backend *be, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int N, int C, int OC,
                          backend_gemm *p, float *scratch) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (!prec_ok(c, p)) return;
    mm_scratch r = scratch_regions(scratch, N, C, OC, p != NULL ? p->prec : BACKEND_PREC_FP32);
    int e5m2 = p != NULL && p->dy_e5m2;
    unsigned mask = 1u << BACKEND_FP8_DY | 1u << BACKEND_FP8_X;
    int copy_amax = is_fp8(p) && p->amax_acc == NULL;
    if (copy_amax) amax_begin(c);
    if (dinp != NULL) mask |= 1u << BACKEND_FP8_W;
    if (fp8_native_shape(c, p, N, C, OC) &&
        fp8_backward(c, dinp, dweight, dout, inp, weight, N, C, OC, p, r)) {
        if (copy_amax) amax_end(c, p, mask);
        return;
    }
    if (is_fp8(p)) c->fp8_gemms[1] += dinp != NULL ? 2 : 1;
    mm_operand dy = mm_prepare(c, r.dy, dout, (size_t)N * OC, p, BACKEND_FP8_DY, e5m2);
    if (dinp != NULL) {
        mm_operand w = mm_weight(c, p, weight, OC, C, r.w);
        /* dinp^T (C, N) = W (C, OC col-major) dy^T (OC, N) */
        lt_matmul(c, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dy, OC, dinp, C,
                  dequant(p, BACKEND_FP8_DY, BACKEND_FP8_W), 0.0f);
    }
    mm_operand x = mm_prepare(c, r.x, inp, (size_t)N * C, p, BACKEND_FP8_X, 0);
    /* dweight^T (C, OC) += X^T (C, N) (dy^T (OC, N))^T */
    lt_matmul(c, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, x, C, dy, OC, dweight, C,
              dequant(p, BACKEND_FP8_DY, BACKEND_FP8_X), 1.0f);
    if (copy_amax) amax_end(c, p, mask);
}
