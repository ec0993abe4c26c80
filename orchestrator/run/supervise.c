#define _GNU_SOURCE /* sigabbrev_np */
#include "supervise.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "baton_version.h"
#include "ckpt/ckpt.h"
#include "ckpt/crc32c.h"
#include "util/file.h"
#include "util/shquote.h"
#include "util/utf8.h"
#include "launch_fds.h"
#include "launch_slurm.h"
#include "run_ctx.h"
#include "run_edit.h"
#include "run_watchdog.h"
#include "run_worker.h"
#include "units.h"
#include "util/clock.h"

#define RUN_DEFAULT_HEARTBEAT_S 60.0
#define RUN_DEFAULT_BACKOFF_S   1.0
#define RUN_KILL_GRACE_S        5.0 /* after a failure: the others are stuck or failing too */
#define RUN_DIR_GONE_CONFIRM_S  0.3 /* the run directory not at its path: seen again after */
#define RUN_OVERRIDES_KEPT_MAX  (16u << 10) /* overrides kept in RUN_STARTED whole */
#define RUN_DRAIN_S             2.0         /* for the control channel of an attempt that ended */
#define RUN_POLL_MS             200         /* run_watch's poll */

void run_err(const run_ctx *c, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", c->o && c->o->prog ? c->o->prog : "baton run");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* The run directory removed (or replaced: rm -rf, then made again) while the run ran:
 * nothing can be journaled or resumed there, so the run stops with an error, its workers
 * killed at once (a stop checkpoint would only make the path again, belonging to no run).
 * Returns whether it is gone. */
static int run_dir_gone(run_ctx *c) {
    if (c->dir_gone) return 1;
    if (c->journal_broken) return 0;
    int where = journal_where(&c->j, c->dir_moved_to, sizeof c->dir_moved_to);
    double now = bt_clock_now();
    if (where == JOURNAL_HERE) return c->dir_suspect_at = 0, 0;
    /* not there with no word of where it went: seen again 0.3 s later before the workers
     * are killed for it (no name left, or a name elsewhere, is proof at once) */
    if (where == JOURNAL_AWAY &&
        (c->dir_suspect_at == 0 || now - c->dir_suspect_at < RUN_DIR_GONE_CONFIRM_S)) {
        if (c->dir_suspect_at == 0) c->dir_suspect_at = now;
        c->dir_moved_to[0] = '\0';
        return 0;
    }
    c->dir_gone = 1, c->journal_broken = 1;
    run_progress_end(&c->prog);
    if (where == JOURNAL_MOVED)
        run_err(c,
                "%s: the run directory was moved to %s while the run ran: stopping the run, "
                "its workers killed (their paths are the old ones)\n",
                c->dir->path, c->dir_moved_to);
    else if (where == JOURNAL_AWAY)
        run_err(c,
                "%s: the run directory's %s is no longer there (the directory moved, replaced "
                "or removed) while the run ran: stopping the run, its workers killed\n",
                c->dir->path, JOURNAL_FILE);
    else
        run_err(c,
                "%s: the run directory was removed while the run ran (its %s has no name "
                "left): stopping the run, its workers killed\n",
                c->dir->path, JOURNAL_FILE);
    c->dir_away = where == JOURNAL_AWAY;
    return 1;
}

int run_journal(run_ctx *c, Baton__JournalRecord__Kind kind, uint32_t stage,
                Baton__JournalRecord *r) {
    Baton__JournalRecord def = BATON__JOURNAL_RECORD__INIT;
    if (r == NULL) r = &def;
    r->has_kind = 1, r->kind = kind;
    r->has_stage_index = 1, r->stage_index = stage;
    bt_diag d;
    bt_diag_init(&d);
    if (c->journal_broken || run_dir_gone(c)) return BT_EIO; /* said once; the run stops */
    run_data_end_fill(c, kind, stage, r);
    int rc = journal_append(&c->j, r, &d);
    if (rc == 0) {
        run_ckpt_note_record(c, r);
        return 0;
    }
    /* A run that goes on with records missing (a failure, a checkpoint, a stage's end) is
     * no longer what its journal says: status would count wrong, a resume could replay
     * the wrong history. It stops instead, its workers checkpointing as on SIGTERM. */
    c->journal_broken = 1;
    run_progress_end(&c->prog);
    bt_buf cmd;
    bt_buf_init(&cmd);
    run_err(c,
            "%s (%s/%s, record %s): stopping the run, since a journal that misses "
            "records no longer describes it; make room (or fix the cause), then %s\n",
            d.msg, c->dir->path, JOURNAL_FILE, journal_kind_name(kind),
            bt_shell_cmd(&cmd, "baton resume", c->dir->path));
    bt_buf_free(&cmd);
    return rc;
}

static double run_seconds(const Baton__Duration *d, double dflt) {
    return d && d->has_seconds && d->seconds > 0 ? d->seconds : dflt;
}

/* The attempt's spec, written to file; *stuck set (run_stuck) when that failed on a full
 * disk (or quota), or on what is at its temp file. */
/* Test hook: BATON_FAULT_SPEC_FULL=sNN-aMM.pb makes writing that attempt's spec fail as
 * on a full disk (tests/run/check-supervise.sh spec-full), which a link to /dev/full
 * cannot stand in for: the run's files are never written through links. */
static int run_spec_fault_full(const char *name, const char *file, bt_diag *diag) {
    const char *f = getenv("BATON_FAULT_SPEC_FULL");
    if (f == NULL || strcmp(f, strrchr(name, '/') + 1) != 0) return 0;
    bt_diag_set(diag, "%s: cannot write: %s", file, strerror(ENOSPC));
    errno = ENOSPC;
    return BT_EIO;
}

static int run_write_spec(run_ctx *c, size_t i, uint32_t attempt, Baton__StageSpec **out,
                          char *file, size_t cap, int *stuck, bt_diag *diag) {
    int rc = recipe_resolve_stage(c->doc, i, out, diag);
    if (rc != 0) return rc;
    Baton__StageSpec *s = *out;
    char probe[128];
    free(s->run_dir);
    s->run_dir = strdup(c->dir->path);
    free(s->run_id);
    s->run_id = strdup(c->dir->run_id);
    s->has_attempt = 1, s->attempt = attempt;
    if (c->cs_open) {
        free(s->control_address);
        s->control_address = strdup(c->cs.address);
    }
    rc = run_nodes_plan(&c->nodes, s, c->nodes_note, sizeof c->nodes_note, diag);
    rc = rc ? rc : run_skip_apply(c, (uint32_t)i, s);
    if (rc != 0) return rc;
    const char *init = c->doc->recipe->init;
    /* the worker takes the newest of the run's checkpoints it can load, skipping later
     * stages' (train_ckpt_load); with none of this stage or an earlier one, the recipe's */
    int from = run_ckpt_start_from(c, (uint32_t)i, probe, sizeof probe, diag);
    if (from < 0) { /* not a fresh start from the recipe's init: another attempt looks again */
        char why[sizeof diag->msg];
        snprintf(why, sizeof why, "%s", diag->msg[0] ? diag->msg : "cannot list checkpoints");
        bt_diag_init(diag); /* bt_diag_set keeps a message already set */
        bt_diag_set(diag,
                    "stage \"%s\": %s; cannot tell which checkpoint the stage starts from: "
                    "the attempt fails (retried)",
                    c->doc->recipe->stages[i]->name, why);
        return BT_EIO;
    }
    if (from > 0) {
        free(s->init_checkpoint);
        s->init_checkpoint = strdup(c->dir->path);
    } else if (init != NULL && init[0] != '\0') { /* none of its own yet: the recipe's */
        free(s->init_checkpoint);
        s->init_checkpoint = strdup(init);
    }
    /* a string not copied (strdup failing) is no field to leave out: the spec would
     * start the stage elsewhere (random weights for a lost init_checkpoint) */
    int lost = s->run_dir == NULL || s->run_id == NULL ||
               (c->cs_open && s->control_address == NULL) ||
               ((from > 0 || (init != NULL && init[0] != '\0')) && s->init_checkpoint == NULL);
    size_t n = baton__stage_spec__get_packed_size(s);
    uint8_t *buf = lost ? NULL : malloc(n ? n : 1);
    if (buf == NULL) return BT_ENOMEM;
    baton__stage_spec__pack(s, buf);
    char name[64];
    snprintf(name, sizeof name, "specs/s%02zu-a%02u.pb", i, attempt);
    run_dir_file(c->dir, name, file, cap);
    int at_tmp = 0;
    rc = run_spec_fault_full(name, file, diag);
    rc = rc ? rc : ckpt_write_file_atomic_at(file, buf, n, &at_tmp, diag);
    *stuck = rc != 0 ? run_stuck(errno, at_tmp) : 0;
    free(buf);
    return rc;
}

/* The steps stage k counts on TensorBoard's axis: those it completed with, where the
 * journal says it completed (as read when this baton run started, or as this one
 * completed it), since the records of the stages after it were written counting them,
 * whatever its recipe says now (steps edited since); else its recipe's. */
static uint64_t run_stage_span(run_ctx *c, size_t k) {
    const run_stage_state *ss = k < RUN_MAX_STAGES ? &c->st.stage[k] : NULL;
    if (ss && ss->completed && ss->last_step > 0) return ss->last_step;
    Baton__Stage *eff = NULL;
    uint64_t n = recipe_effective_stage(c->doc, k, &eff) == 0 && eff ? eff->steps : 0;
    if (eff) protobuf_c_message_free_unpacked(&eff->base, NULL);
    return n;
}

/* Steps of the stages before stage i: where its steps start on TensorBoard's axis. */
static uint64_t run_step_offset(run_ctx *c, size_t i) {
    uint64_t n = 0;
    for (size_t k = 0; k < i; k++)
        n += run_stage_span(c, k);
    return n;
}

static uint32_t run_world(const Baton__StageSpec *s) {
    const Baton__Parallel *p = s->stage->parallel;
    return p->tp * p->pp * p->cp * p->dp;
}

/* Journals a completed step after a failure as the recovery. */
static void run_note_recovery(run_ctx *c, uint32_t stage, uint32_t attempt) {
    if (c->failed_at <= 0 || c->prog.steps_seen == 0) return;
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    /* the attempt's first step: several may arrive in one read of rank 0's output */
    r.has_step = 1, r.step = c->prog.first_step;
    r.has_recovery_s = 1, r.recovery_s = c->prog.first_step_at - c->failed_at;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__RECOVERED, stage, &r);
    if (!c->o->quiet) {
        run_progress_end(&c->prog);
        printf("[%s] recovered: step %llu completed %.2f s after the failure\n", c->prog.stage,
               (unsigned long long)r.step, r.recovery_s);
    }
    c->failed_at = 0;
}

