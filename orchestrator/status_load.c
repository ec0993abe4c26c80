/* A run's state read from its run directory for baton status (status_load.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/crc32c.h"
#include "run/run_dir.h"
#include "run/run_edit.h"
#include "status_load.h"
#include "util/file.h"

/* The names the run's stages trained with (their attempts' specs), for rows not the
 * recipe's. */
static void status_rec_names(status_view *v) {
    v->n_rec = v->st.n_stages < RUN_MAX_STAGES ? v->st.n_stages : RUN_MAX_STAGES;
    run_edit_names(v->dir, v->n_rec, v->rec_names);
}

/* The kept recipe against the run's stages (run_edit_moved): moved, the rows are the run's
 * stages under the names they trained with, and a warning says why. */
static void status_check_moved(status_view *v) {
    size_t at = 0;
    status_rec_names(v);
    v->moved =
        run_edit_moved(v->rec_names, v->n_rec, &v->doc, v->moved_what, sizeof v->moved_what, &at);
    if (v->moved)
        fprintf(stderr,
                "baton status: warning: the kept recipe (%s/recipe.yaml) no longer matches "
                "the run's stages: %s; 'baton resume' refuses it until they are back in their "
                "order. Shown: the run's stages under the names they trained with\n",
                v->dir, v->moved_what);
}

static double status_num(const char *line, const char *key) {
    const char *p = strstr(line, key);
    return p ? strtod(p + strlen(key), NULL) : 0;
}

/* The number after key in line; 0 when key is missing or its value is not a number (a
 * null included). */
static int status_field(const char *line, const char *key, double *out) {
    return bt_json_line_num(line, key, out) == 0 && !isnan(*out);
}

static void status_metrics_line(status_view *v, const char *line) {
    double stage, x;
    if (!status_field(line, "\"stage_index\": ", &stage) || stage < 0 || stage >= RUN_MAX_STAGES)
        return;
    status_last *l = &v->last[(size_t)stage];
    l->time = status_field(line, "\"time\": ", &x) ? x : 0;
    l->has_loss = status_field(line, "\"loss\": ", &l->loss);
    l->has_tok = status_field(line, "\"tokens_per_s\": ", &l->tok);
    l->has_skipped = status_field(line, "\"skipped_steps\": ", &l->skipped);
    double step, attempt;
    if (!status_field(line, "\"step\": ", &step) || !status_field(line, "\"attempt\": ", &attempt))
        return;
    v->recent[v->n_lines++ % STATUS_RECENT] = (status_point){.time = l->time,
                                                             .step = (uint64_t)step,
                                                             .stage = (uint32_t)stage,
                                                             .attempt = (uint32_t)attempt};
}

/* Each whole line of RUN_DIR/name to on_line; a torn line (or one longer than any baton
 * writes) is skipped. Returns the last line it passed on into last ("" for none). */
static void status_jsonl(status_view *v, const char *name,
                         void (*on_line)(status_view *v, const char *line), char *last,
                         size_t cap) {
    char path[4200], line[4096];
    last[0] = '\0';
    snprintf(path, sizeof path, "%s/%s", v->dir, name);
    FILE *f = bt_fopen_private(path, "r"); /* a FIFO there is refused, never waited on */
    if (f == NULL) return;
    while (fgets(line, sizeof line, f)) {
        if (strchr(line, '\n') == NULL) continue;
        snprintf(last, cap, "%s", line);
        on_line(v, line);
    }
    fclose(f);
}

static void status_metrics(status_view *v) {
    char last[4096];
    status_jsonl(v, "metrics.jsonl", status_metrics_line, last, sizeof last);
    if (last[0] == '\0') return;
    v->have_metrics = 1;
    v->m_step = (uint64_t)status_num(last, "\"step\": ");
    v->m_stage = (uint32_t)status_num(last, "\"stage_index\": ");
    v->m_step_time = status_num(last, "\"step_time_s\": ");
    v->m_loss = status_num(last, "\"loss\": ");
    v->m_tok = status_num(last, "\"tokens_per_s\": ");
}

/* A stage's closing validation loss from a line of valid.jsonl (the last for it stays). */
static void status_valid_line(status_view *v, const char *line) {
    double stage, loss;
    if (!status_field(line, "\"stage_index\": ", &stage) || stage < 0 || stage >= RUN_MAX_STAGES ||
        !status_field(line, "\"valid_loss\": ", &loss))
        return;
    v->has_valid[(size_t)stage] = 1, v->valid[(size_t)stage] = loss;
}

static void status_valid(status_view *v) {
    char last[4096];
    status_jsonl(v, "valid.jsonl", status_valid_line, last, sizeof last);
}

