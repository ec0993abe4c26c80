/* Elementwise CUDA operations: fill, add, scale, 2-D copy, sum of squares and SwiGLU
 * (the embedding lookup is cuda_embedding.cu's).
 *
 * Rules: backward ops write (=) activation gradients. The sum of squares reduces over a
 * fixed grid, then the partials in a fixed tree, in double. Launchers take the backend,
 * queue on its stream and check the launch. */
#include "cuda_internal.cuh"

#define EW_THREADS 256

__global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float *x, float s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* Each block sums a strided share of x into part[blockIdx.x]. */
__global__ void sumsq_part_kernel(double *part, const float *x, size_t n) {
    __shared__ double sh[CUDA_SUMSQ_THREADS];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc += (double)x[i] * (double)x[i];
    acc = cuda_block_sum(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* *dst = the sum of the CUDA_SUMSQ_BLOCKS partials, in a fixed tree. */
__global__ void sumsq_final_kernel(const double *part, double *dst) {
    __shared__ double sh[CUDA_SUMSQ_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < CUDA_SUMSQ_BLOCKS; i += blockDim.x)
        acc += part[i];
    acc = cuda_block_sum(acc, sh);
    if (threadIdx.x == 0) *dst = acc;
}

/* *total += seg[i] for i < n in order, one thread: the host's loop over segments. */
__global__ void sumsq_add_kernel(double *total, const double *seg, int n) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double t = *total;
    for (int i = 0; i < n; i++)
        t += seg[i];
    *total = t;
}

__device__ __forceinline__ float sigmoid_dev(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__global__ void swiglu_forward_kernel(float *out, const float *inp, int N, int F) {
    size_t total = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / F, f = i % F;
        float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
        out[i] = g * sigmoid_dev(g) * u;
    }
}

/* d up = dout * silu(gate); d gate = dout * up * s * (1 + gate * (1 - s)), s = sigmoid. */
__global__ void swiglu_backward_kernel(float *dinp, const float *dout, const float *inp, int N,
                                       int F) {
    size_t total = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / F, f = i % F;
        float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], d = dout[i];
        float s = sigmoid_dev(g);
        dinp[n * 2 * F + F + f] = d * g * s;
        dinp[n * 2 * F + f] = d * u * s * (1.0f + g * (1.0f - s));
    }
}

void cuda_zero(backend *be, float *x, size_t n) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (n == 0) return;
    cuda_check(c, cudaMemsetAsync(x, 0, n * sizeof *x, c->stream), "zero: cudaMemsetAsync");
}

void cuda_add(backend *be, float *out, const float *a, const float *b, size_t n) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (n == 0) return;
    add_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(out, a, b, n);
    CUDA_LAUNCHED(c, "add_kernel");
}

void cuda_scale(backend *be, float *x, float s, size_t n) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (n == 0) return;
    scale_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(x, s, n);
    CUDA_LAUNCHED(c, "scale_kernel");
}

void cuda_copy2d(backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                 size_t width) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (rows == 0 || width == 0) return;
    cuda_check(c,
               cudaMemcpy2DAsync(dst, ldd * sizeof(float), src, lds * sizeof(float),
                                 width * sizeof(float), rows, cudaMemcpyDeviceToDevice, c->stream),
               "copy2d: cudaMemcpy2DAsync");
}

double cuda_sumsq(backend *be, const float *x, size_t n) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (n == 0) return 0.0;
    sumsq_part_kernel<<<CUDA_SUMSQ_BLOCKS, CUDA_SUMSQ_THREADS, 0, c->stream>>>(c->sumsq_part, x, n);
    CUDA_LAUNCHED(c, "sumsq_part_kernel");
    sumsq_final_kernel<<<1, CUDA_SUMSQ_THREADS, 0, c->stream>>>(c->sumsq_part,
                                                                c->sumsq_part + CUDA_SUMSQ_BLOCKS);
    CUDA_LAUNCHED(c, "sumsq_final_kernel");
    cuda_check(c,
               cudaMemcpyAsync(c->sumsq_host, c->sumsq_part + CUDA_SUMSQ_BLOCKS, sizeof(double),
                               cudaMemcpyDeviceToHost, c->stream),
               "sumsq: cudaMemcpyAsync");
    cuda_check(c, cudaStreamSynchronize(c->stream), "sumsq: cudaStreamSynchronize");
    return c->err ? 0.0 : *c->sumsq_host;
}

/* Each segment's total as cuda_sumsq computes it into the batch's slots, the batch added
 * in order to the running total; one copy to the host at the end. */
double cuda_sumsq_segs(backend *be, const float *x, const backend_seg *segs, size_t nseg) {
    cuda_ctx *c = cuda_ctx_of(be);
    double *total = c->sumsq_seg + CUDA_SUMSQ_SEGS;
    cuda_check(c, cudaMemsetAsync(total, 0, sizeof *total, c->stream), "sumsq_segs: reset");
    for (size_t s0 = 0; s0 < nseg; s0 += CUDA_SUMSQ_SEGS) {
        int nb = (int)(nseg - s0 < CUDA_SUMSQ_SEGS ? nseg - s0 : CUDA_SUMSQ_SEGS);
        for (int i = 0; i < nb; i++) {
            const backend_seg *g = &segs[s0 + (size_t)i];
            if (g->n == 0) {
                cuda_check(c, cudaMemsetAsync(c->sumsq_seg + i, 0, sizeof(double), c->stream),
                           "sumsq_segs: empty segment");
                continue;
            }
            sumsq_part_kernel<<<CUDA_SUMSQ_BLOCKS, CUDA_SUMSQ_THREADS, 0, c->stream>>>(
                c->sumsq_part, x + g->offset, g->n);
            sumsq_final_kernel<<<1, CUDA_SUMSQ_THREADS, 0, c->stream>>>(c->sumsq_part,
                                                                        c->sumsq_seg + i);
        }
        sumsq_add_kernel<<<1, 1, 0, c->stream>>>(total, c->sumsq_seg, nb);
        CUDA_LAUNCHED(c, "sumsq_segs kernels");
    }
    cuda_check(
        c, cudaMemcpyAsync(c->sumsq_host, total, sizeof(double), cudaMemcpyDeviceToHost, c->stream),
        "sumsq_segs: cudaMemcpyAsync");
    cuda_check(c, cudaStreamSynchronize(c->stream), "sumsq_segs: cudaStreamSynchronize");
    return c->err ? 0.0 : *c->sumsq_host;
}

void cuda_swiglu_forward(backend *be, float *out, const float *inp, int N, int F) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t n = (size_t)N * F;
    if (n == 0) return;
    swiglu_forward_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(out, inp, N, F);
    CUDA_LAUNCHED(c, "swiglu_forward_kernel");
}

void cuda_swiglu_backward(backend *be, float *dinp, const float *dout, const float *inp, int N,
                          int F) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t n = (size_t)N * F;
    if (n == 0) return;
    swiglu_backward_kernel<<<cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(dinp, dout, inp,
                                                                                   N, F);
    CUDA_LAUNCHED(c, "swiglu_backward_kernel");
}
