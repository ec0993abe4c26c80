/* Pipeline parallelism's schedule: non-interleaved 1F1B (PipeDream-Flush, Megatron-LM's
 * forward_backward_pipelining_without_interleaving) over the K micro-batches of a step.
 * The schedule knows nothing about layers: it calls the stage's forward and backward
 * through pipeline_stage and moves the activations at the stage boundaries point to
 * point over the pipeline group (rank = stage).
 *
 * Stage s runs min(pp - 1 - s, K) warmup forwards, then alternates one forward and one
 * backward, then runs the remaining backwards. A micro-batch's activations stay stored
 * from its forward to its backward, so a stage holds at most pipeline_slots() of them;
 * micro-batch j lives in slot j % slots (backwards retire micro-batches in the order the
 * forwards started them, so slot j % slots is free again when j starts).
 *
 * Messages: the output of micro-batch j goes to the next stage with tag 2j, the gradient
 * of its input to the previous stage with tag 2j + 1. Where a stage both sends and
 * receives (the steady phase) both transfers are posted together (comm_p2p), so
 * neighbours that send to each other at the same time cannot deadlock; every wait is
 * bounded by the group's timeout. */
#ifndef BATON_PIPELINE_H
#define BATON_PIPELINE_H

#include <stddef.h>

#include "comm.h"
#include "util/err.h"

/* One stage, as the schedule sees it. Every callback returns 0 or a negative BT_ code
 * (which stops the schedule). */
typedef struct pipeline_stage {
    void *ctx;
    /* Forward of micro-batch mb in slot; on stages after the first its input is in
     * input(ctx, slot), on stages before the last it leaves its output in output(). */
    int (*forward)(void *ctx, int mb, int slot);
    /* Backward of micro-batch mb in slot; on stages before the last the gradient of its
     * output is in grad(ctx); on stages after the first it leaves there the gradient of
     * its input. */
    int (*backward)(void *ctx, int mb, int slot);
    float *(*input)(void *ctx, int slot);
    float *(*output)(void *ctx, int slot);
    float *(*grad)(void *ctx);
} pipeline_stage;

typedef struct pipeline {
    comm *group; /* rank = stage; borrowed */
    int stage, stages;
    size_t count; /* floats of one boundary activation (B*T*C) */
} pipeline;

/* Activation slots stage `stage` of `stages` needs for K micro-batches: min(K, stages -
 * stage). */
int pipeline_slots(int stages, int stage, int K);

/* group: the pipeline group (its size is the number of stages); count: floats of one
 * activation at a stage boundary. */
void pipeline_init(pipeline *p, comm *group, size_t count);

/* Forward and backward of micro-batches 0 .. K-1 under 1F1B; a collective over the group.
 * A failed transfer returns BT_EIO with diag naming it. */
int pipeline_run_1f1b(pipeline *p, int K, const pipeline_stage *st, bt_diag *diag);

#endif
