/* Grouped-query attention on the GPU: the causal attention of a whole sequence and the
 * blockwise attention with explicit positions of ring attention (the same kernels,
 * templated on how a key's visibility is decided). Semantics are those of backend.h and
 * cpu_attention.c / cpu_attention_part.c.
 *
 * These are the float32 kernels (BACKEND_PREC_FP32, stored probabilities, heads the
 * tensor-core kernels of cuda_attention_tc.cu do not take, or BATON_CUDA_ATTENTION=fp32);
 * they are straightforward, not flash-tiled: a warp owns one query row (forward,
 * dq) or one key row (dk, dv). It walks the keys (queries) 32 at a time, each lane
 * computing one full dot product over the head; the forward keeps an online softmax
 * (running max, sum and output) and returns each row's log-sum-exp. Head sizes up to
 * ATT_MAXHD. Heads up to ATT_TILE_MAXHD go to the tiled variants of
 * cuda_attention_tiled.cu instead (the same arithmetic, with the keys or queries a block
 * of rows needs shared through shared memory); these kernels take the larger heads.
 *
 * Rules kept:
 *  - A score is always att_dot(q row, k row) (fmaf in index order) times scale, and a
 *    probability always expf(score - lse) with explicit round-to-nearest intrinsics, so the
 *    forward's stored probabilities and the backward's recomputed ones are the same bits
 *    whichever kernel and memory they come from.
 *  - Every output element is written by one warp in a fixed order: no atomics, results
 *    independent of scheduling and of buffer addresses.
 *  - attention_backward WRITES dq, dk, dv; attention_part_backward ACCUMULATES into them.
 *    The whole-sequence backward needs each query row's delta = rowsum(P * dP) before the
 *    dk/dv pass and has no (B, H, T) scratch (its size depends on T only): it parks delta
 *    in the first element of the row's own dq head slice, which the dq pass reads before
 *    it overwrites that slice. */
#include <math.h>
#include <stdio.h>

#include "cuda_attention.cuh"

#define ATT_WARPS 4 /* rows (warps) per block of these kernels */

