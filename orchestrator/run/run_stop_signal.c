/* A rank that stopped the ranks on a signal of its own, as an attempt's cause (run_ctx.h).
 *
 * A SIGTERM or SIGINT that reaches one rank (a user's kill, an OOM guard, a node agent)
 * makes every rank save a checkpoint at the next step and exit 75, the workers' "stopped on
 * request", in no useful order: the launcher blames whichever rank it reaped first. The
 * rank the signal came to says so in a Stop (schema/control.proto), and that rank, its
 * signal and where the ranks stopped name the failure instead. */
#define _GNU_SOURCE /* sigabbrev_np */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "run_ctx.h"
#include "supervise.h"

/* The rank's report where it names the cause: a signal baton run did not send (its own
 * SIGTERMs stop the ranks after another rank's failure, a hang, or its own stop), not while
 * baton run stops the run itself, and not under Slurm (whose SIGTERMs, a time limit or
 * scancel, run_slurm_stopping judges). */
static const control_stop_signal *run_signal_report(const run_ctx *c) {
    const control_stop_signal *k = &c->cs.stop_signal;
    if (!c->cs_open || !k->seen || c->o->slurm || c->got_signal) return NULL;
    if (k->sender == (int)getpid()) return NULL;
    return k;
}

static int run_rank_stopped(const launch_job *job, int r) {
    const launch_rank *rk = &job->ranks[r];
    return rk->exited && rk->exit_status == RUN_WORKER_EXIT_STOPPED;
}

void run_signal_blame(run_ctx *c, launch_job *job) {
    const control_stop_signal *k = run_signal_report(c);
    if (k == NULL || c->cs.fatal.key.seen || job->failed_rank < 0 ||
        !run_rank_stopped(job, job->failed_rank))
        return;
    launch_job_blame(job, (int)k->rank);
}

/* "SIGTERM (from pid 1234, not baton run)", "SIGINT (not from baton run)" */
static void run_signal_what(const control_stop_signal *k, char *out, size_t cap) {
    const char *abbrev = sigabbrev_np(k->signal);
    char sig[32];
    if (abbrev != NULL)
        snprintf(sig, sizeof sig, "SIG%s", abbrev);
    else
        snprintf(sig, sizeof sig, "signal %d", k->signal);
    if (k->sender > 0)
        snprintf(out, cap, "%s (from pid %d, not baton run)", sig, k->sender);
    else
        snprintf(out, cap, "%s (not from baton run)", sig);
}

int run_signal_describe(const run_ctx *c, const launch_job *job, uint32_t stage, char *why,
                        size_t cap) {
    const control_stop_signal *k = run_signal_report(c);
    if (k == NULL || (int)k->rank >= job->nprocs) return 0;
    char what[96], also[64] = "";
    run_signal_what(k, what, sizeof what);
    unsigned long long step = (unsigned long long)k->step;
    if (k->ranks > 1)
        snprintf(also, sizeof also, " (and %u other rank%s likewise)", k->ranks - 1,
                 k->ranks == 2 ? "" : "s");
    if (job->failed_rank != (int)k->rank || !run_rank_stopped(job, (int)k->rank)) {
        size_t l = strlen(why);
        snprintf(why + l, cap - l,
                 "; rank %u had received %s%s: the ranks were stopping at step %llu", k->rank, what,
                 also, step);
        return 0;
    }
    int all = 1;
    for (int r = 0; r < job->nprocs; r++)
        all = all && run_rank_stopped(job, r);
    int saved = c->journaled[stage].name[0] != '\0' && c->journaled[stage].step == k->step;
    char who[96];
    launch_job_who(job, (int)k->rank, who, sizeof who);
    if (saved && all) { /* each ended on its own stop: the launcher's SIGTERMs (to a rank
                         * slower to exit than the first) changed nothing, and go unsaid */
        snprintf(why, cap,
                 "%s received %s%s: every rank saved a stop checkpoint at step %llu and exited 75",
                 who, what, also, step);
        return 1;
    }
    if (saved)
        snprintf(why, cap, "%s received %s%s: the ranks saved a stop checkpoint at step %llu", who,
                 what, also, step);
    else
        snprintf(why, cap, "%s received %s%s: the ranks stopped at step %llu to save a checkpoint",
                 who, what, also, step);
    launch_job_describe_stopped(job, why, cap);
    return 1;
}
