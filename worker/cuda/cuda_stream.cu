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

/* An event per call: recorded on waitee, waited for on waiter, destroyed at once (CUDA
 * releases it once the wait is done), so calls never share one. */
void cuda_stream_wait(backend *be, void *waiter, void *waitee) {
    cuda_ctx *c = cuda_ctx_of(be);
    cudaStream_t to = queue_of(c, waiter), from = queue_of(c, waitee);
    if (to == from) return;
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, from);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to, ev, 0);
    if (ev != NULL) cudaEventDestroy(ev);
    cuda_check(c, e, "stream_wait: event");
}
