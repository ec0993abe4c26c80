/* Pipeline parallelism for the training loop. The schedule (pipeline.h) runs each step's
 * micro-batches through the stages; what the loop adds around it is
 *  - the step loss: only the last stage computes it, so it is summed over the pipeline
 *    group (the other stages add 0) and every stage reports the true mean;
 *  - the gradient norm: each stage's sum of squares over its own parameters is added over
 *    the pipeline group (train_dp_set_norm), on top of the tp and dp reductions;
 *  - evaluation: a forward-only pass through the stages, micro-batch after micro-batch.
 * AdamW and ZeRO-1 need nothing: each stage updates (and shards over dp) its own buffer. */
#ifndef BATON_TRAIN_PP_H
#define BATON_TRAIN_PP_H

#include "comm.h"
#include "model.h"
#include "pipeline.h"

typedef struct train_pp {
    comm *group; /* borrowed; NULL: pp 1 */
    int stage, stages;
    pipeline pipe;
} train_pp;

/* group: the pipeline group (NULL or size 1: none); count: floats of one boundary
 * activation (micro_batch * seq_len * dim). */
void train_pp_init(train_pp *p, comm *group, size_t count);

/* x summed over the pipeline group, in place (each stage passes its part). */
int train_pp_sum(train_pp *p, double *x, bt_diag *diag);

/* Forward only through the stages for one batch (B <= model's max): the loss (*loss, on
 * every stage) of tokens/targets. */
int train_pp_eval_batch(train_pp *p, model *m, const int32_t *tokens, const int32_t *targets, int B,
                        int T, float *loss, bt_diag *diag);

#endif
