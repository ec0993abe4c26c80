/* baton run's watch over an attempt (run_watchdog.h): the hang rule, baton run's own
 * pauses forgiven, the stop signals. */
#define _GNU_SOURCE /* sigabbrev_np */
#include "run_watchdog.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "run_holder.h"
#include "supervise.h"
#include "util/clock.h"
#include "util/stop_signals.h"

#define RUN_STOP_GRACE_S  120.0 /* on a signal: time for the workers to checkpoint */
#define RUN_SIGNAL_ECHO_S 1.0   /* the stop's signal again from its sender: the same stop */
#define RUN_PAUSE_GAP_S   1.0   /* a turn of run_watch this long: baton run was not running */

/* A rank of this host's job whose process is stopped (state T or t in /proc/PID/stat),
 * or -1: the likely cause of a hang, which the rank silent longest need not be (the
 * others block waiting on it, some of them earlier). Not for a Slurm step, whose
 * processes are srun's, not the ranks. */
static int run_stopped_rank(const launch_job *job) {
    if (job == NULL || job->opts.plain) return -1;
    for (int r = 0; r < job->nprocs; r++) {
        const launch_rank *lr = &job->ranks[r];
        if (!lr->running || lr->pid <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)lr->pid);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *close = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
        if (close != NULL && close[1] == ' ' && (close[2] == 'T' || close[2] == 't')) return r;
    }
    return -1;
}

/* The hang rule: no heartbeat from some connected rank for hang_s (the control channel),
 * or, with no rank connected, neither a step from rank 0 nor a word from any rank for
 * hang_s (before the ranks connect; or after they all closed the channel and the job still
 * has not ended — a lost host whose launcher step waits on it). */
int run_hung(run_ctx *c, const launch_job *job, double started, double hang_s, double now) {
    int rank = -1;
    double quiet = c->cs_open ? control_server_silence(&c->cs, now, &rank) : -1;
    c->hang_rank = -1;
    if (quiet > hang_s) {
        int stopped = run_stopped_rank(job);
        c->hang_rank = stopped >= 0 ? stopped : rank;
        char who[96] = "", pid[32] = "";
        if (stopped >= 0)
            snprintf(who, sizeof who, "rank %d (pid %d) is stopped (SIGSTOP or a debugger); ",
                     stopped, (int)job->ranks[stopped].pid);
        else if (job && !job->opts.plain && rank >= 0 && rank < job->nprocs &&
                 job->ranks[rank].pid > 0) /* the one blamed: its pid, as for a stopped one */
            snprintf(pid, sizeof pid, " (pid %d)", (int)job->ranks[rank].pid);
        snprintf(c->hang_why, sizeof c->hang_why,
                 "hang: %srank %d%s sent no heartbeat for %.1f s (heartbeat_timeout %.0f s)", who,
                 rank, pid, quiet, hang_s);
        return 1;
    }
    double since = c->prog.steps_seen ? c->prog.last_step_at : started;
    double heard = c->cs_open ? control_server_last_heard(&c->cs) : 0;
    since = heard > since ? heard : since;
    if (quiet < 0 && now - since > hang_s) {
        snprintf(c->hang_why, sizeof c->hang_why,
                 "hang: no completed step and no rank heard for %.0f s (heartbeat_timeout)",
                 hang_s);
        return 1;
    }
    return 0;
}

static double run_later(double t, double gap_s, double now) {
    return t + gap_s < now ? t + gap_s : now;
}

/* Whether a rank's own failure (not a stop of ours) is ending the job, or is about to
 * (a failed rank reaped, the launcher's settle window open: launch.h). */
int run_rank_failed(const launch_job *job) {
    return job->cause == LAUNCH_EXITED || job->cause == LAUNCH_SIGNALED ||
           job->cause == LAUNCH_ABORTED || (job->cause == LAUNCH_RUNNING && job->cand_rank >= 0);
}

/* Whether a SIGCONT came since the last look: baton run was stopped (SIGSTOP, Ctrl-Z)
 * and continued. SIGCONT is blocked: it resumes the process all the same, and waits in
 * c->cfd, which this drains. */
int run_got_cont(run_ctx *c) {
    struct signalfd_siginfo si;
    int got = 0;
    while (c->cfd >= 0 && read(c->cfd, &si, sizeof si) == (ssize_t)sizeof si)
        got = 1;
    return got;
}

/* Moves the hang clocks (every rank's last word, the attempt's start, rank 0's last step)
 * on by s seconds. */
static void run_forgive(run_ctx *c, double *started, double s, double now) {
    if (s <= 0) return;
    if (c->cs_open) control_server_forgive(&c->cs, s, now);
    *started = run_later(*started, s, now);
    if (c->prog.steps_seen) c->prog.last_step_at = run_later(c->prog.last_step_at, s, now);
}

