/* Causal grouped-query attention of whole sequences on the tensor cores: the kernels
 * cuda_attention_forward/backward take for a precision other than float32 (backend.h),
 * no stored probabilities, head sizes that are multiples of 16 up to 128, unless
 * BATON_CUDA_ATTENTION=fp32 (cuda_ctx.att_fp32). FlashAttention-2's scheme on
 * nvcuda::wmma 16x16x16 bf16 products with float32 accumulation:
 *
 *  - Forward: a block of TC_WARPS warps per (sequence, head, TC_ROWS query rows), each
 *    warp owning 16 rows. It walks the keys up to the causal bound in tiles of BK rows
 *    staged in shared memory as bf16 (round to nearest even): S = Q K^T (Q kept in
 *    fragments), an online softmax in float32 on S round-tripped through shared memory
 *    (two lanes per row), P rounded to bf16, O += P V in accumulator fragments. Rescaling
 *    O per row needs each fragment element's row, which the opaque layout hides: an
 *    accumulator fragment loaded from a 16x16 table of row numbers holds, element for
 *    element, the row of any accumulator fragment of the same type. lse = m + log(l) of
 *    the scaled float32 scores, as the float32 kernels define it.
 *  - Backward, three or four launches: delta = rowsum(dout * out) per (row, head) from
 *    the forward's output (FlashAttention-2's row term; it is parked, as in
 *    cuda_attention.cu, in the first element of the row's dq head slice); dk, dv per
 *    (sequence, kv head, TC_ROWS keys), each warp 16 keys, looping over the group's query
 *    heads in order and the query tiles that see the keys — under grouped-query attention
 *    with few blocks, over a slice of the group's heads, each slice's partial sums then
 *    added in slice order by a fourth launch (tc_dkdv_slices: the slices follow from B, T
 *    and the heads per rank, so dk and dv's last bits do too, as any tiling's would); dq
 *    per (sequence, head, TC_ROWS query rows). Both
 *    recompute S and dP = dout V^T on the tensor cores, P = exp(scale S - lse) and
 *    dS = P (dP - delta) scale in float32, and multiply P and dS rounded to bf16.
 *
 * Rules kept: every output element is written once, by one warp, from sums in a fixed
 * order (no atomics), so results are bitwise the same run to run; dq, dk, dv are written
 * (=) with row stride ld. Rows and keys past T are staged as zeros and masked. Shared
 * memory is dynamic (its size from the tile templates: 46 to 90 KB per block); each
 * launcher raises the kernel's limit first. Tiles: 64 query rows (4 warps) against 64
 * keys in the forward; backward 64 keys (dk, dv) or 64 query rows (dq) against tiles of 64
 * (heads up to 64) or 32 (heads up to 128) of the other side. Products use bf16 operands,
 * so results differ from the float32 kernels' by bf16 rounding (about 2^-9 relative per
 * operand). */
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "cuda_attention.cuh"
#include "cuda_backend.h"

using namespace nvcuda;

/* Registers against shared memory at head size 128 (ptxas -v, CUDA 13.0, sm_90; 64K
 * registers and 228 KB of shared memory per SM, 1 KB of it reserved per block): the
 * forward <128, 64> uses 168 registers (ptxas's own choice, 8 bytes spilled; about 230
 * without a spill) and 61.5 KB, 3 blocks per SM by either; dk/dv <128, 32> 220 and 79.3 KB,
 * 2 by either (__launch_bounds__(TC_THREADS, 3) caps it at 168 with 252 bytes spilled, and
 * the shared memory still holds only 2); dq <128, 32> 124 and 74.5 KB, 4 by registers, 3 by
 * shared memory. No kernel's registers hold it below its shared-memory bound, so none is
 * given a minimum block count. */
