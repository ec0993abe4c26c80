/* The data-parallel gradient reduction overlapped with the backward (zero 0 and 1; ZeRO-2
 * and 3 reduce each unit as it finishes already, model_zero.h).
 *
 * Without it the gradients are reduced in one call after the step's last backward
 * (train_dp_update: an all-reduce, or under ZeRO-1 a reduce-scatter; under expert
 * parallelism one all-reduce per tensor). With it, during the backward, each unit's gradients
 * (model_n_units: the head, each layer, the embedding) are reduced as soon as the model reports
 * them complete (model.unit_grads_done), per-bucket in Megatron's terms with one bucket per unit:
 *  - zero 0: all-reduced, during the step's last backward;
 *  - zero 0 with expert parallelism: likewise, the routed experts' runs of the unit over
 *    the expert-data-parallel group (not at all where every holder of an expert is in
 *    the ep group), the rest over the dp group;
 *  - ZeRO-1: reduced (comm_reduce) to the rank whose shard holds them, one reduce per
 *    shard the unit touches, during the step's last backward, so each rank ends with its
 *    own shard's sums (the rest of its buffer is partial sums, never read): about the
 *    reduce-scatter's bytes;
 *  - ZeRO-1 with expert parallelism: likewise, each tensor's part of each rank's shard of
 *    the packs (train_dp.h: the dense tensors sharded over the dp group, the routed
 *    experts' over the edp group) reduced to that rank over the pack's group;
 * on a backend with side queues and groups whose collectives take a stream (CUDA +
 * NCCL), on a side queue that first waits for the ops' queue (an event behind the unit's
 * last gradient op): NCCL reduces the unit while the backward goes on with the units
 * before it; otherwise (the CPU engine with Gloo) at once, in the same places: the same
 * reductions and numbers, nothing overlaps.
 * Completing (train_dp_overlap_finish after the step's micro-batches) reduces any unit
 * that was not reported, waits for the side queue (the comm's timeout applies), orders the
 * ops' queue after it and marks the reduction done (train_dp.grads_reduced: the update
 * skips it, under ZeRO-1 it takes its shard from the gradient buffer). Reducing per unit instead of
 * the whole buffer changes only the order of float additions across ranks.
 *
 * Used when the group has more than one rank (or the routed experts have two holders or
 * more: the tp ranks folded in, dp x cp = 1), the units cover the gradient buffer, and
 * BATON_DP_OVERLAP is not "0": by default under zero 0 and 1 wherever a side queue
 * exists; BATON_DP_OVERLAP=1 uses it without one too (the CPU engine: the tests' way to
 * check the per-unit path). */
#ifndef BATON_TRAIN_DP_OVERLAP_H
#define BATON_TRAIN_DP_OVERLAP_H

#include "model.h"
#include "train_dp.h"
#include "util/err.h"

typedef enum train_dp_overlap_mode {
    OVERLAP_ALLREDUCE, /* zero 0 */
    OVERLAP_EXPERTS,   /* zero 0 with expert parallelism */
    OVERLAP_SHARDS,    /* ZeRO-1 */
    OVERLAP_EP_SHARDS, /* ZeRO-1 with expert parallelism (train_dp.h's packs) */
} train_dp_overlap_mode;

typedef struct train_dp_overlap {
    train_dp *dp;
    model *m;
    int on; /* set up for this stage */
    train_dp_overlap_mode mode;
    void *stream; /* the backend's side queue; NULL: each unit reduced at once */
    int n_units;
    unsigned char *done; /* (n_units) this pass's reduction is under way or done */
    int rc;              /* the first failure of this pass's reductions, a BT_ code */
    char why[256];       /* and its message */
    char desc[256];      /* train_dp_overlap_describe */
} train_dp_overlap;

/* Decides whether to overlap (see above) and sets up; zero is the stage's level. 0 or
 * BT_ENOMEM, BT_EIO. Off is not an error. */
int train_dp_overlap_init(train_dp_overlap *o, train_dp *dp, model *m, int zero, bt_diag *diag);
void train_dp_overlap_free(train_dp_overlap *o);
/* How the stage reduces its data-parallel gradients, for the log ("" when dp is 1). */
const char *train_dp_overlap_describe(const train_dp_overlap *o);

/* Before a micro-batch's backward (last: the step's last; interleaved pipelines: the last
 * micro-batch of the chunk, each chunk's units complete then): hooks the model's backward
 * where this pass reduces, unhooks it elsewhere. */
void train_dp_overlap_arm(train_dp_overlap *o, int last);
/* After the step's micro-batches: every unit reduced and waited for, 0 or BT_EIO. After
 * a failed step (step_failed) only what is under way is waited for; returns 0. */
int train_dp_overlap_finish(train_dp_overlap *o, int step_failed, bt_diag *diag);

#endif
