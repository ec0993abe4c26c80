/* CPU emulation (cuda_emu_core.h): the part of the CUDA runtime that C code calls too
 * (tests/gpu/test_cuda_ops_stream.c), with C linkage, defined in emu.cpp; cuda_runtime.h
 * has the rest.
 *
 * Completion: every call does its work at once, but the device is modelled as slow, so that
 * what a GPU shows to a host that does not wait shows here too. Work queued on a stream
 * (kernels, async copies and sets, matrix products) is unfinished until something waits
 * for it (cudaStreamSynchronize, cudaEventSynchronize, and the calls that synchronize the
 * whole device: cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost) or until a query has
 * found it unfinished once: the first cudaStreamQuery or cudaEventQuery of unfinished work
 * answers cudaErrorNotReady, the next one cudaSuccess (a poll ends). The device finishes
 * work in the order it was queued, whatever the stream (a valid schedule of CUDA's).
 *
 * Errors: as the runtime does, every call that fails leaves its error as the calling
 * thread's last error, cudaErrorNotReady from a query included, until cudaGetLastError
 * reads and clears it (cudaPeekAtLastError reads it only). */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);

#ifdef __cplusplus
}
#endif
