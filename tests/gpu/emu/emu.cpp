/* The emulation's per-thread and shared state (cuda_emu_core.h), and the runtime's
 * completion model and last error (cuda_runtime_api.h). */
#include "cuda_runtime.h"
thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
namespace emu {
thread_local Block *cur;
thread_local int tid;
std::mutex atomic_mu;
Pool &pool = *new Pool;

/* Work is numbered in the order it was queued (1, 2, ...); the device has finished all of
 * it up to `done`. A queue's `last` is the number of the last work its next work waits
 * for (its own, or an event's that it was made to wait for); an event's `at`, that of the
 * last work queued on its stream when it was recorded. */
struct Queue {
    unsigned long long last = 0;
};
struct Event {
    unsigned long long at = 0;
};
static std::mutex model_mu;
static unsigned long long seq, done;
static Queue default_queue;
static thread_local cudaError_t last_error;

static Queue *queue_of(void *s) {
    return s != nullptr ? (Queue *)s : &default_queue;
}
void *queue_new() {
    return new Queue;
}
void queue_free(void *s) {
    queue_sync(s);
    if (s != nullptr) delete (Queue *)s;
}
void queued(void *s) {
    std::lock_guard<std::mutex> l(model_mu);
    queue_of(s)->last = ++seq;
}
static void finish(unsigned long long upto) { /* model_mu held */
    if (done < upto) done = upto;
}
void queue_sync(void *s) {
    std::lock_guard<std::mutex> l(model_mu);
    finish(queue_of(s)->last);
}
void device_sync() {
    std::lock_guard<std::mutex> l(model_mu);
    finish(seq);
}
void *event_new() {
    return new Event;
}
void event_free(void *e) {
    delete (Event *)e;
}
void event_record(void *e, void *s) {
    std::lock_guard<std::mutex> l(model_mu);
    ((Event *)e)->at = queue_of(s)->last;
}
void event_sync(void *e) {
    std::lock_guard<std::mutex> l(model_mu);
    finish(((Event *)e)->at);
}
void queue_wait_event(void *s, void *e) {
    std::lock_guard<std::mutex> l(model_mu);
    Queue *q = queue_of(s);
    if (q->last < ((Event *)e)->at) q->last = ((Event *)e)->at;
}
cudaError_t fail(cudaError_t e) {
    last_error = e;
    return e;
}
/* The work up to *upto finished: cudaSuccess; else not ready, and this poll lets the
 * device get there. */
static cudaError_t query(const unsigned long long *upto) {
    std::lock_guard<std::mutex> l(model_mu);
    if (done >= *upto) return cudaSuccess;
    finish(*upto);
    return fail(cudaErrorNotReady);
}
} // namespace emu

extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}
extern "C" cudaError_t cudaPeekAtLastError(void) {
    return emu::last_error;
}
extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    default:
        return "emulated CUDA error";
    }
}
extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    default:
        return "emulated CUDA error";
    }
}
extern "C" cudaError_t cudaStreamQuery(cudaStream_t s) {
    return emu::query(&emu::queue_of(s)->last);
}
extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
    return emu::query(&((emu::Event *)e)->at);
}
