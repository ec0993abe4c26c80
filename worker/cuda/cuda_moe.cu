/* The CUDA backend's mixture-of-experts routing and permutation ops (backend.h: moe_route
 * ... moe_router_backward), with the semantics of cpu_moe.c.
 *
 * Rules: every float operation that the CPU reference (built with -ffp-contract=off) does
 * as a separate multiply, add, subtract or divide is written with the round-to-nearest
 * intrinsics (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn), which nvcc never contracts
 * into a fused multiply-add, in the reference's order. Every sum that backend.h defines
 * "in index order" is one sequential loop: the router kernels give a token to a warp, its
 * lanes compute the terms of a row in parallel into shared memory, and then every lane
 * adds them up in order, reading the same words (a broadcast), so all lanes hold the same
 * total with no shuffle. Given equal inputs, everything but moe_route's expf and
 * moe_combine_backward's dot products (a warp per row: lane-strided partial sums, then a
 * fixed butterfly) therefore equals the CPU bit for bit; expf may differ from libm's by
 * an ulp or two. moe_assign's grouping is integer logic over chunks of pairs, a thread
 * per expert walking each chunk in p order: no atomics. No op allocates; a shape
 * outside backend.h's limits is recorded as an error, not run. Launchers take the
 * backend, queue on its stream and check the launch. */
#include <stdio.h>

#include "cuda_internal.cuh"
#include "moe.h"
#include "util/err.h"

#define MOE_WARPS    4 /* tokens (router) or grouped rows (combine backward) per block */
#define MOE_PER_LANE (MOE_MAX_EXPERTS / 32) /* experts held by one lane: e = lane + 32 i */
#define MOE_THREADS  256

/* The sum of sh[0 .. n) in index order, in float; every lane of the warp runs it. */
__device__ __forceinline__ float warp_ordered_sum(const float *sh, int n) {
    float sum = 0.0f;
    for (int e = 0; e < n; e++)
        sum = __fadd_rn(sum, sh[e]);
    return sum;
}

/* One warp per token n: the scores replace the logits, then the top K by s + bias in
 * decreasing order (ties to the lower index), then the combine weights. A selection
 * round takes each lane's best untaken expert (its experts scanned in increasing index
 * with a strict >) and reduces over the lanes with the order (value descending, index
 * ascending), which picks what the CPU's single scan picks; all lanes end with the same
 * winner, whose owner marks it taken. */
__global__ void __launch_bounds__(MOE_WARPS * 32)
    moe_route_kernel(float *scores, float *ssum, int32_t *topk, float *gate, const float *bias,
                     int N, int E, int K, int score, int norm_topk) {
    __shared__ float shbuf[MOE_WARPS][MOE_MAX_EXPERTS];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int n = blockIdx.x * MOE_WARPS + w;
    if (n >= N) return; /* a whole warp: the kernel has no block-wide barrier */
    float *sh = shbuf[w], *s = scores + (size_t)n * E;
    float sv[MOE_PER_LANE];
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        sv[i] = e < E ? s[e] : 0.0f;
    }
    if (score == MOE_SCORE_SIGMOID) {
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e >= E) continue;
            sv[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-sv[i])));
            sh[e] = sv[i];
        }
        __syncwarp();
        float sum = warp_ordered_sum(sh, E);
        if (lane == 0) ssum[n] = sum;
    } else {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++)
            if (lane + 32 * i < E) mx = sv[i] > mx ? sv[i] : mx;
        mx = cuda_warp_max(mx);
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e >= E) continue;
            sv[i] = expf(__fsub_rn(sv[i], mx));
            sh[e] = sv[i];
        }
        __syncwarp();
        float sum = warp_ordered_sum(sh, E);
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++)
            sv[i] = __fdiv_rn(sv[i], sum);
        if (lane == 0) ssum[n] = 1.0f;
    }
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        if (e < E) s[e] = sv[i];
    }
    float v[MOE_PER_LANE]; /* the selection values s + bias */
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        v[i] = e < E ? __fadd_rn(sv[i], bias ? bias[e] : 0.0f) : 0.0f;
    }
    unsigned taken = 0; /* bit i: expert lane + 32 i already selected */
    int32_t *tk = topk + (size_t)n * K;
    float *g = gate + (size_t)n * K, gsum = 0.0f;
    for (int j = 0; j < K; j++) {
        int best = -1;
        float bv = 0.0f, bs = 0.0f;
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e < E && !((taken >> i) & 1u) && (best < 0 || v[i] > bv))
                best = e, bv = v[i], bs = sv[i];
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(CUDA_FULL_MASK, bv, o);
            float os = __shfl_xor_sync(CUDA_FULL_MASK, bs, o);
            int oe = __shfl_xor_sync(CUDA_FULL_MASK, best, o);
            if (oe >= 0 && (best < 0 || ov > bv || (ov == bv && oe < best)))
                best = oe, bv = ov, bs = os;
        }
        if ((best & 31) == lane) taken |= 1u << (best >> 5);
        gsum = __fadd_rn(gsum, bs);
        if (lane == 0) tk[j] = best, g[j] = bs;
    }
    if (norm_topk && lane == 0)
        for (int j = 0; j < K; j++)
            g[j] = __fdiv_rn(g[j], gsum);
}

