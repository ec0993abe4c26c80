/* The plan's note on a stage's number format: what range its GEMM inputs have and so
 * whether the stage needs loss scaling (fp16) or not (bf16, fp8, fp32). */
#ifndef BATON_PLAN_PRECISION_H
#define BATON_PLAN_PRECISION_H

#include <stdio.h>

#include "recipe.pb-c.h"

/* One or two "precision ..." lines of `baton plan`'s text report; p may be NULL (fp32). */
void plan_precision_text(FILE *f, const Baton__Precision *p);

#endif
