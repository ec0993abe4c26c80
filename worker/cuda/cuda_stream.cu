/* Side queues of the CUDA backend (backend.h: stream_new, stream_free, stream_wait): the
 * trainer puts the data-parallel gradient all-reduce on one, behind an event recorded on
 * the ops' stream, so that NCCL reduces a layer's gradients while the backward goes on
 * with the layers before it. Failures are recorded for sync(), as every op's. */
#include "cuda_internal.cuh"

static cudaStream_t queue_of(cuda_ctx *c, void *s) {
    return s != NULL ? (cudaStream_t)s : c->stream;
}

void *cuda_stream_new(backend *be) {
    cuda_ctx *c = cuda_ctx_of(be);
    cudaStream_t s = NULL;
    cuda_check(c, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    return s;
}

void cuda_stream_free(backend *be, void *s) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (s == NULL) return;
    cuda_check(c, cudaStreamSynchronize((cudaStream_t)s), "stream_free: cudaStreamSynchronize");
    cuda_check(c, cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy");
}

/* One event, made at init and recorded anew by every call: cudaStreamWaitEvent makes the
 * waiter wait for the work the event's latest record captured when the wait is enqueued,
 * and a later record of the same event changes nothing for a wait already enqueued (the
 * CUDA runtime's documented semantics). So record-then-wait pairs may reuse it freely as
 * long as no other record comes between a pair's two calls: the backend's ops, this one
 * included, are called from one thread. (One event created and destroyed per call cost a
 * driver allocation per layer and queue.) */
void cuda_stream_wait(backend *be, void *waiter, void *waitee) {
    cuda_ctx *c = cuda_ctx_of(be);
    cudaStream_t to = queue_of(c, waiter), from = queue_of(c, waitee);
    if (to == from) return;
    cudaError_t e = cudaEventRecord(c->queue_mark, from);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to, c->queue_mark, 0);
    cuda_check(c, e, "stream_wait: event");
}
