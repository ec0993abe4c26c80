/* CPU emulation (cuda_emu_core.h): the CUDA runtime calls worker/cuda makes: host memory, copies,
 * no-op streams, one device. */
#pragma once
#include "cuda_emu_core.h"
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
#define cudaStreamNonBlocking  1u
#define cudaEventDisableTiming 2u
inline const char *cudaGetErrorString(cudaError_t) {
    return "emulated CUDA error";
}
inline cudaError_t cudaGetLastError() {
    return 0;
}
inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return 0;
}
inline cudaError_t cudaSetDevice(int) {
    return 0;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = (void *)1;
    return 0;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) {
    return 0;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
    return 0;
}
/* Events: every call runs to completion before it returns, so a recorded event has
 * always completed. */
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = (void *)1;
    return 0;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t) {
    return 0;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = 0) {
    return 0;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
    return 0;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) {
    return 0;
}
inline cudaError_t cudaMalloc(void **p, size_t n) {
#ifdef EMU_EXACT_ALLOC /* exactly n bytes: with -fsanitize=address, overruns show */
    *p = malloc(n ? n : 1);
    if (*p) memset(*p, 0xA5, n);
#else
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (*p) memset(*p, 0xA5, (n + 255) / 256 * 256); /* garbage, as a GPU would give */
#endif
    return *p ? 0 : 2;
}
inline cudaError_t cudaMallocHost(void **p, size_t n) {
    return cudaMalloc(p, n);
}
inline cudaError_t cudaFree(void *p) {
    free(p);
    return 0;
}
/* Stream-ordered allocation: streams run every call to completion, so at once. */
inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
    return cudaMalloc(p, n);
}
inline cudaError_t cudaFreeAsync(void *p, cudaStream_t) {
    return cudaFree(p);
}
inline cudaError_t cudaFreeHost(void *p) {
    free(p);
    return 0;
}
inline cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return 0;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t = 0) {
    memset(p, v, n);
    return 0;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                                   cudaStream_t = 0) {
    memmove(d, s, n);
    return 0;
}
inline cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w,
                                     size_t h, cudaMemcpyKind, cudaStream_t = 0) {
    for (size_t r = 0; r < h; r++)
        memmove((char *)d + r * dp, (const char *)s + r * sp, w);
    return 0;
}
inline cudaError_t cudaMemset2DAsync(void *d, size_t dp, int v, size_t w, size_t h,
                                     cudaStream_t = 0) {
    for (size_t r = 0; r < h; r++)
        memset((char *)d + r * dp, v, w);
    return 0;
}