/* control_ckpt_cb: rank 0 committed checkpoint name of the current attempt, over the
 * control channel (never from its output, which a --worker wrapper may send elsewhere). */
static void run_note_ckpt(void *arg, const char *name, uint64_t step) {
    run_ctx *c = arg;
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = c->cs.attempt;
    r.has_step = 1, r.step = step;
    r.detail = (char *)name;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__CHECKPOINT_COMMITTED, c->cs.stage_index, &r);
}

/* Once the attempt's ranks are gone: its checkpoints no Checkpoint message journaled (rank
 * 0 without the control channel) journaled from checkpoints/, and, the first time rank 0
 * trained without ever connecting, a word on what the run goes without. */
static void run_ckpts_without_channel(run_ctx *c, uint32_t stage, uint32_t attempt) {
    size_t found = run_ckpt_journal_found(c, stage, attempt);
    if (c->no_channel_said || !c->cs_open || c->cs.ranks == NULL || c->cs.ranks[0].ever_connected)
        return;
    if (found == 0 && c->prog.steps_seen == 0) return; /* it may never have begun */
    c->no_channel_said = 1;
    run_progress_end(&c->prog);
    run_err(c,
            "stage \"%s\" attempt %u: rank 0 trained without ever connecting to the control "
            "channel at %s (BATON_CONTROL_TOKEN dropped, say by a --worker wrapper that "
            "clears the environment, or the address unreachable: its log says which): no "
            "heartbeats, so a hang is seen by progress only, and its "
            "checkpoint commits are journaled from %s/ once each attempt ends; said once\n",
            c->prog.stage, attempt, c->cs.address, CKPT_ROOT_IN_RUN);
}

/* Every rank exited 0 but the stage's final checkpoint could not be read (fin, from
 * run_stage_finished): RUN_FINAL_UNREAD (out of descriptors, an I/O error, damaged) a
 * failure another attempt may get past; RUN_FINAL_BROKEN (EACCES, ENOTDIR, a newer
 * format) one it would meet the same: the run fails at once. */
static attempt_end run_unread_final(run_ctx *c, uint32_t stage, uint32_t attempt,
                                    Baton__JournalRecord *r, const char *why, int fin) {
    int again = fin != RUN_FINAL_BROKEN;
    r->detail = (char *)why;
    r->has_retryable = 1, r->retryable = again;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__FAILURE, stage, r);
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, r);
    run_progress_end(&c->prog);
    run_err(c, "stage \"%s\" attempt %u failed: %s%s\n", c->prog.stage, attempt, why,
            again ? ""
                  : " (not retried: another attempt would find it the same; once the cause "
                    "is fixed, 'baton resume' completes the stage)");
    return again ? ATTEMPT_RETRY : ATTEMPT_BROKEN;
}

