/* Where two recipes differ, for a message: a run directory refusing a recipe that is not
 * the one kept with its run says what the differences are. */
#ifndef BATON_RECIPE_DIFF_H
#define BATON_RECIPE_DIFF_H

#include <stddef.h>

#include "recipe_load.h"
#include "util/buf.h"

/* Appends to out the first max differences of now against was, field by field (what the
 * YAML sets, not its bytes: comments and layout are no difference), "; " between them:
 * "FILE:LINE: PATH: OLD in the run's recipe, NEW here" (FILE:LINE: where now sets it,
 * when it does; PATH as recipe_pos has it, "stages[1].steps"), 'stages[2] ("c"): added' or
 * 'removed', then ", and N more" when there are more. Returns how many there are (0: the
 * same recipe). */
size_t recipe_diff(const recipe_doc *was, const recipe_doc *now, size_t max, bt_buf *out);

#endif