/* moe_assign in three kernels over chunks of consecutive pairs, a block per chunk and a
 * thread per expert (blockDim.x >= E), no atomics:
 *  1. count: chunk[g][e] = the pairs of chunk g that selected e (thread e walks the chunk
 *     in p order; its reads of topk[p] are the same word for every thread);
 *  2. scan (one block): chunk[g][e] becomes the pairs of e before chunk g, routed and
 *     kept follow, and thread 0 forms the offsets, all into counts;
 *  3. place: thread e walks chunk g again and numbers e's pairs from chunk[g][e] on: the
 *     i-th pair of e overall is kept when i < kept[e], at row offset[e] + i.
 * Every pair has one owner thread, so each row[p] is written once; the result is the
 * single scan's of cpu_moe.c. */
__global__ void moe_assign_count_kernel(int32_t *chunk, const int32_t *topk, size_t P, size_t CH,
                                        int E) {
    const int e = threadIdx.x;
    const size_t p0 = blockIdx.x * CH, p1 = p0 + CH < P ? p0 + CH : P;
    int32_t cnt = 0;
    for (size_t p = p0; p < p1; p++)
        cnt += topk[p] == e;
    if (e < E) chunk[(size_t)blockIdx.x * E + e] = cnt;
}

__global__ void moe_assign_scan_kernel(int32_t *chunk, int32_t *counts, int G, int E, int capacity,
                                       const int32_t *limit) {
    __shared__ int32_t offset[CUDA_MOE_EXPERTS + 1];
    const int e = threadIdx.x;
    int32_t routed = 0, kept = 0;
    if (e < E) {
        for (int g = 0; g < G; g++) {
            int32_t c = chunk[(size_t)g * E + e];
            chunk[(size_t)g * E + e] = routed;
            routed += c;
        }
        int32_t cap = limit != NULL ? limit[e] : capacity == 0 ? routed : capacity;
        kept = routed < cap ? routed : cap;
        counts[e] = routed;
        counts[E + e] = kept;
        offset[e + 1] = kept;
    }
    __syncthreads();
    if (e == 0) {
        offset[0] = 0;
        for (int x = 0; x < E; x++)
            offset[x + 1] += offset[x];
        for (int x = 0; x <= E; x++)
            counts[2 * E + x] = offset[x];
    }
}

__global__ void moe_assign_place_kernel(int32_t *row, int32_t *tok, int32_t *slot,
                                        const int32_t *counts, const int32_t *chunk,
                                        const int32_t *topk, size_t P, size_t CH, int K, int E) {
    const int e = threadIdx.x;
    if (e >= E) return; /* no barrier below */
    const size_t p0 = blockIdx.x * CH, p1 = p0 + CH < P ? p0 + CH : P;
    int32_t i = chunk[(size_t)blockIdx.x * E + e], kept = counts[E + e], base = counts[2 * E + e];
    for (size_t p = p0; p < p1; p++) {
        if (topk[p] != e) continue;
        if (i >= kept) {
            row[p] = -1;
            continue;
        }
        int32_t r = base + i++;
        row[p] = r;
        tok[r] = (int32_t)(p / (size_t)K);
        slot[r] = (int32_t)(p % (size_t)K);
    }
}