#define TC_WARPS   4
#define TC_THREADS (32 * TC_WARPS)
#define TC_ROWS    (16 * TC_WARPS) /* query rows (forward, dq) or keys (dk, dv) per block */

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
/* A row-major (n, d) tile read as the (d, n) operand B: its transpose. */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Shared-memory layouts, byte offsets (all multiples of 32, as wmma's pointers need).
 * Staged bf16 tiles have rows of HD + 8 (16-byte padding against bank conflicts), float
 * tiles rows of n + 4, bf16 products rows of n + 8. */
template <int HD, int BK> struct tc_fwd_layout {
    static constexpr int LDH = HD + 8, LDS = BK + 4, LDP = BK + 8;
    /* Q's staging (TC_ROWS rows), then K (BK rows) and V (BK rows) */
    static constexpr int KVROWS = 2 * BK > TC_ROWS ? 2 * BK : TC_ROWS;
    static constexpr size_t KV = 0;
    static constexpr size_t S = KV + (size_t)KVROWS * LDH * 2;         /* float [W][16][LDS] */
    static constexpr size_t P = S + (size_t)TC_WARPS * 16 * LDS * 4;   /* bf16 [W][16][LDP] */
    static constexpr size_t RID = P + (size_t)TC_WARPS * 16 * LDP * 2; /* float [16][16] */
    static constexpr size_t STAT = RID + 256 * 4; /* float [2][W][16]: corr, then l */
    static constexpr size_t BYTES = STAT + 2 * TC_WARPS * 16 * 4;
};

/* dk, dv: the block's TC_ROWS keys and values, BQ query rows with their dout, S^T and
 * dP^T per warp (float), P^T and dS^T per warp (bf16), lse and delta of the rows. */
template <int HD, int BQ> struct tc_dkdv_layout {
    static constexpr int LDH = HD + 8, LDS = BQ + 4, LDP = BQ + 8;
    static constexpr size_t K = 0;
    static constexpr size_t V = K + (size_t)TC_ROWS * LDH * 2;
    static constexpr size_t Q = V + (size_t)TC_ROWS * LDH * 2;
    static constexpr size_t DO = Q + (size_t)BQ * LDH * 2;
    static constexpr size_t S = DO + (size_t)BQ * LDH * 2;
    static constexpr size_t DP = S + (size_t)TC_WARPS * 16 * LDS * 4;
    static constexpr size_t P = DP + (size_t)TC_WARPS * 16 * LDS * 4;
    static constexpr size_t DS = P + (size_t)TC_WARPS * 16 * LDP * 2;
    static constexpr size_t LSE = DS + (size_t)TC_WARPS * 16 * LDP * 2;
    static constexpr size_t DEL = LSE + BQ * 4;
    static constexpr size_t BYTES = DEL + BQ * 4;
};

/* dq: the block's TC_ROWS query rows with their dout, BK keys and values, S and dP per
 * warp (float), dS per warp (bf16), lse and delta of the rows. */
template <int HD, int BK> struct tc_dq_layout {
    static constexpr int LDH = HD + 8, LDS = BK + 4, LDP = BK + 8;
    static constexpr size_t Q = 0;
    static constexpr size_t DO = Q + (size_t)TC_ROWS * LDH * 2;
    static constexpr size_t K = DO + (size_t)TC_ROWS * LDH * 2;
    static constexpr size_t V = K + (size_t)BK * LDH * 2;
    static constexpr size_t S = V + (size_t)BK * LDH * 2;
    static constexpr size_t DP = S + (size_t)TC_WARPS * 16 * LDS * 4;
    static constexpr size_t DS = DP + (size_t)TC_WARPS * 16 * LDS * 4;
    static constexpr size_t LSE = DS + (size_t)TC_WARPS * 16 * LDP * 2;
    static constexpr size_t DEL = LSE + TC_ROWS * 4;
    static constexpr size_t BYTES = DEL + TC_ROWS * 4;
};

/* Rows [r0, r0 + n) of src (stride ld, hd floats each) into rows [0, rows) of dst (stride
 * ldd) as bf16, rows from n on zero; by the whole block (TC_THREADS), each thread four
 * consecutive columns of every (TC_THREADS / (HD / 4))-th row: float4 loads where rows
 * and src are 16-byte aligned (the model's fused rows are), else four scalar loads. */
template <int HD>
__device__ __forceinline__ void tc_stage(bf16 *dst, int ldd, const float *src, size_t ld, int r0,
                                         int n, int rows, int hd) {
    constexpr int QUADS = HD / 4, RSTEP = TC_THREADS / QUADS;
    int cq = threadIdx.x % QUADS;
    if (4 * cq >= hd) return; /* hd is a multiple of 16, so of 4 */
    bool vec = ld % 4 == 0 && (uintptr_t)src % 16 == 0;
    for (int r = threadIdx.x / QUADS; r < rows; r += RSTEP) {
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n) {
            const float *p = src + (size_t)(r0 + r) * ld + 4 * cq;
            x = vec ? *(const float4 *)p : make_float4(p[0], p[1], p[2], p[3]);
        }
        bf16 *d = dst + r * ldd + 4 * cq;
        d[0] = __float2bfloat16_rn(x.x);
        d[1] = __float2bfloat16_rn(x.y);
        d[2] = __float2bfloat16_rn(x.z);
        d[3] = __float2bfloat16_rn(x.w);
    }
}

/* Writes a warp's 16 x 16 accumulator tile to rows [r0, r0 + 16) (those below rend) of dst
 * (stride ld), each row's values divided by div[row] when div is not NULL, through the
 * warp's float buffer buf (16 rows of stride ldb). */
__device__ __forceinline__ void tc_write_tile(float *dst, size_t ld, int r0, int rend,
                                              const frag_c &f, float *buf, int ldb,
                                              const float *div) {
    int lane = threadIdx.x % 32;
    wmma::store_matrix_sync(buf, f, ldb, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
        int r = e / 16, c = e % 16;
        float x = buf[r * ldb + c];
        if (r0 + r < rend) dst[(size_t)(r0 + r) * ld + c] = div != NULL ? x / div[r] : x;
    }
    __syncwarp(); /* buf is free again */
}