/* The poll set of a watch turn (the signalfd, then every descriptor of the control
 * channel, however many ranks connect) grown to fit: pfd itself or a larger one (small,
 * the caller's first, is never freed); out of memory, pfd as it was, which
 * control_server_pollfds fills as far as it goes. */
static struct pollfd *run_watch_room(const run_ctx *c, struct pollfd *pfd,
                                     const struct pollfd *small, size_t *cap) {
    size_t want = 2 + (c->cs_open ? c->cs.n_conns : 0);
    if (want <= *cap) return pfd;
    want += want / 2; /* a crowd connecting grows it a few times, not once a turn */
    struct pollfd *p = realloc(pfd == small ? NULL : pfd, want * sizeof *p);
    if (p == NULL) return pfd;
    *cap = want;
    return p;
}

/* Polls the job until it ends; kills it on a signal or a hang (*hung set). */
static int run_watch(run_ctx *c, launch_job *job, uint32_t stage, uint32_t attempt, double hang_s,
                     int *hung) {
    struct pollfd small[64], *pfd = small;
    size_t cap = sizeof small / sizeof *small;
    double started = bt_clock_now(), last = started;
    int rc;
    c->slow_forgiven = 0, c->cont_carry = 0;
    run_got_cont(c); /* one from before the attempt stopped none of its turns */
    /* progress from rank 0's Metrics, as they arrive and as its log replays them */
    c->cs.on_metrics = run_progress_metrics, c->cs.metrics_arg = &c->prog;
    c->cs.on_checkpoint = run_note_ckpt, c->cs.ckpt_arg = c; /* journaled as they come */
    for (;;) {
        size_t n = 0;
        pfd = run_watch_room(c, pfd, small, &cap);
        if (c->sfd >= 0) pfd[n++] = (struct pollfd){.fd = c->sfd, .events = POLLIN};
        if (c->cs_open) n += control_server_pollfds(&c->cs, pfd + n, cap - n);
        if ((rc = launch_job_step(job, pfd, n, RUN_POLL_MS)) <= 0) break;
        run_pause_check(c, &last, &started, hang_s);
        if (c->cs_open) control_server_handle(&c->cs, pfd, n, bt_clock_now());
        /* where rank 0 stands before its first step (resumed there), by its heartbeats */
        if (c->cs_open && c->cs.ranks) run_progress_at(&c->prog, c->cs.ranks[0].step);
        run_check_build(c, job); /* first: another build's topology report is no matter */
        run_check_topology(c, job, stage, attempt);
        run_note_recovery(c, stage, attempt);
        if (c->sfd >= 0 && (pfd[0].revents & POLLIN)) run_on_signal(c, job);
        if (run_dir_gone(c) && !c->killed_now) {
            c->got_signal = c->got_signal ? c->got_signal : SIGTERM;
            c->killed_now = 1;
            launch_job_kill_now(job, LAUNCH_STOPPED);
        }
        if (c->journal_broken && !c->got_signal) { /* a stop, as on SIGTERM */
            c->got_signal = SIGTERM;
            run_stop_workers(c, job, "baton run cannot write its journal");
        }
        if (c->got_signal && !c->killed_now && run_stop_lost_rank(job)) {
            /* the stop checkpoint is collective: the others would wait for the lost rank
             * until their collective timeout; run_check_stop says what was saved */
            c->killed_now = 1;
            launch_job_kill_now(job, LAUNCH_STOPPED);
        }
        /* also while a stop is under way: a hung rank would hold it for the stop's grace;
         * not once a rank's failure is ending the job: the others may be waiting for the
         * failed one, and the launcher's kill grace ends them (the failure is the cause) */
        double now =
            run_pause_check(c, &last, &started, hang_s); /* also a pause within this turn */
        if (!*hung && !c->killed_now && !c->topo_refused && !c->build_refused &&
            !run_rank_failed(job) && run_hung(c, job, started, hang_s, now)) {
            *hung = 1;
            run_progress_end(&c->prog);
            run_err(c, "stage \"%s\": %s: killing the attempt\n", c->prog.stage, c->hang_why);
            if (c->got_signal) /* the SIGTERMs went out with the stop request */
                launch_job_kill_now(job, LAUNCH_STOPPED);
            else
                launch_job_kill(job, LAUNCH_STOPPED);
        }
    }
    if (pfd != small) free(pfd);
    /* what the ranks sent before they exited, read before the attempt is judged and torn
     * down (a paused `baton run` finds them all gone at once) */
    if (c->cs_open) control_server_drain(&c->cs, RUN_DRAIN_S);
    run_check_build(c, NULL); /* a Hello read only now: the job ended first */
    /* and what never came (a rank's outbox full or lost with it) from rank 0's own log */
    if (c->cs_open) run_metrics_take(c, stage, attempt, 0, c->cs.step_offset);
    /* a first step only the drain or the log brought is the recovery too */
    run_note_recovery(c, stage, attempt);
    c->cs.on_metrics = NULL, c->cs.on_checkpoint = NULL;
    return rc;
}

