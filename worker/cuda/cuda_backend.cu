/* The CUDA backend's table, its memory functions and its lifetime. The operations live
 * in cuda_elementwise.cu, cuda_norm.cu, cuda_matmul.cu, cuda_attention.cu,
 * cuda_attention_part.cu, cuda_loss.cu, cuda_optim.cu and cuda_moe.cu; every one queues
 * work on the backend's stream and records (never returns) a failure, which sync() then
 * reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_backend.h"
#include "cuda_internal.cuh"

/* cuBLASLt workspace: what the large split-K and stream-K kernels ask for on Hopper. */
#define CUDA_LT_WORKSPACE_BYTES ((size_t)64 << 20)

void cuda_record(cuda_ctx *c, int code, const char *what, const char *detail) {
    if (c->err) return;
    c->err = code;
    snprintf(c->errmsg, sizeof c->errmsg, "%s: %s", what, detail ? detail : "");
}

static void *cuda_alloc(backend *be, size_t bytes) {
    cuda_ctx *c = cuda_ctx_of(be);
    void *p = NULL;
    if (cudaSetDevice(c->device) != cudaSuccess) return NULL;
    /* cudaMalloc aligns to 256 bytes; a 0-byte request still gets a distinct block. */
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError(); /* an out-of-memory is the caller's to report */
        return NULL;
    }
    /* Zeroed, and complete before the pointer is used on any stream (the backend's stream
     * does not synchronize with the legacy default stream, nor does NCCL's). */
    if (cudaMemsetAsync(p, 0, bytes ? bytes : 256, c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free_mem(backend *be, void *ptr) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (ptr == NULL) return;
    cudaSetDevice(c->device);
    /* Queued work may still read ptr: cudaFree waits for the device first. */
    cuda_check(c, cudaFree(ptr), "cudaFree");
}

static void cuda_to_host(backend *be, void *host_dst, const void *src, size_t bytes) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (bytes == 0) return;
    cudaSetDevice(c->device);
    cuda_check(c, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
               "to_host: cudaMemcpyAsync");
    cuda_check(c, cudaStreamSynchronize(c->stream), "to_host: cudaStreamSynchronize");
}

static void cuda_from_host(backend *be, void *dst, const void *host_src, size_t bytes) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (bytes == 0) return;
    cudaSetDevice(c->device);
    cuda_check(c, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream),
               "from_host: cudaMemcpyAsync");
    /* The caller may reuse host_src as soon as we return. */
    cuda_check(c, cudaStreamSynchronize(c->stream), "from_host: cudaStreamSynchronize");
}

static int cuda_sync(backend *be) {
    cuda_ctx *c = cuda_ctx_of(be);
    cudaSetDevice(c->device);
    cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    /* "The first error since the last sync": the code is reported once; its message stays
     * readable through cuda_backend_error until another failure is recorded. */
    int err = c->err;
    c->err = 0;
    return err;
}

extern "C" const char *cuda_backend_error(backend *be) {
    cuda_ctx *c = cuda_ctx_of(be);
    return c ? c->errmsg : "";
}

extern "C" void *cuda_backend_stream(backend *be) {
    cuda_ctx *c = cuda_ctx_of(be);
    return c ? (void *)c->stream : NULL;
}

/* Whether this machine shows an NVIDIA device node at all (/dev/nvidiactl, /dev/nvidia0;
 * WSL's /dev/dxg): without one no GPU can be used, whatever the driver library says. */
static int cuda_device_nodes(void) {
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0 ||
           access("/dev/dxg", F_OK) == 0;
}

/* cudaGetDeviceCount failed with e: BT_EUNSUPPORTED where there is no device (no device
 * node, or the driver says none) or no driver installed at all (driver version 0), BT_EIO
 * where a driver and a device are there but do not work (too old for the runtime,
 * mismatched): an error to fix, not the absence of a GPU. */
static int cuda_count_error(cudaError_t e, bt_diag *diag) {
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    int nodes = cuda_device_nodes();
    if (e == cudaErrorNoDevice || driver == 0 || !nodes) {
        bt_diag_set(diag, "no CUDA device: cudaGetDeviceCount: %s%s", cudaGetErrorString(e),
                    driver == 0 ? " (no CUDA driver installed)"
                    : !nodes    ? " (no /dev/nvidia* device node)"
                                : "");
        return BT_EUNSUPPORTED;
    }
    bt_diag_set(diag,
                "CUDA driver error: cudaGetDeviceCount: %s (driver supports CUDA %d.%d, "
                "runtime %d.%d)",
                cudaGetErrorString(e), driver / 1000, driver % 1000 / 10, runtime / 1000,
                runtime % 1000 / 10);
    return BT_EIO;
}

