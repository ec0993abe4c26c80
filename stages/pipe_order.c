/* The order of a pipeline stage's computations (pipe_order.h). */
#include "pipe_order.h"

/* The first micro-batch of the last group, L = pp (floor(K / pp) - 1): the groups before
 * it hold pp micro-batches, it K - L (pp to 2 pp - 1). */
static uint32_t last_group(uint32_t pp, uint32_t K) {
    return K >= pp ? (K / pp - 1) * pp : 0;
}

uint32_t pipe_order_last_group(uint32_t pp, uint32_t K) {
    return K - last_group(pp, K);
}

uint32_t pipe_order_warmup(uint32_t pp, uint32_t v, uint32_t K, uint32_t s) {
    uint64_t total = (uint64_t)K * v, w;
    if (v <= 1) {
        w = pp - s - 1;
    } else if (K == pp) {
        w = total;
    } else {
        w = 2ull * (pp - s - 1) + (uint64_t)(v - 1) * pipe_order_last_group(pp, K);
    }
    return (uint32_t)(w < total ? w : total);
}

uint32_t pipe_order_mb(uint32_t pp, uint32_t v, uint32_t K, uint32_t k) {
    uint32_t L = last_group(pp, K);
    if (k < L * v) return k / (pp * v) * pp + k % pp;
    return L + (k - L * v) % (K - L);
}

uint32_t pipe_order_chunk(uint32_t pp, uint32_t v, uint32_t K, uint32_t k, int forward) {
    uint32_t L = last_group(pp, K);
    uint32_t c = k < L * v ? k % (pp * v) / pp : (k - L * v) / (K - L);
    return forward ? c : v - 1 - c;
}

static pipe_pass pass(uint32_t pp, uint32_t v, uint32_t K, uint32_t k, int forward) {
    if (v <= 1) return (pipe_pass){.forward = forward, .mb = k, .chunk = 0};
    return (pipe_pass){.forward = forward,
                       .mb = pipe_order_mb(pp, v, K, k),
                       .chunk = pipe_order_chunk(pp, v, K, k, forward)};
}

pipe_pass pipe_order_at(uint32_t pp, uint32_t v, uint32_t K, uint32_t s, uint64_t i) {
    v = v > 1 ? v : 1;
    uint64_t total = (uint64_t)K * v, w = pipe_order_warmup(pp, v, K, s), steady = 2 * (total - w);
    if (i < w) return pass(pp, v, K, (uint32_t)i, 1);
    i -= w;
    if (i < steady)
        return i % 2 ? pass(pp, v, K, (uint32_t)(i / 2), 0)
                     : pass(pp, v, K, (uint32_t)(w + i / 2), 1);
    return pass(pp, v, K, (uint32_t)(total - w + i - steady), 0);
}

void pipe_order(uint32_t pp, uint32_t v, uint32_t K, uint32_t s, pipe_pass *out) {
    uint64_t n = 2 * (uint64_t)K * (v > 1 ? v : 1);
    for (uint64_t i = 0; i < n; i++)
        out[i] = pipe_order_at(pp, v, K, s, i);
}