/* Journals how the attempt ended and decides what comes next. */
static attempt_end run_classify(run_ctx *c, const launch_job *job, uint32_t stage, uint32_t attempt,
                                int hung) {
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    r.has_step = c->prog.have_step, r.step = c->prog.step;
    r.has_loss = c->prog.have_step, r.loss = c->prog.loss;
    int status = launch_job_exit_status(job);
    r.has_exit_code = 1, r.exit_code = status;
    char why[1024];
    /* Ranks that all exited 0, some without PMIx_Finalize (its reply never came: this
     * process, the PMIx server's, was paused meanwhile, say by Ctrl-Z), finished their
     * work all the same: the stage's final checkpoint says whether it was all of it. */
    int all_zero = job->cause == LAUNCH_EXITED && run_all_exited_zero(job);
    int fin = RUN_FINAL_SHORT;
    int success = job->cause == LAUNCH_SUCCESS && !c->build_refused; /* not another build's */
    all_zero = all_zero && !c->build_refused;
    if ((all_zero && !c->got_signal) || success)
        fin = run_stage_finished(c, stage, c->spec->stage->steps, why, sizeof why);
    if (fin == RUN_FINAL_BROKEN) return run_unread_final(c, stage, attempt, &r, why, fin);
    if (all_zero && !c->got_signal && fin == RUN_FINAL_DONE) {
        launch_job_describe(job, why, sizeof why);
        run_progress_end(&c->prog);
        run_err(c,
                "stage \"%s\": %s, but every rank exited 0 and the stage's final "
                "checkpoint is committed: the stage is complete\n",
                c->prog.stage, why);
        run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
        return ATTEMPT_DONE;
    }
    if (run_stopped_after_end(c, job, stage)) {
        r.exit_code = 0; /* every rank's; the job's cause is the stop */
        run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
        return ATTEMPT_DONE;
    }
    if (success) {
        /* Exit status 0 alone is no proof: a worker told to take fewer steps, or a wrapper
         * that never ran one, exits 0 too. The stage's final checkpoint is. */
        if (fin == RUN_FINAL_DONE) {
            run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
            return ATTEMPT_DONE;
        }
        if (fin < 0) return run_unread_final(c, stage, attempt, &r, why, fin);
        /* Every rank did what it was told and would do it again: not retried. */
        r.detail = why;
        r.has_retryable = 1, r.retryable = 0;
        run_journal(c, BATON__JOURNAL_RECORD__KIND__FAILURE, stage, &r);
        run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
        run_progress_end(&c->prog);
        run_err(c,
                "stage \"%s\" attempt %u failed: %s (not retried: another attempt "
                "would end the same way)\n",
                c->prog.stage, attempt, why);
        return ATTEMPT_BROKEN;
    }
    launch_job_describe(job, why, sizeof why);
    if (c->o->slurm) launch_slurm_describe(c->o->slurm, job, why, sizeof why);
    int signalled = run_signal_describe(c, job, stage, why, sizeof why);
    char node[32]; /* refused: killed for it, the rank blamed is the one named in why */
    int refused = run_refused(c, job, &r, why, sizeof why, node, sizeof node);
    if (hung && !refused) snprintf(why, sizeof why, "%s", c->hang_why);
    const launch_rank *rk =
        job->failed_rank >= 0 && !refused ? &job->ranks[job->failed_rank] : NULL;
    int told = !refused && !hung; /* why is how the ranks ended: what they said next */
    if (told && c->cs_open && c->cs.fatal.key.seen) {
        size_t l = strlen(why);
        char said[401]; /* its end kept: the errno's words */
        bt_utf8_cut_middle(c->cs.fatal.message, 400, said, sizeof said);
        snprintf(why + l, sizeof why - l, "; rank %u reported: %s", c->cs.fatal.rank, said);
    } else if (told && !signalled && rk && rk->exited && rk->exit_status != 0 && !c->o->slurm) {
        /* no Fatal (no channel yet, or a wrapper's error): what the rank said last */
        run_words_quote(&c->prog.words, rk->rank, why, sizeof why);
    }
    /* loss spikes: rolled back, unless the stage has had its RUN_MAX_ROLLBACKS (spent:
     * then a failure not retried, the checkpoints from the spikes (or the guard's warm-up
     * before them) on set aside all the same, no window kept: run_rollback_refused) */
    int spikes = !c->got_signal && rk && rk->exited && rk->exit_status == RUN_WORKER_EXIT_ROLLBACK;
    int spent = spikes && run_rollbacks(c, stage) >= RUN_MAX_ROLLBACKS;
    if (spikes && !spent && run_rollback(c, stage, attempt) == 0) {
        r.detail = why;
        run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
        c->nonfinite_prev.have = 0; /* the next attempt skips other samples */
        return ATTEMPT_ROLLBACK;
    }
    if (rk) {
        r.has_rank = 1, r.rank = rk->rank;
        r.has_signal = rk->term_signal != 0, r.signal = rk->term_signal;
        r.has_pid = rk->pid > 0, r.pid = (int32_t)rk->pid;
        run_nodes_name(&c->nodes, rk->node, node, sizeof node);
        r.node = node;
        if (c->o->slurm) run_slurm_blame(c, &r, node, sizeof node);
    } else if (hung && !refused) { /* no exit status: baton killed the ranks */
        run_blame_rank(c, job, c->hang_rank, &r, node, sizeof node);
    }
    int fatal = (rk && rk->exited && rk->exit_status == 2) ||
                (c->cs_open && c->cs.fatal.key.seen && c->cs.fatal.key.code == 2) ||
                job->cause == LAUNCH_SPAWN_FAILED || (c->o->slurm && c->o->slurm->step_refused) ||
                refused;
    /* Slurm's SIGTERM (a time limit, scancel, a requeue) reaching the workers before baton,
     * or the job ending under the attempt: a stop, not a failure */
    int stop = c->got_signal || (!fatal && c->o->slurm && run_slurm_stopping(c, job));
    /* Every candidate checkpoint refused (CRC mismatches, a truncated shard) twice in a
     * row: no attempt writes a checkpoint before it loads one, so the next would read the
     * same damaged bytes. Once is retried: the refusal may have been a passing I/O error. */
    int damaged = !stop && !fatal && c->prog.no_ckpt && c->no_ckpt_streak >= 1;
    c->no_ckpt_streak = c->prog.no_ckpt ? c->no_ckpt_streak + 1 : 0;
    int full = !stop && !fatal && !damaged && c->cs_open && c->cs.fatal.disk_full;
    int again = run_nonfinite_again(c) && !stop && !fatal && !damaged && !full;
    spent = spent && !stop && !fatal;
    if (spent) run_rollback_refused(c, stage, attempt);
    attempt_end end = stop                                ? ATTEMPT_STOPPED
                      : fatal                             ? ATTEMPT_FATAL
                      : damaged || full || again || spent ? ATTEMPT_BROKEN
                                                          : ATTEMPT_RETRY;
    char advice[1000];
    run_give_up_advice(c, again, spent, advice, sizeof advice);
    if (end == ATTEMPT_STOPPED) run_check_stop(c, job, stage, &r);
    r.detail = why;
    r.has_retryable = 1, r.retryable = end == ATTEMPT_RETRY;
    if (end != ATTEMPT_STOPPED) run_journal(c, BATON__JOURNAL_RECORD__KIND__FAILURE, stage, &r);
    r.node = NULL;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED, stage, &r);
    run_progress_end(&c->prog);
    if (end != ATTEMPT_STOPPED)
        run_err(c, "stage \"%s\" attempt %u failed: %s%s\n", c->prog.stage, attempt, why,
                end == ATTEMPT_FATAL     ? " (a configuration error: not retried)"
                : full || again || spent ? advice
                : end == ATTEMPT_BROKEN
                    ? " (not retried: no usable checkpoint in two attempts in a row, every "
                      "candidate refused: the checkpoints are damaged; 'baton ckpt verify' "
                      "says where)"
                    : "");
    /* the run's failure, as status gives it (the attempt's is journaled above) */
    run_give_up_numbers(c, stage, again, spent);
    if (full) /* the failure quotes the first Fatal: is it the full disk's? */
        run_disk_full(c, stage,
                      !hung && c->cs.fatal.key.seen && c->cs.fatal.rank == c->cs.fatal.full_rank &&
                          strcmp(c->cs.fatal.message, c->cs.fatal.full_message) == 0);
    return end;
}

