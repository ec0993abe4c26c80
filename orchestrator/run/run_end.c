/* How an attempt ends where supervise.c's classification needs more than the ranks' exit
 * statuses: one that could not start (its spec or log not made, the workers not launched,
 * the checkpoint root not listed), one stopped (its stop checkpoint committed or not, the
 * stop come after the stage's last step), a full disk ending the run. */
#define _GNU_SOURCE /* sigabbrev_np */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "run_ctx.h"
#include "run_worker.h"
#include "util/buf.h"
#include "util/shquote.h"
#include "util/utf8.h"

/* I/O and memory failures of our own may pass; a bad spec, a missing worker program or
 * a layout that cannot fit will not. */
static int run_transient(int rc) {
    return rc == BT_EIO || rc == BT_ENOMEM;
}

/* Why an attempt's own file could not be written (err), where a restart would not help:
 * a full disk or quota (RUN_STUCK_FULL), or, where its open failed (at_open), something
 * put in its place that is not a regular file, or a link (RUN_STUCK_PLANTED; refused,
 * never waited on or followed); else 0. An EINVAL from a write, fsync or rename after the
 * open is no file's doing (fsync on a file system without it). */
int run_stuck(int err, int at_open) {
    if (err == ENOSPC || err == EDQUOT) return RUN_STUCK_FULL;
    return at_open && (err == EINVAL || err == ELOOP || err == EISDIR) ? RUN_STUCK_PLANTED : 0;
}

/* Every rank of the job exited with status 0 (none killed by a signal). */
int run_all_exited_zero(const launch_job *job) {
    for (int r = 0; r < job->nprocs; r++)
        if (!job->ranks[r].exited || job->ranks[r].exit_status != 0) return 0;
    return job->nprocs > 0;
}

/* A rank of a stopped job that did not end as asked: killed by a signal baton run did not
 * send (first), else a nonzero exit; "" when none. */
static void run_stop_casualty(const run_ctx *c, const launch_job *job, char *out, size_t cap) {
    out[0] = '\0';
    for (int pass = 0; pass < 2 && out[0] == '\0'; pass++)
        for (int k = 0; k < job->nprocs && out[0] == '\0'; k++) {
            const launch_rank *rk = &job->ranks[k];
            char node[32];
            run_nodes_name(&c->nodes, rk->node, node, sizeof node);
            if (pass == 0 && rk->term_signal != 0 && !rk->signal_from_launcher)
                snprintf(out, cap, "rank %d (node %s, pid %d) was killed by signal SIG%s", k, node,
                         (int)rk->pid, sigabbrev_np(rk->term_signal));
            else if (pass == 1 && rk->exited && rk->exit_status != 0)
                snprintf(out, cap, "rank %d (node %s, pid %d) exited with status %d", k, node,
                         (int)rk->pid, rk->exit_status);
        }
}

/* A stopped attempt: whether its stop checkpoint (at the last step trained) was committed.
 * When not (a rank died while saving it, a full disk), says so and from which checkpoint
 * a resume continues, and journals that step as the attempt's: the one the run stands at. */
void run_check_stop(run_ctx *c, const launch_job *job, uint32_t stage, Baton__JournalRecord *r) {
    char have[128], who[256], from[2200];
    uint64_t at = 0;
    bt_diag d;
    bt_diag_init(&d);
    int own = run_ckpt_own(c, stage, have, sizeof have, &at, &d);
    if (own <= 0) at = 0;
    if (!c->prog.have_step || (own >= 0 && at >= c->prog.step)) return;
    if (own > 0)
        snprintf(from, sizeof from, "a resume continues from %s/%s (step %llu)", CKPT_ROOT_IN_RUN,
                 have, (unsigned long long)at);
    else if (own == 0)
        snprintf(from, sizeof from, "a resume continues from the start of the stage (step 0)");
    else /* the journal keeps the last step it knows of; the resume looks again */
        snprintf(from, sizeof from, "where a resume continues cannot be told now: %s", d.msg);
    run_stop_casualty(c, job, who, sizeof who);
    run_progress_end(&c->prog);
    run_err(c, "stage \"%s\": the stop checkpoint at step %llu %s%s%s%s; %s\n", c->prog.stage,
            (unsigned long long)c->prog.step,
            own >= 0 ? "was not completed" : "may not have been completed", who[0] ? " (" : "", who,
            who[0] ? ")" : "", from);
    r->has_step = own >= 0, r->step = at; /* unknown: none */
}

