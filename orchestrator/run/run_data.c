/* Where each stage's data ends and the next one's starts (run_ctx.h): by what the journal
 * recorded as the stages completed, not by the recipe, which a user may have edited since
 * (a completed stage's steps or global_batch), and which then no longer says what was read. */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/ckpt.h"
#include "run_ctx.h"

void run_data_end_seen(run_ctx *c, uint32_t stage, const Baton__Manifest *m) {
    if (stage >= RUN_MAX_STAGES || m == NULL || !m->has_data_position) return;
    c->data_end[stage].final = m->data_position + m->skipped_samples;
    c->data_end[stage].has_final = 1;
}

void run_data_end_fill(run_ctx *c, Baton__JournalRecord__Kind kind, uint32_t stage,
                       Baton__JournalRecord *r) {
    if (kind != BATON__JOURNAL_RECORD__KIND__STAGE_COMPLETED || stage >= RUN_MAX_STAGES ||
        !c->data_end[stage].has_final)
        return;
    r->has_data_end = 1, r->data_end = c->data_end[stage].final;
}

void run_data_note_record(run_ctx *c, const Baton__JournalRecord *r) {
    uint32_t k = r->stage_index;
    if (r->kind != BATON__JOURNAL_RECORD__KIND__STAGE_COMPLETED || k >= RUN_MAX_STAGES) return;
    /* a completion without it (an older journal) leaves an earlier one's end unknown too:
     * the stage may have been trained further since; its final checkpoint, at the step
     * the record gives, tells (run_data_old_end) */
    c->data_end[k].has_done = r->has_data_end;
    c->data_end[k].done = r->has_data_end ? r->data_end : 0;
    c->data_end[k].has_old = !r->has_data_end && r->has_step;
    c->data_end[k].old_step = r->step;
}

/* Where stage k ended by its final checkpoint at the step of its STAGE_COMPLETED record
 * without data_end (an older baton's: its manifest records the data position): 1 and
 * *end, or 0 when that checkpoint is gone or does not say (its name in name). */
static int run_data_old_end(const run_ctx *c, uint32_t k, uint64_t *end, char *name, size_t cap) {
    char root[4200], dir[4300];
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    ckpt_name(k, c->data_end[k].old_step, name, cap);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int ok = ckpt_manifest_read(dir, &m, &d) == 0 && m->model != NULL && m->has_step &&
             m->step == c->data_end[k].old_step && m->stage_final && m->has_data_position &&
             ckpt_stage_relation(m, run_recipe_name(c), k) == CKPT_SAME_STAGE;
    if (ok) *end = m->data_position + m->skipped_samples;
    if (m) baton__manifest__free_unpacked(m, NULL);
    return ok;
}

/* The stages before stage: the samples each one's rollbacks skipped (extra) and where each
 * one ended by its STAGE_COMPLETED record or, an older baton's without it, by its final
 * checkpoint (ended, RECIPE_END_UNKNOWN where neither says: lost[k] set for such a record);
 * whether any of it is known. */
static int run_data_known(const run_ctx *c, uint32_t stage, uint64_t *extra, uint64_t *ended,
                          int *lost) {
    int any = 0;
    for (uint32_t k = 0; k < stage; k++) {
        char name[64];
        int done = k < RUN_MAX_STAGES && c->data_end[k].has_done;
        ended[k] = done ? c->data_end[k].done : RECIPE_END_UNKNOWN;
        if (!done && k < RUN_MAX_STAGES && c->data_end[k].has_old)
            lost[k] = !(done = run_data_old_end(c, k, &ended[k], name, sizeof name));
        any |= done;
    }
    for (size_t k = 0; k < c->n_skips; k++)
        if (c->skips[k].stage < stage)
            extra[c->skips[k].stage] += c->skips[k].to - c->skips[k].from, any = 1;
    return any;
}

/* Stage k's end, taken from the recipe for stage's start (start): said once, where it
 * decides the start (another end of k moves it). */
static void run_data_say_lost(run_ctx *c, uint32_t stage, uint32_t k, const uint64_t *extra,
                              uint64_t *ended, uint64_t start) {
    uint64_t moved = start;
    ended[k] = RECIPE_END_UNKNOWN - 1; /* as far as can be: the start follows if k decides it */
    if (recipe_data_start(c->doc, stage, extra, ended, &moved) != 0 || moved == start) return;
    char name[64];
    ckpt_name(k, c->data_end[k].old_step, name, sizeof name);
    c->data_end[k].said = 1;
    run_err(c,
            "stage \"%s\" completed under an older baton, which did not journal where its data "
            "ended, and its final checkpoint %s/%s is gone: stage \"%s\" starts at global "
            "sample %llu, where the recipe's steps and global_batch say it ended (edited since "
            "it completed, it re-reads or skips samples: put them back)\n",
            c->doc->recipe->stages[k]->name, CKPT_ROOT_IN_RUN, name,
            c->doc->recipe->stages[stage]->name, (unsigned long long)start);
}

int run_data_start(run_ctx *c, uint32_t stage, Baton__StageSpec *s) {
    uint64_t *extra = calloc((size_t)stage + 1, sizeof *extra);
    uint64_t *ended = calloc((size_t)stage + 1, sizeof *ended);
    int *lost = calloc((size_t)stage + 1, sizeof *lost);
    int rc = extra && ended && lost ? 0 : BT_ENOMEM;
    if (rc == 0 && run_data_known(c, stage, extra, ended, lost))
        rc = recipe_data_start(c->doc, stage, extra, ended, &s->start_sample);
    for (uint32_t k = 0; rc == 0 && k < stage && k < RUN_MAX_STAGES; k++)
        if (lost[k] && !c->data_end[k].said) {
            uint64_t was = ended[k];
            run_data_say_lost(c, stage, k, extra, ended, s->start_sample);
            ended[k] = was;
        }
    free(extra), free(ended), free(lost);
    return rc;
}
