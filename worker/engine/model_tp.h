/* Tensor parallelism inside the model's passes (model_pass.c): Megatron-LM's two
 * communication operators, each a forward/backward pair over the tensor-parallel group.
 *
 *   f ("copy"):   forward identity,   backward all-reduce (sum) of the gradient.
 *                 Sits at the input of a column-parallel GEMM (qkv, gate/up, LM head):
 *                 every rank consumes the same replicated activation, so the gradient of
 *                 that activation is the sum of every rank's partial.
 *   g ("reduce"): forward all-reduce (sum), backward identity.
 *                 Sits at the output of a row-parallel GEMM (o_proj, down_proj) and of the
 *                 vocabulary-parallel embedding: the ranks' partial products sum to the
 *                 one-process output, and its gradient is already whole on every rank.
 *
 * With tp 1 (m->tp_group NULL) every operator is the identity and costs nothing. A failed
 * collective is recorded in m->comm_err (the first one wins) and later operators do
 * nothing; model_forward and model_backward return it. */
#ifndef BATON_MODEL_TP_H
#define BATON_MODEL_TP_H

#include <stddef.h>

#include "model.h"

static inline void model_tp_copy_forward(model *m, float *x, size_t n) {
    (void)m, (void)x, (void)n;
}
void model_tp_copy_backward(model *m, float *dx, size_t n);

void model_tp_reduce_forward(model *m, float *x, size_t n);
static inline void model_tp_reduce_backward(model *m, float *dx, size_t n) {
    (void)m, (void)dx, (void)n;
}

/* The vocabulary-parallel cross-entropy forward: partials of this rank's logits, gathered
 * over the group, combined into m->acts.losses and ce_lse on every rank alike. */
void model_tp_crossentropy_forward(model *m, int N);

#endif