/* The backward's two score products for a warp's 16 rows against N rows of the other
 * side: ss (16, N) = x y^T and dps (16, N) = u w^T, float32, row stride lds. x and u are
 * the warp's rows, y and w the other side's (bf16, stride ldh; nt of the HD / 16 column
 * tiles used). */
template <int HD, int N>
__device__ __forceinline__ void tc_two_products(float *ss, float *dps, int lds, const bf16 *x,
                                                const bf16 *u, const bf16 *y, const bf16 *w,
                                                int ldh, int nt) {
#pragma unroll
    for (int c = 0; c < N / 16; c++) {
        frag_c sf, dpf;
        wmma::fill_fragment(sf, 0.0f);
        wmma::fill_fragment(dpf, 0.0f);
#pragma unroll
        for (int t = 0; t < HD / 16; t++)
            if (t < nt) {
                frag_a xf, uf;
                frag_bt yf, wf;
                wmma::load_matrix_sync(xf, x + t * 16, ldh);
                wmma::load_matrix_sync(uf, u + t * 16, ldh);
                wmma::load_matrix_sync(yf, y + (size_t)c * 16 * ldh + t * 16, ldh);
                wmma::load_matrix_sync(wf, w + (size_t)c * 16 * ldh + t * 16, ldh);
                wmma::mma_sync(sf, xf, yf, sf);
                wmma::mma_sync(dpf, uf, wf, dpf);
            }
        wmma::store_matrix_sync(ss + c * 16, sf, lds, wmma::mem_row_major);
        wmma::store_matrix_sync(dps + c * 16, dpf, lds, wmma::mem_row_major);
    }
}

/* Blocks: TC_ROWS-row tiles of T, heaviest (last, under the causal mask) first, times the
 * (sequence, head) pairs. */
