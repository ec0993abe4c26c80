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
#include "pipeline_vp.h"

typedef struct train_pp {
    comm *group; /* borrowed; NULL: pp 1 */
    int stage, stages;
    int vp; /* model chunks per stage; > 1: interleaved (sched) */
    pipeline pipe;
    pipe_schedule sched; /* interleaved: this stage's list (pipe_schedule.h) */
} train_pp;

/* group: the pipeline group (NULL or size 1: none); count: floats of one boundary
 * activation (micro_batch * seq_len * dim); vp: virtual_stages, with K micro-batches a
 * step (vp > 1 makes the interleaved schedule: BT_EINVAL with diag where K is not a
 * multiple of the stages). */
int train_pp_init(train_pp *p, comm *group, size_t count, int vp, int K, bt_diag *diag);
void train_pp_free(train_pp *p);

/* x summed over the pipeline group, in place (each stage passes its part). */
int train_pp_sum(train_pp *p, double *x, bt_diag *diag);

/* Forward only through the stages for one batch (B <= model's max): the loss (*loss, on
 * every stage) of tokens/targets. Interleaved, the batch goes round the stages once per
 * chunk. */
int train_pp_eval_batch(train_pp *p, model *m, const int32_t *tokens, const int32_t *targets, int B,
                        int T, float *loss, bt_diag *diag);

#endif
