/* Rollbacks after loss spikes (supervise.h): the sample windows they skip, and moving
 * the checkpoints saved since the spikes aside (run_set_aside.c), for a rollback and for
 * the request the stage's rollback limit refuses (since the spikes, or the guard's warm-up
 * before them when the checkpoint left has no saved window). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "run_ctx.h"
#include "run_set_aside.h"
#include "spike_guard.h"
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

/* The checkpoints of the stage taken at or after step first into
 * RUN_DIR/rolled-back/sNN-aMM/ (one directory per request, so a name set aside twice
 * never collides), `latest` dropped (run_set_aside): 0 with the newest one left in kept
 * ("none"), or -1, said. */
static int run_rollback_ckpts(run_ctx *c, uint32_t stage, uint32_t attempt, uint64_t first,
                              char *kept, size_t cap) {
    char root[4200], aside[4200], sub[64];
    bt_diag d;
    bt_diag_init(&d);
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    run_dir_file(c->dir, "rolled-back", aside, sizeof aside);
    int rc = bt_mkdir_private(aside); /* a planted link refused */
    if (rc != 0) bt_diag_set(&d, "%s: cannot create: %s", aside, strerror(errno));
    snprintf(sub, sizeof sub, "/s%02u-a%02u", stage, attempt);
    strncat(aside, sub, sizeof aside - strlen(aside) - 1);
    if (rc == 0) rc = run_set_aside(root, aside, stage, first, kept, cap, &d);
    if (rc == 0) return 0;
    run_err(c, "rollback: %s\n", d.msg);
    return -1;
}

/* The spiking steps first..last and the window [from, to) a rank's request names (its
 * Fatal: "... at steps A..B ... skip [FROM, TO) ..."): 0, or -1 when it cannot be read. */
static int run_rollback_request(const run_ctx *c, uint64_t *first, uint64_t *last, uint64_t *from,
                                uint64_t *to) {
    const char *msg = c->cs_open && c->cs.fatal.key.seen ? c->cs.fatal.message : NULL;
    const char *at = msg ? strstr(msg, "at steps ") : NULL;
    *first = *last = 0;
    if (run_skip_parse(msg, from, to) != 0 || at == NULL ||
        sscanf(at, "at steps %" SCNu64 "..%" SCNu64, first, last) != 2 || *first == 0)
        return -1;
    return 0;
}

/* "checkpoint NAME", or the stage's start when no checkpoint is left before the spikes. */
static void run_rollback_to(const char *kept, char *out, size_t cap) {
    if (strcmp(kept, "none") == 0)
        snprintf(out, cap, "the stage's start (no checkpoint before the spikes)");
    else
        snprintf(out, cap, "checkpoint %s", kept);
}

/* A ROLLBACK record of the stage's attempt, at step first (the first one set aside), with
 * detail; said too. */
static void run_rollback_journal(run_ctx *c, uint32_t stage, uint32_t attempt, uint64_t first,
                                 char *detail) {
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    r.has_step = 1, r.step = first;
    r.detail = detail;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ROLLBACK, stage, &r);
    run_progress_end(&c->prog);
    run_err(c, "stage \"%s\": %s\n", c->prog.stage, detail);
}

/* A rank exited RUN_WORKER_EXIT_ROLLBACK: moves the later checkpoints aside, journals the
 * ROLLBACK and keeps the window for the next attempts. Returns 0, or -1 when the request
 * cannot be read (the attempt is then an ordinary failure). */
