/* The CUDA compute backend: the backend.h table on one GPU. GEMMs go through cuBLASLt
 * (float32, bf16 and fp16 inputs with float32 accumulation; fp8 E4M3/E5M2 with
 * per-tensor scales, see cuda_matmul.cu), every other op is a kernel of this directory.
 * The CPU backend (worker/cpu) is its numeric reference; tests/gpu/test_cuda_ops.c
 * compares the two op by op and through a whole model.
 *
 * Rules the kernels keep (those of backend.h): backward ops accumulate (+=) into
 * parameter gradients and write (=) activation gradients; ops never allocate (the
 * backend allocates its own small buffers once, at init: a cuBLASLt workspace, the
 * sum-of-squares partials, pinned staging for results that go back to the host, AdamW's
 * chunk table); ops are deterministic: every reduction runs in a fixed order over a
 * fixed launch shape and no atomic operation changes a result (the only atomic is the
 * fp8 amax, a maximum, which is exact in any order). All work is queued on one stream;
 * the first failed launch or CUDA call is recorded and reported by sync() as BT_EIO, with
 * its message from cuda_backend_error() (an op called with shapes outside its limits, such
 * as the MoE ops' E > 512, launches nothing and is reported as BT_EINVAL).
 *
 * Device memory from alloc() is cudaMalloc'd and zeroed; to_host and from_host are
 * synchronous copies (host buffers may be reused as soon as they return); sumsq
 * synchronizes. A thread that calls the ops makes the backend's device current first;
 * the memory functions do that themselves.
 *
 * Choosing it (a later change to train.c, not made here): train_model_init builds the
 * backend from the StageSpec's cluster device: "cpu" keeps cpu_backend_init; "cuda"
 * calls cuda_backend_init(&be, local_rank % device_count, diag) — the device a worker
 * gets is its node-local rank, as NCCL's comm backend assumes — and, on failure, fails
 * the stage with the diag's message (BT_EUNSUPPORTED: exit status 2, not retried);
 * train_free calls cuda_backend_free after model_free. */
#ifndef BATON_CUDA_BACKEND_H
#define BATON_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"
#include "util/err.h"

/* Fills the table for CUDA device `device`. Returns 0, or BT_EUNSUPPORTED when there
 * is no usable device (no driver, no GPU: the CUDA error string is in diag), BT_EINVAL
 * for a device index out of range, BT_ENOMEM or BT_EIO when setting up the stream,
 * cuBLASLt or the backend's buffers fails. On failure nothing is left to free. */
int cuda_backend_init(backend *be, int device, bt_diag *diag);

/* Releases the stream, the cuBLASLt handle and the backend's buffers (not the memory the
 * caller allocated through the table). Safe on a table that failed to initialize. */
void cuda_backend_free(backend *be);

/* The message of the failure sync() last reported, or of one recorded since ("" when none
 * ever was). */
const char *cuda_backend_error(backend *be);

/* The stream every op of this backend is queued on (a cudaStream_t; NULL before init):
 * for a benchmark that runs and times other work on the same queue as the ops. */
void *cuda_backend_stream(backend *be);

/* Makes this backend the one backend_open (backend_select.h) gives for cluster.device
 * cuda: device local_rank % devices, its errors through be->error. */
void cuda_backend_register(void);

/* The number of CUDA devices, or a negative BT_ code with the reason in diag:
 * BT_EUNSUPPORTED when there is no device (none found, or no driver installed: tests and
 * benchmarks SKIP), BT_EIO when a driver is installed but fails (too old for the runtime,
 * mismatched: an error, never a skip). */
int cuda_device_count(bt_diag *diag);

/* How many fp8 matrix products this backend has run on the fp8 tensor cores (*native)
 * and how many with the fp8 values carried in bf16 (*carried: shapes cuBLASLt's fp8
 * kernels do not take, or BATON_CUDA_FP8=carried; see cuda_matmul.cu). */
void cuda_fp8_gemm_counts(backend *be, long *native, long *carried);

/* 1 when attention of head size hd in precision prec (no stored probabilities) runs on
 * the tensor-core kernels (cuda_attention_tc.cu), 0 when on the float32 ones. */
int cuda_attention_tensor_cores(backend *be, backend_prec prec, int hd);

/* The block count the tensor-core dk/dv kernel splits a grouped-query group's heads to
 * reach (cuda_attention_tc.cu; 1024 by default); returns the previous one. For tests: a
 * small shape takes every split (whole group, some heads, one head per slice) with it. */
unsigned cuda_attention_dkdv_blocks(backend *be, unsigned blocks);

#ifdef __cplusplus
}
#endif

#endif
