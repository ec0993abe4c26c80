/* Shared by the CUDA backend's files: its state, the error recording every launcher
 * goes through, fixed-order reduction helpers, and the operations the table in
 * cuda_backend.cu names. CUDA C++ only. */
#ifndef BATON_CUDA_INTERNAL_CUH
#define BATON_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Blocks of the sum-of-squares reduction: a fixed grid, so the order of the double
 * additions depends only on n. */
#define CUDA_SUMSQ_BLOCKS  264
#define CUDA_SUMSQ_THREADS 256
/* Segments of sumsq_segs whose totals are added to the running total per batch. */
#define CUDA_SUMSQ_SEGS 32
/* moe_assign's chunks of (token, expert) pairs: at most this many, each of at least
 * CUDA_MOE_CHUNK_MIN pairs (cuda_moe.cu). */
#define CUDA_MOE_CHUNKS      1024
#define CUDA_MOE_CHUNK_MIN   256
#define CUDA_MOE_EXPERTS     512 /* moe.h's MOE_MAX_EXPERTS */
#define CUDA_MOE_MEAN_CHUNKS 256 /* moe.h's MOE_MEAN_CHUNKS: moe_score_mean's chunk sums */
/* cuBLASLt algorithms kept per backend: (shape, types, ops, alignment) -> algorithm. */
#define CUDA_LT_CACHE 128
/* AdamW's multi-tensor launch (cuda_optim.cu): elements per chunk (one block each) and
 * chunks per launch (one half of the table); 2^16 * 2^12 = 2^28 elements per launch. */
#define CUDA_ADAMW_CHUNK 65536
#define CUDA_ADAMW_TABLE 4096

/* One chunk of AdamW's table: elements [offset, offset + n) of param, grad, m and v. */
typedef struct cuda_adamw_chunk {
    size_t offset;
    unsigned n; /* 1 .. CUDA_ADAMW_CHUNK */
    int decay;
} cuda_adamw_chunk;

typedef struct cuda_lt_key {
    int m, n, k, lda, ldb, ldd;
    int opa, opb, atype, btype, accumulate, align;
} cuda_lt_key;

typedef struct cuda_lt_entry {
    cuda_lt_key key;
    cublasLtMatmulAlgo_t algo;
    int valid;
    int refused; /* no algorithm for the key (an fp8 product then takes the bf16 path) */
} cuda_lt_entry;

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace; /* (lt_workspace_bytes) */
    size_t lt_workspace_bytes;
    cuda_lt_entry lt_cache[CUDA_LT_CACHE];
    int lt_next;           /* next cache slot to replace once full */
    double *sumsq_part;    /* device (CUDA_SUMSQ_BLOCKS + 1): partials, then the total */
    double *sumsq_seg;     /* device (CUDA_SUMSQ_SEGS + 1): a batch's segment totals, then the
                            * running total of sumsq_segs */
    int32_t *moe_chunk;    /* device (CUDA_MOE_CHUNKS, CUDA_MOE_EXPERTS): moe_assign's per-chunk
                            * counts, then the pairs of each expert before each chunk */
    double *moe_mean_part; /* device (CUDA_MOE_MEAN_CHUNKS, CUDA_MOE_EXPERTS): moe_score_mean's
                            * per-chunk sums (cuda_moe.cu) */
    double *sumsq_host;    /* pinned (1) */
    unsigned *amax_dev;    /* device (BACKEND_FP8_SLOTS): float bits of each operand's amax */
    unsigned *amax_host;   /* pinned (BACKEND_FP8_SLOTS) */
    long fp8_gemms[2];     /* fp8 products run natively (E4M3/E5M2 operands) [0], or with
                            * the fp8 values carried in bf16 [1] (cuda_matmul.cu) */
    cuda_adamw_chunk *adamw_host; /* pinned (2 * CUDA_ADAMW_TABLE): two halves used in turn */
    cuda_adamw_chunk *adamw_dev;  /* device (2 * CUDA_ADAMW_TABLE) */
    cudaEvent_t adamw_copied[2];  /* recorded behind each half's last host-to-device copy */
    cudaEvent_t queue_mark;       /* stream_wait's event, recorded anew by every call
                                   * (cuda_stream.cu) */
    int adamw_half;               /* the half the next batch fills (calls alternate too) */
    float *att_part; /* device (att_part_floats): the tensor-core dk/dv kernel's per-slice
                      * partial sums under grouped-query attention (cuda_attention_tc.cu);
                      * grown on first need, in stream order (cudaMallocAsync), used on
                      * stream only */
    size_t att_part_floats;
    uint32_t *emb_sort; /* device (emb_sort_words): the embedding backward's sort of its
                         * rows by token (cuda_embedding.cu); grown on first need, in stream
                         * order (cudaMallocAsync), used on stream only */
    size_t emb_sort_words;
    unsigned att_dkdv_blocks; /* the blocks the dk/dv kernel's split aims at (1024) */
    int att_fp32;             /* BATON_CUDA_ATTENTION=fp32 at init: attention keeps to the float32
                               * kernels whatever the precision (cuda_attention_tc.cu) */
    int fp8_carried;          /* BATON_CUDA_FP8=carried at init: fp8 products carried in bf16
                               * (cuda_matmul.cu) */
    int err;                  /* first failure recorded since the last sync, a BT_ code; 0 none */
    char errmsg[512];
} cuda_ctx;

