/* A stage attempt's metrics log replayed into metrics.jsonl, valid.jsonl and TensorBoard
 * (control_server_replay in control_server.h). */
#include <stdlib.h>
#include <time.h>

#include "control_internal.h"
#include "metrics_log.h"

/* Which of the log's records metrics.jsonl lacks, by whose its last record is. */
typedef enum replay_from {
    REPLAY_ALL,   /* none of the attempt's: an earlier stage's or attempt's, or none */
    REPLAY_AFTER, /* the attempt's own: from the first step of it the file lacks (a gap
                   * the worker's full outbox left, or the steps after its last) */
    REPLAY_PAST,  /* a later stage's or attempt's (a journal older than the file): only
                   * records past its largest global step, never a rewind over those */
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
    unsigned n;
    bt_diag *diag;
} replay;

static double replay_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int replay_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int replay_held(const replay *r, uint64_t step) {
    return r->n_held > 0 && bsearch(&step, r->held, r->n_held, sizeof step, replay_cmp) != NULL;
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
        /* written from here on: its rewind drops the steps after it, written again next */
        r->filling = 1;
    }
    if (r->from == REPLAY_PAST && r->sink->have_step &&
        r->w->step_offset + m->step <= r->sink->max_step)
        return 0;
    control_metrics c;
    control_metrics_from(m, 0, t, &c);
    int rc = control_metrics_write(r->sink, r->w, &c, r->diag);
    if (rc == 0 && !held) r->n++; /* those it lacked */
    if (rc == 0 && r->cb) r->cb(r->cb_arg, &c, NULL);
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
    if (r.n_held > 1) qsort(r.held, r.n_held, sizeof *r.held, replay_cmp); /* a file edited */
    rc = rc ? rc : metrics_log_read(path, wait_s, busy, replay_one, &r, diag);
    free(r.held);
    *n = r.n;
    return rc;
}