/* moe_score_mean in two kernels, in backend.h's order:
 *  1. part[g][e] = the double sum over chunk g's tokens n in order of the float quotient
 *     s[n][e] / ssum[n]: a thread per (expert, chunk), a warp's lanes on 32 consecutive
 *     experts (one read of a score row's 32 floats), MOE_MEAN_ROWS chunks per block;
 *  2. pmean[e] = the sum of part[g][e] in g order over N, a thread per expert.
 * A thread walks one chunk (moe_mean_chunk(N) tokens, at least MOE_MEAN_CHUNK_MIN), then
 * the chunks (at most MOE_MEAN_CHUNKS), instead of all N tokens. */
#define MOE_MEAN_ROWS 8
static_assert(CUDA_MOE_MEAN_CHUNKS == MOE_MEAN_CHUNKS && CUDA_MOE_EXPERTS == MOE_MAX_EXPERTS,
              "c->moe_mean_part holds a sum per chunk and expert");
__global__ void __launch_bounds__(32 * MOE_MEAN_ROWS)
    moe_score_part_kernel(double *part, const float *scores, const float *ssum, int N, int E,
                          size_t CH, int G) {
    const int e = blockIdx.x * 32 + threadIdx.x, g = blockIdx.y * MOE_MEAN_ROWS + threadIdx.y;
    if (e >= E || g >= G) return;
    const size_t n0 = (size_t)g * CH, n1 = (size_t)N - n0 < CH ? (size_t)N : n0 + CH;
    double P = 0.0;
    for (size_t n = n0; n < n1; n++)
        P += (double)__fdiv_rn(scores[n * E + e], ssum[n]);
    part[(size_t)g * E + e] = P;
}

__global__ void moe_score_mean_kernel(float *pmean, const double *part, int N, int E, int G) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    double P = 0.0;
    for (int g = 0; g < G; g++)
        P += part[(size_t)g * E + e];
    pmean[e] = (float)(P / N);
}

__global__ void gather_rows_kernel(float *dst, const float *src, const int32_t *idx, int M, int C) {
    size_t total = (size_t)M * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        dst[i] = src[(size_t)idx[r] * C + c];
    }
}

/* One thread per element y[n][i]: the token's kept pairs j in increasing order. */
__global__ void moe_combine_kernel(float *y, const float *src, const float *gate,
                                   const int32_t *row, int N, int K, int C) {
    size_t total = (size_t)N * C;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t n = t / C, i = t % C, p = n * K;
        float acc = y[t];
        for (int j = 0; j < K; j++) {
            int32_t r = row[p + j];
            if (r < 0) continue;
            float wgt = gate ? gate[p + j] : 1.0f;
            acc = __fadd_rn(acc, __fmul_rn(wgt, src[(size_t)r * C + i]));
        }
        y[t] = acc;
    }
}

/* One warp per grouped row r: dout elementwise, dgate by a per-lane strided sum, then
 * the fixed butterfly of cuda_warp_sum. */
