/* Where each stage's data ends and the next one's starts (run_ctx.h): by what the journal
 * recorded as the stages completed, not by the recipe, which a user may have edited since
 * (a completed stage's steps or global_batch), and which then no longer says what was read. */
#include <stdlib.h>

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
     * the stage may have been trained further since */
    c->data_end[k].has_done = r->has_data_end;
    c->data_end[k].done = r->has_data_end ? r->data_end : 0;
}

/* The stages before stage: the samples each one's rollbacks skipped (extra) and where each
 * one ended by its STAGE_COMPLETED record (ended, RECIPE_END_UNKNOWN where none says);
 * whether any of it is known. */
static int run_data_known(const run_ctx *c, uint32_t stage, uint64_t *extra, uint64_t *ended) {
    int any = 0;
    for (uint32_t k = 0; k < stage; k++) {
        int done = k < RUN_MAX_STAGES && c->data_end[k].has_done;
        ended[k] = done ? c->data_end[k].done : RECIPE_END_UNKNOWN;
        any |= done;
    }
    for (size_t k = 0; k < c->n_skips; k++)
        if (c->skips[k].stage < stage)
            extra[c->skips[k].stage] += c->skips[k].to - c->skips[k].from, any = 1;
    return any;
}

int run_data_start(const run_ctx *c, uint32_t stage, Baton__StageSpec *s) {
    uint64_t *extra = calloc((size_t)stage + 1, sizeof *extra);
    uint64_t *ended = calloc((size_t)stage + 1, sizeof *ended);
    int rc = extra && ended ? 0 : BT_ENOMEM;
    if (rc == 0 && run_data_known(c, stage, extra, ended))
        rc = recipe_data_start(c->doc, stage, extra, ended, &s->start_sample);
    free(extra), free(ended);
    return rc;
}