/* The run's --set overrides applied to doc, so that step counts are the run's: those the
 * journal kept as the run started (with warn, a warning when RUN_DIR/overrides is lost,
 * cannot be read — a FIFO, a link, over 1 MiB — or differs, which resume refuses), else
 * RUN_DIR/overrides. */
static void status_apply_overrides(const status_view *v, recipe_doc *doc, int warn, bt_diag *diag) {
    char path[4200], *kept = NULL, what[200];
    size_t kept_n = 0;
    uint32_t crc = 0;
    snprintf(path, sizeof path, "%s/overrides", v->dir);
    int have = bt_read_private(path, 1 << 20, 0, &kept, &kept_n) == 0, err = errno;
    const Baton__JournalRecord *rs = journal_run_started(v->rec, v->n);
    const char *started = rs && rs->overrides ? rs->overrides : NULL;
    if (started) crc = rs->overrides_crc32c;
    if (have)
        snprintf(what, sizeof what, "was changed since the run started");
    else if (err == ENOENT)
        snprintf(what, sizeof what, "is missing since the run started");
    else
        snprintf(what, sizeof what, "cannot be read (%s)", bt_file_why(err));
    if (warn && started && (!have || crc32c_update(0, kept, kept_n) != crc))
        fprintf(stderr,
                "baton status: warning: %s %s; showing the run's own overrides, which the "
                "journal keeps\n",
                path, what);
    const char *text = started ? started : have ? kept : "";
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        char line[1024];
        if (len > 0 && len < sizeof line) {
            memcpy(line, p, len);
            line[len] = '\0';
            recipe_apply_set(doc, line, diag);
        }
        p += len + (p[len] == '\n');
    }
    free(kept);
}

/* Whether dir is a run directory baton run or submit made (RUN_DIR/workdir) whose run
 * has not started: no journal record yet, and no checkpoint or attempt's spec (a run
 * whose journal was lost is no new one). */
static int status_is_new_run(const char *dir) {
    run_dir d = {.lock_fd = -1};
    char what[300];
    snprintf(d.path, sizeof d.path, "%s", dir);
    if (!run_dir_has_file(dir, "workdir", NULL)) return 0;
    bt_diag ignore;
    bt_diag_init(&ignore);
    return run_dir_has_history(&d, what, sizeof what, &ignore) == 0;
}

/* A one-line file of the run directory (job_id) into out, its line break dropped; "" when
 * it is missing. */
static void status_read_line(const char *dir, const char *name, char *out, size_t cap) {
    char path[4200], *text = NULL;
    size_t n = 0;
    out[0] = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (bt_read_private(path, 4096, 0, &text, &n) != 0) return;
    snprintf(out, cap, "%.*s", (int)strcspn(text, "\n"), text);
    free(text);
}

/* A journal that is missing or empty (journal says which) in dir, not a new run's: a run
 * baton run is making now (it holds the lock, and writes the journal once the directory is
 * ready, before any attempt's spec or checkpoint: *creating set, 0), one whose journal was
 * lost while a baton run holds it (checkpoints or specs in it) or after (what baton resume
 * says), or no run directory at all (BT_EINVAL). */
static int status_no_records(const char *dir, const char *journal, int *creating, bt_diag *diag) {
    run_dir d = {.lock_fd = -1, .dir_lock_fd = -1};
    char what[300];
    bt_diag ignore;
    bt_diag_init(&ignore);
    snprintf(d.path, sizeof d.path, "%s", dir);
    int history = run_dir_has_history(&d, what, sizeof what, &ignore) > 0;
    if (run_dir_busy(dir) && !history) {
        *creating = 1;
        return 0;
    }
    if (history && run_dir_busy(dir))
        bt_diag_set(diag,
                    "%s/%s is missing or empty, but a baton run holds this directory and a run "
                    "already worked in it (it holds %s): the journal was lost while the run "
                    "works (one whose journal is removed stops); without it baton cannot tell "
                    "which stages completed, and baton resume refuses it too; restore the "
                    "journal, or start a new run in another --run-dir",
                    dir, JOURNAL_FILE, what);
    else if (history)
        bt_diag_set(diag,
                    "%s/%s is missing or empty, but a run already worked in this directory (it "
                    "holds %s): without its journal baton cannot tell which stages completed, "
                    "and baton resume refuses it too; restore the journal, or start a new run "
                    "in another --run-dir (a checkpoint here can be its recipe's init)",
                    dir, JOURNAL_FILE, what);
    else
        bt_diag_set(diag, "%s: not a run directory (%s)", dir, journal);
    return BT_EINVAL;
}