static inline cuda_ctx *cuda_ctx_of(backend *be) {
    return (cuda_ctx *)be->ctx;
}

/* Records the first failure; later ones are dropped (the first is the cause). */
void cuda_record(cuda_ctx *c, int code, const char *what, const char *detail);
/* Checks a CUDA call or, with cuda_launch_error(), the launch just made. */
static inline void cuda_check(cuda_ctx *c, cudaError_t e, const char *what) {
    if (e != cudaSuccess) cuda_record(c, -3 /* BT_EIO */, what, cudaGetErrorString(e));
}
/* The error of the launch just made, from the thread's last error (then cleared). A
 * cudaErrorNotReady there is no launch's: a launch never fails with it, and a stream or
 * event query of unfinished work leaves it (NCCL's comm polls, on this same thread), so it
 * counts as success. */
static inline cudaError_t cuda_launch_error(void) {
    cudaError_t e = cudaGetLastError();
    return e == cudaErrorNotReady ? cudaSuccess : e;
}
#define CUDA_LAUNCHED(c, what) cuda_check((c), cuda_launch_error(), (what))

/* Grid size for n elements at `threads` per block, grid-stride loops beyond it. */
static inline unsigned cuda_grid(size_t n, int threads) {
    size_t g = (n + (size_t)threads - 1) / (size_t)threads;
    if (g > 65535u * 8u) g = 65535u * 8u;
    return g ? (unsigned)g : 1u;
}

#ifdef __CUDACC__
#define CUDA_FULL_MASK 0xffffffffu

template <typename T> __device__ __forceinline__ T cuda_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(CUDA_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float cuda_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(CUDA_FULL_MASK, v, o);
        v = w > v ? w : v; /* NaN never wins, as in the CPU's maxima */
    }
    return v;
}

/* Sum over the block (blockDim.x a power of two <= 1024) in a fixed tree; every thread
 * gets the total. sh holds blockDim.x values. */
template <typename T> __device__ __forceinline__ T cuda_block_sum(T v, T *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float cuda_block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float w = sh[threadIdx.x + s];
            if (w > sh[threadIdx.x]) sh[threadIdx.x] = w;
        }
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
#endif

/* cuda_elementwise.cu */
void cuda_zero(backend *be, float *x, size_t n);
void cuda_add(backend *be, float *out, const float *a, const float *b, size_t n);
void cuda_scale(backend *be, float *x, float s, size_t n);
void cuda_copy2d(backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                 size_t width);
double cuda_sumsq(backend *be, const float *x, size_t n);
double cuda_sumsq_segs(backend *be, const float *x, const backend_seg *segs, size_t nseg);
void cuda_swiglu_forward(backend *be, float *out, const float *inp, int N, int F);
void cuda_swiglu_backward(backend *be, float *dinp, const float *dout, const float *inp, int N,
                          int F);

/* cuda_embedding.cu */
void cuda_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte, int N,
                            int C);
void cuda_embedding_backward(backend *be, float *dwte, const float *dout, const int32_t *tokens,
                             int N, int C);
void cuda_vocab_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                                  int N, int C, int v0, int Vl);
void cuda_vocab_embedding_backward(backend *be, float *dwte, const float *dout,
                                   const int32_t *tokens, int N, int C, int v0, int Vl);

/* cuda_optim.cu */
void cuda_adamw(backend *be, float *param, float *grad, float *m, float *v, const backend_seg *segs,
                size_t nseg, const backend_adamw *a);
void cuda_copy(backend *be, float *dst, const float *src, size_t n);

/* cuda_norm.cu */
void cuda_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps);
void cuda_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int N, int C);
void cuda_rope_forward(backend *be, float *out, const float *inp, const float *cos,
                       const float *sin, int B, int T, int nh, int hd, int ld);
