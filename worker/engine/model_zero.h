/* ZeRO-3 inside the model: the parameters of the stage are not held whole. The trainer
 * (train_zero.h) keeps each rank's share of every unit (model_n_units: the embedding, each
 * layer, the final norm with the head); the model holds one unit's parameters and one
 * unit's gradients at a time, in two buffers of the largest unit's (padded) size.
 *
 * The passes (model_pass.c) call, around each unit:
 *  - model_zero_forward before its forward (and before the recomputed forward of full
 *    recomputation): the unit's parameters are all-gathered into the buffer and its views
 *    point there;
 *  - model_zero_backward before its backward: gathered again, the gradient buffer zeroed;
 *  - model_zero_backward_done after its backward: the gradients reduce-scattered into the
 *    trainer's shard (the gradient buffer is then free again).
 * So every unit is gathered twice per micro-batch (a layer three times under full
 * recomputation) and its gradients reduce-scattered once. The collectives themselves are
 * the trainer's (model_zero_ops), over its data-parallel group; a failure is recorded in
 * m->comm_err as the tensor-parallel collectives' are. With m->zw NULL (every layout but
 * ZeRO-3) the hooks do nothing. */
#ifndef BATON_MODEL_ZERO_H
#define BATON_MODEL_ZERO_H

#include <stddef.h>

#include "model.h"

typedef struct model_zero_ops {
    void *ctx;
    /* Unit u's parameters, whole, into params (the buffer: padding may be overwritten). */
    int (*gather)(void *ctx, int u, float *params);
    /* Unit u's gradients (in grads, zero past the unit's end) reduced into the shard;
     * grads may be overwritten. */
    int (*reduce)(void *ctx, int u, float *grads);
} model_zero_ops;

typedef struct model_zero {
    model_zero_ops ops;
    size_t cap;       /* floats in each buffer: the largest unit, padded */
    float *params;    /* (cap) the resident unit's parameters */
    float *grads;     /* (cap) the unit in backward's gradients */
    int resident;     /* the unit whose parameters are in params; -1: none */
    size_t *unit_off; /* (model_n_units) each unit's first offset, then the stage's end */
} model_zero;

/* Switches m (initialized with cfg.zero3) to gathered parameters: buffers of cap floats
 * each, the collectives in ops. 0 or BT_ENOMEM. */
int model_zero_init(model *m, size_t cap, const model_zero_ops *ops, bt_diag *diag);
void model_zero_free(model *m);

void model_zero_forward(model *m, int u);
void model_zero_backward(model *m, int u);
void model_zero_backward_done(model *m, int u);

/* Makes u resident without gathering (initialization writes it, the trainer keeps its
 * share). */
void model_zero_place(model *m, int u);
/* Gathers u (the parameter dump; a resident unit may predate the last update); 0 or the
 * error. */
int model_zero_fetch(model *m, int u);
/* The unit holding parameter offset off. */
int model_zero_unit_at(const model *m, size_t off);
/* Parameter and gradient pointers of offset off: into the buffers when its unit is
 * resident, else NULL (model_tensor_info). */
void model_zero_views(const model *m, size_t off, float **data, float **grad);

#endif
