/* ZeRO-3 inside the model: the parameters of the stage are not held whole. The trainer
 * (train_zero.h) keeps each rank's share of every unit (model_n_units: the embedding, each
 * layer, the final norm with the head); the model holds at most two units' parameters
 * and two units' gradients at a time, in buffers of the largest unit's (padded) size.
 * ZeRO-2 is the same without the parameter buffers: a model made with cfg.zero2 holds its
 * parameters whole (params_mem) and no gradient buffer; only the gradients go through
 * the two unit buffers and their reductions, and nothing is gathered.
 *
 * The passes (model_pass.c) call, around each unit:
 *  - model_zero_forward(u, next) before its forward (and before the recomputed forward of
 *    full recomputation): u's parameters made resident (all-gathered, unless one of the
 *    buffers holds them already) and its views pointed there; then next (the unit the
 *    pass takes after u, -1 for none) prefetched into the other buffer;
 *  - model_zero_backward(u, next) before its backward: the same, and a gradient buffer
 *    for u zeroed (its previous unit's reduction accumulated first);
 *  - model_zero_backward_done after its backward: the gradients reduce-scattered;
 *  - model_zero_flush at the end of the backward: every reduction accumulated into the
 *    trainer's shard.
 * A unit's parameters stay valid until the weights change (model_zero_invalidate: the
 * trainer's update, model_weights_changed): so the backward finds the forward's last two
 * units resident, the next micro-batch's forward the backward's last two, and full
 * recomputation's backward its recomputed forward's unit.
 * With side queues (the trainer's, on a backend with streams and a group whose
 * collectives take one: CUDA + NCCL) the gathers run on one and the reductions on two
 * more (one per gradient buffer), each collective behind an event on the ops' queue (so
 * a buffer is not overwritten while an op still reads it) and on the other two side
 * queues (so the group's collectives run in the order they were issued, as one NCCL
 * communicator needs); the ops' queue waits (an event) only for the queue whose result
 * it uses, where it uses it, and only once the host has waited for that queue under the
 * comm's timeout (so no host sync on the ops' queue can hang on a collective that never
 * ends): a prefetched unit's gather overlaps the compute of the unit before it, a unit's
 * gradient reduction the backward of the next. Without them (the
 * CPU engine) the collectives complete when called, in the same order: the same
 * numbers.
 * The collectives themselves are the trainer's (model_zero_ops), over its data-parallel
 * group (under ep also the expert-data-parallel group and a copy of the ep group of its
 * own, train_zero.h); a failure is recorded in m->comm_err as the tensor-parallel
 * collectives' are.
 * With m->zw NULL (every layout but ZeRO-2 and ZeRO-3) the hooks do nothing. */
#ifndef BATON_MODEL_ZERO_H
#define BATON_MODEL_ZERO_H

#include <stddef.h>

#include "model.h"

enum { MODEL_ZERO_GATHER_Q = 0, MODEL_ZERO_QUEUES = 3 }; /* then a reduction queue per buffer */

typedef struct model_zero_ops {
    void *ctx;
    void *queue[MODEL_ZERO_QUEUES]; /* the side queues; NULL: collectives complete at once */
    /* Unit u's parameters, whole, into params (the buffer: padding may be overwritten). */
    int (*gather)(void *ctx, int u, float *params, void *stream);
    /* Unit u's gradients (in grads, zero past the unit's end) reduced over the group:
     * this rank's part left in grads, for accumulate once the queue has run it. */
    int (*reduce)(void *ctx, int u, float *grads, void *stream);
    void (*accumulate)(void *ctx, int u, const float *grads);
    /* Waits for what a side queue holds (the comm's timeout applies); 0 or BT_EIO. */
    int (*wait)(void *ctx, void *stream);
} model_zero_ops;

typedef struct model_zero_buf {
    float *params; /* (cap) */
    float *grads;  /* (cap) */
    int unit;      /* whose parameters params holds (or will, once the queue runs); -1 */
    int pending;   /* whose reduction in grads awaits accumulation; -1: none */
} model_zero_buf;

typedef struct model_zero {
    model_zero_ops ops;
    size_t cap; /* floats in each buffer: the largest unit, padded */
    model_zero_buf buf[2];
    int cur;      /* the buffer of the resident unit's parameters */
    int gcur;     /* the buffer of the unit in backward's gradients */
    int resident; /* the unit whose views point at the buffers; -1: none */
    int whole;    /* ZeRO-2: the parameters stay in params_mem; gradient buffers only */
    unsigned char ahead[MODEL_ZERO_QUEUES]; /* work the ops' queue has not waited for */
    size_t *unit_off; /* (model_n_units) each unit's first offset, then the stage's end */
} model_zero;

/* Switches m (initialized with cfg.zero3) to gathered parameters: four buffers of cap
 * floats, the collectives in ops; or m (initialized with cfg.zero2) to unit gradient
 * buffers: two of cap floats (ops.gather is not called). 0 or BT_ENOMEM. */
int model_zero_init(model *m, size_t cap, const model_zero_ops *ops, bt_diag *diag);
void model_zero_free(model *m);

void model_zero_forward(model *m, int u, int next);
void model_zero_backward(model *m, int u, int next);
void model_zero_backward_done(model *m, int u);
void model_zero_flush(model *m);
/* The shards changed: no buffer holds valid parameters any more. */
void model_zero_invalidate(model *m);

/* Makes u resident without gathering (initialization writes it, the trainer keeps its
 * share); its parameters' buffer. */
float *model_zero_place(model *m, int u);
/* Gathers u (the parameter dump); 0 or the error. */
int model_zero_fetch(model *m, int u);
/* The unit holding parameter offset off. */
int model_zero_unit_at(const model *m, size_t off);
/* Parameter and gradient pointers of offset off: into the buffers when its unit is
 * resident, else NULL (model_tensor_info); ZeRO-2's parameters always in params_mem. */
void model_zero_views(const model *m, size_t off, float **data, float **grad);
/* A gradient buffer (cap floats) the trainer may use as scratch between passes (after
 * model_zero_flush; the next backward zeroes it); NULL while a reduction is pending. */
float *model_zero_spare(model *m);

#endif
