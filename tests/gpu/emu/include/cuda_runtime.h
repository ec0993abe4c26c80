/* CPU emulation (cuda_emu_core.h): the CUDA runtime calls worker/cuda makes: host memory,
 * copies, streams and events that model completion and the thread's last error as
 * cuda_runtime_api.h says, one device. */
#pragma once
#include "cuda_emu_core.h"
#include "cuda_runtime_api.h"
enum { cudaErrorNoDevice = 100 };
enum cudaMemcpyKind {
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
#define cudaStreamNonBlocking  1u
#define cudaEventDisableTiming 2u

namespace emu {
/* emu.cpp: the completion model's queues (streams; nullptr is the default stream), its
 * events, and the thread's last error. */
void *queue_new();
void queue_free(void *s);
void queue_sync(void *s); /* waits for s's work */
void device_sync();       /* waits for all work */
void *event_new();
void event_free(void *e);
void event_record(void *e, void *s);
void event_sync(void *e);
void queue_wait_event(void *s, void *e);
cudaError_t fail(cudaError_t e); /* e, left as the thread's last error */
} // namespace emu

inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return 0;
}
inline cudaError_t cudaDriverGetVersion(int *v) {
    *v = 13000;
    return 0;
}
inline cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return 0;
}
inline cudaError_t cudaSetDevice(int) {
    return 0;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = emu::queue_new();
    return 0;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    emu::queue_free(s);
    return 0;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu::queue_sync(s);
    return 0;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = emu::event_new();
    return 0;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    emu::event_free(e);
    return 0;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) {
    emu::event_record(e, s);
    return 0;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu::event_sync(e);
    return 0;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0) {
    emu::queue_wait_event(s, e);
    return 0;
}
namespace emu {
inline void *device_bytes(size_t n) {
#ifdef EMU_EXACT_ALLOC /* exactly n bytes: with -fsanitize=address, overruns show */
    void *p = malloc(n ? n : 1);
    if (p) memset(p, 0xA5, n);
#else
    void *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (p) memset(p, 0xA5, (n + 255) / 256 * 256); /* garbage, as a GPU would give */
#endif
    return p;
}
} // namespace emu
/* Device memory: allocating and freeing synchronize the device, as CUDA's do. */
inline cudaError_t cudaMalloc(void **p, size_t n) {
    emu::device_sync();
    *p = emu::device_bytes(n);
    return *p ? 0 : emu::fail(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaMallocHost(void **p, size_t n) {
    return cudaMalloc(p, n);
}
inline cudaError_t cudaFree(void *p) {
    emu::device_sync();
    free(p);
    return 0;
}
/* Stream-ordered allocation: no synchronization (the work queued ahead of a free has
 * already run here). */
inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
    *p = emu::device_bytes(n);
    return *p ? 0 : emu::fail(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaFreeAsync(void *p, cudaStream_t) {
    free(p);
    return 0;
}
inline cudaError_t cudaFreeHost(void *p) {
    return cudaFree(p);
}
inline cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    emu::queued(nullptr);
    return 0;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0) {
    memset(p, v, n);
    emu::queued(s);
    return 0;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                                   cudaStream_t q = 0) {
    memmove(d, s, n);
    emu::queued(q);
    return 0;
}
inline cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w,
                                     size_t h, cudaMemcpyKind, cudaStream_t q = 0) {
    for (size_t r = 0; r < h; r++)
        memmove((char *)d + r * dp, (const char *)s + r * sp, w);
    emu::queued(q);
    return 0;
}
inline cudaError_t cudaMemset2DAsync(void *d, size_t dp, int v, size_t w, size_t h,
                                     cudaStream_t q = 0) {
    for (size_t r = 0; r < h; r++)
        memset((char *)d + r * dp, v, w);
    emu::queued(q);
    return 0;
}
