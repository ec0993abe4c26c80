/* Rollbacks after loss spikes (supervise.h): the sample windows they skip, and moving
 * the checkpoints saved since the spikes aside. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "run_ctx.h"
#include "util/file.h"

/* "... skip [FROM, TO) ..." in a worker's message or a ROLLBACK record's detail. */
int run_skip_parse(const char *text, uint64_t *from, uint64_t *to) {
    const char *p = text ? strstr(text, "skip [") : NULL;
    return p && sscanf(p, "skip [%" SCNu64 ", %" SCNu64 ")", from, to) == 2 && *to > *from ? 0 : -1;
}

int run_skip_add(run_ctx *c, uint32_t stage, uint64_t from, uint64_t to) {
    if (c->n_skips == RUN_MAX_SKIPS) return -1;
    c->skips[c->n_skips++] = (run_skip){stage, from, to};
    return 0;
}

uint32_t run_rollbacks(const run_ctx *c, uint32_t stage) {
    uint32_t n = 0;
    for (size_t k = 0; k < c->n_skips; k++)
        n += c->skips[k].stage == stage;
    return n;
}

/* The stage's skipped windows into its StageSpec, and its start after earlier stages
 * (run_data_start: where they ended, their rollbacks' windows included). */
int run_skip_apply(run_ctx *c, uint32_t stage, Baton__StageSpec *s) {
    int rc = run_data_start(c, stage, s);
    uint32_t n = run_rollbacks(c, stage);
    if (rc != 0 || n == 0) return rc;
    s->skip_samples = calloc(n, sizeof *s->skip_samples);
    if (s->skip_samples == NULL) return BT_ENOMEM;
    for (size_t k = 0; k < c->n_skips; k++) {
        if (c->skips[k].stage != stage) continue;
        Baton__SkipRange *r = malloc(sizeof *r);
        if (r == NULL) return BT_ENOMEM;
        baton__skip_range__init(r);
        r->has_from = r->has_to = 1, r->from = c->skips[k].from, r->to = c->skips[k].to;
        s->skip_samples[s->n_skip_samples++] = r;
    }
    return 0;
}

/* Moves the checkpoints taken at or after step `first` of the stage (names sort in
 * training order, ckpt_name_cmp) to RUN_DIR/rolled-back/sNN-aMM/ (one directory per rollback, so a
 * name set aside twice never collides) and drops the `latest` pointer, so that the newest remaining
 * checkpoint predates the spikes; its name (or "none") into kept. */
static int run_rollback_ckpts(run_ctx *c, uint32_t stage, uint32_t attempt, uint64_t first,
                              char *kept, size_t cap, bt_diag *diag) {
    char root[4200], aside[4200], sub[64], bound[64], from[8500], to[8500];
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    run_dir_file(c->dir, "rolled-back", aside, sizeof aside);
    if (bt_mkdir_private(aside) != 0) { /* a planted link refused */
        bt_diag_set(diag, "%s: cannot create: %s", aside, strerror(errno));
        return BT_EIO;
    }
    snprintf(sub, sizeof sub, "/s%02u-a%02u", stage, attempt);
    strncat(aside, sub, sizeof aside - strlen(aside) - 1);
    ckpt_name(stage, first, bound, sizeof bound);
    char **names;
    size_t n;
    int rc = ckpt_list(root, &names, &n, diag);
    if (rc != 0) return rc;
    snprintf(kept, cap, "none");
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (ckpt_name_cmp(names[k], bound) < 0) {
            snprintf(kept, cap, "%s", names[k]);
            continue;
        }
        snprintf(from, sizeof from, "%s/%s", root, names[k]);
        snprintf(to, sizeof to, "%s/%s", aside, names[k]);
        if (bt_mkdir_private(aside) != 0 || rename(from, to) != 0) {
            bt_diag_set(diag, "%s: cannot move it to %s: %s", from, aside, strerror(errno));
            rc = BT_EIO;
        }
    }
    ckpt_names_free(names, n);
    snprintf(from, sizeof from, "%s/%s", root, CKPT_LATEST);
    if (rc == 0 && unlink(from) != 0 && errno != ENOENT) {
        bt_diag_set(diag, "%s: cannot remove: %s", from, strerror(errno));
        rc = BT_EIO;
    }
    return rc;
}

/* A rank exited RUN_WORKER_EXIT_ROLLBACK: moves the later checkpoints aside, journals the
 * ROLLBACK and keeps the window for the next attempts. Returns 0, or -1 when the request
 * cannot be read (the attempt is then an ordinary failure). */
int run_rollback(run_ctx *c, uint32_t stage, uint32_t attempt) {
    const char *msg = c->cs_open && c->cs.fatal.key.seen ? c->cs.fatal.message : NULL;
    uint64_t from, to, first = 0, last = 0;
    const char *at = msg ? strstr(msg, "at steps ") : NULL;
    if (run_skip_parse(msg, &from, &to) != 0 || at == NULL ||
        sscanf(at, "at steps %" SCNu64 "..%" SCNu64, &first, &last) != 2 || first == 0)
        return -1;
    if (c->n_skips == RUN_MAX_SKIPS) { /* counted as a plain failure: max_restarts ends it */
        run_err(c, "rollback: the run already skips %d sample windows\n", RUN_MAX_SKIPS);
        return -1;
    }
    char kept[256], detail[768];
    bt_diag d;
    bt_diag_init(&d);
    if (run_rollback_ckpts(c, stage, attempt, first, kept, sizeof kept, &d) != 0) {
        run_err(c, "rollback: %s\n", d.msg);
        return -1;
    }
    char to_what[300];
    if (strcmp(kept, "none") == 0)
        snprintf(to_what, sizeof to_what, "the stage's start (no checkpoint before the spikes)");
    else
        snprintf(to_what, sizeof to_what, "checkpoint %s", kept);
    snprintf(detail, sizeof detail,
             "loss spikes at steps %" PRIu64 "..%" PRIu64 ": skip [%" PRIu64 ", %" PRIu64
             ") (global samples); rolled back to %s",
             first, last, from, to, to_what);
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    r.has_step = 1, r.step = first;
    r.detail = detail;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ROLLBACK, stage, &r);
    (void)run_skip_add(c, stage, from, to); /* room checked above */
    snprintf(c->rollback_note, sizeof c->rollback_note, "%s", detail);
    run_progress_end(&c->prog);
    run_err(c, "stage \"%s\": %s\n", c->prog.stage, detail);
    return 0;
}

/* The attempt's StageSpec, written to specs/sNN-aMM.pb (path into file). */
