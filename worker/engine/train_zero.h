/* ZeRO-2 and ZeRO-3 for the training loop (parallel.zero 2 | 3), over the data-parallel
 * group of the rank's tp slice and pipeline stage.
 *
 * Sharding is per unit (model_n_units: the embedding, each layer, the final norm with the
 * head): unit u of n parameters is padded to size * chunk_u, chunk_u = ceil(n / size) (size:
 * the unit's group's, the dp group's or, for an MoE layer under ep, the edp group's), and
 * rank r owns its elements [r chunk_u, r chunk_u + len_u) (len_u: chunk_u less padding).
 * The rank's shard is its chunks of every unit one after the other (base_u, the sum of
 * the earlier chunks); gradients, Adam moments and, under ZeRO-3, the fp32 parameters are
 * held in that layout only. Each unit can thus be gathered and reduced alone.
 *
 *  - ZeRO-2: the model holds its parameters whole but no gradient buffer (cfg.zero2,
 *    model_zero.h): each unit's backward writes its gradients into one of two unit
 *    buffers, which is reduce-scattered as soon as the unit is done (on a side queue where
 *    there is one, overlapped with the next unit's backward) and the rank's chunk added
 *    into its gradient shard; every micro-batch does so. After the sharded update each
 *    unit is all-gathered back into the whole parameters (through a unit buffer).
 *  - ZeRO-3: the model holds no full parameters or gradients (model_zero.h); each unit is
 *    all-gathered from the parameter shard before its forward and backward and its
 *    gradients reduce-scattered into the gradient shard after its backward. The update
 *    works on the shards; nothing is gathered after it.
 * The update is ZeRO-1's: the global norm from the shards' sums of squares (over the dp
 * group, then the tp/pp norm groups of train_dp), clipping, AdamW over the rank's
 * segments. Summing the micro-batches after (not before) the reduction changes only the
 * order of float additions.
 *
 * MoE layers (ep 1) are sharded like the rest; under ZeRO-3 the selection bias of
 * aux-loss-free balancing is nudged in the shard (train_zero_moe_bias).
 * Under expert parallelism an MoE layer's unit holds this ep rank's routed experts, which
 * its dp peers of other ep ranks do not hold: such a unit is sharded over the
 * expert-data-parallel group instead (the ranks holding the same experts; none with one
 * rank: the unit stays whole), and after its reduce-scatter over that group the dense
 * part of the rank's chunk (attention, norms, router, shared experts, bias: the same on
 * every rank) is all-reduced over the ep group, whose members hold the same chunk of it
 * (Megatron's distributed optimizer shards experts over the expert-data-parallel group
 * alike). So the unit's dense part is sharded ep times less than a dense unit; the norm
 * counts it on ep rank 0 only, and the checkpoint takes it from there.
 * With kv heads replicated over tp (tp > n_kv_heads) the k_proj and v_proj parts of the
 * gradient shard are summed over the ranks sharing a kv head after the step's
 * micro-batches (train_zero_reduce_tp): their shards lie alike (the same units, the same
 * dp rank). So, under sequence parallelism, are the MoE layers' parts of the shard over
 * the whole tp group (each tp rank ran them on its own rows: model_moe.h). */
#ifndef BATON_TRAIN_ZERO_H
#define BATON_TRAIN_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "model.h"
#include "model_zero.h"
#include "optim.h"
#include "train_dp.h"

typedef struct train_zero_unit {
    size_t offset, n; /* the unit's parameters in the stage's flat layout */
    size_t chunk;     /* ceil(n / size), size that of the unit's group */
    size_t base;      /* this rank's chunk in the shards */
    size_t len;       /* its parameters: [offset + rank chunk, + len) */
    int edp;          /* sharded over the expert-data-parallel group (an MoE layer under ep) */
    size_t xlo, xhi;  /* edp: its routed experts, [xlo, xhi) of the flat layout */
} train_zero_unit;

