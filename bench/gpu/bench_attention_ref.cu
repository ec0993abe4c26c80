/* The reference path bench_gpu measures baton's attention kernel against: causal attention
 * as cuBLAS would do it without a fused kernel — S = Q K^T per head (a strided batched
 * float32 GEMM, CUBLAS_COMPUTE_32F, the precision of baton's kernel), a row softmax with
 * the causal mask in place over S (B*H*T*T floats in memory), then O = P V. Forward only:
 * the figure compared is forward TFLOP/s. Dense q, k, v of (B*T, H*hd), no GQA. It runs on
 * the stream the caller gives (bench_gpu: the CUDA backend's own, where baton's kernels
 * run) and is timed by events on it, as bench_gpu times baton's kernels (bench_timer): the
 * same queue and the same clock for both sides of the comparison. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>

#include "bench_gpu.h"

/* One block per row of S: softmax over keys 0..i (scaled), zero above the diagonal. */
__global__ void ref_softmax_kernel(float *S, int T, float scale) {
    __shared__ float sh[256];
    size_t row = blockIdx.x;
    int i = (int)(row % T);
    float *s = S + row * T;
    float m = -INFINITY;
    for (int j = threadIdx.x; j <= i; j += blockDim.x)
        m = fmaxf(m, s[j] * scale);
    sh[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    m = sh[0];
    __syncthreads();
    float sum = 0.0f;
    for (int j = threadIdx.x; j <= i; j += blockDim.x)
        sum += expf(s[j] * scale - m);
    sh[threadIdx.x] = sum;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    float inv = 1.0f / sh[0];
    for (int j = threadIdx.x; j < T; j += blockDim.x)
        s[j] = j <= i ? expf(s[j] * scale - m) * inv : 0.0f;
}

extern "C" int bench_timer_start(bench_timer *t, void *stream) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    t->start = t->stop = NULL, t->stream = stream;
    if (cudaEventCreate(&e0) != cudaSuccess) return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    if (cudaEventRecord(e0, (cudaStream_t)stream) != cudaSuccess) {
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        return -1;
    }
    t->start = e0, t->stop = e1;
    return 0;
}

extern "C" double bench_timer_stop(bench_timer *t) {
    cudaEvent_t e0 = (cudaEvent_t)t->start, e1 = (cudaEvent_t)t->stop;
    float ms = -1.0f;
    if (e0 == NULL || e1 == NULL || cudaEventRecord(e1, (cudaStream_t)t->stream) != cudaSuccess ||
        cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
        ms = -1.0f;
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    t->start = t->stop = NULL;
    return ms < 0.0f ? -1.0 : ms * 1e-3;
}

extern "C" int bench_ref_attention(const float *q, const float *k, const float *v, float *out,
                                   float *S, int B, int T, int H, int hd, float scale, int reps,
                                   void *stream, double *seconds) {
    cudaStream_t st = (cudaStream_t)stream;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return -1;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); /* no TF32: float32 like baton's kernel */
    int rc = cublasSetStream(h, st) == CUBLAS_STATUS_SUCCESS ? 0 : -1;
    int ld = H * hd;
    long long sQ = hd, sS = (long long)T * T;
    const float one = 1.0f, zero = 0.0f;
    bench_timer tm = {NULL, NULL, stream};
    for (int rep = -1; rep < reps && rc == 0; rep++) { /* rep -1: warm-up */
        if (rep == 0 && bench_timer_start(&tm, stream) != 0) rc = -3;
        for (int b = 0; b < B && rc == 0; b++) {
            size_t off = (size_t)b * T * ld;
            /* column-major: S_h^T (T x T) = K_h (T x hd)^... : S[i][j] = q_i . k_j, row-major
             * (T, T) per head = column-major (T, T) with m = keys, n = queries. */
            if (cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, &one, k + off, ld,
                                          sQ, q + off, ld, sQ, &zero, S, T, sS,
                                          H) != CUBLAS_STATUS_SUCCESS)
                rc = -2;
            ref_softmax_kernel<<<(unsigned)((size_t)H * T), 256, 0, st>>>(S, T, scale);
            /* out_h (T, hd) row-major = P (T, T) V_h (T, hd): column-major out^T = V^T P^T */
            if (cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, &one, v + off, ld,
                                          sQ, S, T, sS, &zero, out + off, ld, sQ,
                                          H) != CUBLAS_STATUS_SUCCESS)
                rc = -2;
        }
    }
    double t = tm.start != NULL ? bench_timer_stop(&tm) : -1.0; /* synchronizes the stream */
    if (rc == 0 && t < 0.0) rc = -3;
    *seconds = t > 0.0 ? t / (reps > 0 ? reps : 1) : 0.0;
    if (cudaStreamSynchronize(st) != cudaSuccess || cudaGetLastError() != cudaSuccess) rc = -3;
    cublasDestroy(h);
    return rc;
}