__global__ void __launch_bounds__(MOE_WARPS * 32)
    moe_combine_backward_kernel(float *dout, float *dgate, const float *dy, const float *out,
                                const float *gate, const int32_t *tok, const int32_t *slot, int M,
                                int K, int C) {
    const int lane = threadIdx.x & 31;
    const size_t r = (size_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (r >= (size_t)M) return; /* a whole warp */
    size_t p = (size_t)tok[r] * K + slot[r];
    const float *d = dy + (size_t)tok[r] * C, *o = out + r * C;
    float *dr = dout + r * C, gp = gate[p], dot = 0.0f;
    for (int i = lane; i < C; i += 32) {
        dr[i] = __fmul_rn(gp, d[i]);
        dot = __fadd_rn(dot, __fmul_rn(d[i], o[i]));
    }
    dot = cuda_warp_sum(dot);
    if (lane == 0) dgate[p] = dot;
}

/* One warp per token, lane owning experts lane + 32 i; dp (E), the aux loss's gradient
 * through P, formed once per block. ds goes through shared memory only where the
 * combine weights scatter into it; the e-order sums go through the term buffer. */
__global__ void __launch_bounds__(MOE_WARPS * 32)
    moe_router_backward_kernel(float *dl, const float *scores, const float *ssum,
                               const int32_t *topk, const float *gate, const float *dgate,
                               const int32_t *routed, int N, int n_aux, int E, int K, int score,
                               int norm_topk, double aux_coef) {
    __shared__ float dp[MOE_MAX_EXPERTS];
    __shared__ float shbuf[MOE_WARPS][MOE_MAX_EXPERTS];
    const int aux = aux_coef != 0.0;
    if (aux)
        for (int e = threadIdx.x; e < E; e += blockDim.x) {
            float f = (float)((double)routed[e] / ((double)n_aux * K));
            dp[e] = (float)(aux_coef * E * f / n_aux);
        }
    __syncthreads();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int n = blockIdx.x * MOE_WARPS + w;
    if (n >= N) return; /* a whole warp, after the block's only barrier */
    float *sh = shbuf[w];
    const float *s = scores + (size_t)n * E;
    const int32_t *tk = topk + (size_t)n * K;
    const float *g = gate + (size_t)n * K, *dg = dgate + (size_t)n * K;
    float sv[MOE_PER_LANE], ds[MOE_PER_LANE];
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        sv[i] = e < E ? s[e] : 0.0f;
        if (e < E) sh[e] = 0.0f;
    }
    /* Through the combine weights: the K selected experts are distinct, so the lanes
     * scatter in parallel, each into a different word, adding to 0 as the CPU does. */
    float gs = 0.0f, gdot = 0.0f;
    if (norm_topk)
        for (int j = 0; j < K; j++) {
            gs = __fadd_rn(gs, s[tk[j]]);
            gdot = __fadd_rn(gdot, __fmul_rn(dg[j], g[j]));
        }
    __syncwarp();
    for (int j = lane; j < K; j += 32) {
        float x = norm_topk ? __fdiv_rn(__fsub_rn(dg[j], gdot), gs) : dg[j];
        sh[tk[j]] = __fadd_rn(sh[tk[j]], x);
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        ds[i] = e < E ? sh[e] : 0.0f;
    }
    __syncwarp();
    if (aux) {
        const float sn = ssum[n];
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e < E) sh[e] = __fmul_rn(dp[e], __fdiv_rn(sv[i], sn));
        }
        __syncwarp();
        float dot = warp_ordered_sum(sh, E);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e < E) ds[i] = __fadd_rn(ds[i], __fdiv_rn(__fsub_rn(dp[e], dot), sn));
        }
    }
    float *d = dl + (size_t)n * E;
    if (score == MOE_SCORE_SIGMOID) {
#pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e < E) d[e] = __fmul_rn(ds[i], __fmul_rn(sv[i], __fsub_rn(1.0f, sv[i])));
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        if (e < E) sh[e] = __fmul_rn(ds[i], sv[i]);
    }
    __syncwarp();
    float dot = warp_ordered_sum(sh, E);
#pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        if (e < E) d[e] = __fmul_rn(sv[i], __fsub_rn(ds[i], dot));
    }
}

/* 1 when E and K are within backend.h's limits; else 0, with the failure recorded. */
static int moe_shape_ok(cuda_ctx *c, const char *op, int E, int K) {
    if (E >= 1 && E <= MOE_MAX_EXPERTS && K >= 1 && K <= E) return 1;
    char detail[96];
    snprintf(detail, sizeof detail, "E %d, K %d: need 1 <= K <= E <= %d", E, K, MOE_MAX_EXPERTS);
    cuda_record(c, BT_EINVAL, op, detail);
    return 0;
}

void cuda_moe_route(backend *be, float *scores, float *ssum, int32_t *topk, float *gate,
                    const float *bias, int N, int E, int K, int score, int norm_topk) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N == 0 || !moe_shape_ok(c, "moe_route", E, K)) return;
    moe_route_kernel<<<(N + MOE_WARPS - 1) / MOE_WARPS, MOE_WARPS * 32, 0, c->stream>>>(
        scores, ssum, topk, gate, bias, N, E, K, score, norm_topk);
    CUDA_LAUNCHED(c, "moe_route_kernel");
}