/* A rank said the disk is full (a checkpoint save: ENOSPC, EDQUOT): the run ends, exit 1,
 * as when the spec cannot be written. Another attempt would train the steps since the
 * last checkpoint again to fail at the same save (the oldest checkpoint goes only after a
 * new one is committed), max_restarts times over. Said with the rank's message; journaled
 * without it where the attempt's failure (in_failure) already quotes it, so that baton
 * status shows it once, and with its first clause, "the disk is full (rank N)", short
 * enough for status's first line. */
void run_disk_full(run_ctx *c, uint32_t stage, int in_failure) {
    const control_fatal *f = &c->cs.fatal;
    char said[601]; /* its end kept: "No space left on device" */
    bt_utf8_cut_middle(f->full_message, 600, said, sizeof said);
    bt_buf cmd;
    bt_buf_init(&cmd);
    const char *resume = bt_shell_cmd(&cmd, "baton resume", c->dir->path);
    run_err(c,
            "stage \"%s\": the disk is full (rank %u: %s): not retried, as every restart "
            "would train to the same save and fail alike; make room (or keep fewer checkpoints: "
            "checkpoint.keep), then %s\n",
            c->prog.stage, f->full_rank, said, resume);
    char msg[640] = "";
    if (!in_failure) snprintf(msg, sizeof msg, ": %s", said);
    run_give_up(c, stage, 0,
                "the disk is full (rank %u%s); not retried, as every restart would train to the "
                "same save and fail alike; make room (or keep fewer checkpoints: "
                "checkpoint.keep), then %s",
                f->full_rank, msg, resume);
    bt_buf_free(&cmd);
}

/* A stop (baton run's signal) that came once the ranks were past the stage's last step:
 * a worker takes no stop after it (worker_train), so it still saved the stage's final
 * checkpoint, ran the closing validation and exited 0; exit 75 is a stop checkpoint
 * before the end (the validation skipped), a rank killed or exited otherwise failed to
 * finish. Every rank exited 0 and the final checkpoint committed: the stage is complete
 * (said), not stopped, so that no resume runs it again to train nothing. */
int run_stopped_after_end(run_ctx *c, const launch_job *job, uint32_t stage) {
    char why[1024];
    if (!c->got_signal || (job->cause != LAUNCH_STOPPED && job->cause != LAUNCH_EXITED) ||
        c->build_refused || c->topo_refused || !run_all_exited_zero(job) ||
        run_stage_finished(c, stage, c->spec->stage->steps, why, sizeof why) != RUN_FINAL_DONE)
        return 0;
    run_progress_end(&c->prog);
    run_err(c,
            "stage \"%s\": the stop came after its last step: every rank exited 0 and the "
            "stage's final checkpoint is committed: the stage is complete\n",
            c->prog.stage);
    return 1;
}

/* The attempt's spec or log could not be made or written (no worker started; detail
 * says which): said, naming the stage, and journaled as the attempt's failure, so that
 * baton status names the cause. A full disk ends the run (exit 1) at once: no worker ran
 * since the last try, so nothing frees room, and every restart would fail alike within
 * its backoff; a resume goes on once there is room. So does a FIFO, device or link where
 * the run writes its own file (stuck RUN_STUCK_PLANTED): not baton's doing, to be looked
 * at. Another I/O failure is retried as a failed attempt. */
attempt_end run_spec_failed(run_ctx *c, uint32_t stage, uint32_t attempt, int rc, int stuck,
                            const char *detail, const char *msg) {
    char why[1200];
    snprintf(why, sizeof why, "attempt %u cannot start: %.1100s", attempt, msg);
    c->prog.stage = c->doc->recipe->stages[stage]->name;
    run_progress_end(&c->prog);
    run_err(c, "stage \"%s\": %s\n", c->prog.stage, why);
    attempt_end end = stuck ? ATTEMPT_BROKEN : run_transient(rc) ? ATTEMPT_RETRY : ATTEMPT_FATAL;
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    /* journaled as an attempt all the same: the next one (of a resume too) takes the next
     * number, and status counts it with its failure and the restart after it */
    r.detail = (char *)detail;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED, stage, &r);
    r.detail = why;
    r.has_retryable = 1, r.retryable = end != ATTEMPT_FATAL;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__FAILURE, stage, &r);
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
    bt_buf cmd;
    bt_buf_init(&cmd);
    if (stuck == RUN_STUCK_FULL)
        run_give_up(c, stage, 1,
                    "the disk is full: not retried, as every restart would fail alike; make "
                    "room, then %s",
                    bt_shell_cmd(&cmd, "baton resume", c->dir->path));
    else if (stuck == RUN_STUCK_PLANTED)
        run_give_up(c, stage, 1,
                    "not retried, as baton never makes its own files so: look at what is "
                    "there, remove it, then %s",
                    bt_shell_cmd(&cmd, "baton resume", c->dir->path));
    bt_buf_free(&cmd);
    return end;
}

