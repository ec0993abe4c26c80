/* Cross-entropy over the vocabulary on the GPU, whole or vocabulary-parallel, with the
 * semantics of cpu_loss.c: the forward keeps each row's log-sum-exp, the backward forms
 * softmax - onehot in one elementwise sweep (in place of the logits when the caller
 * wishes), rows with a negative target are ignored (loss 0, gradient 0).
 *
 * One block per row for the forward: the maximum (exact in any order) and the sum of
 * exponentials in double over a fixed tree. */
#include <math.h>

#include "cuda_internal.cuh"

#define CE_THREADS 256

/* The row's max m and sum of exp(x - m) (double), for the block. */
__device__ void row_max_sumexp(const float *x, int V, float *m_out, double *s_out, float *shf,
                               double *shd) {
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        m = x[j] > m ? x[j] : m;
    m = cuda_block_max(m, shf);
    double s = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        s += (double)expf(x[j] - m);
    s = cuda_block_sum(s, shd);
    *m_out = m;
    *s_out = s;
}

__global__ void ce_forward_kernel(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, int V) {
    __shared__ float shf[CE_THREADS];
    __shared__ double shd[CE_THREADS];
    size_t n = blockIdx.x;
    int t = targets[n];
    if (t < 0) {
        if (threadIdx.x == 0) losses[n] = lse[n] = 0.0f;
        return;
    }
    const float *x = logits + n * V;
    float m;
    double s;
    row_max_sumexp(x, V, &m, &s, shf, shd);
    if (threadIdx.x == 0) {
        float l = (float)((double)m + log(s));
        lse[n] = l;
        losses[n] = l - x[t];
    }
}

__global__ void ce_partial_kernel(float *part, const float *logits, const int32_t *targets, int Vl,
                                  int v0) {
    __shared__ float shf[CE_THREADS];
    __shared__ double shd[CE_THREADS];
    size_t n = blockIdx.x;
    int t = targets[n];
    float *p = part + n * 3;
    if (t < 0) {
        if (threadIdx.x == 0) p[0] = p[1] = p[2] = 0.0f;
        return;
    }
    const float *x = logits + n * Vl;
    float m;
    double s;
    row_max_sumexp(x, Vl, &m, &s, shf, shd);
    if (threadIdx.x == 0) {
        p[0] = m;
        p[1] = (float)s;
        p[2] = (t >= v0 && t < v0 + Vl) ? x[t - v0] : 0.0f;
    }
}

/* One thread per row: the same arithmetic, in the same order, as cpu_vocab_ce_combine. */
__global__ void ce_combine_kernel(float *losses, float *lse, const float *parts,
                                  const int32_t *targets, int N, int R) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    losses[n] = lse[n] = 0.0f;
    if (targets[n] < 0) return;
    size_t stride = (size_t)N * 3;
    float m = -INFINITY, target = 0.0f;
    for (int r = 0; r < R; r++)
        m = fmaxf(m, parts[r * stride + (size_t)n * 3]);
    double sum = 0.0;
    for (int r = 0; r < R; r++) {
        const float *p = parts + r * stride + (size_t)n * 3;
        sum += (double)p[1] * exp((double)(p[0] - m));
        target += p[2];
    }
    float l = (float)((double)m + log(sum));
    lse[n] = l;
    losses[n] = l - target;
}

/* dlogits = (exp(x - lse) - onehot(target - v0)) * dloss; 0 on ignored rows. Elementwise,
 * so dlogits may alias logits. */
__global__ void ce_backward_kernel(float *dlogits, const float *logits, const float *lse,
                                   const int32_t *targets, float dloss, int N, int Vl, int v0) {
    size_t total = (size_t)N * Vl;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / Vl;
        int j = (int)(i % Vl), t = targets[n];
        if (t < 0) {
            dlogits[i] = 0.0f;
            continue;
        }
        float d = expf(logits[i] - lse[n]) * dloss;
        if (t - v0 == j) d -= dloss;
        dlogits[i] = d;
    }
}

void cuda_crossentropy_forward(backend *be, float *losses, float *lse, const float *logits,
                               const int32_t *targets, int N, int V) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N == 0) return;
    ce_forward_kernel<<<N, CE_THREADS, 0, c->stream>>>(losses, lse, logits, targets, V);
    CUDA_LAUNCHED(c, "ce_forward_kernel");
}

void cuda_crossentropy_backward(backend *be, float *dlogits, const float *logits, const float *lse,
                                const int32_t *targets, float dloss, int N, int V) {
    cuda_vocab_ce_backward(be, dlogits, logits, lse, targets, dloss, N, V, 0);
}

void cuda_vocab_ce_partial(backend *be, float *part, const float *logits, const int32_t *targets,
                           int N, int Vl, int v0) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N == 0) return;
    ce_partial_kernel<<<N, CE_THREADS, 0, c->stream>>>(part, logits, targets, Vl, v0);
    CUDA_LAUNCHED(c, "ce_partial_kernel");
}

void cuda_vocab_ce_combine(backend *be, float *losses, float *lse, const float *parts,
                           const int32_t *targets, int N, int R) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N == 0) return;
    ce_combine_kernel<<<(N + 127) / 128, 128, 0, c->stream>>>(losses, lse, parts, targets, N, R);
    CUDA_LAUNCHED(c, "ce_combine_kernel");
}

void cuda_vocab_ce_backward(backend *be, float *dlogits, const float *logits, const float *lse,
                            const int32_t *targets, float dloss, int N, int Vl, int v0) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t n = (size_t)N * Vl;
    if (n == 0) return;
    ce_backward_kernel<<<cuda_grid(n, 256), 256, 0, c->stream>>>(dlogits, logits, lse, targets,
                                                                 dloss, N, Vl, v0);
    CUDA_LAUNCHED(c, "ce_backward_kernel");
}