/* "SPEC on node0,node2 (NOTE)" for the journal; the note also goes to the terminal. */
static void run_attempt_detail(run_ctx *c, const char *spec_file, char *out, size_t cap) {
    size_t l = (size_t)snprintf(out, cap, "%s on ", spec_file);
    for (uint32_t k = 0; k < c->nodes.n_active && l < cap; k++) {
        char name[32];
        run_nodes_name(&c->nodes, (int)k, name, sizeof name);
        l += (size_t)snprintf(out + l, cap - l, "%s%s", k ? "," : "", name);
    }
    if (c->nodes_note[0] && l < cap) {
        l += (size_t)snprintf(out + l, cap - l, " (%s)", c->nodes_note);
        run_progress_end(&c->prog);
        run_err(c, "%s\n", c->nodes_note);
    }
    if (c->rollback_note[0] && l < cap) snprintf(out + l, cap - l, " (%s)", c->rollback_note);
    c->rollback_note[0] = '\0';
}

static attempt_end run_attempt(run_ctx *c, size_t i, uint32_t attempt, double *hang_s) {
    Baton__StageSpec *spec = NULL;
    char spec_file[4200], log_file[4200], name[64];
    bt_diag d;
    bt_diag_init(&d);
    /* first: it waits for a rank 0 a killed baton run left to end */
    run_metrics_take(c, (uint32_t)i, attempt, 1, run_step_offset(c, i));
    run_sweep_partials(c); /* no worker runs now: any .partial is a dead save's */
    char why[1024];
    int missing = run_ckpt_missing(c, (uint32_t)i, why, sizeof why);
    if (missing < 0) /* a failed attempt, retried: the cause may pass; nothing is changed */
        return run_unlisted(c, (uint32_t)i, attempt, why);
    if (missing > 0) {
        c->prog.stage = c->doc->recipe->stages[i]->name;
        run_give_up(c, (uint32_t)i, 1, "%s", why);
        return ATTEMPT_BROKEN;
    }
    int stuck = 0,
        wrc = run_write_spec(c, i, attempt, &spec, spec_file, sizeof spec_file, &stuck, &d);
    if (wrc != 0) {
        if (spec) protobuf_c_message_free_unpacked(&spec->base, NULL);
        return run_spec_failed(c, (uint32_t)i, attempt, wrc, stuck, RUN_NO_SPEC,
                               d.msg[0] ? d.msg : bt_strerror(wrc));
    }
    *hang_s = run_seconds(spec->stage->restart ? spec->stage->restart->heartbeat_timeout : NULL,
                          RUN_DEFAULT_HEARTBEAT_S);
    snprintf(name, sizeof name, "logs/s%02zu-a%02u.log", i, attempt);
    run_dir_file(c->dir, name, log_file, sizeof log_file);
    char *argv[] = {(char *)c->o->worker, "--spec", spec_file, NULL};
    char token_env[128];
    snprintf(token_env, sizeof token_env, "BATON_CONTROL_TOKEN=%s", c->dir->token);
    char store_env[400];
    char *env[] = {token_env, NULL, NULL};
    uint32_t world = run_world(spec);
    if (c->cs_open &&
        control_server_begin_attempt(&c->cs, (uint32_t)i, c->doc->recipe->stages[i]->name, attempt,
                                     world, run_step_offset(c, i)) != 0) {
        run_err(c, "out of memory\n");
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        return ATTEMPT_FATAL;
    }
    uint32_t nodes = c->nodes.n_active ? c->nodes.n_active : 1;
    if (nodes > world) nodes = world;
    launch_opts lo = {.nprocs = (int)world,
                      .nnodes = (int)nodes,
                      .argv = argv,
                      .env_extra = env,
                      .kill_grace_s = RUN_KILL_GRACE_S,
                      .on_output = run_progress_line,
                      .output_arg = &c->prog,
                      .fds_per_rank = c->cs_open}; /* each rank's control connection */
    int src = c->o->slurm ? run_slurm_opts(c, &lo, argv, i, attempt, (int)world, store_env,
                                           sizeof store_env, &stuck, &d)
                          : 0;
    if (src != 0) {
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        if (src == BT_EIO) /* as the spec's own: a full disk or planted file stops, resumable */
            return run_spec_failed(c, (uint32_t)i, attempt, BT_EIO, stuck,
                                   "not started: no host file written", d.msg);
        run_err(c, "%s\n", d.msg);
        return ATTEMPT_FATAL;
    }
    env[1] = c->o->slurm ? store_env : NULL;
    FILE *log = bt_fopen_private(log_file, "w"); /* a FIFO there is refused, never waited on */
    if (log == NULL) {
        int err = errno;
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        char msg[4400];
        snprintf(msg, sizeof msg, "%s: cannot create: %s", log_file, bt_file_why(err));
        return run_spec_failed(c, (uint32_t)i, attempt, BT_EIO, run_stuck(err, 1),
                               "not started: no log made", msg);
    }
    c->prog = (run_progress){.log = log,
                             .stage = c->doc->recipe->stages[i]->name,
                             .tty = isatty(1),
                             .quiet = c->o->quiet,
                             .total = spec->stage->steps};
    if (c->prog.log) setvbuf(c->prog.log, NULL, _IOLBF, 0); /* readable while it runs */
    run_words_init(&c->prog.words, lo.nprocs);
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    char detail[4800];
    run_attempt_detail(c, spec_file, detail, sizeof detail);
    r.detail = detail;
    r.worker = (char *)c->o->worker; /* which program ran, whatever PATH a resume has */
    run_journal(c, BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED, (uint32_t)i, &r);
    if (c->journal_broken) { /* the stage's or the attempt's start not journaled: no workers */
        if (c->prog.log) fclose(c->prog.log);
        c->prog.log = NULL;
        run_words_free(&c->prog.words);
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        return ATTEMPT_STOPPED;
    }
    /* after the attempt's start (a killed run's open attempt keeps its wall time), before
     * its ranks: what is found once it ends is then its own */
    run_ckpt_journal_found(c, (uint32_t)i, RUN_NO_ATTEMPT);
    launch_job job;
    c->spec = spec, c->topo_checked = c->topo_refused = 0, c->build_checked = c->build_refused = 0;
    int hung = 0, remade = c->srv.tmpdir_remade, rc = launch_job_init(&job, &c->srv, &lo, &d);
    if (rc == 0 && job.fds_note[0]) run_err(c, "%s\n", job.fds_note);
    rc = rc ? rc : launch_job_start(&job, &d);
    if (remade == 0 && c->srv.tmpdir_remade > 0) /* said the first time only */
        run_err(c,
                "the launcher's temp dir %s was removed while the run ran (a temp-file "
                "cleaner?): made it again\n",
                c->srv.tmpdir);
    if (c->srv.tmpdir_note[0]) run_err(c, "%s\n", c->srv.tmpdir_note);
    c->srv.tmpdir_note[0] = '\0';
    rc = rc ? rc : run_watch(c, &job, (uint32_t)i, attempt, *hang_s, &hung);
    attempt_end end = ATTEMPT_FATAL;
    if (rc == 0 && c->dir_gone) {
        end = ATTEMPT_STOPPED; /* said in run_dir_gone: nothing to judge or to journal */
    } else if (rc == 0) {
        run_ckpts_without_channel(c, (uint32_t)i, attempt);
        /* the rank that said why first, not a peer reacting to it reaped before it */
        if (c->cs_open && c->cs.fatal.key.seen && !c->o->slurm)
            launch_job_blame(&job, (int)c->cs.fatal.rank);
        else /* the ranks' exit 75: the rank a signal came to, not the first one reaped */
            run_signal_blame(c, &job);
        end = run_classify(c, &job, (uint32_t)i, attempt, hung);
        if (end == ATTEMPT_FATAL && c->o->slurm) /* what srun left of the step: no stop */
            run_slurm_cancel_left(c, NULL, 0);
        if (end == ATTEMPT_RETRY && c->o->slurm) {
            if (run_slurm_find_lost(c, (uint32_t)i, attempt))
                end = ATTEMPT_STOPPED; /* the job ended under the attempt */
        } else if (end == ATTEMPT_RETRY)
            run_find_lost_nodes(c, &job, (uint32_t)i, attempt);
    } else {
        end = run_launch_failed(c, (uint32_t)i, attempt, rc, d.msg[0] ? d.msg : bt_strerror(rc));
    }
    launch_job_close(&job);
    if (c->prog.log) fclose(c->prog.log);
    c->prog.log = NULL;
    run_words_free(&c->prog.words);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    return end;
}

