/* Tensor parallelism for the training loop. The model does the per-layer communication
 * (model_tp.h); what is left to the loop after the last micro-batch of a step is
 *  - the kv heads replicated when tp > n_kv_heads: their gradients summed over the ranks
 *    sharing a head (a sub-group of the tp group, made here), so the copies stay equal;
 *  - under sequence parallelism, the MoE layers' gradients (each tp rank ran them on its
 *    own rows: model_moe.h) summed over the tp group;
 *  - the gradient norm: every rank's sum of squares over the gradients it counts (its own
 *    slices, and each replicated tensor on one rank only: model_tensor.replica 0) added
 *    over the tp group, on top of the data-parallel reduction (train_dp);
 *  - the fp8 amaxes: the maximum over the tp group, so that a sharded GEMM's scales are
 *    those of the whole tensor and every rank keeps the same ones. */
#ifndef BATON_TRAIN_TP_H
#define BATON_TRAIN_TP_H

#include <stddef.h>

#include "comm.h"
#include "model.h"

typedef struct train_tp {
    comm *group; /* borrowed; NULL: tp 1 */
    comm *kv;    /* owned: the ranks of group sharing this rank's kv head; NULL if none */
    int rank, size;
} train_tp;

/* group: the tensor-parallel group (NULL or size 1: none); cfg: the model's config (its
 * tp and n_kv_heads decide whether kv heads are replicated). Collective over group. */
int train_tp_init(train_tp *p, comm *group, const model_config *cfg, bt_diag *diag);
void train_tp_free(train_tp *p);

/* After the last micro-batch: the replicated kv heads' gradients summed, and under
 * sequence parallelism the MoE layers' (zero 0 and 1; ZeRO-2/3: train_zero_reduce_tp). */
int train_tp_reduce_grads(train_tp *p, model *m, bt_diag *diag);
/* Element-wise maximum over the tp group, in place. */
int train_tp_max(train_tp *p, float *x, size_t n, bt_diag *diag);

#endif
