/* The order of a pipeline stage's computations (pipe_order.h). */
#include "pipe_order.h"

uint32_t pipe_order_warmup(uint32_t pp, uint32_t v, uint32_t K, uint32_t s) {
    uint64_t total = (uint64_t)K * v, w;
    if (v <= 1) {
        w = pp - s - 1;
    } else if (K == pp) {
        w = total;
    } else {
        w = 2ull * (pp - s - 1) + (uint64_t)(v - 1) * pp;
    }
    return (uint32_t)(w < total ? w : total);
}

uint32_t pipe_order_mb(uint32_t pp, uint32_t v, uint32_t k) {
    return k / (pp * v) * pp + k % pp;
}

uint32_t pipe_order_chunk(uint32_t pp, uint32_t v, uint32_t k, int forward) {
    uint32_t c = k % (pp * v) / pp;
    return forward ? c : v - 1 - c;
}

static pipe_pass pass(uint32_t pp, uint32_t v, uint32_t k, int forward) {
    if (v <= 1) return (pipe_pass){.forward = forward, .mb = k, .chunk = 0};
    return (pipe_pass){.forward = forward,
                       .mb = pipe_order_mb(pp, v, k),
                       .chunk = pipe_order_chunk(pp, v, k, forward)};
}

void pipe_order(uint32_t pp, uint32_t v, uint32_t K, uint32_t s, pipe_pass *out) {
    v = v > 1 ? v : 1;
    uint32_t total = K * v, w = pipe_order_warmup(pp, v, K, s), n = 0;
    for (uint32_t k = 0; k < w; k++)
        out[n++] = pass(pp, v, k, 1);
    for (uint32_t i = 0; i + w < total; i++) {
        out[n++] = pass(pp, v, w + i, 1);
        out[n++] = pass(pp, v, i, 0);
    }
    for (uint32_t k = total - w; k < total; k++)
        out[n++] = pass(pp, v, k, 0);
}
