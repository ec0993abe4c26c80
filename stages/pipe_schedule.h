/* The interleaved 1F1B schedule (Megatron-LM's forward_backward_pipelining_with_interleaving,
 * "virtual pipeline stages"): each of the pp stages holds v model chunks, chunk c of stage s
 * being the model's (c pp + s)-th of pp v equal runs of layers, so a micro-batch goes round
 * the stages v times (the last stage sends chunk c's output to stage 0's chunk c + 1) and
 * the bubble shrinks from (pp - 1)/(K + pp - 1) to (pp - 1)/(v K + pp - 1) of a step.
 *
 * The schedule is a list of actions per stage, made ahead (pipe_schedule_make) and then
 * run (pipeline_vp_run), so that a test can check every stage's list together: no
 * deadlock under batched point-to-point semantics, the same message order on both ends of
 * every pair (NCCL matches by order), every chunk of every micro-batch forward once and
 * backward once after it. The order is pipe_order.h's (groups of pp micro-batches as in
 * Megatron-Core's schedule table, the last group taking the remainder, each group
 * through chunk 0, then 1, ...; the chunks in reverse going backward); stage s runs
 * min(2 (pp - s - 1) + (v - 1) G, K v) warmup forwards, G the last group's micro-batches
 * (pp when pp divides K; all K v when K = pp), then one forward and one backward at a
 * time, then the remaining backwards; after each computation one batch of transfers
 * (comm_p2p) sends what it produced and receives what a later one needs, the stage that
 * leads that way taking what the other end finished pp - 1 steps before. K >= pp; when
 * pp does not divide K the larger last group keeps more chunks in flight (up to 2 pp - 1
 * micro-batches a group instead of pp: more slots and received-gradient buffers, the
 * planner counts them from these lists).
 *
 * Buffers. A slot holds one chunk's activations of one micro-batch from the receipt of its
 * input (or its forward, where nothing is received) to its backward; on the last stage the
 * last chunk's micro-batches take slots [0, head_slots), which also hold the head's
 * activations, the others the slots after them. A received output gradient waits in one
 * of grad_bufs buffers (grad_in) until its backward moves it to grad (take_grad). A
 * message's tag is 2 (mb pp v + w) (+ 1 for a gradient), w the receiving virtual stage
 * (c pp + s). Transfers run as pipeline_run_1f1b's do (pipeline.h): on the communication
 * queue where pipeline_set_queue made one (for `slots` slots), sends waited for only before
 * their buffer is written again (a forward into the slot, any backward), batches that
 * receive at once; else each completes on return. */
#ifndef BATON_PIPE_SCHEDULE_H
#define BATON_PIPE_SCHEDULE_H

#include <stdint.h>

#include "util/err.h"

typedef enum pipe_op_kind { PIPE_SEND = 0, PIPE_RECV = 1 } pipe_op_kind;

typedef enum pipe_buf {
    PIPE_BUF_OUTPUT,  /* send: a slot's output */
    PIPE_BUF_INPUT,   /* receive: a slot's input */
    PIPE_BUF_GRAD,    /* send: the gradient of the input the last backward left */
    PIPE_BUF_GRAD_IN, /* receive: a gradient buffer */
} pipe_buf;

typedef struct pipe_op {
    pipe_op_kind kind;
    int dir; /* +1: to / from the next stage (mod pp), -1: the previous */
    uint32_t tag;
    pipe_buf buf;
    int index;     /* the slot or gradient buffer */
    int mb, chunk; /* whose data (the receiver's chunk for a receive, the sender's for a send) */
} pipe_op;

typedef enum pipe_kind { PIPE_FORWARD, PIPE_BACKWARD, PIPE_XFER } pipe_kind;

typedef struct pipe_action {
    pipe_kind kind;
    int mb, chunk, slot; /* forward and backward */
    int grad_in;         /* backward: the buffer its gradient was received in; -1: the loss */
    int n_ops;           /* transfers */
    pipe_op ops[4];
} pipe_action;

typedef struct pipe_schedule {
    int stages, stage, K, v;
    pipe_action *a;
    int n, cap;
    int slots, head_slots, grad_bufs; /* what the stage needs */
} pipe_schedule;

/* Stage `stage` of `stages`' list for K micro-batches and v chunks per stage (v >= 2,
 * stages >= 2, K >= stages). 0, BT_EINVAL (with diag) or BT_ENOMEM. */
int pipe_schedule_make(int stages, int stage, int K, int v, pipe_schedule *s, bt_diag *diag);
void pipe_schedule_free(pipe_schedule *s);

/* Non-interleaved 1F1B (v = 1, stages >= 2, K >= 1) as the same kind of list, for the
 * planner's replay (stages/plan_pipe_time.c): the computations and batches of transfers
 * worker/engine/pipeline.c's pipeline_run_1f1b makes, in its order (receive the next
 * input, send the activation and receive the gradient together, send the gradient and
 * receive the next input together, ...), tags as above with chunk 0. The worker runs
 * pipeline_run_1f1b itself; slots and buffers are left -1. */
int pipe_schedule_make_1f1b(int stages, int stage, int K, pipe_schedule *s, bt_diag *diag);

#endif
