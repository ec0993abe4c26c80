/* The elementwise pieces of ring attention on the GPU (the block-pair kernels are in
 * cuda_attention.cu): merging a block's partial output into the running one by their
 * log-sum-exps, and the backward's row term delta = rowsum(dout * out). Same arithmetic
 * as cpu_attention_part.c; one thread (merge) or one warp (delta) per row and head. */
#include <math.h>

#include "cuda_internal.cuh"

/* One thread per (b, h, t): l = logaddexp(lse, lse2), out = out e^(lse - l) + out2 e^(lse2 - l). */
__global__ void att_merge_kernel(float *out, float *lse, const float *out2, const float *lse2,
                                 int B, int T, int H, int hd) {
    size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (r >= (size_t)B * H * T) return;
    int t = (int)(r % T), h = (int)(r / T % H), b = (int)(r / T / H);
    float l1 = lse[r], l2 = lse2[r];
    if (l2 == -INFINITY) return;
    float *o1 = out + ((size_t)b * T + t) * H * hd + (size_t)h * hd;
    const float *o2 = out2 + ((size_t)b * T + t) * H * hd + (size_t)h * hd;
    float m = l1 > l2 ? l1 : l2;
    float l = m + log1pf(expf(-fabsf(l1 - l2)));
    float w1 = l1 == -INFINITY ? 0.0f : expf(l1 - l), w2 = expf(l2 - l);
    for (int d = 0; d < hd; d++)
        o1[d] = o1[d] * w1 + o2[d] * w2;
    lse[r] = l;
}

/* One warp per (b, h, t): delta = sum over hd of dout * out, in double. */
__global__ void att_rowdelta_kernel(float *delta, const float *dout, const float *out, int B, int T,
                                    int H, int hd) {
    size_t r = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= (size_t)B * H * T) return;
    int t = (int)(r % T), h = (int)(r / T % H), b = (int)(r / T / H);
    size_t off = ((size_t)b * T + t) * H * hd + (size_t)h * hd;
    double s = 0.0;
    for (int d = lane; d < hd; d += 32)
        s += (double)dout[off + d] * out[off + d];
    s = cuda_warp_sum(s);
    if (lane == 0) delta[r] = (float)s;
}

void cuda_attention_merge(backend *be, float *out, float *lse, const float *out2, const float *lse2,
                          int B, int T, int H, int hd) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t rows = (size_t)B * H * T;
    if (rows == 0) return;
    att_merge_kernel<<<(unsigned)((rows + 127) / 128), 128, 0, c->stream>>>(out, lse, out2, lse2, B,
                                                                            T, H, hd);
    CUDA_LAUNCHED(c, "att_merge_kernel");
}

void cuda_attention_delta(backend *be, float *delta, const float *dout, const float *out, int B,
                          int T, int H, int hd) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t rows = (size_t)B * H * T;
    if (rows == 0) return;
    att_rowdelta_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, c->stream>>>(delta, dout, out, B, T,
                                                                           H, hd);
    CUDA_LAUNCHED(c, "att_rowdelta_kernel");
}
