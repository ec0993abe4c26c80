/* What a resume of a checkpoint by its own stage needs unchanged, as the checkpoint's
 * manifest records it, besides the training data's counts (which the worker checks
 * against the files): the model's shape, which its tensors have, and what its data
 * position counts in — the seed (the sample order), the stage's seq_len (the window a
 * sample is) and a mixture's weights (how its draws interleave the sources): under other
 * values the position indexes other samples. Both the worker, as it loads a checkpoint,
 * and `baton run`, before it starts a stage's workers, judge a resume by these. A value
 * the manifest does not record (an older checkpoint) is not checked. A stage boundary
 * may change any of them but the shape: the next stage reads from its own position. */
#ifndef BATON_CKPT_RESUME_H
#define BATON_CKPT_RESUME_H

#include <stddef.h>

#include "manifest.pb-c.h"
#include "stage_spec.pb-c.h"

/* The first model dimension in which the checkpoint's model and `model` differ, named
 * as the recipe's key with both values ("model.dim 64 in the checkpoint, 96 in this
 * stage"), into out; 1 when one differs (or the manifest has no model), else 0. */
int ckpt_resume_model_diff(const Baton__Manifest *m, const Baton__Model *model, char *out,
                           size_t cap);
/* The first of seed, seq_len and the mixture's weights that the stage spec s gives
 * otherwise than checkpoint m was saved under, named with the old and the new value
 * ("seed 7 -> 8"), into out; 1 when one differs, else 0 (also when the checkpoint is at
 * or past the stage's steps: the stage reads no more samples). */
int ckpt_resume_order_diff(const Baton__Manifest *m, const Baton__StageSpec *s, char *out,
                           size_t cap);

#endif