template <int HD, int BK>
__global__ void __launch_bounds__(TC_THREADS)
    att_tc_forward_kernel(att_args a, float *out, float *lse) {
    typedef tc_fwd_layout<HD, BK> L;
    extern __shared__ __align__(128) unsigned char tc_smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bf16 *kv = (bf16 *)(tc_smem + L::KV), *ks = kv, *vs = kv + BK * L::LDH;
    float *ss = (float *)(tc_smem + L::S) + warp * 16 * L::LDS;
    bf16 *ps = (bf16 *)(tc_smem + L::P) + warp * 16 * L::LDP;
    float *rid_s = (float *)(tc_smem + L::RID);
    float *corr_s = (float *)(tc_smem + L::STAT) + warp * 16;
    float *l_s = (float *)(tc_smem + L::STAT) + (TC_WARPS + warp) * 16;
    int T = a.Tq, hd = a.hd, nt = hd / 16, nbh = a.B * a.H;
    int tiles = (T + TC_ROWS - 1) / TC_ROWS;
    int qt = tiles - 1 - (int)(blockIdx.x / nbh), bh = (int)(blockIdx.x % nbh);
    int h = bh % a.H, b = bh / a.H, g = h / (a.H / a.KV);
    int i0 = qt * TC_ROWS, nq = T - i0 < TC_ROWS ? T - i0 : TC_ROWS, wi0 = i0 + 16 * warp;
    const float *qb = a.q + (size_t)b * T * a.ldq + (size_t)h * hd;
    const float *kb = a.k + (size_t)b * T * a.ldkv + (size_t)g * hd;
    const float *vb = a.v + (size_t)b * T * a.ldkv + (size_t)g * hd;

    tc_stage<HD>(kv, L::LDH, qb, a.ldq, i0, nq, TC_ROWS, hd);
    for (int e = threadIdx.x; e < 256; e += blockDim.x)
        rid_s[e] = (float)(e / 16);
    __syncthreads();
    frag_a qf[HD / 16];
    frag_c of[HD / 16], rid;
#pragma unroll
    for (int t = 0; t < HD / 16; t++)
        if (t < nt) {
            wmma::load_matrix_sync(qf[t], kv + (size_t)warp * 16 * L::LDH + t * 16, L::LDH);
            wmma::fill_fragment(of[t], 0.0f);
        }
    wmma::load_matrix_sync(rid, rid_s, 16, wmma::mem_row_major);

    bool live = wi0 < T; /* the warp has rows */
    int r = lane / 2, half = lane % 2, i = wi0 + r, c0 = half * (BK / 2);
    float m = -INFINITY, l = 0.0f;
    int jend = i0 + nq; /* the block's last row sees the keys before it */
    for (int j0 = 0; j0 < jend; j0 += BK) {
        int nk = jend - j0 < BK ? jend - j0 : BK;
        __syncthreads(); /* the previous tile (or Q's staging) is consumed */
        tc_stage<HD>(ks, L::LDH, kb, a.ldkv, j0, nk, BK, hd);
        tc_stage<HD>(vs, L::LDH, vb, a.ldkv, j0, nk, BK, hd);
        __syncthreads();
        if (!live || j0 > wi0 + 15) continue; /* the same for the whole warp */
#pragma unroll
        for (int c = 0; c < BK / 16; c++) { /* S (16, BK) = Q K^T */
            frag_c sf;
            wmma::fill_fragment(sf, 0.0f);
#pragma unroll
            for (int t = 0; t < HD / 16; t++)
                if (t < nt) {
                    frag_bt kf;
                    wmma::load_matrix_sync(kf, ks + (size_t)c * 16 * L::LDH + t * 16, L::LDH);
                    wmma::mma_sync(sf, qf[t], kf, sf);
                }
            wmma::store_matrix_sync(ss + c * 16, sf, L::LDS, wmma::mem_row_major);
        }
        __syncwarp();
        /* Online softmax of row r: lanes 2r and 2r + 1 take half of the columns each. */
        float mt = -INFINITY;
        for (int x = 0; x < BK / 2; x++) {
            int j = j0 + c0 + x;
            float s = j <= i && i < T ? __fmul_rn(ss[r * L::LDS + c0 + x], a.scale) : -INFINITY;
            mt = s > mt ? s : mt;
        }
        float mo = __shfl_xor_sync(CUDA_FULL_MASK, mt, 1);
        mt = mo > mt ? mo : mt;
        float mn = mt > m ? mt : m;
        float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        float psum = 0.0f;
        for (int x = 0; x < BK / 2; x++) {
            int j = j0 + c0 + x;
            float p = 0.0f;
            if (j <= i && i < T) p = expf(__fmul_rn(ss[r * L::LDS + c0 + x], a.scale) - mn);
            psum += p;
            ps[r * L::LDP + c0 + x] = __float2bfloat16_rn(p);
        }
        psum += __shfl_xor_sync(CUDA_FULL_MASK, psum, 1); /* the same sum in both lanes */
        l = l * corr + psum;
        m = mn;
        if (half == 0) corr_s[r] = corr;
        __syncwarp();
#pragma unroll
        for (int t = 0; t < HD / 16; t++)
            if (t < nt)
                for (int e = 0; e < of[t].num_elements; e++)
                    of[t].x[e] *= corr_s[(int)rid.x[e]];
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) { /* O += P V */
            frag_a pf;
            wmma::load_matrix_sync(pf, ps + kk * 16, L::LDP);
#pragma unroll
            for (int t = 0; t < HD / 16; t++)
                if (t < nt) {
                    frag_b vf;
                    wmma::load_matrix_sync(vf, vs + (size_t)kk * 16 * L::LDH + t * 16, L::LDH);
                    wmma::mma_sync(of[t], pf, vf, of[t]);
                }
        }
    }
    if (!live) return; /* no block barrier follows */
    if (half == 0) {
        l_s[r] = l;
        if (i < T) lse[(size_t)bh * T + i] = m + logf(l);
    }
    __syncwarp();
    size_t ldo = (size_t)a.H * hd;
    float *ob = out + (size_t)b * T * ldo + (size_t)h * hd;
#pragma unroll
    for (int t = 0; t < HD / 16; t++)
        if (t < nt) tc_write_tile(ob + t * 16, ldo, wi0, T, of[t], ss, L::LDS, l_s);
}

/* delta of (row n = b T + i, head h) = sum over hd of dout * out, in double, parked at
 * dq[n ld + h hd]; one warp per (row, head), r = n H + h. */
__global__ void att_tc_delta_kernel(float *dq, const float *dout, const float *out, int ld,
                                    size_t rows, int H, int hd) {
    size_t r = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *d = dout + r * hd, *o = out + r * hd;
    double s = 0.0;
    for (int x = lane; x < hd; x += 32)
        s += (double)d[x] * o[x];
    s = cuda_warp_sum(s);
    if (lane == 0) dq[r / H * ld + r % H * hd] = (float)s;
}

/* Where the dk/dv kernel writes: dk and dv (row stride ld, kv head g at column g hd) when
 * the group's query heads are not split (slices 1), else slice s's partial sums at
 * dk + s sstride (and dv's), summed by att_tc_slices_kernel. */
typedef struct tc_dkdv_out {
    float *dk, *dv;
    size_t ld, sstride;
    int slices; /* the group's query heads in this many slices, one block each */
} tc_dkdv_out;

/* dk, dv of TC_ROWS keys of (b, g), 16 per warp: sums over the query heads of the block's
 * slice of the group in order and over the query tiles (BQ rows) from the block's first
 * key on. Blocks: key tiles in order (the first ones are the heaviest) times (b, g, slice). */