/* The kept recipe (stage names, planned steps); one that cannot be read is said, as its
 * stages are shown as '?' without their steps then, or with journal_rows (what runs is not
 * known either) under the names they trained with. */
static int status_load_recipe(status_view *v, const char *recipe, int journal_rows) {
    bt_diag d;
    bt_diag_init(&d);
    if (recipe_load_kept(recipe, &v->doc, &d) == 0) return 1;
    fprintf(stderr,
            "baton status: warning: the run's kept recipe cannot be read (%s): %s and planned "
            "steps as '?' (null in --json); 'baton resume' refuses it too until it is mended\n",
            d.msg[0] ? d.msg : recipe,
            journal_rows ? "the stages the run started are shown under the names they trained "
                           "with"
                         : "stage names are shown as '?'");
    return 0;
}

/* The process holding a running run, and whether the kept recipe is still the one it read
 * (an edit is taken by the next baton resume only: the recipe is read once), or cannot be
 * read now (kept_err: moved aside, replaced by a link). */
static void status_holder(status_view *v) {
    char path[4200], *text = NULL;
    size_t n = 0;
    /* a record is shown once its process is checked to hold the lock file, or when it
     * cannot be checked from here (said so); never a stale one */
    v->holder_state = run_holder_find(v->dir, &v->holder);
    v->has_holder =
        v->holder_state == RUN_HOLDER_HELD || v->holder_state == RUN_HOLDER_OTHER_HOST ||
        v->holder_state == RUN_HOLDER_OTHER_NS || v->holder_state == RUN_HOLDER_UNVERIFIED;
    if (!v->has_holder) return;
    snprintf(path, sizeof path, "%s/recipe.yaml", v->dir);
    if (bt_read_private(path, 64u << 20, 0, &text, &n) == 0)
        v->recipe_edited = crc32c_update(0, text, n) != v->holder.recipe_crc32c;
    else
        v->kept_err = errno ? errno : EIO;
    free(text);
}

/* The bytes the running process read, RUN_DIR_RUNNING_RECIPE, into v->doc where they are
 * the ones its record names: 1; else 0, v->copy saying why not (missing, other bytes,
 * cannot be read or parsed). */
static int status_running_copy(status_view *v) {
    char path[4200], *text = NULL;
    size_t n = 0;
    bt_diag d;
    bt_diag_init(&d);
    snprintf(path, sizeof path, "%s/%s", v->dir, RUN_DIR_RUNNING_RECIPE);
    if (bt_read_private(path, RECIPE_MAX_BYTES, 0, &text, &n) != 0) {
        int err = errno;
        v->copy = err == ENOENT ? STATUS_COPY_MISSING : STATUS_COPY_BAD;
        snprintf(v->copy_why, sizeof v->copy_why, "%s", bt_file_why(err));
        return 0;
    }
    v->copy_crc32c = crc32c_update(0, text, n);
    if (v->copy_crc32c != v->holder.recipe_crc32c) {
        v->copy = STATUS_COPY_OTHER;
    } else if (recipe_load_buffer(path, text, n, &v->doc, &d) != 0) {
        v->copy = STATUS_COPY_BAD;
        snprintf(v->copy_why, sizeof v->copy_why, "%.600s", d.msg);
    } else {
        v->doc.text = text, v->doc.text_len = n; /* as recipe_load_kept keeps them */
        return 1;
    }
    free(text);
    return 0;
}

/* The recipe whose stages and planned steps are shown (v->plan): the kept one, or for a
 * running run whose kept copy was edited after its process read it, or cannot be read now
 * (unless kept_only), the bytes that process read, RUN_DIR_RUNNING_RECIPE, taken only when
 * they are the ones its record names; where they are not (status_copy), none: no planned
 * steps, and only the journal's stages as rows, under the names they trained with (the
 * kept recipe's where none is known), not the edit's new ones, which do not run. */
static void status_pick_recipe(status_view *v, int kept_only) {
    char path[4200];
    int not_read = !kept_only && (v->recipe_edited || v->kept_err);
    if (not_read && status_running_copy(v)) {
        v->have_doc = 1, v->plan = STATUS_PLAN_RUNNING;
        return;
    }
    snprintf(path, sizeof path, "%s/recipe.yaml", v->dir);
    v->have_doc = status_load_recipe(v, path, not_read);
    v->plan = v->have_doc && !not_read ? STATUS_PLAN_KEPT : STATUS_PLAN_NONE;
    v->journal_rows = not_read;
}