/* Sleeps s seconds unless a signal arrives (then returns 1). Waited a day at a time, so
 * that no wait overflows poll's int milliseconds (the recipe check caps a backoff at
 * UNITS_MAX_DURATION_S; a NaN or negative one is no wait). */
static int run_backoff(run_ctx *c, double s) {
    struct pollfd pfd = {.fd = c->sfd, .events = POLLIN};
    double wait = s > 0 ? (s < UNITS_MAX_DURATION_S ? s : UNITS_MAX_DURATION_S) : 0;
    double end = bt_clock_now() + wait;
    for (double left = end - bt_clock_now(); left > 0; left = end - bt_clock_now()) {
        int ms = left > 86400 ? 86400 * 1000 : (int)(left * 1000) + 1;
        if (poll(&pfd, c->sfd >= 0 ? 1 : 0, ms) > 0) {
            struct signalfd_siginfo si;
            if (read(c->sfd, &si, sizeof si) == (ssize_t)sizeof si)
                c->got_signal = (int)si.ssi_signo, run_signal_note(c, &si);
            return 1;
        }
    }
    return 0;
}

static const Baton__RestartPolicy *run_policy(const recipe_doc *doc, size_t i, Baton__Stage **eff) {
    *eff = NULL;
    return recipe_effective_stage(doc, i, eff) == 0 && *eff ? (*eff)->restart : NULL;
}

/* The descriptors the PMIx server and the control channel take (14 measured), on top of
 * what baton run holds before they start. */
#define RUN_FDS_SERVERS 16

static int run_fds_precheck(run_ctx *c) {
    if (c->o->slurm) return 0; /* one srun: its own count at the launch */
    int world = (int)(c->nodes.planned * c->nodes.gpn);
    char note[400];
    bt_diag d;
    bt_diag_init(&d);
    int rc = launch_fds_check(world > 0 ? world : 1, LAUNCH_FDS_PER_RANK + 1, RUN_FDS_SERVERS, note,
                              sizeof note, &d);
    if (note[0]) run_err(c, "%s\n", note);
    struct rlimit rl;
    if (rc == 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    long servers = launch_fds_needed(0, 0, RUN_FDS_SERVERS);
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)servers) return 0;
    run_err(c, "cannot start: %s (its PMIx server and control channel alone need about %ld)\n",
            d.msg, servers);
    return BT_ERANGE;
}

int run_fds_check(const recipe_doc *doc, const run_opts *o) {
    run_ctx c = {.doc = (recipe_doc *)doc, .o = o, .sfd = -1, .cfd = -1};
    bt_diag d;
    bt_diag_init(&d);
    if (run_nodes_init(&c.nodes, doc->recipe->cluster, &d) != 0) {
        run_err(&c, "cannot start: %s\n", d.msg);
        return BT_ERANGE;
    }
    return run_fds_precheck(&c);
}