template <int HD, int BQ>
__global__ void __launch_bounds__(TC_THREADS)
    att_tc_dkdv_kernel(att_args a, tc_dkdv_out o, const float *dq_park, const float *dout,
                       const float *lse) {
    typedef tc_dkdv_layout<HD, BQ> L;
    extern __shared__ __align__(128) unsigned char tc_smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bf16 *ks = (bf16 *)(tc_smem + L::K), *vs = (bf16 *)(tc_smem + L::V);
    bf16 *qs = (bf16 *)(tc_smem + L::Q), *dos = (bf16 *)(tc_smem + L::DO);
    float *ss = (float *)(tc_smem + L::S) + warp * 16 * L::LDS;
    float *dps = (float *)(tc_smem + L::DP) + warp * 16 * L::LDS;
    bf16 *ps = (bf16 *)(tc_smem + L::P) + warp * 16 * L::LDP;
    bf16 *dss = (bf16 *)(tc_smem + L::DS) + warp * 16 * L::LDP;
    float *lse_s = (float *)(tc_smem + L::LSE), *del_s = (float *)(tc_smem + L::DEL);
    int T = a.Tq, hd = a.hd, nt = hd / 16, nbg = a.B * a.KV * o.slices;
    int per = a.H / a.KV / o.slices; /* query heads per slice */
    int j0b = (int)(blockIdx.x / nbg) * TC_ROWS, bgs = (int)(blockIdx.x % nbg);
    int sl = bgs % o.slices, bg = bgs / o.slices;
    int g = bg % a.KV, b = bg / a.KV, wj0 = j0b + 16 * warp;
    int h0 = g * (a.H / a.KV) + sl * per;
    int nk = T - j0b < TC_ROWS ? T - j0b : TC_ROWS;
    size_t ldo = (size_t)a.H * hd;
    tc_stage<HD>(ks, L::LDH, a.k + (size_t)b * T * a.ldkv + (size_t)g * hd, a.ldkv, j0b, nk,
                 TC_ROWS, hd);
    tc_stage<HD>(vs, L::LDH, a.v + (size_t)b * T * a.ldkv + (size_t)g * hd, a.ldkv, j0b, nk,
                 TC_ROWS, hd);
    frag_c dkf[HD / 16], dvf[HD / 16];
#pragma unroll
    for (int t = 0; t < HD / 16; t++)
        if (t < nt) {
            wmma::fill_fragment(dkf[t], 0.0f);
            wmma::fill_fragment(dvf[t], 0.0f);
        }
    bool live = wj0 < T;
    const bf16 *kw = ks + (size_t)warp * 16 * L::LDH, *vw = vs + (size_t)warp * 16 * L::LDH;
    for (int h = h0; h < h0 + per; h++) {
        const float *qb = a.q + (size_t)b * T * a.ldq + (size_t)h * hd;
        const float *db = dout + (size_t)b * T * ldo + (size_t)h * hd;
        const float *lb = lse + ((size_t)b * a.H + h) * T;
        for (int i0 = j0b; i0 < T; i0 += BQ) { /* rows before j0b see none of the keys */
            int nq = T - i0 < BQ ? T - i0 : BQ;
            __syncthreads(); /* the previous tile is consumed */
            tc_stage<HD>(qs, L::LDH, qb, a.ldq, i0, nq, BQ, hd);
            tc_stage<HD>(dos, L::LDH, db, ldo, i0, nq, BQ, hd);
            for (int e = threadIdx.x; e < BQ; e += blockDim.x) {
                int i = i0 + e;
                lse_s[e] = i < T ? lb[i] : 0.0f;
                del_s[e] = i < T ? dq_park[((size_t)b * T + i) * a.ldq + (size_t)h * hd] : 0.0f;
            }
            __syncthreads();
            if (!live || i0 + BQ - 1 < wj0) continue; /* the same for the whole warp */
            /* S^T = K Q^T, dP^T = V dout^T (16, BQ) */
            tc_two_products<HD, BQ>(ss, dps, L::LDS, kw, vw, qs, dos, L::LDH, nt);
            __syncwarp();
            for (int e = lane; e < 16 * BQ; e += 32) {
                int rr = e / BQ, cc = e % BQ, j = wj0 + rr, i = i0 + cc;
                float p = 0.0f, ds = 0.0f;
                if (i < T && i >= j) {
                    p = expf(__fsub_rn(__fmul_rn(ss[rr * L::LDS + cc], a.scale), lse_s[cc]));
                    ds = p * (dps[rr * L::LDS + cc] - del_s[cc]) * a.scale;
                }
                ps[rr * L::LDP + cc] = __float2bfloat16_rn(p);
                dss[rr * L::LDP + cc] = __float2bfloat16_rn(ds);
            }
            __syncwarp();
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++) { /* dv += P^T dout, dk += dS^T q */
                frag_a pf, dsf;
                wmma::load_matrix_sync(pf, ps + kk * 16, L::LDP);
                wmma::load_matrix_sync(dsf, dss + kk * 16, L::LDP);
#pragma unroll
                for (int t = 0; t < HD / 16; t++)
                    if (t < nt) {
                        frag_b df, qf;
                        wmma::load_matrix_sync(df, dos + (size_t)kk * 16 * L::LDH + t * 16, L::LDH);
                        wmma::load_matrix_sync(qf, qs + (size_t)kk * 16 * L::LDH + t * 16, L::LDH);
                        wmma::mma_sync(dvf[t], pf, df, dvf[t]);
                        wmma::mma_sync(dkf[t], dsf, qf, dkf[t]);
                    }
            }
        }
    }
    if (!live) return;
    size_t at = (size_t)sl * o.sstride + (size_t)b * T * o.ld + (size_t)g * hd;
    float *dkb = o.dk + at, *dvb = o.dv + at;