extern "C" int cuda_device_count(bt_diag *diag) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return cuda_count_error(e, diag);
    if (n == 0) {
        bt_diag_set(diag, "no CUDA device: cudaGetDeviceCount found 0 devices");
        return BT_EUNSUPPORTED;
    }
    return n;
}

static void fill_table(backend *be) {
    be->name = "cuda";
    be->alloc = cuda_alloc;
    be->free = cuda_free_mem;
    be->to_host = cuda_to_host;
    be->from_host = cuda_from_host;
    be->sync = cuda_sync;
    be->matmul_scratch_floats = cuda_matmul_scratch_floats;
    be->matmul_wcache_floats = cuda_matmul_wcache_floats;
    be->attention_scratch_floats = cuda_attention_scratch_floats;
    be->zero = cuda_zero;
    be->add = cuda_add;
    be->scale = cuda_scale;
    be->copy2d = cuda_copy2d;
    be->sumsq = cuda_sumsq;
    be->sumsq_segs = cuda_sumsq_segs;
    be->copy = cuda_copy;
    be->pack_bf16 = cuda_pack_bf16;
    be->unpack_bf16 = cuda_unpack_bf16;
    be->adamw = cuda_adamw;
    be->host_memory = 0;
    be->stream_new = cuda_stream_new;
    be->stream_free = cuda_stream_free;
    be->stream_wait = cuda_stream_wait;
    be->embedding_forward = cuda_embedding_forward;
    be->embedding_backward = cuda_embedding_backward;
    be->rmsnorm_forward = cuda_rmsnorm_forward;
    be->rmsnorm_backward = cuda_rmsnorm_backward;
    be->matmul_forward = cuda_matmul_forward;
    be->matmul_backward = cuda_matmul_backward;
    be->rope_forward = cuda_rope_forward;
    be->rope_backward = cuda_rope_backward;
    be->attention_forward = cuda_attention_forward;
    be->attention_backward = cuda_attention_backward;
    be->attention_part_scratch_floats = cuda_attention_part_scratch_floats;
    be->attention_part_forward = cuda_attention_part_forward;
    be->attention_merge = cuda_attention_merge;
    be->attention_delta = cuda_attention_delta;
    be->attention_part_backward = cuda_attention_part_backward;
    be->swiglu_forward = cuda_swiglu_forward;
    be->swiglu_backward = cuda_swiglu_backward;
    be->crossentropy_forward = cuda_crossentropy_forward;
    be->crossentropy_backward = cuda_crossentropy_backward;
    be->vocab_embedding_forward = cuda_vocab_embedding_forward;
    be->vocab_embedding_backward = cuda_vocab_embedding_backward;
    be->vocab_ce_partial = cuda_vocab_ce_partial;
    be->vocab_ce_combine = cuda_vocab_ce_combine;
    be->vocab_ce_backward = cuda_vocab_ce_backward;
    be->moe_route = cuda_moe_route;
    be->moe_assign = cuda_moe_assign;
    be->moe_score_mean = cuda_moe_score_mean;
    be->gather_rows = cuda_gather_rows;
    be->moe_combine = cuda_moe_combine;
    be->moe_combine_backward = cuda_moe_combine_backward;
    be->moe_router_backward = cuda_moe_router_backward;
}

