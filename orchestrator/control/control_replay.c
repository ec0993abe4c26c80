/* A stage attempt's metrics log replayed into metrics.jsonl, valid.jsonl and TensorBoard
 * (control_server_replay in control_server.h). */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "control_internal.h"
#include "metrics_log.h"
#include "util/buf.h"

/* Which of the log's records metrics.jsonl lacks, by whose its last record is. */
typedef enum replay_from {
    REPLAY_ALL,   /* none of the attempt's: an earlier stage's or attempt's, or none */
    REPLAY_AFTER, /* the attempt's own: from the first step of it the file lacks (a gap
                   * the worker's full outbox left, or the steps after its last) */
    REPLAY_PAST,  /* a later stage's or attempt's (a journal older than the file): only
                   * records past what the file holds (control_metrics_past), never a
                   * rewind over those */
} replay_from;

typedef struct replay {
    control_metrics_sink *sink;
    control_metrics_cb cb; /* the server's on_metrics for its current attempt, else NULL */
    void *cb_arg;
    const control_metrics_where *w;
    replay_from from;
    uint64_t *held; /* REPLAY_AFTER: the attempt's steps metrics.jsonl holds, ascending */
    size_t n_held;
    int filling; /* REPLAY_AFTER: a step it lacks was met; every record from there on */
    /* REPLAY_AFTER: what only metrics.jsonl and valid.jsonl hold from that step on (the
     * log's holes: appends that failed while the records went out live), which the fill's
     * rewind drops: written back in their places, the orphans ascending, one per step,
     * read back one at a time (a dead log's orphans may be every step after it) */
    control_metrics_kept orphans;
    size_t next_orphan;
    control_metrics_valid *valids;
    size_t n_valids;
    unsigned n;
    bt_diag *diag;
} replay;

static double replay_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int replay_held(const replay *r, uint64_t step) {
    return r->n_held > 0 &&
           bsearch(&step, r->held, r->n_held, sizeof step, control_u64_cmp) != NULL;
}

/* The orphans up to step `upto` written back, but for one of that step itself, which the
 * log holds after all (appended since they were found). */
static int replay_orphans(replay *r, uint64_t upto) {
    control_metrics_kept *k = &r->orphans;
    int rc = 0;
    while (rc == 0 && r->next_orphan < k->n && k->rec[r->next_orphan].step <= upto) {
        size_t i = r->next_orphan++;
        if (k->rec[i].step == upto && upto != UINT64_MAX) continue;
        control_metrics o;
        rc = control_metrics_kept_read(k, i, &o, r->diag);
        rc = rc ? rc : control_metrics_write(r->sink, r->w, &o, r->diag);
    }
    return rc;
}

/* After the log: the orphans after its last step and the validations, once filling. */
static int replay_rest(replay *r) {
    int rc = r->filling ? replay_orphans(r, UINT64_MAX) : 0;
    for (size_t i = 0; rc == 0 && r->filling && i < r->n_valids; i++) {
        const control_metrics_valid *v = &r->valids[i];
        control_metrics_where w = *r->w;
        w.attempt = v->attempt;
        rc = control_metrics_write_valid(r->sink, &w, v->step, v->loss, v->windows, v->time,
                                         r->diag);
    }
    return rc;
}

static int replay_one(void *arg, const Baton__Metrics *m) {
    replay *r = arg;
    double t = m->has_time ? m->time : replay_now();
    if (m->has_valid_loss) { /* written unless valid.jsonl holds it */
        control_valid v = {.step = m->step, .loss = m->valid_loss, .windows = m->valid_windows};
        if (r->cb) r->cb(r->cb_arg, NULL, &v);
        return control_metrics_write_valid(r->sink, r->w, m->step, m->valid_loss, m->valid_windows,
                                           t, r->diag);
    }
    int held = r->from == REPLAY_AFTER && replay_held(r, m->step);
    if (r->from == REPLAY_AFTER && !r->filling) {
        if (held) return 0;
        /* written from here on: its rewind drops the steps after it, written again next
         * from the log, or from the orphans where the log has a hole (replay_plan) */
        r->filling = 1;
    }
    if (r->from == REPLAY_PAST && control_metrics_past(r->sink, r->w->stage_index, m->step))
        return 0;
    int rc = r->filling ? replay_orphans(r, m->step) : 0;
    if (rc != 0) return rc;
    control_metrics c;
    control_metrics_from(m, 0, t, &c);
    rc = control_metrics_write(r->sink, r->w, &c, r->diag);
    if (rc == 0 && !held) r->n++; /* those it lacked */
    if (rc == 0 && r->cb) r->cb(r->cb_arg, &c, NULL);
    return rc;
}

/* ---- the plan: a first pass over the log, for what the fill's rewind would lose ---- */

typedef struct replay_scan {
    const replay *r;
    int found;               /* the log holds a record of a step metrics.jsonl lacks: */
    uint64_t first;          /* the first one, where the fill starts */
    uint64_t *steps, *valid; /* the log's steps from there on; its validations' steps */
    size_t n_steps, cap_steps, n_valid, cap_valid;
} replay_scan;