#pragma unroll
    for (int t = 0; t < HD / 16; t++)
        if (t < nt) {
            tc_write_tile(dkb + t * 16, o.ld, wj0, T, dkf[t], ss, L::LDS, NULL);
            tc_write_tile(dvb + t * 16, o.ld, wj0, T, dvf[t], ss, L::LDS, NULL);
        }
}

/* dk, dv (row stride ldkv) = the sum of the slices' partial sums (part: slices blocks of
 * sstride floats, row stride KV hd; dv's follow dk's at vpart), in slice order. */
__global__ void att_tc_slices_kernel(float *dk, float *dv, int ldkv, const float *part,
                                     const float *vpart, size_t sstride, int slices, size_t rows,
                                     int w) {
    size_t n = rows * (size_t)w;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / (size_t)w, x = e % (size_t)w;
        float sk = 0.0f, sv = 0.0f;
        for (int s = 0; s < slices; s++) {
            sk += part[(size_t)s * sstride + e];
            sv += vpart[(size_t)s * sstride + e];
        }
        dk[r * ldkv + x] = sk;
        dv[r * ldkv + x] = sv;
    }
}

/* dq of TC_ROWS query rows of (b, h), 16 per warp, over the keys up to the causal bound
 * in tiles of BK. delta is read from where it is parked in dq before any dq is written
 * (the block writes only its own rows' slices, after its last barrier). Blocks: the
 * heaviest row tiles first, times (b, h). */