static void ctx_release(cuda_ctx *c) {
    if (c->emb_sort) cudaFreeAsync(c->emb_sort, c->stream); /* stream-ordered memory */
    if (c->att_part) cudaFreeAsync(c->att_part, c->stream);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->lt_workspace) cudaFree(c->lt_workspace);
    if (c->sumsq_part) cudaFree(c->sumsq_part);
    if (c->sumsq_seg) cudaFree(c->sumsq_seg);
    if (c->moe_chunk) cudaFree(c->moe_chunk);
    if (c->moe_mean_part) cudaFree(c->moe_mean_part);
    if (c->amax_dev) cudaFree(c->amax_dev);
    if (c->adamw_dev) cudaFree(c->adamw_dev);
    if (c->sumsq_host) cudaFreeHost(c->sumsq_host);
    if (c->amax_host) cudaFreeHost(c->amax_host);
    if (c->adamw_host) cudaFreeHost(c->adamw_host);
    for (int h = 0; h < 2; h++)
        if (c->adamw_copied[h]) cudaEventDestroy(c->adamw_copied[h]);
    if (c->queue_mark) cudaEventDestroy(c->queue_mark);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" int cuda_backend_init(backend *be, int device, bt_diag *diag) {
    memset(be, 0, sizeof *be);
    int n = cuda_device_count(diag);
    if (n < 0) return n;
    if (device < 0 || device >= n) {
        bt_diag_set(diag, "CUDA device %d does not exist (this node has %d: 0..%d)", device, n,
                    n - 1);
        return BT_EINVAL;
    }
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (c == NULL) {
        bt_diag_set(diag, "cuda backend: out of host memory");
        return BT_ENOMEM;
    }
    c->device = device;
    const char *att_env = getenv("BATON_CUDA_ATTENTION"); /* "fp32": no tensor-core attention */
    c->att_fp32 = att_env != NULL && strcmp(att_env, "fp32") == 0;
    c->att_dkdv_blocks = 1024;
    const char *fp8_env = getenv("BATON_CUDA_FP8"); /* "carried": no fp8 tensor cores */
    c->fp8_carried = fp8_env != NULL && strcmp(fp8_env, "carried") == 0;
    const char *step = "cudaSetDevice";
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) {
        step = "cudaStreamCreateWithFlags";
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    }
    if (e == cudaSuccess) {
        step = "cudaMalloc (cuBLASLt workspace)";
        c->lt_workspace_bytes = CUDA_LT_WORKSPACE_BYTES;
        e = cudaMalloc(&c->lt_workspace, c->lt_workspace_bytes);
    }
    if (e == cudaSuccess) {
        step = "cudaMalloc (reduction buffers)";
        e = cudaMalloc((void **)&c->sumsq_part, (CUDA_SUMSQ_BLOCKS + 1) * sizeof(double));
    }
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->sumsq_seg, (CUDA_SUMSQ_SEGS + 1) * sizeof(double));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->moe_chunk,
                       (size_t)CUDA_MOE_CHUNKS * CUDA_MOE_EXPERTS * sizeof(int32_t));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->moe_mean_part,
                       (size_t)CUDA_MOE_MEAN_CHUNKS * CUDA_MOE_EXPERTS * sizeof(double));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->amax_dev, BACKEND_FP8_SLOTS * sizeof(unsigned));
    if (e == cudaSuccess) {
        step = "cudaMalloc (AdamW chunk table)";
        e = cudaMalloc((void **)&c->adamw_dev, 2 * CUDA_ADAMW_TABLE * sizeof(cuda_adamw_chunk));
    }
    if (e == cudaSuccess) {
        step = "cudaMallocHost (staging)";
        e = cudaMallocHost((void **)&c->sumsq_host, sizeof(double));
    }
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&c->amax_host, BACKEND_FP8_SLOTS * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&c->adamw_host,
                           2 * CUDA_ADAMW_TABLE * sizeof(cuda_adamw_chunk));
    for (int h = 0; h < 2 && e == cudaSuccess; h++) {
        step = "cudaEventCreateWithFlags";
        e = cudaEventCreateWithFlags(&c->adamw_copied[h], cudaEventDisableTiming);
    }
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->queue_mark, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        bt_diag_set(diag, "cuda backend on device %d: %s: %s", device, step, cudaGetErrorString(e));
        (void)cudaGetLastError();
        ctx_release(c);
        return e == cudaErrorMemoryAllocation ? BT_ENOMEM : BT_EIO;
    }
    cublasStatus_t s = cublasLtCreate(&c->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        bt_diag_set(diag, "cuda backend on device %d: cublasLtCreate: %s", device,
                    cublasLtGetStatusString(s));
        c->lt = NULL;
        ctx_release(c);
        return BT_EIO;
    }
    be->ctx = c;
    fill_table(be);
    return 0;
}

extern "C" void cuda_backend_free(backend *be) {
    if (be == NULL || be->ctx == NULL) return;
    cuda_ctx *c = cuda_ctx_of(be);
    cudaSetDevice(c->device);
    ctx_release(c);
    be->ctx = NULL;
}
