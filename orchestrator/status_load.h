/* A run's state as baton status shows it, loaded from its run directory: the journal
 * replayed (run_state.h), the kept recipe with the run's --set overrides, the last lines of
 * metrics.jsonl and valid.jsonl, and for a running run the process holding it
 * (run_holder.h). cmd_status.c words it as text or JSON; baton run's closing summary too. */
#ifndef BATON_STATUS_LOAD_H
#define BATON_STATUS_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "recipe.h"
#include "run/journal.h"
#include "run/run_holder.h"
#include "run/run_state.h"
#include "util/err.h"

/* A stage's latest step as metrics.jsonl has it; a field it lacks (or has as null) is
 * unknown. */
typedef struct status_last {
    int has_loss, has_tok, has_skipped;
    double time, loss, tok;
    double skipped; /* the stage's steps whose update was skipped, so far */
} status_last;

/* One line of metrics.jsonl, for the recent pace of the running stage. */
typedef struct status_point {
    double time;
    uint64_t step;
    uint32_t stage, attempt;
} status_point;

#define STATUS_RECENT 16 /* the lines the ETA's pace is taken over */

/* Which recipe the stages' planned steps and the ETA are of. */
typedef enum status_plan {
    STATUS_PLAN_NONE = 0, /* none: the kept recipe cannot be read, or it was edited after the
                           * running process read it and what that read is not kept */
    STATUS_PLAN_KEPT,     /* RUN_DIR/recipe.yaml, what runs or what a resume takes */
    STATUS_PLAN_RUNNING,  /* RUN_DIR_RUNNING_RECIPE: what the running process read, the kept
                           * recipe edited since (or missing, or not readable now) */
} status_plan;

/* Why RUN_DIR_RUNNING_RECIPE was not taken for STATUS_PLAN_RUNNING, where it was looked for. */
typedef enum status_copy {
    STATUS_COPY_TAKEN = 0, /* taken, or not looked for */
    STATUS_COPY_MISSING,   /* no such file: a baton older than the copy, a write that failed */
    STATUS_COPY_OTHER,     /* other bytes than the holder's record names (copy_crc32c) */
    STATUS_COPY_BAD,       /* cannot be read or parsed (copy_why) */
} status_copy;

typedef struct status_view {
    const char *dir;
    recipe_doc doc;
    int have_doc;
    Baton__JournalRecord **rec;
    size_t n;
    run_state st;
    int running;
    int has_holder; /* running, and the process holding it known (run_holder.h) */
    run_holder holder;
    run_holder_state holder_state; /* what its record is worth, when has_holder */
    int recipe_edited;             /* RUN_DIR/recipe.yaml is not what that process read */
    int kept_err;                  /* has_holder: errno reading RUN_DIR/recipe.yaml, or 0 */
    status_plan plan;              /* which recipe doc is, for the planned steps */
    status_copy copy;              /* why RUN_DIR_RUNNING_RECIPE was not taken */
    uint32_t copy_crc32c;          /* its CRC32C (STATUS_COPY_OTHER) */
    char copy_why[700];            /* why it cannot be read (STATUS_COPY_BAD) */
    int journal_rows;  /* the running process's recipe is not known (edited since, no copy):
                        * the rows are the journal's stages only */
    int not_started;   /* made by baton run or submit, no journal record yet */
    int creating;      /* being made by a baton run that holds it: no workdir, no journal */
    char job_id[64];   /* baton submit's job (RUN_DIR/job_id), or "" */
    char worker[4200]; /* the --worker the run was started with (RUN_DIR/worker), or "" */
    uint64_t m_step;   /* from metrics.jsonl's last line, if any */
    uint32_t m_stage;
    double m_step_time, m_loss, m_tok;
    int have_metrics;
    status_last last[RUN_MAX_STAGES];   /* per stage: its last line of metrics.jsonl */
    status_point recent[STATUS_RECENT]; /* the last lines, recent[n_lines % STATUS_RECENT] next */
    int has_valid[RUN_MAX_STAGES];      /* per stage: valid.jsonl's last line for it */
    double valid[RUN_MAX_STAGES];
    size_t n_lines;
    double now; /* unix seconds when status looked */
    /* the kept recipe's stages removed, inserted or reordered among the run's (which resume
     * refuses: run_edit_moved): what changed, and the rows then shown under the names the
     * run's stages trained with (rec) */
    int moved;
    char moved_what[600];
    char *rec_names[RUN_MAX_STAGES];
    size_t n_rec;
} status_view;

/* The run directory dir (kept as v->dir: it must outlive v) read into *v, the stages'
 * planned steps those of the recipe the running process read where the kept one was
 * edited since, or is missing or cannot be read now (status_plan), or with kept_only the
 * kept recipe's (baton run's closing
 * summary: what a resume takes next): 0, or BT_EINVAL (diag) when it is no run directory
 * (missing, not a directory, its journal not a file, missing or empty but not a new
 * run's: status_no_records) or its journal holds no whole record. Warnings (a damaged
 * journal's tail, a kept recipe that cannot be read, overrides changed since the run
 * started, stages moved; with the running process's recipe shown, the edited kept one
 * that the next resume cannot read or refuses for its stages moved) are said on stderr. */
int status_load(status_view *v, const char *dir, int kept_only, bt_diag *diag);
void status_free(status_view *v);

#endif
