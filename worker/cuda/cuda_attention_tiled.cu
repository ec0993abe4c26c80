/* Tiled attention kernels for heads up to ATT_TILE_MAXHD: the same arithmetic, in the same
 * order, as the one-warp-per-row kernels of cuda_attention.cu (whose rules hold here:
 * scores and probabilities through att_dot/att_prob, every output element written by one
 * warp, no atomics), with the memory traffic cut: a block of ATT_TILE_ROWS warps takes
 * that many consecutive rows of one (sequence, head) and walks the keys (queries) in
 * chunks of ATT_CHUNK rows that the whole block loads once into shared memory (rows padded
 * by one float so that lanes reading different rows hit different banks).
 *
 *  - att_tiled_forward: one warp per query row, online softmax, log-sum-exp.
 *  - att_tiled_rows: one warp per query row of the backward: its delta = rowsum(P dP)
 *    (parked where att_delta says), or dq = / += sum_j dS k_j.
 *  - att_tiled_dkdv: one warp per key row: dk, dv = / += over the group's query heads.
 *
 * Warps whose row lies beyond the sequence, or whose causal range ends before a chunk,
 * still take part in every chunk's loads and barriers, and skip only the arithmetic. */
#include <math.h>

#include "cuda_attention.cuh"

#define TILE_THREADS (32 * ATT_TILE_ROWS)
#define TILE_LD      (ATT_TILE_MAXHD + 1)

/* Copies rows [r0, r0 + n) (stride ld) of hd floats into dst (stride TILE_LD). */
__device__ __forceinline__ void tile_load(float (*dst)[TILE_LD], const float *src, size_t ld,
                                          int r0, int n, int hd) {
    for (int e = threadIdx.x; e < n * hd; e += blockDim.x) {
        int r = e / hd, d = e % hd;
        dst[r][d] = src[(size_t)(r0 + r) * ld + d];
    }
}

/* Blocks cover (b, h or g, ATT_TILE_ROWS consecutive rows of T). */
static unsigned tile_blocks(int B, int heads, int T) {
    return (unsigned)((size_t)B * heads * ((T + ATT_TILE_ROWS - 1) / ATT_TILE_ROWS));
}

