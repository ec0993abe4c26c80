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
 * bounded by the group's timeout.
 *
 * The communication queue (pipeline_set_queue). Where the backend has side queues and the
 * group's operations take a stream (CUDA + NCCL), transfers run on a queue of their own
 * instead of the ops' queue, each behind an event recorded on the ops' queue (the data to
 * send is written, the buffer to receive into no longer read), and sends are not waited
 * for: the stage goes on while NCCL sends (stage 0's warmup forwards overlap their sends; a
 * send followed by a receive is waited for with it, one host round trip instead of two; in
 * non-interleaved 1F1B little else can overlap, each stage's next compute needing what it
 * receives). The host waits for the queue, under the group's watchdog, after a batch that
 * receives (the received data is used next), before a forward or backward that writes a
 * buffer still being sent (a forward: its slot's output; a backward, which writes the input
 * gradient: any), and when the schedule ends. The ops' queue never waits on the
 * communication queue by an event: a peer that died then surfaces as the watchdog's timeout
 * instead of a host blocked on the ops' queue. A failed send is reported by the next wait.
 * BATON_PP_OVERLAP=0 keeps every transfer on the ops' queue, waited for at once;
 * BATON_PP_OVERLAP=1 runs the deferred-send bookkeeping without a queue too (the CPU engine,
 * whose comm backends complete transfers before they return: the tests' way to run it). */
#ifndef BATON_PIPELINE_H
#define BATON_PIPELINE_H

#include <stddef.h>

#include "backend.h"
#include "comm.h"
#include "util/err.h"

/* One stage, as the schedule sees it. Every callback returns 0 or a negative BT_ code
 * (which stops the schedule). */
typedef struct pipeline_stage {
    void *ctx;
    /* Forward of micro-batch mb's model chunk `chunk` (0 unless interleaved,
     * pipe_schedule.h) in slot; on stages after the first its input is in input(ctx, slot),
     * on stages before the last it leaves its output in output(). */
    int (*forward)(void *ctx, int mb, int chunk, int slot);
    /* Backward of micro-batch mb's chunk in slot; on stages before the last the gradient
     * of its output is in grad(ctx); on stages after the first it leaves there the
     * gradient of its input. */
    int (*backward)(void *ctx, int mb, int chunk, int slot);
    float *(*input)(void *ctx, int slot);
    float *(*output)(void *ctx, int slot);
    float *(*grad)(void *ctx);
    /* Interleaved only: buffer i of those gradients are received into, and the move of
     * buffer i's into grad(ctx) before the backward that takes it. */
    float *(*grad_in)(void *ctx, int i);
    void (*take_grad)(void *ctx, int i);
} pipeline_stage;

typedef struct pipeline {
    comm *group; /* rank = stage; borrowed */
    int stage, stages;
    size_t count;           /* floats of one boundary activation (B*T*C) */
    backend *be;            /* borrowed; set with the queue */
    void *stream;           /* the communication queue (be's side queue) or NULL */
    int grad_sending;       /* a send of the input gradient is under way */
    unsigned char *sending; /* (slots) a send of the slot's output is under way; NULL: sends
                             * are waited for at once (no queue, BATON_PP_OVERLAP unset) */
    int n_sending;          /* slots allocated */
} pipeline;

/* Activation slots stage `stage` of `stages` needs for K micro-batches: min(K, stages -
 * stage). */
int pipeline_slots(int stages, int stage, int K);

/* group: the pipeline group (its size is the number of stages); count: floats of one
 * activation at a stage boundary. */
void pipeline_init(pipeline *p, comm *group, size_t count);

/* Sets up the communication queue (see above) for up to `slots` activation slots; off
 * (BATON_PP_OVERLAP=0, one stage, no queue) is not an error. 0, BT_ENOMEM or BT_EIO (no
 * queue could be made), with diag. */
int pipeline_set_queue(pipeline *p, backend *be, int slots, bt_diag *diag);
void pipeline_free(pipeline *p);
/* How the stage's transfers run, for the log ("" with one stage). */
const char *pipeline_describe(const pipeline *p);

/* Waits for every transfer under way on the communication queue (the group's watchdog
 * bounds it); nonzero on a failure, the buffers free either way. Nothing to do without
 * the deferred-send bookkeeping. */
int pipeline_wait_all(pipeline *p);
/* 1 if a send under way must be waited for before a forward into slot (its output, or the
 * gradient buffer, being sent) or, with slot -1, before a backward (any send). */
int pipeline_sends_pending(const pipeline *p, int slot);

/* Forward and backward of micro-batches 0 .. K-1 under 1F1B; a collective over the group.
 * A failed transfer returns BT_EIO with diag naming it. */
int pipeline_run_1f1b(pipeline *p, int K, const pipeline_stage *st, bt_diag *diag);

#endif
