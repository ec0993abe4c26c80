#include "run_state.h"

#include <string.h>

static void state_attempt_ended(run_stage_state *st, const Baton__JournalRecord *r,
                                double *attempt_t0) {
    /* a completed stage's: the steps it completed with, not where an attempt extending it
     * (its recipe given more steps since) stopped */
    if (r->has_step && !st->completed) st->last_step = r->step;
    if (*attempt_t0 > 0) st->wall_s += r->wall_time - *attempt_t0;
    *attempt_t0 = 0;
    st->open_at = 0;
}

/* An attempt left open when the next one starts: its supervisor was killed (kill -9)
 * before it could journal the end. It lasted at least until its stage's last record. */
static void state_attempt_abandoned(run_stage_state *st, double *attempt_t0) {
    if (*attempt_t0 > 0 && st->last_at > *attempt_t0) st->wall_s += st->last_at - *attempt_t0;
    *attempt_t0 = 0;
}

static void state_failure(run_state *s, run_stage_state *st, uint32_t k,
                          const Baton__JournalRecord *r) {
    int stuck = r->has_server_stuck && r->server_stuck;
    int not_retried = r->has_retryable && !r->retryable;
    st->failures++, s->total_failures++;
    st->failure_at = r->wall_time;
    if (not_retried) st->not_retried++;
    /* retried: the next attempt a restart, the next step completed its recovery; a stuck
     * server's failure is retried by a fresh process (a restart, though not one
     * max_restarts counts), and the run gave up on it only where a STAGE_FAILED says so */
    st->failure_open = st->recovery_open = !not_retried || stuck;
    /* journals older than STAGE_FAILED: a failure not retried ended the run; the attempt a
     * later baton run starts after it (the cause mended: a --worker that was not a
     * program) is no restart, and its first step no recovery */
    if (not_retried && !stuck) st->failed = 1, s->failed_stage = k + 1;
}

void run_state_replay(run_state *s, Baton__JournalRecord *const *v, size_t n) {
    memset(s, 0, sizeof *s);
    double attempt_t0 = 0;
    size_t open_stage = 0;
    for (size_t i = 0; i < n; i++) {
        const Baton__JournalRecord *r = v[i];
        uint32_t k = r->stage_index < RUN_MAX_STAGES ? r->stage_index : RUN_MAX_STAGES - 1;
        run_stage_state *st = &s->stage[k];
        int staged = r->kind != BATON__JOURNAL_RECORD__KIND__RUN_STARTED &&
                     r->kind != BATON__JOURNAL_RECORD__KIND__RUN_COMPLETED;
        if (staged && k + 1 > s->n_stages) s->n_stages = k + 1;
        switch (r->kind) {
        case BATON__JOURNAL_RECORD__KIND__RUN_STARTED:
            if (!s->started) s->started_at = r->wall_time;
            s->started = 1;
            break;
        case BATON__JOURNAL_RECORD__KIND__STAGE_STARTED:
            if (!st->started) st->started_at = r->wall_time;
            st->started = 1;
            break;
        case BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED:
            state_attempt_abandoned(&s->stage[open_stage], &attempt_t0);
            st->attempts++;
            attempt_t0 = r->wall_time, open_stage = k;
            /* a killed `baton run` leaves its last attempt open: status counts it as running
             * only while a supervisor holds the run */
            for (size_t o = 0; o < RUN_MAX_STAGES; o++)
                s->stage[o].open_at = 0;
            st->open_at = r->wall_time;
            st->failed = 0;
            if (st->failure_open) st->restarts++, s->total_restarts++;
            /* counted once; the recovery stays pending until a step completes (an attempt
             * stopped before its first one leaves it to the next: recovery_open) */
            st->failure_open = 0;
            if (s->failed_stage == k + 1) s->failed_stage = 0;
            break;
        case BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED:
            state_attempt_ended(st, r, &attempt_t0);
            break;
        case BATON__JOURNAL_RECORD__KIND__FAILURE:
            state_failure(s, st, k, r);
            break;
        case BATON__JOURNAL_RECORD__KIND__STAGE_FAILED:
            /* server_stuck: not given up, continued in a fresh process (which, killed before
             * its attempt, leaves the run stopped, not failed) */
            if (!(r->has_server_stuck && r->server_stuck)) st->failed = 1, s->failed_stage = k + 1;
            break;
        case BATON__JOURNAL_RECORD__KIND__RECOVERED:
            st->recovery_open = 0;
            break;
        case BATON__JOURNAL_RECORD__KIND__STAGE_COMPLETED:
            st->completed = 1, st->completed_at = r->wall_time, st->failed = 0;
            st->recovery_open = 0;
            if (s->failed_stage == k + 1) s->failed_stage = 0;
            if (r->has_step) st->last_step = r->step;
            break;
        case BATON__JOURNAL_RECORD__KIND__RUN_COMPLETED:
            s->completed = 1;
            break;
        default:
            break;
        }
        if (staged && r->wall_time > st->last_at) st->last_at = r->wall_time;
        if (staged && r->has_attempt && r->attempt >= st->next_attempt)
            st->next_attempt = r->attempt + 1;
        if (staged && r->has_loss) st->has_loss = 1, st->loss = r->loss, st->loss_at = r->wall_time;
        if (staged && r->has_tokens_per_s)
            st->has_tokens_per_s = 1, st->tokens_per_s = r->tokens_per_s,
            st->tokens_per_s_at = r->wall_time;
        if (r->has_recovery_s && r->recovery_s > 0)
            st->recovery_s_sum += r->recovery_s, st->recoveries++, s->total_recoveries++;
    }
}