void cuda_rope_backward(backend *be, float *dinp, const float *dout, const float *cos,
                        const float *sin, int B, int T, int nh, int hd, int ld);

/* cuda_matmul.cu */
void cuda_pack_bf16(backend *be, uint16_t *dst, const float *src, size_t n);
void cuda_unpack_bf16(backend *be, float *dst, const uint16_t *src, size_t n);
size_t cuda_matmul_scratch_floats(backend *be, int N, int C, int OC, backend_prec prec);
size_t cuda_matmul_wcache_floats(backend *be, int C, int OC, backend_prec prec);
void cuda_matmul_forward(backend *be, float *out, const float *inp, const float *weight, int N,
                         int C, int OC, backend_gemm *p, float *scratch);
void cuda_matmul_backward(backend *be, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int N, int C, int OC,
                          backend_gemm *p, float *scratch);

/* cuda_stream.cu */
void *cuda_stream_new(backend *be);
void cuda_stream_free(backend *be, void *s);
void cuda_stream_wait(backend *be, void *waiter, void *waitee);

/* cuda_attention.cu */
size_t cuda_attention_scratch_floats(backend *be, int T);
void cuda_attention_forward(backend *be, float *out, float *lse, float *att, const float *q,
                            const float *k, const float *v, int ld, int B, int T, int H, int KV,
                            int hd, float scale, backend_prec prec, float *scratch);
void cuda_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *att, const float *lse, const float *q,
                             const float *k, const float *v, int ld, int B, int T, int H, int KV,
                             int hd, float scale, backend_prec prec, float *scratch);

/* cuda_attention_part.cu */
size_t cuda_attention_part_scratch_floats(backend *be, int Tq, int Tk);
void cuda_attention_part_forward(backend *be, float *out, float *lse, const float *q, int ldq,
                                 const float *k, const float *v, int ldkv, int B, int Tq, int Tk,
                                 int H, int KV, int hd, float scale, const int32_t *qpos,
                                 const int32_t *kpos, float *scratch);
void cuda_attention_merge(backend *be, float *out, float *lse, const float *out2, const float *lse2,
                          int B, int T, int H, int hd);
void cuda_attention_delta(backend *be, float *delta, const float *dout, const float *out, int B,
                          int T, int H, int hd);
void cuda_attention_part_backward(backend *be, float *dq, int ldq, float *dk, float *dv, int ldkv,
                                  const float *dout, const float *delta, const float *lse,
                                  const float *q, const float *k, const float *v, int B, int Tq,
                                  int Tk, int H, int KV, int hd, float scale, const int32_t *qpos,
                                  const int32_t *kpos, float *scratch);

/* cuda_loss.cu */
void cuda_crossentropy_forward(backend *be, float *losses, float *lse, const float *logits,
                               const int32_t *targets, int N, int V);
void cuda_crossentropy_backward(backend *be, float *dlogits, const float *logits, const float *lse,
                                const int32_t *targets, float dloss, int N, int V);
void cuda_vocab_ce_partial(backend *be, float *part, const float *logits, const int32_t *targets,
                           int N, int Vl, int v0);
void cuda_vocab_ce_combine(backend *be, float *losses, float *lse, const float *parts,
                           const int32_t *targets, int N, int R);
void cuda_vocab_ce_backward(backend *be, float *dlogits, const float *logits, const float *lse,
                            const int32_t *targets, float dloss, int N, int Vl, int v0);

/* cuda_moe.cu */
void cuda_moe_route(backend *be, float *scores, float *ssum, int32_t *topk, float *gate,
                    const float *bias, int N, int E, int K, int score, int norm_topk);
void cuda_moe_assign(backend *be, int32_t *row, int32_t *tok, int32_t *slot, int32_t *counts,
                     const int32_t *topk, int N, int K, int E, int capacity, const int32_t *limit);
void cuda_moe_score_mean(backend *be, float *pmean, const float *scores, const float *ssum, int N,
                         int E);
void cuda_gather_rows(backend *be, float *dst, const float *src, const int32_t *idx, int M, int C);
void cuda_moe_combine(backend *be, float *y, const float *src, const float *gate,
                      const int32_t *row, int N, int K, int C);
void cuda_moe_combine_backward(backend *be, float *dout, float *dgate, const float *dy,
                               const float *out, const float *gate, const int32_t *tok,
                               const int32_t *slot, int M, int K, int C);
void cuda_moe_router_backward(backend *be, float *dl, const float *scores, const float *ssum,
                              const int32_t *topk, const float *gate, const float *dgate,
                              const int32_t *routed, int N, int n_aux, int E, int K, int score,
                              int norm_topk, double aux_coef);

#endif