/* A turn of run_watch's loop far longer than its poll (RUN_PAUSE_GAP_S): baton run itself
 * was not running and read nothing from the ranks meanwhile, which may have blocked on it
 * (a full socket or pipe, the PMIx server). Two causes are told apart by SIGCONT:
 *  - stopped (SIGSTOP, Ctrl-Z) and continued, a SIGCONT seen: the whole gap is forgiven,
 *    since the ranks' silence over it is not theirs;
 *  - no SIGCONT: slow (starved of CPU, its own work taking long), held by a debugger, or
 *    frozen with its container (the cgroup freezer sends no SIGCONT). Starvation can make
 *    every turn long, and forgiving each would never let a real hang be declared, so these
 *    gaps are forgiven only up to heartbeat_timeout in all per attempt (c->slow_forgiven):
 *    a freeze longer than that, or a starved run, may see its ranks judged hung.
 * A gap of half of heartbeat_timeout or more is said. *last: the previous check's time,
 * updated; returns now. */
double run_pause_check(run_ctx *c, double *last, double *started, double hang_s) {
    double now = bt_clock_now(), gap = now - *last;
    *last = now;
    /* a SIGCONT read after the clock may end a stop that began after it: the gap that
     * holds that stop is this one or the next, never a later one, so one read now is kept
     * for the next gap only (over-forgiving one turn at most). Kept longer, a SIGCONT with
     * no stop (bg, a stray kill -CONT) would excuse whatever slow turn came next, however
     * much later: a debugger's hold or a starved run taken for a stop, all of it forgiven. */
    int cont = run_got_cont(c), stopped = cont || c->cont_carry;
    c->cont_carry = cont;
    if (gap < RUN_PAUSE_GAP_S) return now;
    double forgive = gap, left = hang_s - c->slow_forgiven;
    if (!stopped) forgive = gap < left ? gap : left > 0 ? left : 0;
    if (!stopped) c->slow_forgiven += forgive;
    run_forgive(c, started, forgive, now);
    int ran_out = !stopped && forgive < gap && forgive > 0;
    if (gap < hang_s / 2 && !ran_out) return now;
    run_progress_end(&c->prog);
    if (stopped)
        run_err(c,
                "was stopped for %.1f s (it got SIGCONT: SIGSTOP or Ctrl-Z, then continued): "
                "the ranks' silence over that time does not count toward heartbeat_timeout\n",
                gap);
    else
        run_err(c,
                "was not running for %.1f s and got no SIGCONT (starved of CPU, slow, held "
                "by a debugger or frozen): %.1f s of the ranks' silence forgiven, %.1f s of "
                "at most %.0f s (heartbeat_timeout) in this attempt%s\n",
                gap, forgive, c->slow_forgiven, hang_s,
                forgive < gap ? "; no more is forgiven" : "");
    return now;
}

/* Asks the workers to checkpoint and stop (Stop over the control channel, SIGTERM), then
 * kills what is left after RUN_STOP_GRACE_S. Under Slurm the SIGTERM goes to the step's
 * tasks, not srun, which would SIGKILL them (launch_slurm_signal). */
void run_stop_workers(run_ctx *c, launch_job *job, const char *reason) {
    if (c->cs_open) control_server_stop_all(&c->cs, 1, reason);
    launch_job_kill_after(job, LAUNCH_STOPPED, RUN_STOP_GRACE_S);
}

/* The stop's signal si: its sender (one that kill()ed it, not a terminal's Ctrl-C) and
 * when, for run_signal_echo; the holder's record (run_holder.h) marked stopping, so that a
 * later baton stop sends nothing. */
void run_signal_note(run_ctx *c, const struct signalfd_siginfo *si) {
    c->signal_pid = si->ssi_code == SI_USER ? si->ssi_pid : 0;
    c->signal_at = bt_clock_now();
    if (c->dir != NULL) run_holder_stopping(c->dir->lock_fd);
}

/* Whether si, after the stop's signal, is another baton stop's (RUN_HOLDER_STOP_VALUE): one
 * that raced the record's "stopping", or one run when the record could not be written.
 * Said: the same stop, going on. */
static int run_signal_baton_stop(run_ctx *c, const struct signalfd_siginfo *si) {
    if ((int)si->ssi_signo != SIGTERM || si->ssi_code != SI_QUEUE ||
        si->ssi_int != RUN_HOLDER_STOP_VALUE)
        return 0;
    run_err(c,
            "got SIGTERM from baton stop (pid %u) while already stopping: the same stop, "
            "going on (its workers write a stop checkpoint; a SIGTERM or Ctrl-C from "
            "elsewhere kills them at once)\n",
            si->ssi_pid);
    return 1;
}

