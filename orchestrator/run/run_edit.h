/* A run's kept recipe (RUN_DIR/recipe.yaml) edited between runs, against the history its
 * journal, specs and checkpoints record. The journal and the checkpoints tie a stage's
 * history to its position in the recipe and to the recipe's name, so stages moved,
 * removed or inserted before stages the run trained, and the recipe renamed under a stage
 * in progress, are refused before any worker starts; a stage renamed in place and stages
 * appended are taken. A run that completed takes more work: stages appended after its
 * last, or more steps for that last stage (run_edit_work_left). */
#ifndef BATON_RUN_EDIT_H
#define BATON_RUN_EDIT_H

#include <stddef.h>

#include "recipe.h"
#include "run_state.h"

/* Whether stage i, completed, is to be trained further: it is the last stage the run has
 * any history of and the recipe now gives it more steps than it completed with. */
int run_edit_extends(const recipe_doc *doc, const run_state *st, size_t i);
/* Index + 1 of the recipe's first stage with work left (not completed, or extended), 0
 * when every stage is done. */
size_t run_edit_work_left(const recipe_doc *doc, const run_state *st);
/* What that work is, for a message: 'stage "c" (new)' or 'stage "b" (15 steps, completed
 * with 10)'; "" when none. */
void run_edit_work_text(const recipe_doc *doc, const run_state *st, char *out, size_t cap);

#endif
