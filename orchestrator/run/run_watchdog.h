/* baton run's watch over an attempt: the hang rule, pauses of baton run itself (SIGSTOP,
 * a debugger, a starved host) forgiven, and the stop signals (SIGINT, SIGTERM, SIGHUP). */
#ifndef BATON_RUN_WATCHDOG_H
#define BATON_RUN_WATCHDOG_H

#include <sys/signalfd.h>

#include "run_ctx.h"

/* The hang rule: no heartbeat from some connected rank for hang_s (the control channel),
 * or, with no rank connected, neither a step from rank 0 nor a word from any rank for
 * hang_s. Sets c->hang_why and c->hang_rank; 1 when hung. */
int run_hung(run_ctx *c, const launch_job *job, double started, double hang_s, double now);
/* Whether a rank's own failure (not a stop of ours) is ending the job, or is about to. */
int run_rank_failed(const launch_job *job);
/* Whether a SIGCONT came since the last look (c->cfd drained). */
int run_got_cont(run_ctx *c);
/* A turn of run_watch longer than it should be: baton run was paused; the hang clocks
 * forgiven accordingly. Returns now. */
double run_pause_check(run_ctx *c, double *last, double *started, double hang_s);
/* Asks every rank to checkpoint and stop (their SIGTERM), the job killed after the grace. */
void run_stop_workers(run_ctx *c, launch_job *job, const char *reason);
/* The stop's signal si: its sender and when, for its echo. */
void run_signal_note(run_ctx *c, const struct signalfd_siginfo *si);
/* A stop signal waiting in c->sfd: the first stops the workers in order, a second (not
 * its echo) kills them at once. */
void run_on_signal(run_ctx *c, launch_job *job);
/* Between stages, after stage `done` completed and before `next` starts: whether a stop
 * was asked for, by a signal read during the attempt (its ranks were past the stage's last
 * step) or one still waiting in c->sfd (it came as they exited), said as stopping before
 * `next`. */
int run_stop_before(run_ctx *c, const char *done, const char *next);
/* During a stop: a rank gone other than by finishing (exit 0) or stopping (75). */
int run_stop_lost_rank(const launch_job *job);
/* The signalfd of the stop signals (blocked since run_signals_block); SIGCONT's in *cfd. */
int run_signals(int *cfd);

#endif
