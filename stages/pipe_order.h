/* The order of a pipeline stage's computations in one step, shared by the worker's
 * schedules (worker/engine/pipeline.h, pipe_schedule.h) and the planner (which replays it to
 * count what ZeRO-3 gathers). K micro-batches, pp stages, v model chunks per stage.
 *  - Non-interleaved 1F1B (v = 1): stage s runs w = min(pp - s - 1, K) warmup forwards,
 *    then one forward and one backward at a time, then the w remaining backwards;
 *    micro-batches in order.
 *  - Interleaved (v > 1, Megatron-LM's virtual pipeline, K >= pp): the micro-batches go
 *    in groups of pp, the last of G = K - L (pp to 2 pp - 1, L = pp (floor(K / pp) - 1)),
 *    each group through chunk 0, then chunk 1, ... (Megatron-Core's schedule table goes
 *    in groups likewise; here the remainder joins the last group rather than forming a
 *    smaller one, so that every group has pp or more micro-batches and a micro-batch's
 *    next chunk comes pp or more forwards later): virtual micro-batch k in [0, K v) below L v is
 * chunk (k mod pp v) / pp of micro-batch (k / pp v) pp + k mod pp going forward, at or above it
 * chunk (k - L v) / G of micro-batch L + (k - L v) mod G; the chunks in reverse going backward; w =
 * min(2 (pp - s - 1) + (v - 1) G, K v) warmup forwards (all K v when K = pp), then forward w + i
 * and backward i together, then the remaining backwards. */
#ifndef BATON_PIPE_ORDER_H
#define BATON_PIPE_ORDER_H

#include <stdint.h>

/* Interleaved: the micro-batches of the last group, K - pp (floor(K / pp) - 1) (pp to
 * 2 pp - 1; K when K < pp). */
uint32_t pipe_order_last_group(uint32_t pp, uint32_t K);
/* Warmup forwards of stage s. */
uint32_t pipe_order_warmup(uint32_t pp, uint32_t v, uint32_t K, uint32_t s);
/* Interleaved virtual micro-batch k (< K v): its micro-batch and its chunk forward /
 * backward. */
uint32_t pipe_order_mb(uint32_t pp, uint32_t v, uint32_t K, uint32_t k);
uint32_t pipe_order_chunk(uint32_t pp, uint32_t v, uint32_t K, uint32_t k, int forward);

typedef struct pipe_pass {
    int forward; /* 1: a forward, 0: a backward */
    uint32_t mb, chunk;
} pipe_pass;

/* Stage s's pass i (< 2 K v) of the order; no list needed (the planner's replay of a
 * long step allocates nothing). */
pipe_pass pipe_order_at(uint32_t pp, uint32_t v, uint32_t K, uint32_t s, uint64_t i);
/* Stage s's 2 K v passes in order into out. */
void pipe_order(uint32_t pp, uint32_t v, uint32_t K, uint32_t s, pipe_pass *out);

#endif