typedef struct train_zero {
    int level;   /* 2 or 3; 0: off (zero < 2, or one data-parallel rank) */
    backend *be; /* the model's: grads and params are its memory */
    comm *group;
    int rank, size;
    comm *edp, *ep;   /* expert parallelism: the expert-data-parallel group (NULL: one
                       * rank) and the ep group (borrowed); ep NULL without it */
    comm *ep_dense;   /* owned: the ep group's ranks, for the dense all-reduces only */
    int erank, esize; /* in edp (0 and 1 when NULL) */
    int ep_rank;      /* in ep (0 without it) */
    train_zero_unit *units;
    int n_units;
    size_t n;            /* shard floats: the chunks of every unit */
    size_t cap;          /* the largest unit, padded: its group's size * chunk */
    float *grads;        /* (n) reduced gradients, accumulated over the micro-batches */
    float *params;       /* (n) ZeRO-3: this rank's fp32 parameters; NULL under ZeRO-2 */
    optim_segment *segs; /* the rank's parts of the tensors, shard-relative */
    int *seg_unit;       /* (n_segs) the unit of each */
    size_t n_segs;
    optim_segment *norm_segs; /* the parts this rank counts in the norm (with norm groups, or
                               * under ep); NULL: every segment */
    size_t n_norm_segs;
    void *queue[MODEL_ZERO_QUEUES]; /* model_zero.h's side queues; NULL: none */
    const moe_config *moe;          /* ZeRO-3 with bias balancing: the model's MoE layers */
    size_t *bias_off;               /* (stage layers) each MoE layer's selection bias offset */
} train_zero;

/* Sets up level (2 or 3) over group for m (built with cfg.zero2 or cfg.zero3); segs are
 * the stage's tensors (full-buffer offsets); edp: the expert-data-parallel group under
 * expert parallelism (m->ep_group set; NULL when it has one rank). Switches m to unit
 * gradient buffers, and under level 3 to gathered parameters (model_zero_init). The
 * optimizer state to allocate is z->n floats. */
int train_zero_init(train_zero *z, int level, comm *group, comm *edp, model *m,
                    const optim_segment *segs, size_t n_segs, bt_diag *diag);
/* Under tp/pp: the tensors (full-buffer offsets) this rank counts in the gradient norm
 * (less, under ep, the dense copies ep rank 0 counts). */
int train_zero_set_norm(train_zero *z, const optim_segment *segs, size_t n);
void train_zero_free(train_zero *z);

/* ZeRO-3 with bias balancing (model.moe_bias_step): each MoE layer's selection bias is
 * nudged after the step in the shard, the part of it this rank holds (the step is per
 * expert). 0 or BT_ENOMEM; nothing to do otherwise. */
int train_zero_moe_bias(train_zero *z, model *m);
/* ZeRO-3: the initial weights (model_init_weights, unit by unit) into the shard. */
int train_zero_init_weights(train_zero *z, model *m, uint64_t seed);
/* Zeroes the gradient shard before a step's first micro-batch. */
void train_zero_begin_step(train_zero *z, model *m);
/* After each micro-batch's backward (whose units were reduce-scattered into the shard as
 * they finished): the collectives' verdict. */
int train_zero_after_backward(train_zero *z, model *m, bt_diag *diag);
/* tp > n_kv_heads: the shard's k_proj and v_proj gradients summed over kv, the ranks
 * sharing this rank's kv head (train_tp.h; NULL: nothing to do); under sequence
 * parallelism the MoE layers' over the model's tp group. 0 or BT_EIO. */
int train_zero_reduce_tp(train_zero *z, const model *m, comm *kv, bt_diag *diag);
/* The update (see the top); *norm gets the global norm before clipping. */
int train_zero_update(train_zero *z, train_dp *d, model *m, optim_adamw *o, const optim_hparams *hp,
                      double lr, double *norm, bt_diag *diag);

/* 0 where the tensor at off (stage offset) is the dense part of an expert-data-parallel
 * unit and this is not ep rank 0: its shards are another rank's copies (the norm and the
 * checkpoint take them from ep rank 0); else 1. */
int train_zero_counts(const train_zero *z, size_t off);
/* The part of the parameters [off, off + count) (one tensor) in this rank's shard: its
 * elements [*a, *b) at shard index *at; 0 when they do not meet. */
int train_zero_part(const train_zero *z, size_t off, size_t count, uint64_t *a, uint64_t *b,
                    size_t *at);

#endif