void cuda_moe_assign(backend *be, int32_t *row, int32_t *tok, int32_t *slot, int32_t *counts,
                     const int32_t *topk, int N, int K, int E, int capacity, const int32_t *limit) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (!moe_shape_ok(c, "moe_assign", E, K)) return;
    /* N 0 still writes the counts: all zero, offset 0 (one empty chunk). */
    size_t P = (size_t)N * K, CH = (P + CUDA_MOE_CHUNKS - 1) / CUDA_MOE_CHUNKS;
    CH = CH < CUDA_MOE_CHUNK_MIN ? CUDA_MOE_CHUNK_MIN : CH;
    int G = P ? (int)((P + CH - 1) / CH) : 1, threads = (E + 31) / 32 * 32;
    moe_assign_count_kernel<<<G, threads, 0, c->stream>>>(c->moe_chunk, topk, P, CH, E);
    moe_assign_scan_kernel<<<1, threads, 0, c->stream>>>(c->moe_chunk, counts, G, E, capacity,
                                                         limit);
    moe_assign_place_kernel<<<G, threads, 0, c->stream>>>(row, tok, slot, counts, c->moe_chunk,
                                                          topk, P, CH, K, E);
    CUDA_LAUNCHED(c, "moe_assign kernels");
}

void cuda_moe_score_mean(backend *be, float *pmean, const float *scores, const float *ssum, int N,
                         int E) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (E <= 0) return;
    if (E > MOE_MAX_EXPERTS) {
        moe_shape_ok(c, "moe_score_mean", E, 1);
        return;
    }
    const size_t CH = moe_mean_chunk(N > 0 ? (size_t)N : 0);
    const int G = N > 0 ? (int)(((size_t)N + CH - 1) / CH) : 0; /* <= MOE_MEAN_CHUNKS */
    if (G > 0) {
        dim3 grid((unsigned)(E + 31) / 32, (unsigned)(G + MOE_MEAN_ROWS - 1) / MOE_MEAN_ROWS);
        moe_score_part_kernel<<<grid, dim3(32, MOE_MEAN_ROWS), 0, c->stream>>>(
            c->moe_mean_part, scores, ssum, N, E, CH, G);
    }
    moe_score_mean_kernel<<<(E + 127) / 128, 128, 0, c->stream>>>(pmean, c->moe_mean_part, N, E, G);
    CUDA_LAUNCHED(c, "moe_score_mean kernels");
}

void cuda_gather_rows(backend *be, float *dst, const float *src, const int32_t *idx, int M, int C) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t n = (size_t)M * C;
    if (M <= 0 || C <= 0) return;
    gather_rows_kernel<<<cuda_grid(n, MOE_THREADS), MOE_THREADS, 0, c->stream>>>(dst, src, idx, M,
                                                                                 C);
    CUDA_LAUNCHED(c, "gather_rows_kernel");
}

void cuda_moe_combine(backend *be, float *y, const float *src, const float *gate,
                      const int32_t *row, int N, int K, int C) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t n = (size_t)N * C;
    if (N <= 0 || C <= 0) return;
    moe_combine_kernel<<<cuda_grid(n, MOE_THREADS), MOE_THREADS, 0, c->stream>>>(y, src, gate, row,
                                                                                 N, K, C);
    CUDA_LAUNCHED(c, "moe_combine_kernel");
}

void cuda_moe_combine_backward(backend *be, float *dout, float *dgate, const float *dy,
                               const float *out, const float *gate, const int32_t *tok,
                               const int32_t *slot, int M, int K, int C) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (M <= 0) return;
    moe_combine_backward_kernel<<<(M + MOE_WARPS - 1) / MOE_WARPS, MOE_WARPS * 32, 0, c->stream>>>(
        dout, dgate, dy, out, gate, tok, slot, M, K, C);
    CUDA_LAUNCHED(c, "moe_combine_backward_kernel");
}

void cuda_moe_router_backward(backend *be, float *dl, const float *scores, const float *ssum,
                              const int32_t *topk, const float *gate, const float *dgate,
                              const int32_t *routed, int N, int n_aux, int E, int K, int score,
                              int norm_topk, double aux_coef) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N == 0 || !moe_shape_ok(c, "moe_router_backward", E, K)) return;
    moe_router_backward_kernel<<<(N + MOE_WARPS - 1) / MOE_WARPS, MOE_WARPS * 32, 0, c->stream>>>(
        dl, scores, ssum, topk, gate, dgate, routed, N, n_aux, E, K, score, norm_topk, aux_coef);
    CUDA_LAUNCHED(c, "moe_router_backward_kernel");
}
