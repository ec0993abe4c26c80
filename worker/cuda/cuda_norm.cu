/* RMSNorm and rotary embedding on the GPU.
 *
 * Rules: backward ops accumulate (+=) into parameter gradients and write (=) activation
 * gradients. A row's reductions (sum of squares, the backward's dot product) run in one
 * block per row, in double, over a fixed tree. The weight gradient is a column sum over
 * all rows: a block takes 32 columns, its 32 warps take every 32nd row each, and the 32
 * partial sums are added in warp order: a fixed order, no atomics. (With 8 warps, a block
 * per 32 columns kept too few loads in flight: at C 2048 one block on each of 64 SMs.) */
#include "cuda_internal.cuh"

#define NORM_THREADS 256
#define DW_ROWS      32 /* row groups (warps) of the weight-gradient kernel */

/* One block per row: rstd = 1 / sqrt(mean(x^2) + eps); out = x * rstd * weight. */
__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp,
                                       const float *weight, int C, float eps) {
    __shared__ double sh[NORM_THREADS];
    size_t n = blockIdx.x;
    const float *x = inp + n * C;
    double ss = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        ss += (double)x[c] * (double)x[c];
    ss = cuda_block_sum(ss, sh);
    float r = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        out[n * C + c] = x[c] * r * weight[c];
    if (threadIdx.x == 0) rstd[n] = r;
}

/* dinp = r * (g - x * r^2 * mean(g * x)), g = weight * dout; one block per row. */
__global__ void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                             const float *weight, const float *rstd, int C) {
    __shared__ double sh[NORM_THREADS];
    size_t n = blockIdx.x;
    const float *x = inp + n * C, *dy = dout + n * C;
    double dot = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dot += (double)(weight[c] * dy[c]) * (double)x[c];
    dot = cuda_block_sum(dot, sh);
    float r = rstd[n];
    float k = (float)(dot / C) * r * r;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dinp[n * C + c] = r * (weight[c] * dy[c] - x[c] * k);
}

/* dweight[c] += sum over rows of dout * x * r; block (32, DW_ROWS) per 32 columns. */
__global__ void rmsnorm_backward_dweight_kernel(float *dweight, const float *dout, const float *inp,
                                                const float *rstd, int N, int C) {
    __shared__ float sh[DW_ROWS][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C)
        for (int n = threadIdx.y; n < N; n += DW_ROWS)
            acc += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        for (int r = 0; r < DW_ROWS; r++)
            s += sh[r][threadIdx.x];
        dweight[c] += s;
    }
}

/* One thread per pair (i, i + hd/2) of a head of a row; sign +1 forward, -1 backward (the
 * transposed rotation). out may alias inp: each thread reads its pair before writing it. */
__global__ void rope_kernel(float *out, const float *inp, const float *cos, const float *sin, int T,
                            int nh, int hd, int ld, size_t total, float sign) {
    int half = hd / 2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / ((size_t)nh * half);
        int rem = (int)(i % ((size_t)nh * half));
        int h = rem / half, j = rem % half;
        size_t off = n * ld + (size_t)h * hd;
        size_t t = n % T;
        float cs = cos[t * half + j], sn = sign * sin[t * half + j];
        float x0 = inp[off + j], x1 = inp[off + j + half];
        out[off + j] = x0 * cs - x1 * sn;
        out[off + j + half] = x1 * cs + x0 * sn;
    }
}

void cuda_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N == 0) return;
    rmsnorm_forward_kernel<<<N, NORM_THREADS, 0, c->stream>>>(out, rstd, inp, weight, C, eps);
    CUDA_LAUNCHED(c, "rmsnorm_forward_kernel");
}

void cuda_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                           const float *inp, const float *weight, const float *rstd, int N, int C) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N == 0) return;
    rmsnorm_backward_dinp_kernel<<<N, NORM_THREADS, 0, c->stream>>>(dinp, dout, inp, weight, rstd,
                                                                    C);
    CUDA_LAUNCHED(c, "rmsnorm_backward_dinp_kernel");
    dim3 block(32, DW_ROWS);
    rmsnorm_backward_dweight_kernel<<<(C + 31) / 32, block, 0, c->stream>>>(dweight, dout, inp,
                                                                            rstd, N, C);
    CUDA_LAUNCHED(c, "rmsnorm_backward_dweight_kernel");
}

static void rope_launch(backend *be, float *out, const float *inp, const float *cos,
                        const float *sin, int B, int T, int nh, int hd, int ld, float sign) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t total = (size_t)B * T * nh * (hd / 2);
    if (total == 0) return;
    rope_kernel<<<cuda_grid(total, 256), 256, 0, c->stream>>>(out, inp, cos, sin, T, nh, hd, ld,
                                                              total, sign);
    CUDA_LAUNCHED(c, "rope_kernel");
}

void cuda_rope_forward(backend *be, float *out, const float *inp, const float *cos,
                       const float *sin, int B, int T, int nh, int hd, int ld) {
    rope_launch(be, out, inp, cos, sin, B, T, nh, hd, ld, 1.0f);
}

void cuda_rope_backward(backend *be, float *dinp, const float *dout, const float *cos,
                        const float *sin, int B, int T, int nh, int hd, int ld) {
    rope_launch(be, dinp, dout, cos, sin, B, T, nh, hd, ld, -1.0f);
}