/* 1 when the kept recipe doc, with the run's overrides applied as resume applies them,
 * is one resume refuses (an override that no longer applies, or recipe_validate_run),
 * diag saying why. */
static int status_kept_invalid(const status_view *v, recipe_doc *kept, bt_diag *diag) {
    bt_diag naming;
    bt_diag_init(&naming);
    status_apply_overrides(v, kept, 0, diag);
    return bt_diag_isset(diag) || recipe_validate_run(kept, diag, &naming) != 0;
}

/* With the running process's recipe shown for an edit of the kept one: what the next
 * baton resume makes of that edit, said when it refuses it (it cannot be read, its stages
 * moved among the run's, or with the run's overrides it fails validation, as resume checks
 * it); the rows stay what runs. Resume's checks against the run's checkpoints and data
 * (steps below a checkpoint's, another model shape) are not made here. */
static void status_check_kept(const status_view *v) {
    char path[4200], what[600];
    size_t at = 0;
    recipe_doc kept;
    bt_diag d;
    bt_diag_init(&d);
    snprintf(path, sizeof path, "%s/recipe.yaml", v->dir);
    if (recipe_load_kept(path, &kept, &d) != 0) {
        fprintf(stderr,
                "baton status: warning: the run's kept recipe cannot be read (%s): the next "
                "'baton resume' refuses it until it is mended\n",
                d.msg[0] ? d.msg : path);
        return;
    }
    if (run_edit_moved(v->rec_names, v->n_rec, &kept, what, sizeof what, &at))
        fprintf(stderr,
                "baton status: warning: the kept recipe (%s/recipe.yaml), as edited, no longer "
                "matches the run's stages: %s; the next 'baton resume' refuses it until they "
                "are back in their order\n",
                v->dir, what);
    else if (status_kept_invalid(v, &kept, &d))
        fprintf(stderr,
                "baton status: warning: the kept recipe (%s/recipe.yaml), as edited, is not "
                "valid: %s; the next 'baton resume' refuses it until it is mended\n",
                v->dir, d.msg);
    recipe_doc_free(&kept);
}

int status_load(status_view *v, const char *dir, int kept_only, bt_diag *diag) {
    memset(v, 0, sizeof *v);
    v->dir = dir;
    if (run_dir_check_arg("status", dir, diag) != 0) return BT_EINVAL;
    journal_tail tail;
    int rc = journal_read(dir, &v->rec, &v->n, &tail, diag);
    if (rc == 0 && tail.damaged) {
        bt_diag w;
        bt_diag_init(&w);
        journal_diag_damaged(dir, &tail, &w);
        fprintf(stderr, "baton status: warning: %s; shown: the %zu records before it\n", w.msg,
                v->n);
    }
    if (rc == 0 && v->n == 0 && tail.size > 0) { /* there, but nothing to show of it */
        bt_diag_set(diag, "%s: its journal holds no whole record (%zu bytes: cut short or damaged)",
                    dir, tail.size);
        rc = BT_EINVAL;
    } else if (rc == 0 && v->n == 0 && status_is_new_run(dir)) {
        v->not_started = 1;
        status_read_line(dir, "job_id", v->job_id, sizeof v->job_id);
    } else if (rc == 0 && v->n == 0) {
        char journal[4200];
        snprintf(journal, sizeof journal, "%s/%s", dir, JOURNAL_FILE);
        rc = status_no_records(dir,
                               access(journal, F_OK) == 0 ? "its journal is empty" : "no journal",
                               &v->creating, diag);
    }
    if (rc != 0) {
        journal_records_free(v->rec, v->n); /* an empty array may be allocated */
        v->rec = NULL, v->n = 0;
        return rc;
    }
    bt_diag ignore;
    bt_diag_init(&ignore);
    if (run_dir_read_worker(dir, v->worker, sizeof v->worker, &ignore) <= 0) v->worker[0] = '\0';
    v->running = run_dir_busy(dir);
    if (v->running) status_holder(v);
    if (!v->creating) status_pick_recipe(v, kept_only);
    if (v->have_doc) status_apply_overrides(v, &v->doc, 1, &ignore);
    run_state_replay(&v->st, v->rec, v->n);
    if (v->have_doc)
        status_check_moved(v);
    else if (v->journal_rows)
        status_rec_names(v);
    if (v->plan == STATUS_PLAN_RUNNING && v->recipe_edited) status_check_kept(v);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v->now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    status_metrics(v);
    status_valid(v);
    return 0;
}

void status_free(status_view *v) {
    journal_records_free(v->rec, v->n);
    run_edit_names_free(v->rec_names, v->n_rec);
    if (v->have_doc) recipe_doc_free(&v->doc);
}