/* Whether si, after the stop's signal, is that one again: the same signal from the same
 * process, baton run's parent, within RUN_SIGNAL_ECHO_S, as coreutils' timeout sends it
 * (to its child, then to its own process group, which holds baton run too). A user's
 * second kill from another shell, or through a forwarder that is not the parent, is no
 * echo. Said, once: a third one kills. */
static int run_signal_echo(run_ctx *c, const struct signalfd_siginfo *si) {
    if ((int)si->ssi_signo != c->got_signal || si->ssi_code != SI_USER || c->signal_pid == 0 ||
        si->ssi_pid != c->signal_pid || (pid_t)si->ssi_pid != getppid() ||
        bt_clock_now() - c->signal_at > RUN_SIGNAL_ECHO_S)
        return 0;
    run_err(c,
            "got SIG%s again from the same process (pid %u), baton run's parent, within %.1f s "
            "(as `timeout` does, signalling baton run and then its process group): the same "
            "stop, going on (another signal kills the workers at once)\n",
            sigabbrev_np(c->got_signal), c->signal_pid, RUN_SIGNAL_ECHO_S);
    c->signal_pid = 0;
    return 1;
}

/* A stop signal waiting in c->sfd (non-blocking) read into *si: 0 when none. The first
 * (no stop asked for yet) is the stop: c->got_signal set and noted (run_signal_note). */
static int run_signal_take(run_ctx *c, struct signalfd_siginfo *si) {
    if (c->sfd < 0 || read(c->sfd, si, sizeof *si) != (ssize_t)sizeof *si) return 0;
    if (c->got_signal) return 1;
    c->got_signal = (int)si->ssi_signo;
    run_signal_note(c, si);
    return 1;
}

/* The first signal asks the workers to checkpoint and stop (RUN_STOP_GRACE_S); a second
 * SIGINT or SIGTERM (the user will not wait) kills them at once: the run resumes from its
 * last complete checkpoint. The first one echoed by its sender is no second (run_signal_echo). */
void run_on_signal(run_ctx *c, launch_job *job) {
    struct signalfd_siginfo si;
    int stopping = c->got_signal != 0;
    if (!run_signal_take(c, &si)) return;
    int sig = (int)si.ssi_signo;
    if (stopping) {
        if (c->killed_now || (sig != SIGINT && sig != SIGTERM)) return;
        if (run_signal_echo(c, &si) || run_signal_baton_stop(c, &si)) return;
        c->killed_now = 1;
        run_progress_end(&c->prog);
        run_err(c,
                "got SIG%s after SIG%s: killing the workers now (SIGKILL); the run "
                "resumes from its last complete checkpoint\n",
                sigabbrev_np(sig), sigabbrev_np(c->got_signal));
        launch_job_kill_now(job, LAUNCH_STOPPED);
        return;
    }
    run_progress_end(&c->prog);
    run_err(c, "got SIG%s: asking the workers to checkpoint and stop\n",
            sigabbrev_np(c->got_signal));
    run_stop_workers(c, job, "baton run got a signal");
}

int run_stop_before(run_ctx *c, const char *done, const char *next) {
    int said = c->got_signal != 0;
    struct signalfd_siginfo si;
    if (!said) run_signal_take(c, &si);
    if (!c->got_signal) return 0;
    run_progress_end(&c->prog);
    if (said)
        run_err(c, "stopping before stage \"%s\"\n", next);
    else
        run_err(c, "got SIG%s after stage \"%s\" completed: stopping before stage \"%s\"\n",
                sigabbrev_np(c->got_signal), done, next);
    return 1;
}

/* During a stop: a rank gone other than by finishing (exit 0) or stopping (75). */
int run_stop_lost_rank(const launch_job *job) {
    for (int k = 0; k < job->nprocs; k++) {
        const launch_rank *rk = &job->ranks[k];
        if (rk->pid != 0 && !rk->running &&
            !(rk->exited && (rk->exit_status == 0 || rk->exit_status == RUN_EXIT_STOPPED)))
            return 1;
    }
    return 0;
}

/* SIGCONT too: blocked, it still continues a stopped process, and waits for c->cfd (the
 * launcher's children start with no signal blocked). */
void run_signals_block(void) {
    sigset_t set;
    bt_stop_signals(&set);
    sigaddset(&set, SIGCONT);
    sigprocmask(SIG_BLOCK, &set, NULL);
}

/* A signal that came since run_signals_block waits in the signalfd; SIGCONT in *cfd. */
int run_signals(int *cfd) {
    sigset_t set, cont;
    bt_stop_signals(&set);
    sigemptyset(&cont);
    sigaddset(&cont, SIGCONT);
    *cfd = -1;
    if (sigprocmask(SIG_BLOCK, &cont, NULL) == 0)
        *cfd = signalfd(-1, &cont, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) return -1;
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}