template <int HD, int BK>
__global__ void __launch_bounds__(TC_THREADS)
    att_tc_dq_kernel(att_args a, float *dq, const float *dout, const float *lse) {
    typedef tc_dq_layout<HD, BK> L;
    extern __shared__ __align__(128) unsigned char tc_smem[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bf16 *qs = (bf16 *)(tc_smem + L::Q), *dos = (bf16 *)(tc_smem + L::DO);
    bf16 *ks = (bf16 *)(tc_smem + L::K), *vs = (bf16 *)(tc_smem + L::V);
    float *ss = (float *)(tc_smem + L::S) + warp * 16 * L::LDS;
    float *dps = (float *)(tc_smem + L::DP) + warp * 16 * L::LDS;
    bf16 *dss = (bf16 *)(tc_smem + L::DS) + warp * 16 * L::LDP;
    float *lse_s = (float *)(tc_smem + L::LSE), *del_s = (float *)(tc_smem + L::DEL);
    int T = a.Tq, hd = a.hd, nt = hd / 16, nbh = a.B * a.H;
    int tiles = (T + TC_ROWS - 1) / TC_ROWS;
    int qt = tiles - 1 - (int)(blockIdx.x / nbh), bh = (int)(blockIdx.x % nbh);
    int h = bh % a.H, b = bh / a.H, g = h / (a.H / a.KV);
    int i0 = qt * TC_ROWS, nq = T - i0 < TC_ROWS ? T - i0 : TC_ROWS, wi0 = i0 + 16 * warp;
    size_t ldo = (size_t)a.H * hd;
    float *dqb = dq + (size_t)b * T * a.ldq + (size_t)h * hd;
    const float *kb = a.k + (size_t)b * T * a.ldkv + (size_t)g * hd;
    const float *vb = a.v + (size_t)b * T * a.ldkv + (size_t)g * hd;
    tc_stage<HD>(qs, L::LDH, a.q + (size_t)b * T * a.ldq + (size_t)h * hd, a.ldq, i0, nq, TC_ROWS,
                 hd);
    tc_stage<HD>(dos, L::LDH, dout + (size_t)b * T * ldo + (size_t)h * hd, ldo, i0, nq, TC_ROWS,
                 hd);
    for (int e = threadIdx.x; e < TC_ROWS; e += blockDim.x) {
        int i = i0 + e;
        lse_s[e] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        del_s[e] = i < T ? dqb[(size_t)i * a.ldq] : 0.0f;
    }
    frag_c dqf[HD / 16];
#pragma unroll
    for (int t = 0; t < HD / 16; t++)
        if (t < nt) wmma::fill_fragment(dqf[t], 0.0f);
    bool live = wi0 < T;
    const bf16 *qw = qs + (size_t)warp * 16 * L::LDH, *dw = dos + (size_t)warp * 16 * L::LDH;
    const float *lw = lse_s + warp * 16, *delw = del_s + warp * 16;
    int jend = i0 + nq;
    for (int j0 = 0; j0 < jend; j0 += BK) { /* at least one tile: every block's barriers */
        int nk = jend - j0 < BK ? jend - j0 : BK;
        __syncthreads(); /* the previous tile is consumed (and the rows' staging done) */
        tc_stage<HD>(ks, L::LDH, kb, a.ldkv, j0, nk, BK, hd);
        tc_stage<HD>(vs, L::LDH, vb, a.ldkv, j0, nk, BK, hd);
        __syncthreads();
        if (!live || j0 > wi0 + 15) continue; /* the same for the whole warp */
        /* S = Q K^T, dP = dout V^T (16, BK) */
        tc_two_products<HD, BK>(ss, dps, L::LDS, qw, dw, ks, vs, L::LDH, nt);
        __syncwarp();
        for (int e = lane; e < 16 * BK; e += 32) {
            int rr = e / BK, cc = e % BK, i = wi0 + rr, j = j0 + cc;
            float ds = 0.0f;
            if (i < T && j <= i) {
                float p = expf(__fsub_rn(__fmul_rn(ss[rr * L::LDS + cc], a.scale), lw[rr]));
                ds = p * (dps[rr * L::LDS + cc] - delw[rr]) * a.scale;
            }
            dss[rr * L::LDP + cc] = __float2bfloat16_rn(ds);
        }
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) { /* dq += dS k */
            frag_a dsf;
            wmma::load_matrix_sync(dsf, dss + kk * 16, L::LDP);
#pragma unroll
            for (int t = 0; t < HD / 16; t++)
                if (t < nt) {
                    frag_b kf;
                    wmma::load_matrix_sync(kf, ks + (size_t)kk * 16 * L::LDH + t * 16, L::LDH);
                    wmma::mma_sync(dqf[t], dsf, kf, dqf[t]);
                }
        }
    }
    if (!live) return;
#pragma unroll
    for (int t = 0; t < HD / 16; t++)
        if (t < nt) tc_write_tile(dqb + t * 16, a.ldq, wi0, T, dqf[t], ss, L::LDS, NULL);
}

int att_tc_takes(const cuda_ctx *c, backend_prec prec, const float *att, int hd) {
    return prec != BACKEND_PREC_FP32 && att == NULL && hd % 16 == 0 && hd > 0 &&
           hd <= ATT_TC_MAXHD && !c->att_fp32;
}

int cuda_attention_tensor_cores(backend *be, backend_prec prec, int hd) {
    return att_tc_takes(cuda_ctx_of(be), prec, NULL, hd);
}

unsigned cuda_attention_dkdv_blocks(backend *be, unsigned blocks) {
    cuda_ctx *c = cuda_ctx_of(be);
    unsigned was = c->att_dkdv_blocks;
    c->att_dkdv_blocks = blocks;
    return was;
}

/* Raises kernel k's dynamic shared memory limit to bytes (above the default 48 KB). */
template <typename K> static int tc_smem(cuda_ctx *c, K *k, size_t bytes, const char *what) {
    cudaError_t e =
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    cuda_check(c, e, what);
    return e == cudaSuccess;
}

template <int HD, int BK> static void tc_forward(cuda_ctx *c, att_args a, float *out, float *lse) {
    size_t bytes = tc_fwd_layout<HD, BK>::BYTES;
    unsigned n = (unsigned)((size_t)a.B * a.H * ((a.Tq + TC_ROWS - 1) / TC_ROWS));
    if (!tc_smem(c, att_tc_forward_kernel<HD, BK>, bytes, "att_tc_forward_kernel (smem)")) return;
    att_tc_forward_kernel<HD, BK><<<n, TC_THREADS, bytes, c->stream>>>(a, out, lse);
    CUDA_LAUNCHED(c, "att_tc_forward_kernel");
}

/* Under grouped-query attention the dk/dv kernel's blocks, one per (key tile, sequence, kv
 * head), each loop over the group's query heads: few blocks, the first key tile's doing
 * rep times the causal triangle's longest row alone (the 1.1B benchmark model, 4 kv heads
 * of 8 query heads, at 4K: 256 blocks, the longest 512 tile steps against 63 per block
 * slot on average). So the group splits into the fewest slices (a divisor of rep) that
 * give c->att_dkdv_blocks (1024) blocks, each writing partial sums that a second kernel adds in
 * slice order: a function of the shapes alone, so results stay the same run to run. */