template <bool CAUSAL>
__global__ void __launch_bounds__(TILE_THREADS)
    att_tiled_forward_kernel(att_args a, float *out, float *lse, float *att) {
    __shared__ float qs[ATT_TILE_ROWS][ATT_TILE_MAXHD];
    __shared__ float ks[ATT_CHUNK][TILE_LD], vs[ATT_CHUNK][TILE_LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tiles = (a.Tq + ATT_TILE_ROWS - 1) / ATT_TILE_ROWS;
    int bh = blockIdx.x / tiles, i0 = (int)(blockIdx.x % tiles) * ATT_TILE_ROWS;
    int h = bh % a.H, b = bh / a.H, g = h / (a.H / a.KV), hd = a.hd;
    int i = i0 + warp;
    bool active = i < a.Tq;
    size_t r = (size_t)bh * a.Tq + i;
    if (active)
        for (int d = lane; d < hd; d += 32)
            qs[warp][d] = a.q[((size_t)b * a.Tq + i) * a.ldq + (size_t)h * hd + d];
    const float *kb = a.k + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    const float *vb = a.v + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    int32_t qp = active ? (CAUSAL ? i : a.qpos[i]) : 0;
    int jend = !active ? 0 : CAUSAL ? i + 1 : a.Tk;
    int last = (i0 + ATT_TILE_ROWS < a.Tq ? i0 + ATT_TILE_ROWS : a.Tq) - 1;
    int block_jend = CAUSAL ? last + 1 : a.Tk;
    float m = -INFINITY, l = 0.0f, acc[ATT_TILE_MAXHD / 32];
#pragma unroll
    for (int x = 0; x < ATT_TILE_MAXHD / 32; x++)
        acc[x] = 0.0f;
    for (int j0 = 0; j0 < block_jend; j0 += ATT_CHUNK) {
        int nj = block_jend - j0 < ATT_CHUNK ? block_jend - j0 : ATT_CHUNK;
        __syncthreads(); /* the previous chunk is consumed (and qs written) */
        tile_load(ks, kb, a.ldkv, j0, nj, hd);
        tile_load(vs, vb, a.ldkv, j0, nj, hd);
        __syncthreads();
        if (j0 >= jend) continue; /* the same for the whole warp */
        int j = j0 + lane;
        bool vis = j < jend && (CAUSAL || a.kpos[j] <= qp);
        float s = vis ? __fmul_rn(att_dot(qs[warp], ks[lane], hd), a.scale) : -INFINITY;
        float cm = cuda_warp_max(s);
        if (cm == -INFINITY) continue;
        float mn = cm > m ? cm : m;
        float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        float p = vis ? expf(s - mn) : 0.0f;
        l = l * corr + cuda_warp_sum(p);
#pragma unroll
        for (int x = 0; x < ATT_TILE_MAXHD / 32; x++)
            acc[x] *= corr;
        int njw = jend - j0 < ATT_CHUNK ? jend - j0 : ATT_CHUNK;
        for (int jj = 0; jj < njw; jj++) {
            float pj = __shfl_sync(CUDA_FULL_MASK, p, jj);
            if (pj == 0.0f) continue;
#pragma unroll
            for (int x = 0; x < ATT_TILE_MAXHD / 32; x++) {
                int d = lane + 32 * x;
                if (d < hd) acc[x] += pj * vs[jj][d];
            }
        }
        m = mn;
    }
    if (!active) return; /* no barrier follows */
    float L = m == -INFINITY ? -INFINITY : m + logf(l);
    float *o = out + ((size_t)b * a.Tq + i) * a.H * hd + (size_t)h * hd;
#pragma unroll
    for (int x = 0; x < ATT_TILE_MAXHD / 32; x++) {
        int d = lane + 32 * x;
        if (d < hd) o[d] = m == -INFINITY ? 0.0f : acc[x] / l;
    }
    if (lane == 0) lse[r] = L;
    if (CAUSAL && att != NULL)
        for (int j = lane; j < a.Tk; j += 32)
            att[r * a.Tk + j] =
                j <= i ? att_prob(qs[warp], kb + (size_t)j * a.ldkv, hd, a.scale, L) : 0.0f;
}

/* One warp per query row: MODE ATT_ROWS_DELTA parks delta = sum_j P dP (double) at
 * dlt; ATT_ROWS_DQ writes dq = sum_j dS k_j, ATT_ROWS_DQ_ACC adds it. */
template <bool CAUSAL, int MODE>
__global__ void __launch_bounds__(TILE_THREADS)
    att_tiled_rows_kernel(att_args a, float *dq, const float *dout, const float *att,
                          const float *lse, att_delta dlt) {
    __shared__ float qs[ATT_TILE_ROWS][ATT_TILE_MAXHD], dos[ATT_TILE_ROWS][ATT_TILE_MAXHD];
    __shared__ float ks[ATT_CHUNK][TILE_LD], vs[ATT_CHUNK][TILE_LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tiles = (a.Tq + ATT_TILE_ROWS - 1) / ATT_TILE_ROWS;
    int bh = blockIdx.x / tiles, i0 = (int)(blockIdx.x % tiles) * ATT_TILE_ROWS;
    int h = bh % a.H, b = bh / a.H, g = h / (a.H / a.KV), hd = a.hd;
    int i = i0 + warp;
    bool active = i < a.Tq;
    size_t r = (size_t)bh * a.Tq + i, row = (size_t)b * a.Tq + i;
    float L = -INFINITY, dl = 0.0f;
    if (active) {
        for (int d = lane; d < hd; d += 32) {
            qs[warp][d] = a.q[row * a.ldq + (size_t)h * hd + d];
            dos[warp][d] = dout[row * a.H * hd + (size_t)h * hd + d];
        }
        L = lse[r];
        if (MODE != ATT_ROWS_DELTA) dl = dlt.p[b * dlt.sb + h * dlt.sh + i * dlt.st];
    }
    __syncwarp(); /* every lane has read delta before any lane writes dq (it may live there) */
    const float *kb = a.k + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    const float *vb = a.v + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    int32_t qp = active ? (CAUSAL ? i : a.qpos[i]) : 0;
    int jend = !active || L == -INFINITY ? 0 : CAUSAL ? i + 1 : a.Tk;
    int last = (i0 + ATT_TILE_ROWS < a.Tq ? i0 + ATT_TILE_ROWS : a.Tq) - 1;
    int block_jend = CAUSAL ? last + 1 : a.Tk;
    float acc[ATT_TILE_MAXHD / 32];
#pragma unroll
    for (int x = 0; x < ATT_TILE_MAXHD / 32; x++)
        acc[x] = 0.0f;
    double dsum = 0.0;
    for (int j0 = 0; j0 < block_jend; j0 += ATT_CHUNK) {
        int nj = block_jend - j0 < ATT_CHUNK ? block_jend - j0 : ATT_CHUNK;
        __syncthreads();
        tile_load(ks, kb, a.ldkv, j0, nj, hd);
        tile_load(vs, vb, a.ldkv, j0, nj, hd);
        __syncthreads();
        if (j0 >= jend) continue;
        int j = j0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (j < jend && (CAUSAL || a.kpos[j] <= qp)) {
            p = att != NULL ? att[r * a.Tk + j] : att_prob(qs[warp], ks[lane], hd, a.scale, L);
            float dp = att_dot(dos[warp], vs[lane], hd);
            if (MODE == ATT_ROWS_DELTA)
                dsum += (double)p * (double)dp;
            else
                ds = p * (dp - dl) * a.scale;
        }
        if (MODE == ATT_ROWS_DELTA) continue;
        int njw = jend - j0 < ATT_CHUNK ? jend - j0 : ATT_CHUNK;
        for (int jj = 0; jj < njw; jj++) {
            float dsj = __shfl_sync(CUDA_FULL_MASK, ds, jj);
            if (dsj == 0.0f) continue;
#pragma unroll
            for (int x = 0; x < ATT_TILE_MAXHD / 32; x++) {
                int d = lane + 32 * x;
                if (d < hd) acc[x] += dsj * ks[jj][d];
            }
        }
    }
    if (!active) return;
    if (MODE == ATT_ROWS_DELTA) {
        dsum = cuda_warp_sum(dsum);
        if (lane == 0) dq[b * dlt.sb + h * dlt.sh + i * dlt.st] = (float)dsum;
        return;
    }
    float *o = dq + row * a.ldq + (size_t)h * hd;
#pragma unroll
    for (int x = 0; x < ATT_TILE_MAXHD / 32; x++) {
        int d = lane + 32 * x;
        if (d < hd) o[d] = MODE == ATT_ROWS_DQ_ACC ? o[d] + acc[x] : acc[x];
    }
}

/* One warp per key row j of (b, g): dk, dv = (or +=, ACC) the sums over the group's query
 * heads and the query rows that see the key, query chunks shared by the block. */
template <bool CAUSAL, bool ACC>
__global__ void __launch_bounds__(TILE_THREADS)
    att_tiled_dkdv_kernel(att_args a, float *dk, float *dv, const float *dout, const float *att,
                          const float *lse, att_delta dlt) {
    __shared__ float ks[ATT_TILE_ROWS][ATT_TILE_MAXHD], vs[ATT_TILE_ROWS][ATT_TILE_MAXHD];
    __shared__ float qs[ATT_CHUNK][TILE_LD], dos[ATT_CHUNK][TILE_LD];
    __shared__ float ls[ATT_CHUNK], dls[ATT_CHUNK];
    __shared__ int32_t qps[ATT_CHUNK];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int tiles = (a.Tk + ATT_TILE_ROWS - 1) / ATT_TILE_ROWS;
    int bg = blockIdx.x / tiles, j0b = (int)(blockIdx.x % tiles) * ATT_TILE_ROWS;
    int g = bg % a.KV, b = bg / a.KV, hd = a.hd, rep = a.H / a.KV, ldo = a.H * hd;
    int j = j0b + warp;
    bool active = j < a.Tk;
    size_t krow = (size_t)b * a.Tk + j;
    if (active)
        for (int d = lane; d < hd; d += 32) {
            ks[warp][d] = a.k[krow * a.ldkv + (size_t)g * hd + d];
            vs[warp][d] = a.v[krow * a.ldkv + (size_t)g * hd + d];
        }
    int32_t kp = active ? (CAUSAL ? j : a.kpos[j]) : 0;
    float ak[ATT_TILE_MAXHD / 32], av[ATT_TILE_MAXHD / 32];
#pragma unroll
    for (int x = 0; x < ATT_TILE_MAXHD / 32; x++)
        ak[x] = av[x] = 0.0f;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        size_t stat = ((size_t)b * a.H + h) * a.Tq;
        const float *qb = a.q + (size_t)b * a.Tq * a.ldq + (size_t)h * hd;
        const float *db = dout + (size_t)b * a.Tq * ldo + (size_t)h * hd;
        /* causal: query rows before the block's first key see none of its keys */
        for (int c0 = CAUSAL ? j0b : 0; c0 < a.Tq; c0 += ATT_CHUNK) {
            int nc = a.Tq - c0 < ATT_CHUNK ? a.Tq - c0 : ATT_CHUNK;
            __syncthreads();
            tile_load(qs, qb, a.ldq, c0, nc, hd);
            tile_load(dos, db, ldo, c0, nc, hd);
            if (threadIdx.x < (unsigned)nc) {
                int i = c0 + threadIdx.x;
                ls[threadIdx.x] = lse[stat + i];
                dls[threadIdx.x] = dlt.p[b * dlt.sb + h * dlt.sh + i * dlt.st];
                qps[threadIdx.x] = CAUSAL ? i : a.qpos[i];
            }
            __syncthreads();
            if (!active || (CAUSAL && c0 + nc <= j)) continue;
            int i = c0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (lane < nc && (CAUSAL ? i >= j : kp <= qps[lane]) && ls[lane] != -INFINITY) {
                p = att != NULL ? att[(stat + i) * a.Tk + j]
                                : att_prob(qs[lane], ks[warp], hd, a.scale, ls[lane]);
                float dp = att_dot(dos[lane], vs[warp], hd);
                ds = p * (dp - dls[lane]) * a.scale;
            }
            for (int ii = 0; ii < nc; ii++) {
                float pi = __shfl_sync(CUDA_FULL_MASK, p, ii);
                float dsi = __shfl_sync(CUDA_FULL_MASK, ds, ii);
                if (pi == 0.0f && dsi == 0.0f) continue;
#pragma unroll
                for (int x = 0; x < ATT_TILE_MAXHD / 32; x++) {
                    int d = lane + 32 * x;
                    if (d < hd) {
                        av[x] += pi * dos[ii][d];
                        ak[x] += dsi * qs[ii][d];
                    }
                }
            }
        }
    }
    if (!active) return;
    float *okr = dk + krow * a.ldkv + (size_t)g * hd, *ovr = dv + krow * a.ldkv + (size_t)g * hd;
#pragma unroll
    for (int x = 0; x < ATT_TILE_MAXHD / 32; x++) {
        int d = lane + 32 * x;
        if (d < hd) {
            okr[d] = ACC ? okr[d] + ak[x] : ak[x];
            ovr[d] = ACC ? ovr[d] + av[x] : av[x];
        }
    }
}

void att_tiled_forward(cuda_ctx *c, att_args a, int causal, float *out, float *lse, float *att) {
    unsigned n = tile_blocks(a.B, a.H, a.Tq);
    if (causal)
        att_tiled_forward_kernel<true><<<n, TILE_THREADS, 0, c->stream>>>(a, out, lse, att);
    else
        att_tiled_forward_kernel<false><<<n, TILE_THREADS, 0, c->stream>>>(a, out, lse, NULL);
    CUDA_LAUNCHED(c, "att_tiled_forward_kernel");
}

void att_tiled_rows(cuda_ctx *c, att_args a, int causal, int mode, float *dq, const float *dout,
                    const float *att, const float *lse, att_delta dlt) {
    unsigned n = tile_blocks(a.B, a.H, a.Tq);
    if (causal && mode == ATT_ROWS_DELTA)
        att_tiled_rows_kernel<true, ATT_ROWS_DELTA>
            <<<n, TILE_THREADS, 0, c->stream>>>(a, dq, dout, att, lse, dlt);
    else if (causal && mode == ATT_ROWS_DQ)
        att_tiled_rows_kernel<true, ATT_ROWS_DQ>
            <<<n, TILE_THREADS, 0, c->stream>>>(a, dq, dout, att, lse, dlt);
    else if (!causal && mode == ATT_ROWS_DQ_ACC)
        att_tiled_rows_kernel<false, ATT_ROWS_DQ_ACC>
            <<<n, TILE_THREADS, 0, c->stream>>>(a, dq, dout, NULL, lse, dlt);
    else {
        cuda_record(c, -8 /* BT_EINTERNAL */, "att_tiled_rows", "unsupported mode");
        return;
    }
    CUDA_LAUNCHED(c, "att_tiled_rows_kernel");
}

void att_tiled_dkdv(cuda_ctx *c, att_args a, int causal, int accumulate, float *dk, float *dv,
                    const float *dout, const float *att, const float *lse, att_delta dlt) {
    unsigned n = tile_blocks(a.B, a.KV, a.Tk);
    if (causal && !accumulate)
        att_tiled_dkdv_kernel<true, false>
            <<<n, TILE_THREADS, 0, c->stream>>>(a, dk, dv, dout, att, lse, dlt);
    else if (!causal && accumulate)
        att_tiled_dkdv_kernel<false, true>
            <<<n, TILE_THREADS, 0, c->stream>>>(a, dk, dv, dout, NULL, lse, dlt);
    else {
        cuda_record(c, -8 /* BT_EINTERNAL */, "att_tiled_dkdv", "unsupported mode");
        return;
    }
    CUDA_LAUNCHED(c, "att_tiled_dkdv_kernel");
}