/* Attempts of stage i until it completes; an exit status when the run must end. */
static int run_stage(run_ctx *c, size_t i) {
    run_stage_state *ss = &c->st.stage[i];
    if (!ss->started) run_journal(c, BATON__JOURNAL_RECORD__KIND__STAGE_STARTED, (uint32_t)i, NULL);
    Baton__Stage *eff;
    const Baton__RestartPolicy *pol = run_policy(c->doc, i, &eff);
    uint32_t max_restarts = pol && pol->has_max_restarts ? pol->max_restarts : 10;
    double backoff = run_seconds(pol ? pol->backoff : NULL, RUN_DEFAULT_BACKOFF_S);
    int status = -1;
    c->no_ckpt_streak = 0;
    c->nonfinite_prev.have = 0;
    /* a failure an earlier baton run gave up on (or was killed or stopped after, its
     * restart too before a step): the first step of this one is its recovery, counted from
     * the failure on the monotonic clock */
    if (ss->recovery_open && c->failed_at <= 0 && ss->failure_at > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double ago = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - ss->failure_at;
        double t = bt_clock_now() - (ago > 0 ? ago : 0);
        c->failed_at = t > 0 ? t : 1e-9; /* before the boot: counted from it */
    }
    uint32_t first = ss->next_attempt > ss->attempts ? ss->next_attempt : ss->attempts;
    for (uint32_t attempt = first; status < 0; attempt++) {
        double hang_s = 0;
        attempt_end end = run_attempt(c, i, attempt, &hang_s);
        if (end == ATTEMPT_DONE || c->prog.steps_seen > 0) c->progressed = 1;
        if (c->journal_broken) {
            status = BT_EXIT_FAILURE; /* whatever the attempt came to: said in run_journal */
        } else if (end == ATTEMPT_DONE) {
            Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
            /* its final checkpoint, at its steps, is there (run_stage_finished), even when
             * the progress seen ended earlier: what a resume judges extra steps by */
            r.has_step = 1, r.step = eff && eff->steps > c->prog.step ? eff->steps : c->prog.step;
            r.has_loss = c->prog.have_step, r.loss = c->prog.loss;
            r.has_tokens_per_s = c->prog.have_step, r.tokens_per_s = c->prog.tokens_per_s;
            run_journal(c, BATON__JOURNAL_RECORD__KIND__STAGE_COMPLETED, (uint32_t)i, &r);
            /* as a later baton run replays it: the steps it completed with are where the
             * next stage's start on the metrics' axis (run_step_offset), even where the
             * journal said it completed with fewer before it was extended */
            ss->completed = 1, ss->last_step = r.step;
            run_progress_end(&c->prog);
            /* a failure the stage completed after without a step: not the next stage's */
            c->failed_at = 0;
            status = 0;
        } else if (end == ATTEMPT_STOPPED) {
            status = RUN_EXIT_STOPPED;
        } else if (end == ATTEMPT_FATAL) {
            run_give_up(c, (uint32_t)i, 0, "a configuration error: not retried");
            status = BT_EXIT_USAGE;
        } else if (end == ATTEMPT_BROKEN) {
            status = BT_EXIT_FAILURE;
        } else if (end == ATTEMPT_ROLLBACK) { /* at most RUN_MAX_ROLLBACKS: run_classify */
            run_err(c,
                    "restarting stage \"%s\" from its newest checkpoint before the spikes "
                    "(rollback %u of at most %u, not counted in max_restarts)\n",
                    c->prog.stage, run_rollbacks(c, (uint32_t)i), RUN_MAX_ROLLBACKS);
        } else if (++ss->failures - ss->not_retried > max_restarts) { /* restarts: retried */
            run_give_up(c, (uint32_t)i, 1, "giving up after %u restarts (max_restarts)",
                        max_restarts);
            status = BT_EXIT_FAILURE;
        } else {
            c->failed_at = bt_clock_now();
            run_err(c,
                    "restarting stage \"%s\" from its newest checkpoint in %.1f s "
                    "(restart %u of at most %u)\n",
                    c->prog.stage, backoff, ss->failures - ss->not_retried, max_restarts);
            if (run_backoff(c, backoff)) status = RUN_EXIT_STOPPED;
        }
    }
    if (eff) protobuf_c_message_free_unpacked(&eff->base, NULL);
    return status;
}

static int run_load_state(run_ctx *c) {
    Baton__JournalRecord **v;
    size_t n;
    journal_tail tail;
    bt_diag d;
    bt_diag_init(&d);
    if (journal_read(c->dir->path, &v, &n, &tail, &d) != 0) {
        run_err(c, "%s\n", d.msg);
        return BT_EIO;
    }
    if (tail.damaged) {
        /* continuing would replay a run that lost records (a checkpoint, a stage's end) */
        journal_records_free(v, n);
        journal_diag_damaged(c->dir->path, &tail, &d);
        run_err(c, "%s\n", d.msg);
        return BT_EINVAL;
    }
    char seen[300];
    int history = n == 0 ? run_dir_has_history(c->dir, seen, sizeof seen, &d) : 0;
    if (history < 0) {
        /* an unreadable checkpoints/ is no proof that no run worked here */
        journal_records_free(v, n);
        run_err(c,
                "%s/%s %s, and whether a run already worked in this directory cannot be "
                "told: %s; nothing was changed. Make it readable (or mend the cause), then "
                "run again\n",
                c->dir->path, JOURNAL_FILE,
                tail.size ? "holds no whole record" : "is missing or empty", d.msg);
        return BT_EINVAL;
    }
    if (history > 0) {
        /* Replaying nothing would start the run over on top of its checkpoints: stage 0
         * retrained from whatever is newest there, complete checkpoints replaced. */
        journal_records_free(v, n);
        run_err(c,
                "%s/%s %s, but a run already worked in this directory (it holds "
                "%s): without its journal baton cannot tell which stages completed and "
                "which checkpoint each one ended with, and will not guess; nothing was "
                "changed. Restore the journal, or start a new run in another --run-dir (a "
                "checkpoint here can be its recipe's init)\n",
                c->dir->path, JOURNAL_FILE,
                tail.size ? "holds no whole record" : "is missing or empty", seen);
        return BT_EINVAL;
    }
    run_state_replay(&c->st, v, n);
    for (size_t k = 0; k < n; k++)
        run_ckpt_note_record(c, v[k]);
    if (run_nodes_init(&c->nodes, c->doc->recipe->cluster, &d) != 0) {
        journal_records_free(v, n);
        run_err(c, "%s\n", d.msg);
        return BT_EINVAL;
    }
    for (size_t k = 0; k < n; k++) {
        if (v[k]->kind != BATON__JOURNAL_RECORD__KIND__NODE_EXCLUDED || !v[k]->node) continue;
        if (c->o->slurm)
            run_slurm_replay_exclusion(c, v[k]);
        else
            run_nodes_exclude(&c->nodes, v[k]->node);
    }
    for (size_t k = 0; k < n; k++) {
        uint64_t from, to;
        if (v[k]->kind == BATON__JOURNAL_RECORD__KIND__ROLLBACK &&
            run_skip_parse(v[k]->detail, &from, &to) == 0)
            run_skip_add(c, v[k]->stage_index, from, to);
    }
    journal_records_free(v, n);
    if (tail.torn) run_err(c, "the journal's torn last record was dropped\n");
    return 0;
}

/* RUN_STARTED, with the CRC32C (and, short, the bytes) of the overrides kept with the run:
 * what run_dir_open checks the kept copy against whenever the run is continued, and what
 * baton status applies. Journaled again when a resume takes an edited copy (its detail
 * says so): the overrides the run goes on with. */
