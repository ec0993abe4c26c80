/* The reference path bench_gpu measures baton's attention kernel against: causal attention
 * as cuBLAS would do it without a fused kernel — S = Q K^T per head (a strided batched
 * float32 GEMM, CUBLAS_COMPUTE_32F, the precision of baton's kernel), a row softmax with
 * the causal mask in place over S (B*H*T*T floats in memory), then O = P V. Forward only:
 * the figure compared is forward TFLOP/s. Dense q, k, v of (B*T, H*hd), no GQA. */
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

extern "C" int bench_ref_attention(const float *q, const float *k, const float *v, float *out,
                                   float *S, int B, int T, int H, int hd, float scale, int reps,
                                   double *seconds) {
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return -1;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); /* no TF32: float32 like baton's kernel */
    int ld = H * hd;
    long long sQ = hd, sS = (long long)T * T;
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int rc = 0;
    for (int rep = -1; rep < reps && rc == 0; rep++) { /* rep -1: warm-up */
        if (rep == 0) cudaEventRecord(e0);
        for (int b = 0; b < B && rc == 0; b++) {
            size_t off = (size_t)b * T * ld;
            /* column-major: S_h^T (T x T) = K_h (T x hd)^... : S[i][j] = q_i . k_j, row-major
             * (T, T) per head = column-major (T, T) with m = keys, n = queries. */
            if (cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, &one, k + off, ld,
                                          sQ, q + off, ld, sQ, &zero, S, T, sS,
                                          H) != CUBLAS_STATUS_SUCCESS)
                rc = -2;
            ref_softmax_kernel<<<(unsigned)((size_t)H * T), 256>>>(S, T, scale);
            /* out_h (T, hd) row-major = P (T, T) V_h (T, hd): column-major out^T = V^T P^T */
            if (cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, &one, v + off, ld,
                                          sQ, S, T, sS, &zero, out + off, ld, sQ,
                                          H) != CUBLAS_STATUS_SUCCESS)
                rc = -2;
        }
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, e0, e1);
    *seconds = ms * 1e-3 / (reps > 0 ? reps : 1);
    if (cudaGetLastError() != cudaSuccess) rc = -3;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cublasDestroy(h);
    return rc;
}