int run_rollback(run_ctx *c, uint32_t stage, uint32_t attempt) {
    uint64_t from, to, first, last;
    if (run_rollback_request(c, &first, &last, &from, &to) != 0) return -1;
    if (c->n_skips == RUN_MAX_SKIPS) { /* counted as a plain failure: max_restarts ends it */
        run_err(c, "rollback: the run already skips %d sample windows\n", RUN_MAX_SKIPS);
        return -1;
    }
    char kept[256], detail[768], to_what[300];
    if (run_rollback_ckpts(c, stage, attempt, first, kept, sizeof kept) != 0) return -1;
    run_rollback_to(kept, to_what, sizeof to_what);
    snprintf(detail, sizeof detail,
             "loss spikes at steps %" PRIu64 "..%" PRIu64 ": skip [%" PRIu64 ", %" PRIu64
             ") (global samples); rolled back to %s",
             first, last, from, to, to_what);
    run_rollback_journal(c, stage, attempt, first, detail);
    (void)run_skip_add(c, stage, from, to); /* room checked above */
    snprintf(c->rollback_note, sizeof c->rollback_note, "%s", detail);
    return 0;
}

/* Where the refused request sets aside from (run_set_aside_refused_from), by the newest
 * checkpoint of the stage's root before step first, the one a resume starts from: first
 * when its saved window arms the guard for the spikes, else the guard's warm-up before
 * them (a checkpoint without a window: from before checkpoints kept it, or saved with the
 * guard off; another stage's, a hand-off; none). */
static uint64_t run_refused_from(const run_ctx *c, uint32_t stage, uint64_t first) {
    char root[4200], bound[64], dir[4500];
    char **names = NULL;
    size_t n = 0, k;
    bt_diag d;
    bt_diag_init(&d);
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    ckpt_name(stage, first, bound, sizeof bound);
    if (ckpt_list(root, &names, &n, &d) != 0) n = 0;
    for (k = n; k > 0 && ckpt_name_cmp(names[k - 1], bound) >= 0; k--)
        ;
    Baton__Manifest *m = NULL;
    if (k > 0) snprintf(dir, sizeof dir, "%s/%s", root, names[k - 1]);
    int own = k > 0 && ckpt_manifest_read(dir, &m, &d) == 0 && m->has_step &&
              ckpt_stage_relation(m, run_recipe_name(c), stage) == CKPT_SAME_STAGE;
    uint64_t from =
        run_set_aside_refused_from(own ? m->spike_guard : NULL, own ? m->step : 0, first);
    if (m) baton__manifest__free_unpacked(m, NULL);
    ckpt_names_free(names, n);
    return from;
}

/* (run_ctx.h) The request after the stage's RUN_MAX_ROLLBACKS: no window kept, but the
 * checkpoints saved from the spikes on (the steps undone still count for every_steps) set
 * aside all the same, so that a resume restarts before them and meets them with the guard
 * armed rather than train on from inside them: from the first spiking step when the
 * newest checkpoint before it carries the guard's window (run_refused_from), else from
 * SPIKE_GUARD_WARMUP steps before it, so that a resume from a checkpoint without a window
 * warms the guard up first. Journaled as a ROLLBACK without "skip [" at the first step
 * set aside: run_skip_parse passes over it, and the commits it set aside are no longer
 * required (run_ckpt_note_record). */
void run_rollback_refused(run_ctx *c, uint32_t stage, uint32_t attempt) {
    uint64_t from, to, first, last;
    if (run_rollback_request(c, &first, &last, &from, &to) != 0) return;
    uint64_t aside = run_refused_from(c, stage, first);
    char kept[256], detail[768], to_what[300], margin[96] = "";
    if (run_rollback_ckpts(c, stage, attempt, aside, kept, sizeof kept) != 0) return;
    run_rollback_to(kept, to_what, sizeof to_what);
    if (aside < first)
        snprintf(margin, sizeof margin,
                 " (%" PRIu64 " steps before the spikes, the guard's warm-up)", first - aside);
    snprintf(detail, sizeof detail,
             "loss spikes at steps %" PRIu64 "..%" PRIu64 " after %u rollbacks: not rolled "
             "back, no samples skipped; the checkpoints from step %" PRIu64 " on%s set aside, "
             "so a resume starts from %s%s",
             first, last, RUN_MAX_ROLLBACKS, aside, margin, to_what,
             aside == first ? ", whose saved window arms the guard for them" : "");
    run_rollback_journal(c, stage, attempt, aside, detail);
}
