/* Shared by the attention kernels (cuda_attention.cu: one warp per row, any head size up
 * to ATT_MAXHD; cuda_attention_tiled.cu: blocks of rows sharing key/query chunks through
 * shared memory, head sizes up to ATT_TILE_MAXHD): the arguments, where delta lives, and
 * the one way a score and a probability are computed, which every kernel uses so that
 * stored and recomputed probabilities are the same bits. CUDA C++ only. */
#ifndef BATON_CUDA_ATTENTION_CUH
#define BATON_CUDA_ATTENTION_CUH

#include "cuda_internal.cuh"

#define ATT_MAXHD      256 /* the largest head the kernels take */
#define ATT_PER_LANE   (ATT_MAXHD / 32)
#define ATT_TILE_MAXHD 128 /* the largest head of the tiled kernels */
#define ATT_TILE_ROWS  8   /* rows (warps) per block of the tiled kernels */
#define ATT_CHUNK      32  /* keys (queries) per shared-memory chunk */
#define ATT_TC_MAXHD   128 /* the largest head of the tensor-core kernels (multiples of 16) */

typedef struct att_args {
    const float *q, *k, *v; /* q rows of stride ldq, k and v rows of stride ldkv */
    int ldq, ldkv;
    int B, Tq, Tk, H, KV, hd;
    float scale;
    const int32_t *qpos, *kpos; /* positions; unused when causal (key j visible iff j <= i) */
} att_args;

/* Where query row (b, h, i)'s delta lives: delta[b * sb + h * sh + i * st]. */
typedef struct att_delta {
    const float *p;
    size_t sb, sh, st;
} att_delta;

/* What a row kernel computes for each query row: its delta (parked, see cuda_attention.cu),
 * or dq written, or dq accumulated. */
enum { ATT_ROWS_DELTA = 0, ATT_ROWS_DQ = 1, ATT_ROWS_DQ_ACC = 2 };

#ifdef __CUDACC__
__device__ __forceinline__ float att_dot(const float *x, const float *y, int hd) {
    float s = 0.0f;
    for (int d = 0; d < hd; d++)
        s = __fmaf_rn(x[d], y[d], s);
    return s;
}

__device__ __forceinline__ float att_prob(const float *qrow, const float *krow, int hd, float scale,
                                          float lse) {
    return expf(__fsub_rn(__fmul_rn(att_dot(qrow, krow, hd), scale), lse));
}
#endif

/* cuda_attention_tiled.cu: launchers (hd <= ATT_TILE_MAXHD). causal: whole sequences
 * (Tq == Tk, key j visible iff j <= i), else by positions. att: stored probabilities
 * (causal only) or NULL. */
void att_tiled_forward(cuda_ctx *c, att_args a, int causal, float *out, float *lse, float *att);
void att_tiled_rows(cuda_ctx *c, att_args a, int causal, int mode, float *dq, const float *dout,
                    const float *att, const float *lse, att_delta dlt);
void att_tiled_dkdv(cuda_ctx *c, att_args a, int causal, int accumulate, float *dk, float *dv,
                    const float *dout, const float *att, const float *lse, att_delta dlt);

/* cuda_attention_tc.cu: the bf16 tensor-core kernels of whole causal sequences. att_tc_takes
 * says whether they serve a call (prec not float32, att NULL, hd a multiple of 16 up to
 * ATT_TC_MAXHD, not BATON_CUDA_ATTENTION=fp32); forward and backward ask it alike. Backward
 * reads the forward's output (delta) and writes dq, dk, dv (=). */
int att_tc_takes(const cuda_ctx *c, backend_prec prec, const float *att, int hd);
void att_tc_forward(cuda_ctx *c, att_args a, float *out, float *lse);
void att_tc_backward(cuda_ctx *c, att_args a, float *dq, float *dk, float *dv, const float *dout,
                     const float *out, const float *lse);

#endif