/* Whether a stuck PMIx server ends this process for a fresh one (RUN_EXIT_AFRESH). */
int run_may_afresh(const run_ctx *c) {
    return c->o->afresh && (!c->o->afresh_spent || c->progressed);
}

/* The stage goes on in a fresh process (RUN_EXIT_AFRESH): journaled as STAGE_FAILED with
 * server_stuck, which baton status shows as continued, never as the run given up (a fresh
 * process killed before its attempt leaves the run stopped). */
static void run_continue_afresh(run_ctx *c, uint32_t stage, const char *resume) {
    char why[1024];
    snprintf(why, sizeof why,
             "the embedded PMIx server is stuck: continuing in a fresh process, as %s", resume);
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.detail = why;
    r.has_server_stuck = 1, r.server_stuck = 1;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__STAGE_FAILED, stage, &r);
    run_err(c, "stage \"%s\": %s\n", c->prog.stage, why);
}

/* The workers could not be started (no such worker program, fork failing): said, and
 * journaled as the attempt's failure, so that baton status names the cause. */
attempt_end run_launch_failed(run_ctx *c, uint32_t stage, uint32_t attempt, int rc,
                              const char *msg) {
    char why[1800];
    int noted = (rc == BT_ENOENT || rc == BT_EINVAL) && c->o->worker_note != NULL;
    snprintf(why, sizeof why, "%s: %.1000s%s%.600s%s", RUN_LAUNCH_FAILED, msg, noted ? " (" : "",
             noted ? c->o->worker_note : "", noted ? ")" : "");
    run_err(c, "%s\n", why);
    attempt_end end = run_transient(rc) ? ATTEMPT_RETRY : ATTEMPT_FATAL; /* fork: a moment */
    if (c->srv.wedged) end = ATTEMPT_BROKEN; /* every attempt of this process would fail alike */
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    r.detail = why;
    r.has_retryable = 1, r.retryable = end == ATTEMPT_RETRY;
    /* not retried here, but by a fresh process: its attempt a restart (journal.proto) */
    r.has_server_stuck = c->srv.wedged, r.server_stuck = c->srv.wedged;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__FAILURE, stage, &r);
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
    bt_buf cmd;
    bt_buf_init(&cmd);
    if (c->srv.wedged && run_may_afresh(c))
        run_continue_afresh(c, stage, bt_shell_cmd(&cmd, "baton resume", c->dir->path));
    else if (c->srv.wedged)
        run_give_up(c, stage, 1,
                    "the embedded PMIx server is stuck: not retried in this process; %s "
                    "continues in a fresh one",
                    bt_shell_cmd(&cmd, "baton resume", c->dir->path));
    bt_buf_free(&cmd);
    return end;
}

/* The checkpoint root cannot be listed as the attempt starts (why: the path and the
 * error): which checkpoint the stage starts from cannot be told, so no worker starts, rather
 * than one that would train the stage again from an earlier checkpoint or from step 0. A
 * failed attempt, retried under the stage's max_restarts (the cause may pass: a permission
 * being fixed, a passing I/O error); the checkpoints are left as they are. */
attempt_end run_unlisted(run_ctx *c, uint32_t stage, uint32_t attempt, const char *why) {
    char msg[1100];
    snprintf(msg, sizeof msg,
             "%.900s; which checkpoint the stage starts from cannot be told, so no worker "
             "started (nothing in it was changed)",
             why);
    return run_spec_failed(c, stage, attempt, BT_EIO, 0, RUN_NO_SPEC, msg);
}
