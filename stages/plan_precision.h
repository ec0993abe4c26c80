/* The plan's note on a stage's number format: what range its GEMM inputs have and so
 * whether the stage needs loss scaling (fp16) or not (bf16, fp8, fp32). */
#ifndef BATON_PLAN_PRECISION_H
#define BATON_PLAN_PRECISION_H

#include <stdio.h>

#include "recipe.pb-c.h"
#include "util/buf.h"

/* The peak rate a stage of precision prec is measured against, in FLOP/s (0: not
 * given): fp8 its own (0: 2 x bf16), fp32 its own (0: bf16 / 2, the TF32 tensor-core
 * rate), bf16 and fp16 the bf16 peak. The plan's step time and the worker's logged MFU
 * both use it. gpu may be NULL. */
double plan_peak_flops(const Baton__Gpu *gpu, Baton__Precision__Type prec);

/* Whether a stage of precision p after a stage of precision before (NULL: none, or fp32)
 * starts from the loss scale that stage ended with rather than its own
 * loss_scale.initial, as the worker does (a hand-off keeps the fp16 scaler with the
 * moments): both fp16, and the stage without optimizer.reset (reset). */
int plan_scale_carried(const Baton__Precision *before, const Baton__Precision *p, int reset);

/* One or two "precision ..." lines of `baton plan`'s text report; p may be NULL (fp32).
 * carried_from: the stage before, whose loss scale an fp16 stage starts from instead of
 * its loss_scale.initial (plan_scale_carried), else NULL; init: the recipe's init names
 * the checkpoint the stage starts from (an fp16 stage's carries its scale). */
void plan_precision_text(FILE *f, const Baton__Precision *p, const char *carried_from, int init);

/* The same for `baton plan --json`, into b: "loss_scale": null but for an fp16 stage,
 * {"source": "initial" (its loss_scale.initial), "carried" (the one the stage before
 * ended with, named in "carried_from"; initial not used) or "init" (the one init's
 * checkpoint ended with where an fp16 stage saved it, else initial), "carried_from"
 * (null unless carried), "initial", "growth_factor", "growth_interval",
 * "backoff_factor", "min"}, then ", ". */
void plan_precision_json(bt_buf *b, const Baton__Precision *p, const char *carried_from, int init);

#endif