/* Forward: one warp per query row r = (b * H + h) * Tq + i. */
template <bool CAUSAL>
__global__ void att_forward_kernel(att_args a, float *out, float *lse, float *att) {
    __shared__ float qs[ATT_WARPS][ATT_MAXHD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * ATT_WARPS + warp;
    if (r >= (size_t)a.B * a.H * a.Tq) return;
    int i = (int)(r % a.Tq), h = (int)(r / a.Tq % a.H), b = (int)(r / a.Tq / a.H);
    int g = h / (a.H / a.KV), hd = a.hd;
    const float *qrow = a.q + ((size_t)b * a.Tq + i) * a.ldq + (size_t)h * hd;
    for (int d = lane; d < hd; d += 32)
        qs[warp][d] = qrow[d];
    __syncwarp();
    const float *kb = a.k + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    const float *vb = a.v + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    int32_t qp = CAUSAL ? i : a.qpos[i];
    int jend = CAUSAL ? i + 1 : a.Tk;
    float m = -INFINITY, l = 0.0f, acc[ATT_PER_LANE];
#pragma unroll
    for (int x = 0; x < ATT_PER_LANE; x++)
        acc[x] = 0.0f;
    for (int j0 = 0; j0 < jend; j0 += 32) {
        int j = j0 + lane;
        bool vis = j < jend && (CAUSAL || a.kpos[j] <= qp);
        float s =
            vis ? __fmul_rn(att_dot(qs[warp], kb + (size_t)j * a.ldkv, hd), a.scale) : -INFINITY;
        float cm = cuda_warp_max(s);
        if (cm == -INFINITY) continue; /* the same for every lane */
        float mn = cm > m ? cm : m;
        float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        float p = vis ? expf(s - mn) : 0.0f;
        l = l * corr + cuda_warp_sum(p);
#pragma unroll
        for (int x = 0; x < ATT_PER_LANE; x++)
            acc[x] *= corr;
        int nj = jend - j0 < 32 ? jend - j0 : 32;
        for (int jj = 0; jj < nj; jj++) {
            float pj = __shfl_sync(CUDA_FULL_MASK, p, jj);
            if (pj == 0.0f) continue;
            const float *vr = vb + (size_t)(j0 + jj) * a.ldkv;
#pragma unroll
            for (int x = 0; x < ATT_PER_LANE; x++) {
                int d = lane + 32 * x;
                if (d < hd) acc[x] += pj * vr[d];
            }
        }
        m = mn;
    }
    float L = m == -INFINITY ? -INFINITY : m + logf(l);
    float *o = out + ((size_t)b * a.Tq + i) * a.H * hd + (size_t)h * hd;
#pragma unroll
    for (int x = 0; x < ATT_PER_LANE; x++) {
        int d = lane + 32 * x;
        if (d < hd) o[d] = m == -INFINITY ? 0.0f : acc[x] / l;
    }
    if (lane == 0) lse[r] = L;
    if (CAUSAL && att != NULL) /* the probabilities row, zero above the diagonal */
        for (int j = lane; j < a.Tk; j += 32)
            att[r * a.Tk + j] =
                j <= i ? att_prob(qs[warp], kb + (size_t)j * a.ldkv, hd, a.scale, L) : 0.0f;
}

/* The probability and dS of query row (r: b, h, i) against key j, or zeros. */
template <bool CAUSAL>
__device__ __forceinline__ void att_pds(const att_args &a, const float *att, size_t r, int i, int j,
                                        const float *qrow, const float *krow, const float *dorow,
                                        const float *vrow, float L, float dl, float *p_out,
                                        float *ds_out) {
    float p = 0.0f, ds = 0.0f;
    if (L != -INFINITY) {
        p = att != NULL ? att[r * a.Tk + j] : att_prob(qrow, krow, a.hd, a.scale, L);
        float dp = att_dot(dorow, vrow, a.hd);
        ds = p * (dp - dl) * a.scale;
    }
    *p_out = p;
    *ds_out = ds;
}

/* delta (parked in dq, see the file comment) = sum_j P dP in double; one warp per row. */
__global__ void att_delta_park_kernel(att_args a, float *dq, const float *dout, const float *att,
                                      const float *lse) {
    __shared__ float qs[ATT_WARPS][ATT_MAXHD], dos[ATT_WARPS][ATT_MAXHD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * ATT_WARPS + warp;
    if (r >= (size_t)a.B * a.H * a.Tq) return;
    int i = (int)(r % a.Tq), h = (int)(r / a.Tq % a.H), b = (int)(r / a.Tq / a.H);
    int g = h / (a.H / a.KV), hd = a.hd;
    size_t row = (size_t)b * a.Tq + i;
    for (int d = lane; d < hd; d += 32) {
        qs[warp][d] = a.q[row * a.ldq + (size_t)h * hd + d];
        dos[warp][d] = dout[row * a.H * hd + (size_t)h * hd + d];
    }
    __syncwarp();
    const float *kb = a.k + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    const float *vb = a.v + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    float L = lse[r];
    double acc = 0.0;
    for (int j = lane; j <= i; j += 32) {
        float p = att != NULL ? att[r * a.Tk + j]
                              : att_prob(qs[warp], kb + (size_t)j * a.ldkv, hd, a.scale, L);
        float dp = att_dot(dos[warp], vb + (size_t)j * a.ldkv, hd);
        acc += (double)p * (double)dp;
    }
    acc = cuda_warp_sum(acc);
    if (lane == 0) dq[row * a.ldq + (size_t)h * hd] = (float)acc;
}

/* dq (row stride ldq) = or += sum_j dS k_j; one warp per query row. */
template <bool CAUSAL, bool ACC>
__global__ void att_dq_kernel(att_args a, float *dq, const float *dout, const float *att,
                              const float *lse, att_delta dlt) {
    __shared__ float qs[ATT_WARPS][ATT_MAXHD], dos[ATT_WARPS][ATT_MAXHD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * ATT_WARPS + warp;
    if (r >= (size_t)a.B * a.H * a.Tq) return;
    int i = (int)(r % a.Tq), h = (int)(r / a.Tq % a.H), b = (int)(r / a.Tq / a.H);
    int g = h / (a.H / a.KV), hd = a.hd;
    size_t row = (size_t)b * a.Tq + i;
    for (int d = lane; d < hd; d += 32) {
        qs[warp][d] = a.q[row * a.ldq + (size_t)h * hd + d];
        dos[warp][d] = dout[row * a.H * hd + (size_t)h * hd + d];
    }
    float dl = dlt.p[b * dlt.sb + h * dlt.sh + i * dlt.st];
    __syncwarp(); /* every lane has read delta before any lane writes dq (it may live there) */
    const float *kb = a.k + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    const float *vb = a.v + (size_t)b * a.Tk * a.ldkv + (size_t)g * hd;
    float L = lse[r];
    int32_t qp = CAUSAL ? i : a.qpos[i];
    int jend = CAUSAL ? i + 1 : a.Tk;
    float acc[ATT_PER_LANE];
#pragma unroll
    for (int x = 0; x < ATT_PER_LANE; x++)
        acc[x] = 0.0f;
    if (L != -INFINITY)
        for (int j0 = 0; j0 < jend; j0 += 32) {
            int j = j0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (j < jend && (CAUSAL || a.kpos[j] <= qp))
                att_pds<CAUSAL>(a, att, r, i, j, qs[warp], kb + (size_t)j * a.ldkv, dos[warp],
                                vb + (size_t)j * a.ldkv, L, dl, &p, &ds);
            int nj = jend - j0 < 32 ? jend - j0 : 32;
            for (int jj = 0; jj < nj; jj++) {
                float dsj = __shfl_sync(CUDA_FULL_MASK, ds, jj);
                if (dsj == 0.0f) continue;
                const float *kr = kb + (size_t)(j0 + jj) * a.ldkv;
#pragma unroll
                for (int x = 0; x < ATT_PER_LANE; x++) {
                    int d = lane + 32 * x;
                    if (d < hd) acc[x] += dsj * kr[d];
                }
            }
        }
    __syncwarp();
    float *o = dq + row * a.ldq + (size_t)h * hd;
#pragma unroll
    for (int x = 0; x < ATT_PER_LANE; x++) {
        int d = lane + 32 * x;
        if (d < hd) o[d] = ACC ? o[d] + acc[x] : acc[x];
    }
}

/* dk = or += sum dS^T q, dv = or += sum P^T dout over the group's query heads and the
 * rows that see the key; one warp per key row r = (b * KV + g) * Tk + j. */
template <bool CAUSAL, bool ACC>
__global__ void att_dkdv_kernel(att_args a, float *dk, float *dv, const float *dout,
                                const float *att, const float *lse, att_delta dlt) {
    __shared__ float ks[ATT_WARPS][ATT_MAXHD], vs[ATT_WARPS][ATT_MAXHD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * ATT_WARPS + warp;
    if (r >= (size_t)a.B * a.KV * a.Tk) return;
    int j = (int)(r % a.Tk), g = (int)(r / a.Tk % a.KV), b = (int)(r / a.Tk / a.KV);
    int hd = a.hd, rep = a.H / a.KV, ldo = a.H * hd;
    size_t krow = (size_t)b * a.Tk + j;
    for (int d = lane; d < hd; d += 32) {
        ks[warp][d] = a.k[krow * a.ldkv + (size_t)g * hd + d];
        vs[warp][d] = a.v[krow * a.ldkv + (size_t)g * hd + d];
    }
    __syncwarp();
    int32_t kp = CAUSAL ? j : a.kpos[j];
    float ak[ATT_PER_LANE], av[ATT_PER_LANE];
#pragma unroll
    for (int x = 0; x < ATT_PER_LANE; x++)
        ak[x] = av[x] = 0.0f;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        size_t stat = ((size_t)b * a.H + h) * a.Tq;
        for (int i0 = CAUSAL ? j : 0; i0 < a.Tq; i0 += 32) {
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < a.Tq && (CAUSAL || kp <= a.qpos[i])) {
                size_t qrow = (size_t)b * a.Tq + i;
                float dl = dlt.p[b * dlt.sb + h * dlt.sh + i * dlt.st];
                att_pds<CAUSAL>(a, att, stat + i, i, j, a.q + qrow * a.ldq + (size_t)h * hd,
                                ks[warp], dout + qrow * ldo + (size_t)h * hd, vs[warp],
                                lse[stat + i], dl, &p, &ds);
            }
            int ni = a.Tq - i0 < 32 ? a.Tq - i0 : 32;
            for (int ii = 0; ii < ni; ii++) {
                float pi = __shfl_sync(CUDA_FULL_MASK, p, ii);
                float dsi = __shfl_sync(CUDA_FULL_MASK, ds, ii);
                if (pi == 0.0f && dsi == 0.0f) continue;
                size_t qrow = (size_t)b * a.Tq + i0 + ii;
                const float *qr = a.q + qrow * a.ldq + (size_t)h * hd;
                const float *dor = dout + qrow * ldo + (size_t)h * hd;
#pragma unroll
                for (int x = 0; x < ATT_PER_LANE; x++) {
                    int d = lane + 32 * x;
                    if (d < hd) {
                        av[x] += pi * dor[d];
                        ak[x] += dsi * qr[d];
                    }
                }
            }
        }
    }
    float *okr = dk + krow * a.ldkv + (size_t)g * hd, *ovr = dv + krow * a.ldkv + (size_t)g * hd;
#pragma unroll
    for (int x = 0; x < ATT_PER_LANE; x++) {
        int d = lane + 32 * x;
        if (d < hd) {
            okr[d] = ACC ? okr[d] + ak[x] : ak[x];
            ovr[d] = ACC ? ovr[d] + av[x] : av[x];
        }
    }
}

static unsigned att_blocks(size_t rows) {
    return (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS);
}

/* Shapes the kernels take; a failure is recorded and the op queues nothing. */
static int att_shape_ok(cuda_ctx *c, int H, int KV, int hd, const char *op) {
    if (hd > ATT_MAXHD || hd <= 0 || KV <= 0 || H % KV != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "head_dim %d (at most %d), H %d, KV %d (dividing H)", hd,
                 ATT_MAXHD, H, KV);
        cuda_record(c, -7 /* BT_EUNSUPPORTED */, op, msg);
        return 0;
    }
    return 1;
}

size_t cuda_attention_scratch_floats(backend *be, int T) {
    (void)be;
    (void)T;
    return 0;
}

size_t cuda_attention_part_scratch_floats(backend *be, int Tq, int Tk) {
    (void)be;
    (void)Tq;
    (void)Tk;
    return 0;
}

void cuda_attention_forward(backend *be, float *out, float *lse, float *att, const float *q,
                            const float *k, const float *v, int ld, int B, int T, int H, int KV,
                            int hd, float scale, backend_prec prec, float *scratch) {
    (void)scratch;
    cuda_ctx *c = cuda_ctx_of(be);
    if (!att_shape_ok(c, H, KV, hd, "attention_forward") || B * T == 0) return;
    att_args a = {q, k, v, ld, ld, B, T, T, H, KV, hd, scale, NULL, NULL};
    if (att_tc_takes(c, prec, att, hd)) {
        att_tc_forward(c, a, out, lse);
        return;
    }
    if (hd <= ATT_TILE_MAXHD) {
        att_tiled_forward(c, a, 1, out, lse, att);
        return;
    }
    att_forward_kernel<true>
        <<<att_blocks((size_t)B * H * T), 32 * ATT_WARPS, 0, c->stream>>>(a, out, lse, att);
    CUDA_LAUNCHED(c, "att_forward_kernel");
}

void cuda_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *att, const float *lse, const float *q,
                             const float *k, const float *v, int ld, int B, int T, int H, int KV,
                             int hd, float scale, backend_prec prec, float *scratch) {
    (void)scratch;
    cuda_ctx *c = cuda_ctx_of(be);
    if (!att_shape_ok(c, H, KV, hd, "attention_backward") || B * T == 0) return;
    att_args a = {q, k, v, ld, ld, B, T, T, H, KV, hd, scale, NULL, NULL};
    if (att_tc_takes(c, prec, att, hd)) {
        if (out == NULL) {
            cuda_record(c, -1 /* BT_EINVAL */, "attention_backward",
                        "the tensor-core kernels need the forward's output (out is NULL)");
            return;
        }
        att_tc_backward(c, a, dq, dk, dv, dout, out, lse);
        return;
    }
    /* delta of row (b, h, i) parked at dq[(b T + i) ld + h hd] */
    att_delta dlt = {dq, (size_t)T * ld, (size_t)hd, (size_t)ld};
    if (hd <= ATT_TILE_MAXHD) {
        att_tiled_rows(c, a, 1, ATT_ROWS_DELTA, dq, dout, att, lse, dlt);
        att_tiled_dkdv(c, a, 1, 0, dk, dv, dout, att, lse, dlt);
        att_tiled_rows(c, a, 1, ATT_ROWS_DQ, dq, dout, att, lse, dlt);
        return;
    }
    unsigned qb = att_blocks((size_t)B * H * T), kb = att_blocks((size_t)B * KV * T);
    att_delta_park_kernel<<<qb, 32 * ATT_WARPS, 0, c->stream>>>(a, dq, dout, att, lse);
    CUDA_LAUNCHED(c, "att_delta_park_kernel");
    att_dkdv_kernel<true, false>
        <<<kb, 32 * ATT_WARPS, 0, c->stream>>>(a, dk, dv, dout, att, lse, dlt);
    CUDA_LAUNCHED(c, "att_dkdv_kernel");
    att_dq_kernel<true, false><<<qb, 32 * ATT_WARPS, 0, c->stream>>>(a, dq, dout, att, lse, dlt);
    CUDA_LAUNCHED(c, "att_dq_kernel");
}