static void run_journal_started(run_ctx *c) {
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    char *text = NULL;
    size_t n = 0;
    if (run_dir_read_overrides(c->dir, &text, &n) == 0) {
        r.has_overrides_crc32c = 1, r.overrides_crc32c = crc32c_update(0, text, n);
        if (n < RUN_OVERRIDES_KEPT_MAX && memchr(text, '\0', n) == NULL) r.overrides = text;
    }
    r.build = (char *)BATON_VERSION; /* named should a later build refuse the recipe */
    if (c->st.started) r.detail = "RUN_DIR/overrides edited: taken from here on";
    run_journal(c, BATON__JOURNAL_RECORD__KIND__RUN_STARTED, 0, &r);
    free(text);
}

/* A run that completed, whose recipe now has more (stages appended, more steps for its
 * last stage): said before that is trained. */
static void run_note_more(const run_ctx *c) {
    char what[300];
    run_edit_work_text(c->doc, &c->st, what, sizeof what);
    printf("%s: %s: the run completed, but its recipe (%s/recipe.yaml) now has more, from %s "
           "on: training it\n",
           c->o->prog ? c->o->prog : "baton run", c->dir->path, c->dir->path, what);
}

/* The worker of a run with work to do: one that cannot be launched (the one it was started
 * with, since removed) is said before anything is journaled, exit 2; nonzero then. */
static int run_worker_ready(const run_ctx *c) {
    bt_diag d;
    bt_diag_init(&d);
    if (run_worker_check(c->o->worker, &d) == 0) return 0;
    const char *note = c->o->worker_note;
    run_err(c, "%s%s%s%s\n", d.msg, note ? " (" : "", note ? note : "", note ? ")" : "");
    return -1;
}

/* The stages left, in order, until one ends the run; 0 when all completed. A stop asked
 * for once a stage's ranks were past its last step (that stage complete) ends the run
 * before the next stage, whose attempt would only save a stop checkpoint at its start. */
static int run_stages(run_ctx *c) {
    Baton__Stage **st = c->doc->recipe->stages;
    int status = 0;
    size_t done = SIZE_MAX; /* the stage this process completed last */
    for (size_t i = 0; status == 0 && !c->journal_broken && i < c->doc->recipe->n_stages; i++) {
        if (c->st.stage[i].completed && !run_edit_extends(c->doc, &c->st, i)) continue;
        if (done != SIZE_MAX && run_stop_before(c, st[done]->name, st[i]->name))
            return RUN_EXIT_STOPPED;
        status = run_stage(c, i);
        done = i;
    }
    return status;
}

int run_supervise(run_dir *dir, recipe_doc *doc, const run_opts *o) {
    run_ctx c = {.dir = dir, .doc = doc, .o = o, .sfd = -1, .cfd = -1};
    bt_diag d;
    bt_diag_init(&d);
    int rc = run_load_state(&c);
    if (rc == 0 && (rc = run_edit_check(&c, &d)) != 0) run_err(&c, "%s\n", d.msg);
    /* a recipe edited since the run stopped, against the checkpoint it resumes: refused
     * before anything is journaled */
    if (rc == 0) rc = run_resume_check(&c);
    if (rc == 0 && (rc = journal_open(&c.j, dir->path, &d)) != 0) run_err(&c, "%s\n", d.msg);
    if (rc != 0) return rc == BT_EINVAL ? BT_EXIT_USAGE : BT_EXIT_FAILURE; /* damaged: 2 */
    int status = 0;
    if (c.st.completed && run_edit_work_left(doc, &c.st) == 0) {
        printf("%s: %s: the run has already completed\n", o->prog ? o->prog : "baton run",
               dir->path);
    } else if (!o->slurm && run_worker_ready(&c) != 0) { /* srun execs it on the hosts */
        status = BT_EXIT_USAGE;
    } else if (run_metrics_files_check(&c) != 0) {
        status = BT_EXIT_USAGE;
    } else {
        if (c.st.completed) run_note_more(&c);
        if (!c.st.started || dir->note[0]) run_journal_started(&c); /* overrides edited */
        run_fit_warn(&c); /* plan's "DOES NOT FIT", said once per stage */
        c.sfd = run_signals(&c.cfd);
        bt_diag_init(&c.cs_diag);
        const char *host = o->slurm ? launch_slurm_listen(o->slurm) : "127.0.0.1";
        if (control_server_open(&c.cs, dir->token, dir->path, host, &c.cs_diag) == 0)
            c.cs_open = 1, c.cs.build = BATON_VERSION; /* a worker of another build refused */
        else
            run_err(&c,
                    "no control channel (hangs are seen by progress only, and checkpoint "
                    "commits are journaled from %s/ once each attempt ends): %s\n",
                    CKPT_ROOT_IN_RUN, c.cs_diag.msg);
        if (launch_server_init(&c.srv, &d) != 0) {
            run_err(&c, "cannot start the PMIx server: %s\n", d.msg);
            if (c.cs_open) control_server_close(&c.cs);
            journal_close(&c.j);
            return BT_EXIT_FAILURE;
        }
        status = run_stages(&c);
        if (status == 0) run_journal(&c, BATON__JOURNAL_RECORD__KIND__RUN_COMPLETED, 0, NULL);
        if (c.journal_broken)
            status = BT_EXIT_FAILURE;
        else if (status == BT_EXIT_FAILURE && c.srv.wedged && run_may_afresh(&c))
            status = RUN_EXIT_AFRESH;
        if (o->progressed) *o->progressed = c.progressed;
        launch_server_close(&c.srv);
        if (c.cs_open) control_server_close(&c.cs);
        if (c.sfd >= 0) close(c.sfd);
        if (c.cfd >= 0) close(c.cfd);
    }
    journal_close(&c.j);
    if (status == 0) run_print_summary(dir);
    bt_buf cmd;
    bt_buf_init(&cmd);
    if (status == RUN_EXIT_STOPPED)
        run_err(&c, "stopped; continue with %s\n", bt_shell_cmd(&cmd, "baton resume", dir->path));
    if (c.dir_gone && c.dir_moved_to[0])
        run_err(&c, "stopped: %s was moved while the run ran; continue with %s\n", dir->path,
                bt_shell_cmd(&cmd, "baton resume", c.dir_moved_to));
    else if (c.dir_gone && c.dir_away)
        run_err(&c,
                "stopped: %s is not where it was; if it was moved, continue with 'baton "
                "resume NEW_PATH'\n",
                dir->path);
    else if (c.dir_gone)
        run_err(&c, "stopped: %s was removed while the run ran; nothing is left to resume\n",
                dir->path);
    else if (c.journal_broken)
        run_err(&c,
                "stopped because the journal could not be written; once it can, continue "
                "with %s\n",
                bt_shell_cmd(&cmd, "baton resume", dir->path));
    bt_buf_free(&cmd);
    return status;
}