static int tc_dkdv_slices(const cuda_ctx *c, const att_args *a, unsigned tiles) {
    int rep = a->H / a->KV, s = 1;
    size_t blocks = (size_t)tiles * a->B * a->KV;
    while (s < rep && blocks * s < c->att_dkdv_blocks) {
        s++;
        while (rep % s != 0) /* ends at rep */
            s++;
    }
    return s;
}

/* The slices' partial sums: c->att_part, grown to floats by a stream-ordered free and
 * allocation on the backend's stream (cudaFreeAsync, cudaMallocAsync; the old contents are
 * not kept): cudaFree and cudaMalloc would synchronize the device in the middle of a
 * backward, waiting with no deadline behind NCCL kernels in flight on other streams. */
static float *tc_part(cuda_ctx *c, size_t floats) {
    if (c->att_part_floats >= floats) return c->att_part;
    if (c->att_part) cudaFreeAsync(c->att_part, c->stream);
    c->att_part = NULL, c->att_part_floats = 0;
    cudaError_t e = cudaMallocAsync((void **)&c->att_part, floats * sizeof(float), c->stream);
    cuda_check(c, e, "attention backward: cudaMallocAsync of the dk/dv slices");
    if (e != cudaSuccess) return c->att_part = NULL;
    c->att_part_floats = floats;
    return c->att_part;
}

template <int HD, int BQ>
static void tc_dkdv(cuda_ctx *c, att_args a, unsigned tiles, float *dk, float *dv,
                    const float *dq_park, const float *dout, const float *lse, size_t bytes) {
    int S = tc_dkdv_slices(c, &a, tiles);
    size_t rows = (size_t)a.B * a.Tq, w = (size_t)a.KV * a.hd, sstride = rows * w;
    tc_dkdv_out o = {dk, dv, (size_t)a.ldkv, 0, 1};
    float *part = S > 1 ? tc_part(c, 2 * (size_t)S * sstride) : NULL;
    if (S > 1 && part == NULL) return; /* recorded */
    if (S > 1) o = {part, part + (size_t)S * sstride, w, sstride, S};
    att_tc_dkdv_kernel<HD, BQ>
        <<<tiles * a.B * a.KV * S, TC_THREADS, bytes, c->stream>>>(a, o, dq_park, dout, lse);
    CUDA_LAUNCHED(c, "att_tc_dkdv_kernel");
    if (S == 1) return;
    unsigned n = (unsigned)((rows * w + 255) / 256 < 65535 ? (rows * w + 255) / 256 : 65535);
    att_tc_slices_kernel<<<n, 256, 0, c->stream>>>(dk, dv, a.ldkv, o.dk, o.dv, sstride, S, rows,
                                                   (int)w);
    CUDA_LAUNCHED(c, "att_tc_slices_kernel");
}

template <int HD, int BQ, int BK>
static void tc_backward(cuda_ctx *c, att_args a, float *dq, float *dk, float *dv, const float *dout,
                        const float *lse) {
    size_t b1 = tc_dkdv_layout<HD, BQ>::BYTES, b2 = tc_dq_layout<HD, BK>::BYTES;
    unsigned tiles = (unsigned)((a.Tq + TC_ROWS - 1) / TC_ROWS);
    if (!tc_smem(c, att_tc_dkdv_kernel<HD, BQ>, b1, "att_tc_dkdv_kernel (smem)") ||
        !tc_smem(c, att_tc_dq_kernel<HD, BK>, b2, "att_tc_dq_kernel (smem)"))
        return;
    tc_dkdv<HD, BQ>(c, a, tiles, dk, dv, dq, dout, lse, b1);
    att_tc_dq_kernel<HD, BK><<<tiles * a.B * a.H, TC_THREADS, b2, c->stream>>>(a, dq, dout, lse);
    CUDA_LAUNCHED(c, "att_tc_dq_kernel");
}

void att_tc_forward(cuda_ctx *c, att_args a, float *out, float *lse) {
    if (a.hd <= 64)
        tc_forward<64, 64>(c, a, out, lse);
    else
        tc_forward<128, 64>(c, a, out, lse);
}

void att_tc_backward(cuda_ctx *c, att_args a, float *dq, float *dk, float *dv, const float *dout,
                     const float *out, const float *lse) {
    size_t rows = (size_t)a.B * a.Tq * a.H;
    att_tc_delta_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, c->stream>>>(dq, dout, out, a.ldq,
                                                                           rows, a.H, a.hd);
    CUDA_LAUNCHED(c, "att_tc_delta_kernel");
    if (a.hd <= 64)
        tc_backward<64, 64, 64>(c, a, dq, dk, dv, dout, lse);
    else
        tc_backward<128, 32, 32>(c, a, dq, dk, dv, dout, lse);
}