void cuda_attention_part_forward(backend *be, float *out, float *lse, const float *q, int ldq,
                                 const float *k, const float *v, int ldkv, int B, int Tq, int Tk,
                                 int H, int KV, int hd, float scale, const int32_t *qpos,
                                 const int32_t *kpos, float *scratch) {
    (void)scratch;
    cuda_ctx *c = cuda_ctx_of(be);
    if (!att_shape_ok(c, H, KV, hd, "attention_part_forward") || B * Tq == 0) return;
    att_args a = {q, k, v, ldq, ldkv, B, Tq, Tk, H, KV, hd, scale, qpos, kpos};
    if (hd <= ATT_TILE_MAXHD) {
        att_tiled_forward(c, a, 0, out, lse, NULL);
        return;
    }
    att_forward_kernel<false>
        <<<att_blocks((size_t)B * H * Tq), 32 * ATT_WARPS, 0, c->stream>>>(a, out, lse, NULL);
    CUDA_LAUNCHED(c, "att_forward_kernel (part)");
}

void cuda_attention_part_backward(backend *be, float *dq, int ldq, float *dk, float *dv, int ldkv,
                                  const float *dout, const float *delta, const float *lse,
                                  const float *q, const float *k, const float *v, int B, int Tq,
                                  int Tk, int H, int KV, int hd, float scale, const int32_t *qpos,
                                  const int32_t *kpos, float *scratch) {
    (void)scratch;
    cuda_ctx *c = cuda_ctx_of(be);
    if (!att_shape_ok(c, H, KV, hd, "attention_part_backward") || B * Tq == 0 || Tk == 0) return;
    att_args a = {q, k, v, ldq, ldkv, B, Tq, Tk, H, KV, hd, scale, qpos, kpos};
    att_delta dlt = {delta, (size_t)H * Tq, (size_t)Tq, 1};
    if (hd <= ATT_TILE_MAXHD) {
        att_tiled_dkdv(c, a, 0, 1, dk, dv, dout, NULL, lse, dlt);
        att_tiled_rows(c, a, 0, ATT_ROWS_DQ_ACC, dq, dout, NULL, lse, dlt);
        return;
    }
    att_dkdv_kernel<false, true><<<att_blocks((size_t)B * KV * Tk), 32 * ATT_WARPS, 0, c->stream>>>(
        a, dk, dv, dout, NULL, lse, dlt);
    CUDA_LAUNCHED(c, "att_dkdv_kernel (part)");
    att_dq_kernel<false, true><<<att_blocks((size_t)B * H * Tq), 32 * ATT_WARPS, 0, c->stream>>>(
        a, dq, dout, NULL, lse, dlt);
    CUDA_LAUNCHED(c, "att_dq_kernel (part)");
}