static int replay_push(uint64_t **v, size_t *n, size_t *cap, uint64_t x) {
    if (bt_grow(v, cap, *n + 1, sizeof **v) != 0) return BT_ENOMEM;
    (*v)[(*n)++] = x;
    return 0;
}

static int replay_has(const uint64_t *v, size_t n, uint64_t x) {
    return n > 0 && bsearch(&x, v, n, sizeof x, control_u64_cmp) != NULL;
}

static int replay_scan_one(void *arg, const Baton__Metrics *m) {
    replay_scan *sc = arg;
    if (m->has_valid_loss) return replay_push(&sc->valid, &sc->n_valid, &sc->cap_valid, m->step);
    if (!sc->found && !replay_held(sc->r, m->step)) sc->found = 1, sc->first = m->step;
    return sc->found ? replay_push(&sc->steps, &sc->n_steps, &sc->cap_steps, m->step) : 0;
}

/* The orphans: the steps from sc's first on that metrics.jsonl holds and the log lacks,
 * read back from it; valid.jsonl's validations from there on that the log lacks. */
static int replay_find_orphans(replay *r, replay_scan *sc, bt_diag *diag) {
    const control_metrics_where *w = r->w;
    if (sc->n_steps > 1) qsort(sc->steps, sc->n_steps, sizeof *sc->steps, control_u64_cmp);
    if (sc->n_valid > 1) qsort(sc->valid, sc->n_valid, sizeof *sc->valid, control_u64_cmp);
    uint64_t *want = malloc((r->n_held + 1) * sizeof *want);
    if (want == NULL) {
        bt_diag_set(diag, "%s: out of memory for the %zu steps it holds", r->sink->jsonl_path,
                    r->n_held);
        return BT_ENOMEM;
    }
    size_t n = 0;
    for (size_t i = 0; i < r->n_held; i++)
        if (r->held[i] >= sc->first && !replay_has(sc->steps, sc->n_steps, r->held[i]))
            want[n++] = r->held[i];
    int rc = control_metrics_attempt_records(r->sink, w->stage_index, w->attempt, want, n,
                                             &r->orphans, diag);
    free(want);
    rc = rc ? rc
            : control_metrics_valid_since(r->sink, w->stage_index, sc->first, &r->valids,
                                          &r->n_valids, diag);
    size_t k = 0;
    for (size_t i = 0; i < r->n_valids; i++)
        if (!replay_has(sc->valid, sc->n_valid, r->valids[i].step)) r->valids[k++] = r->valids[i];
    r->n_valids = k;
    return rc;
}

/* REPLAY_AFTER: the log read once for the orphans (replay.orphans), before the replay. */
static int replay_plan(replay *r, const char *path, double wait_s, int *busy, bt_diag *diag) {
    replay_scan sc = {.r = r};
    int rc = metrics_log_read(path, wait_s, busy, replay_scan_one, &sc, diag);
    if (rc == BT_ENOMEM) bt_diag_set(diag, "%s: out of memory reading it", path);
    if (rc == 0 && sc.found) rc = replay_find_orphans(r, &sc, diag);
    free(sc.steps);
    free(sc.valid);
    return rc;
}

int control_server_replay(control_server *cs, const control_metrics_where *w, const char *path,
                          double wait_s, unsigned *n, int *busy, bt_diag *diag) {
    control_metrics_sink *s = &cs->sink;
    replay r = {.sink = s, .w = w, .diag = diag};
    uint32_t st = s->last_stage, at = s->last_attempt;
    if (!s->have_last || st < w->stage_index || (st == w->stage_index && at < w->attempt))
        r.from = REPLAY_ALL;
    else if (st == w->stage_index && at == w->attempt)
        r.from = REPLAY_AFTER;
    else
        r.from = REPLAY_PAST;
    if (w->stage_index == cs->stage_index && w->attempt == cs->attempt)
        r.cb = cs->on_metrics, r.cb_arg = cs->metrics_arg;
    *n = 0, *busy = 0;
    if (s->jsonl_path[0] == '\0') return 0; /* no metrics.jsonl to mend */
    int rc = r.from != REPLAY_AFTER ? 0
                                    : control_metrics_attempt_steps(s, w->stage_index, w->attempt,
                                                                    &r.held, &r.n_held, diag);
    if (r.n_held > 1) qsort(r.held, r.n_held, sizeof *r.held, control_u64_cmp); /* a file edited */
    rc = rc || r.from != REPLAY_AFTER ? rc : replay_plan(&r, path, wait_s, busy, diag);
    /* the orphans are read back by place from metrics.jsonl as it is now, which a rewind
     * must then leave whole: renamed over, not cut */
    s->jsonl.no_cut = r.orphans.n > 0;
    int again = 0; /* the plan waited for a live writer already */
    rc = rc ? rc : metrics_log_read(path, *busy ? 0 : wait_s, &again, replay_one, &r, diag);
    *busy = *busy || again;
    rc = rc ? rc : replay_rest(&r);
    s->jsonl.no_cut = 0;
    free(r.held);
    control_metrics_kept_free(&r.orphans);
    free(r.valids);
    *n = r.n;
    return rc;
}
