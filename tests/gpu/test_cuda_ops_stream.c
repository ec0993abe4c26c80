/* The CUDA backend beside other users of the CUDA runtime and of the device, as NCCL's
 * communication backend (worker/comm/comm_nccl.c) is one, on the same thread and on other
 * streams (test group "stream"):
 *  - a poll of a busy stream (cudaStreamQuery answering cudaErrorNotReady, which the
 *    runtime leaves as the thread's last error) does not fail the backend's next op: its
 *    launch check (CUDA_LAUNCHED) reads the last error;
 *  - the tensor-core attention backward that grows its scratch (the dk/dv slices' partial
 *    sums under grouped-query attention) returns with another stream still busy: growing it
 *    does not synchronize the device, which would wait behind NCCL's kernels with no
 *    deadline.
 * A side queue of the backend (stream_new) is made busy by waiting for milliseconds of
 * work on the ops' stream. Under the emulation (test_cuda_ops_emulated), whose streams model
 * completion (tests/gpu/emu/include/cuda_runtime_api.h), a small buffer does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "test_cuda_ops.h"

#ifdef TEST_CUDA_OPS_EMULATED
#define BUSY_FLOATS ((size_t)1 << 12)
#else
#define BUSY_FLOATS ((size_t)64 << 20) /* 32 passes over 256 MB: milliseconds on an H100 */
#endif

static void fail(const char *what, const char *why) {
    fprintf(stderr, "FAIL %s: %s\n", what, why);
    failures++;
}

/* Queues work on the ops' stream and makes side wait for it: side is busy until it ends. */
static void busy_side(float *busy, void *side) {
    for (int k = 0; k < 32; k++)
        gpu.scale(&gpu, busy, 1.0f, BUSY_FLOATS);
    gpu.stream_wait(&gpu, side, NULL);
}

/* Polls side until it is idle, then runs an op: sync must report no failure. */
static void test_op_after_poll(float *busy, void *side) {
    const char *what = "an op after polling a busy side queue";
    const size_t n = 1000;
    pair a = pair_rand(n, 1.0f);
    busy_side(busy, side);
    long polls = 0;
    cudaError_t e;
    while ((e = cudaStreamQuery((cudaStream_t)side)) == cudaErrorNotReady)
        polls++;
    if (e != cudaSuccess) fail(what, cudaGetErrorString(e));
    if (polls == 0) fail(what, "control: the side queue was idle at the first poll: cannot tell");
    printf("%s: %ld polls found it busy; the thread's last error after them: %s\n", what, polls,
           cudaGetErrorName(cudaPeekAtLastError()));
    cpu.scale(&cpu, a.c, 2.0f, n);
    gpu.scale(&gpu, a.g, 2.0f, n);
    check_sync(what);
    compare_pair(what, &a, 0.0);
    pair_free(&a);
}

/* One forward or backward of bf16 attention (the tensor cores) over the first T rows. */
typedef struct att_bufs {
    int H, KV, hd, ld;
    float *qkv, *out, *lse, *dout, *d, *scratch;
} att_bufs;

static void att_run(const att_bufs *b, int T, int backward) {
    const float *q = b->qkv, *k = q + b->H * b->hd, *v = k + b->KV * b->hd;
    const float scale = 0.25f;
    if (!backward) {
        gpu.attention_forward(&gpu, b->out, b->lse, NULL, q, k, v, b->ld, 1, T, b->H, b->KV, b->hd,
                              scale, BACKEND_PREC_BF16, b->scratch);
        return;
    }
    float *dq = b->d, *dk = dq + b->H * b->hd, *dv = dk + b->KV * b->hd;
    gpu.attention_backward(&gpu, dq, dk, dv, b->dout, b->out, NULL, b->lse, q, k, v, b->ld, 1, T,
                           b->H, b->KV, b->hd, scale, BACKEND_PREC_BF16, b->scratch);
}

/* 4 query heads per kv head and few blocks: the dk/dv kernel splits the group (default aim,
 * 1024 blocks), so its scratch grows from the 40-row backward to the 70-row one. */
static void test_part_grows_in_stream_order(float *busy, void *side) {
    const char *what = "attention backward growing its dk/dv slices";
    enum { T1 = 40, T2 = 70 };
    att_bufs b = {.H = 8, .KV = 2, .hd = 32};
    if (!cuda_attention_tensor_cores(&gpu, BACKEND_PREC_BF16, b.hd)) {
        printf("%s: not run (the tensor-core kernels are off: BATON_CUDA_ATTENTION=fp32)\n", what);
        return;
    }
    unsigned was = cuda_attention_dkdv_blocks(&gpu, 1024);
    b.ld = (b.H + 2 * b.KV) * b.hd;
    pair qkv = pair_rand((size_t)T2 * b.ld, 1.0f), dout = pair_rand((size_t)T2 * b.H * b.hd, 1.0f);
    b.qkv = qkv.g, b.dout = dout.g;
    b.out = gpu.alloc(&gpu, (size_t)T2 * b.H * b.hd * 4);
    b.lse = gpu.alloc(&gpu, (size_t)b.H * T2 * 4);
    b.d = gpu.alloc(&gpu, (size_t)T2 * b.ld * 4);
    b.scratch = gpu.alloc(&gpu, gpu.attention_scratch_floats(&gpu, T2) * 4);
    att_run(&b, T1, 0);
    att_run(&b, T1, 1); /* the scratch's first size */
    att_run(&b, T2, 0);
    check_sync(what);
    busy_side(busy, side);
    att_run(&b, T2, 1); /* grows it */
    cudaError_t e = cudaStreamQuery((cudaStream_t)side);
    if (e == cudaSuccess)
        fail(what, "the side queue was idle when the backward returned: growing the scratch "
                   "waited for the whole device");
    else if (e != cudaErrorNotReady)
        fail(what, cudaGetErrorString(e));
    (void)cudaGetLastError(); /* the query's not-ready: test_op_after_poll's matter */
    check_sync(what);
    cuda_attention_dkdv_blocks(&gpu, was);
    pair_free(&qkv), pair_free(&dout);
    gpu.free(&gpu, b.out), gpu.free(&gpu, b.lse), gpu.free(&gpu, b.d), gpu.free(&gpu, b.scratch);
}

void test_stream_all(void) {
    float *busy = gpu.alloc(&gpu, BUSY_FLOATS * 4);
    void *side = gpu.stream_new(&gpu);
    if (busy == NULL || side == NULL) {
        fail("stream tests", "allocating the busy buffer or the side queue");
    } else {
        test_op_after_poll(busy, side);
        test_part_grows_in_stream_order(busy, side);
    }
    if (side) gpu.stream_free(&gpu, side);
    gpu.free(&gpu, busy);
    check_sync("stream tests");
}
