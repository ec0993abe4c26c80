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

/* The stage names the run trained its first n stages under, by position, as each one's
 * newest attempt's spec (RUN_DIR/specs/sNN-aMM.pb) says: names[i] NULL where none does.
 * Free with run_edit_names_free. */
void run_edit_names(const char *run_dir, size_t n, char **names);
/* The spec stage i's attempt ran under (RUN_DIR/specs/sNN-aMM.pb; attempt -1: the newest
 * attempt's), its name in the run directory into file; NULL when there is none or it
 * cannot be read. Free with baton__stage_spec__free_unpacked. */
Baton__StageSpec *run_edit_spec(const char *run_dir, size_t i, long attempt, char *file,
                                size_t cap);
void run_edit_names_free(char **names, size_t n);
/* Whether the recipe's stages were removed, inserted or reordered among the run's n_rec
 * stages (rec: their names, run_edit_names): 1 with what changed at the first such
 * position (into what, for a message: 'stage "b" was the run's stage 2 and is the
 * recipe's stage 3 now') and that position (*at); 0 when not (a stage renamed in place
 * and stages appended are no move). */
int run_edit_moved(char *const *rec, size_t n_rec, const recipe_doc *doc, char *what, size_t cap,
                   size_t *at);

#endif
