/* Jobs: fork/exec of the ranks, their output, supervision, and stopping them.
 *
 * Rules this file keeps:
 * - waitpid(pid, WNOHANG) on our own pids is the only source of truth about a rank's
 *   end; PMIx raises nothing when a client dies. We wake on each rank's pidfd (the
 *   kernel's per-child exit notification) rather than on SIGCHLD, because a SIGCHLD
 *   handler needs process-global state and would take the signal away from the
 *   program embedding us; without pidfds a short poll timeout stands in.
 * - We never call waitpid(-1): other children of the process are not ours to reap.
 * - The process is multithreaded (PMIx's progress thread), so between fork and exec the
 *   child only makes async-signal-safe calls on data prepared before fork.
 * - One failure names the job's cause; what follows from stopping the others (their
 *   SIGTERM, their nonzero exits) is recorded per rank but never overrides it. Which
 *   failure: the order in which waitpid sees deaths is not the order in which ranks
 *   failed (a rank's PMIx socket closes early in its exit, its peers' fences fail at
 *   once, and on two cores a peer's quick error exit is often reaped first). So the
 *   first failure opens a short settle window, before anything is signalled, and the
 *   strongest failure seen in it wins: killed by a signal > PMIx_Abort > exit without
 *   PMIx_Finalize > nonzero exit after it; the earliest among equals. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"
#include "launch_fds.h"
#include "util/rmtree.h"
#include "launch_tmpdir.h"
#include "pmix_host.h"
#include "util/clock.h"
#include "util/fd_close.h"
#include "util/stop_signals.h"

extern char **environ;

#define LAUNCH_LINE_MAX        4096  /* longer lines are split */
#define LAUNCH_READ_BUDGET     65536 /* bytes read per stream per step, so no rank starves */
#define LAUNCH_NOPIDFD_POLL_MS 50    /* poll period when pidfd_open is unavailable */
#define LAUNCH_DEFAULT_GRACE_S 5.0
#define LAUNCH_SETTLE_S        0.2 /* the settle window (see the top of this file) */

enum { LAUNCH_FD_WAKE, LAUNCH_FD_PID, LAUNCH_FD_OUT, LAUNCH_FD_ERR, LAUNCH_FD_EXTRA };

typedef struct launch_io {
    int fd[2];       /* read ends of the rank's stdout and stderr pipes, or -1 */
    int pidfd;       /* or -1 */
    int sent_signal; /* the last signal the launcher sent to the rank's group */
    size_t len[2];
    char line[2][LAUNCH_LINE_MAX]; /* partial line per stream */
} launch_io;

const char *launch_cause_str(launch_cause cause) {
    switch (cause) {
    case LAUNCH_RUNNING:
        return "running";
    case LAUNCH_SUCCESS:
        return "success";
    case LAUNCH_EXITED:
        return "a rank exited with a nonzero status";
    case LAUNCH_SIGNALED:
        return "a rank was killed by a signal";
    case LAUNCH_ABORTED:
        return "a rank called PMIx_Abort";
    case LAUNCH_TIMED_OUT:
        return "the job timed out";
    case LAUNCH_STOPPED:
        return "the job was stopped";
    case LAUNCH_SPAWN_FAILED:
        return "a rank could not be started";
    }
    return "unknown";
}

/* ---- server ---------------------------------------------------------------------------- */

int launch_server_init(launch_server *srv, bt_diag *diag) {
    return pmixhost_init(srv, diag);
}

void launch_server_close(launch_server *srv) {
    pmixhost_close(srv);
}

/* ---- init -------------------------------------------------------------------------------- */

int launch_resolve_program(const char *cmd, char **out, bt_diag *diag) {
    if (strchr(cmd, '/') != NULL) {
        struct stat st;
        if (stat(cmd, &st) != 0) {
            bt_diag_set(diag, "%s: %s", cmd, strerror(errno));
            return errno == ENOENT ? BT_ENOENT : BT_EINVAL;
        }
        if (S_ISDIR(st.st_mode) || access(cmd, X_OK) != 0) {
            bt_diag_set(diag, "%s: not an executable file", cmd);
            return BT_EINVAL;
        }
        *out = strdup(cmd);
        return *out != NULL ? 0 : BT_ENOMEM;
    }
    const char *path = getenv("PATH");
    if (path == NULL || path[0] == '\0') path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p != '\0';) {
        size_t n = strcspn(p, ":");
        char cand[PATH_MAX];
        int w = snprintf(cand, sizeof cand, "%.*s/%s", (int)(n ? n : 1), n ? p : ".", cmd);
        struct stat st;
        if (w > 0 && (size_t)w < sizeof cand && stat(cand, &st) == 0 && !S_ISDIR(st.st_mode) &&
            access(cand, X_OK) == 0) {
            *out = strdup(cand);
            return *out != NULL ? 0 : BT_ENOMEM;
        }
        p += n;
        if (*p == ':') p++;
    }
    bt_diag_set(diag, "%s: command not found in PATH", cmd);
    return BT_ENOENT;
}

static int launch_check_opts(const launch_opts *o, bt_diag *diag) {
    if (o->nprocs < 1 || o->nprocs > 65535) {
        bt_diag_set(diag, "number of processes: %d; valid: 1..65535", o->nprocs);
        return BT_ERANGE;
    }
    if (o->nnodes < 0 || o->nnodes > o->nprocs) {
        bt_diag_set(diag, "number of nodes: %d; valid: 1..%d (at most one node per process)",
                    o->nnodes, o->nprocs);
        return BT_ERANGE;
    }
    if (o->argv == NULL || o->argv[0] == NULL || o->argv[0][0] == '\0') {
        bt_diag_set(diag, "no command to launch");
        return BT_EINVAL;
    }
    return 0;
}

/* The job's descriptors against RLIMIT_NOFILE (launch_fds.h): LAUNCH_FDS_PER_RANK for
 * each process started (a plain one has no PMIx connection) and the caller's fds_per_rank
 * for each of its ranks, which are the processes unless fds_ranks says otherwise (a Slurm
 * step: one srun process, its tasks the ranks). */
static int launch_check_fds(const launch_opts *o, char *note, size_t cap, bt_diag *diag) {
    int own = LAUNCH_FDS_PER_RANK - (o->plain ? 1 : 0);
    /* besides: the job's hold on the server's temp dir (launch_job.dir_fd) */
    if (o->fds_ranks <= 0)
        return launch_fds_check(o->nprocs, own + o->fds_per_rank, 1, note, cap, diag);
    return launch_fds_check(o->fds_ranks, o->fds_per_rank, (long)o->nprocs * own + 1, note, cap,
                            diag);
}

int launch_job_init(launch_job *job, launch_server *srv, const launch_opts *opts, bt_diag *diag) {
    memset(job, 0, sizeof *job);
    job->failed_rank = job->cand_rank = -1;
    job->dir_fd = -1;
    job->srv = srv;
    int rc = launch_check_opts(opts, diag);
    rc = rc ? rc : launch_check_fds(opts, job->fds_note, sizeof job->fds_note, diag);
    if (rc != 0) return rc;
    job->opts = *opts;
    if (job->opts.nnodes == 0) job->opts.nnodes = 1;
    if (job->opts.kill_grace_s < 0) job->opts.kill_grace_s = LAUNCH_DEFAULT_GRACE_S;
    job->nprocs = job->opts.nprocs;
    job->nnodes = job->opts.nnodes;
    rc = launch_resolve_program(opts->argv[0], &job->exe, diag);
    if (rc != 0) goto error;
    job->ranks = calloc((size_t)job->nprocs, sizeof *job->ranks);
    job->io = calloc((size_t)job->nprocs, sizeof *job->io);
    if (job->ranks == NULL || job->io == NULL) {
        bt_diag_set(diag, "out of memory");
        rc = BT_ENOMEM;
        goto error;
    }
    for (int r = 0; r < job->nprocs; r++) {
        job->ranks[r].rank = r;
        job->ranks[r].node = pmixhost_node_of(r, job->nprocs, job->nnodes);
        job->io[r].fd[0] = job->io[r].fd[1] = job->io[r].pidfd = -1;
    }
    snprintf(job->nspace, sizeof job->nspace, "baton-%ld-%d", (long)getpid(), srv->next_attempt++);
    if (!job->opts.plain)
        rc = pmixhost_ns_register(srv, job->nspace, job->nprocs, job->nnodes, &job->ns, diag);
    if (rc != 0) goto error;
    return 0;
error:
    launch_job_close(job);
    return rc;
}

/* ---- spawning ---------------------------------------------------------------------------- */

/* Appends the caller's extra "NAME=value" strings (replacing same-named ones). */
static int launch_env_extra(char ***envp, char *const *extra) {
    size_t n = 0, k = 0;
    while ((*envp)[n] != NULL)
        n++;
    while (extra != NULL && extra[k] != NULL)
        k++;
    char **env = realloc(*envp, (n + k + 1) * sizeof *env);
    if (env == NULL) return BT_ENOMEM;
    *envp = env;
    for (size_t i = 0; i < k; i++) {
        size_t name = strcspn(extra[i], "=");
        char *dup = strdup(extra[i]);
        if (dup == NULL) return BT_ENOMEM;
        size_t j = 0;
        while (j < n && !(strncmp(env[j], extra[i], name) == 0 && env[j][name] == '='))
            j++;
        if (j < n)
            free(env[j]);
        else
            n++;
        env[j] = dup;
        env[n] = NULL;
    }
    return 0;
}

/* A copy of our environment without PMIx's variables, for a plain child (a launcher with
 * a PMIx server of its own must not see ours); freed by pmixhost_env_free. */
static int launch_env_plain(char ***envp) {
    size_t n = 0, k = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + 1, sizeof *env);
    if (env == NULL) return BT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PMIX_", 5) != 0 && (env[k++] = strdup(environ[i])) == NULL) {
            pmixhost_env_free(env);
            return BT_ENOMEM;
        }
    *envp = env;
    return 0;
}

/* Between fork and exec: async-signal-safe calls only. p: launch_child_fds's; reports an
 * exec failure's errno through p[5] (close-on-exec, so a successful exec reports nothing).
 * fd_limit: bt_fd_close_limit's, read before fork. */
static void launch_child(const char *exe, char *const argv[], char *const envp[], const int p[7],
                         pid_t parent, int fd_limit) {
    int status_fd = p[5];
    setpgid(0, 0); /* its own group: stopping a rank reaches its children too */
    /* A rank never outlives its launcher (killed with SIGKILL, say): a later launcher on
     * the same run directory must not meet it still training and writing checkpoints. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL); /* we ignore it; exec would keep that */
    bt_stop_signals_child();  /* SIGINT, SIGTERM ignored as baton was started */
    if (dup2(p[6], 0) < 0 || dup2(p[1], 1) < 0 || dup2(p[3], 2) < 0) goto fail;
    /* Nothing else of ours (other ranks' pipes, PMIx's sockets) may leak into the rank. */
    if (status_fd > 3) bt_fd_close_span(3, (unsigned)status_fd - 1, fd_limit);
    bt_fd_close_span((unsigned)status_fd + 1, ~0U, fd_limit);
    execve(exe, argv, envp);
fail:;
    int e = errno;
    if (write(status_fd, &e, sizeof e) < 0) _exit(127);
    _exit(127);
}

static void launch_close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* The pipes and /dev/null the child gets: p[0..1] stdout, p[2..3] stderr, p[4..5] exec
 * status, p[6] stdin. All close-on-exec; dup2 clears it on the child's 0, 1, 2. */
static int launch_child_fds(int p[7], bt_diag *diag) {
    for (int i = 0; i < 7; i++)
        p[i] = -1;
    int ok =
        pipe2(p, O_CLOEXEC) == 0 && pipe2(p + 2, O_CLOEXEC) == 0 && pipe2(p + 4, O_CLOEXEC) == 0;
    if (ok) ok = (p[6] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;
    if (ok) return 0;
    int e = errno, full = e == EMFILE || e == ENFILE; /* the same at every attempt */
    struct rlimit rl = {0, 0};
    getrlimit(RLIMIT_NOFILE, &rl);
    char soft[24] = "unlimited", hard[24] = "unlimited";
    if (rl.rlim_cur != RLIM_INFINITY)
        snprintf(soft, sizeof soft, "%llu", (unsigned long long)rl.rlim_cur);
    if (rl.rlim_max != RLIM_INFINITY)
        snprintf(hard, sizeof hard, "%llu", (unsigned long long)rl.rlim_max);
    if (full)
        bt_diag_set(diag, "cannot create pipes for a rank: %s (%s; RLIMIT_NOFILE soft %s, hard %s)",
                    strerror(e), e == EMFILE ? "this process's limit" : "the system's file table",
                    soft, hard);
    else
        bt_diag_set(diag, "cannot create pipes for a rank: %s", strerror(e));
    for (int i = 0; i < 7; i++)
        launch_close_fd(&p[i]);
    return full ? BT_ERANGE : BT_EIO;
}

/* Waits for the child's exec: 0 once it happened, else the errno it failed with. */
static int launch_exec_status(int fd) {
    int e = 0;
    ssize_t n;
    do
        n = read(fd, &e, sizeof e);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof e ? e : 0;
}

static void launch_spawned(launch_job *job, int r, pid_t pid, int p[7]) {
    launch_io *io = &job->io[r];
    setpgid(pid, pid); /* also here: whichever of parent and child runs first */
    io->fd[0] = p[0];
    io->fd[1] = p[2];
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    fcntl(p[2], F_SETFL, O_NONBLOCK);
    io->pidfd = pidfd_open(pid, 0);
    job->ranks[r].pid = pid;
    job->ranks[r].running = 1;
    job->nrunning++;
}

/* The job's private scratch directory inside the server's 0700 temp dir, given to every
 * rank as BATON_JOB_DIR (rendezvous files, for instance) and removed with the job, also
 * when ranks were killed and could not clean up. The temp dir is made again first where
 * something removed it since the last job, or a new one where something else took its
 * name: PMIx keeps no file there that its clients need (they reach the server over TCP,
 * its URI in their environment). */
static int launch_job_dir(launch_job *job, bt_diag *diag) {
    launch_server *srv = job->srv;
    int kept = launch_tmpdir_keep(srv->tmpdir, sizeof srv->tmpdir, &srv->lock_fd, diag);
    if (kept < 0) return kept;
    srv->tmpdir_remade += kept == 1;
    if (kept == 2) { /* said by the caller, not an error */
        snprintf(srv->tmpdir_note, sizeof srv->tmpdir_note, "%s", diag->msg);
        bt_diag_init(diag);
    }
    int n = snprintf(job->dir, sizeof job->dir, "%s/%s", job->srv->tmpdir, job->nspace);
    /* in the dir held, not through its name: that may be a squatter's by now; and held by
     * the job itself, as the server's may be another dir by the job's end (launch_job.dir_fd) */
    errno = ENAMETOOLONG;
    if (n >= 0 && (size_t)n < sizeof job->dir)
        job->dir_fd = fcntl(srv->lock_fd, F_DUPFD_CLOEXEC, 3);
    if (job->dir_fd < 0 || mkdirat(job->dir_fd, job->nspace, 0700) != 0) {
        bt_diag_set(diag, "cannot create the job directory %s: %s", job->dir, strerror(errno));
        job->dir[0] = '\0';
        return BT_EIO;
    }
    return 0;
}

static int launch_spawn(launch_job *job, int r, bt_diag *diag) {
    char **env = NULL;
    int p[7];
    char dir_env[4200], host_env[64];
    snprintf(dir_env, sizeof dir_env, "BATON_JOB_DIR=%s", job->dir);
    /* Every rank of the job runs on this host, whatever its virtual node: the worker
     * divides the host's CPUs by this count (worker/cpu/cpu_threads.h). */
    snprintf(host_env, sizeof host_env, "BATON_HOST_RANKS=%d", job->nprocs);
    char *const dir_extra[] = {dir_env, host_env, NULL};
    int rc = job->opts.plain ? launch_env_plain(&env)
                             : pmixhost_client_setup(job->srv, job->ns, r, environ, &env, diag);
    if (rc == 0 && !job->opts.plain && launch_env_extra(&env, dir_extra) != 0) rc = BT_ENOMEM;
    if (rc == 0 && launch_env_extra(&env, job->opts.env_extra) != 0) {
        bt_diag_set(diag, "out of memory");
        rc = BT_ENOMEM;
    }
    if (rc == 0) rc = launch_child_fds(p, diag);
    if (rc != 0) goto done;
    int fd_limit = bt_fd_close_limit();
    pid_t self = getpid(), pid = fork();
    if (pid == 0) launch_child(job->exe, job->opts.argv, env, p, self, fd_limit);
    if (pid < 0) {
        bt_diag_set(diag, "cannot fork rank %d: %s", r, strerror(errno));
        rc = BT_EIO;
    } else {
        /* The child's ends. */
        launch_close_fd(&p[1]);
        launch_close_fd(&p[3]);
        launch_close_fd(&p[5]);
        launch_close_fd(&p[6]);
        launch_spawned(job, r, pid, p);
        int e = launch_exec_status(p[4]);
        if (e != 0) {
            bt_diag_set(diag, "rank %d: cannot execute %s: %s", r, job->exe, strerror(e));
            /* not a program this host runs (ENOEXEC, EACCES, ...) fails alike every time;
             * a moment's shortage or a file being written may pass */
            rc = e == ENOMEM || e == EAGAIN || e == ETXTBSY || e == EMFILE || e == ENFILE
                     ? BT_EIO
                     : BT_EINVAL;
        }
    }
    launch_close_fd(&p[4]);
    if (pid < 0)
        for (int i = 0; i < 7; i++)
            launch_close_fd(&p[i]);
done:
    pmixhost_env_free(env);
    return rc;
}

/* Records the job's cause unless one is recorded, and stops the rest. */
static void launch_fail(launch_job *job, launch_cause cause, int rank) {
    if (job->cause == LAUNCH_RUNNING) {
        job->cause = cause;
        job->failed_rank = rank;
    }
    launch_job_kill(job, cause);
}

int launch_job_start(launch_job *job, bt_diag *diag) {
    if (job->started || (job->ns == NULL && !job->opts.plain) || job->ranks == NULL) {
        bt_diag_set(diag, "job %s cannot be started (already started or not initialized)",
                    job->nspace);
        return BT_EINVAL;
    }
    job->started = 1;
    job->t_start = bt_clock_now();
    int drc = launch_job_dir(job, diag);
    if (drc != 0) {
        launch_fail(job, LAUNCH_SPAWN_FAILED, 0);
        return drc;
    }
    for (int r = 0; r < job->nprocs; r++) {
        int rc = launch_spawn(job, r, diag);
        if (rc != 0) {
            launch_fail(job, LAUNCH_SPAWN_FAILED, r);
            return rc;
        }
    }
    return 0;
}

/* ---- stopping ---------------------------------------------------------------------------- */

/* sig to every live rank: through opts.on_signal where it takes it (a Slurm step's
 * tasks), else to each process's group. */
static void launch_signal_all(launch_job *job, int sig) {
    if (job->nrunning > 0 && job->opts.on_signal != NULL &&
        job->opts.on_signal(job->opts.signal_arg, sig))
        return;
    for (int r = 0; r < job->nprocs; r++) {
        if (!job->ranks[r].running) continue;
        /* The rank is not reaped, so its pid (and group id) cannot have been reused. */
        pid_t pid = job->ranks[r].pid;
        if (kill(-pid, sig) != 0) kill(pid, sig);
        job->io[r].sent_signal = sig;
    }
}

void launch_job_kill_after(launch_job *job, launch_cause cause, double grace_s) {
    if (!job->stopping) job->opts.kill_grace_s = grace_s;
    launch_job_kill(job, cause);
}

/* The job stops: cause recorded (unless a failure was), each live rank marked stopped.
 * 0 when it already was, or never started. */
static int launch_job_stopping(launch_job *job, launch_cause cause) {
    if (job->cause == LAUNCH_RUNNING) job->cause = cause;
    if (job->stopping || !job->started) return 0;
    job->stopping = 1;
    for (int r = 0; r < job->nprocs; r++)
        if (job->ranks[r].running) job->ranks[r].stopped = 1;
    return 1;
}

void launch_job_kill(launch_job *job, launch_cause cause) {
    if (!launch_job_stopping(job, cause)) return;
    launch_signal_all(job, SIGTERM);
    job->t_kill = bt_clock_now() + job->opts.kill_grace_s;
}

void launch_job_kill_hard(launch_job *job, launch_cause cause) {
    launch_job_stopping(job, cause);
    if (!job->stopping) return;
    launch_signal_all(job, SIGKILL);
    job->t_kill = 0;
}

void launch_job_kill_now(launch_job *job, launch_cause cause) {
    launch_job_kill(job, cause);
    if (!job->stopping) return;
    launch_signal_all(job, SIGKILL);
    job->t_kill = 0;
}

static void launch_check_deadlines(launch_job *job, double now) {
    double limit = job->opts.timeout_s;
    if (!job->stopping && limit > 0 && now >= job->t_start + limit)
        launch_fail(job, LAUNCH_TIMED_OUT, -1);
    if (job->stopping && job->t_kill > 0 && now >= job->t_kill) {
        launch_signal_all(job, SIGKILL);
        job->t_kill = 0;
    }
}

/* ---- output ---------------------------------------------------------------------------- */

static void launch_write_all(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* EPIPE and friends: nobody is reading our output */
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

static void launch_emit(launch_job *job, int r, int stream, const char *line, size_t len) {
    if (job->opts.on_output != NULL) {
        job->opts.on_output(job->opts.output_arg, r, stream, line, len);
        return;
    }
    char prefix[24];
    int n = snprintf(prefix, sizeof prefix, "[%d] ", r);
    struct iovec iov[3] = {{prefix, (size_t)n}, {(void *)line, len}, {"\n", 1}};
    launch_write_all(stream, iov, 3);
}

/* Splits bytes into lines; a line longer than LAUNCH_LINE_MAX is emitted in pieces. */
static void launch_feed(launch_job *job, int r, int s, const char *p, size_t n) {
    launch_io *io = &job->io[r];
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            launch_emit(job, r, s + 1, io->line[s], io->len[s]);
            io->len[s] = 0;
            continue;
        }
        if (io->len[s] == LAUNCH_LINE_MAX) {
            launch_emit(job, r, s + 1, io->line[s], io->len[s]);
            io->len[s] = 0;
        }
        io->line[s][io->len[s]++] = p[i];
    }
}

static void launch_flush(launch_job *job, int r, int s) {
    launch_io *io = &job->io[r];
    if (io->len[s] > 0) launch_emit(job, r, s + 1, io->line[s], io->len[s]);
    io->len[s] = 0;
}

/* Reads what is there (up to the budget); closes the stream at EOF. */
static void launch_read(launch_job *job, int r, int s, size_t budget) {
    launch_io *io = &job->io[r];
    char buf[8192];
    while (io->fd[s] >= 0 && budget > 0) {
        ssize_t n = read(io->fd[s], buf, sizeof buf < budget ? sizeof buf : budget);
        if (n > 0) {
            launch_feed(job, r, s, buf, (size_t)n);
            budget -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            if (n < 0 && errno == EAGAIN) return;
            launch_flush(job, r, s);
            launch_close_fd(&io->fd[s]);
        }
    }
}

/* ---- reaping --------------------------------------------------------------------------- */

/* Failure weights: how strongly a rank's end points at the job's cause. */
enum {
    LAUNCH_W_NONE = 0,
    LAUNCH_W_EXIT_FINALIZED = 1,   /* nonzero exit after PMIx_Finalize: often a peer's error
                                      path reacting to the real failure */
    LAUNCH_W_EXIT_UNFINALIZED = 2, /* exit, even with 0, after PMIx_Init without
                                      PMIx_Finalize: its peers can no longer complete a
                                      fence, so like mpirun we call it a failure */
    LAUNCH_W_ABORT = 3,
    LAUNCH_W_SIGNAL = 4, /* killed by a signal the launcher did not send */
};

/* A failure was seen: the strongest one seen before the settle deadline names the
 * cause. Ignored once the job is being stopped. */
static void launch_candidate(launch_job *job, int r, int weight, launch_cause cause) {
    if (weight == LAUNCH_W_NONE || job->stopping) return;
    if (job->cand_rank < 0) job->t_settle = bt_clock_now() + LAUNCH_SETTLE_S;
    if (weight <= job->cand_weight) return;
    job->cand_rank = r;
    job->cand_weight = weight;
    job->cand_cause = cause;
}

/* Records how rank r ended and returns its failure weight. */
static int launch_record_exit(launch_job *job, int r, int status) {
    launch_rank *rk = &job->ranks[r];
    launch_io *io = &job->io[r];
    rk->running = 0;
    job->nrunning--;
    launch_close_fd(&io->pidfd);
    if (job->ns != NULL) {
        pmixhost_ns_mark_terminated(job->srv, job->ns, r);
        pmixhost_ns_rank_state(job->srv, job->ns, rk);
    }
    if (WIFSIGNALED(status)) {
        rk->term_signal = WTERMSIG(status);
        rk->signal_from_launcher = io->sent_signal != 0 && rk->term_signal == io->sent_signal;
        return rk->signal_from_launcher ? LAUNCH_W_NONE : LAUNCH_W_SIGNAL;
    }
    rk->exited = 1;
    rk->exit_status = WEXITSTATUS(status);
    if (rk->connected && !rk->finalized) return LAUNCH_W_EXIT_UNFINALIZED;
    return rk->exit_status == 0 ? LAUNCH_W_NONE : LAUNCH_W_EXIT_FINALIZED;
}

/* Reaps every rank that has ended (in rank order: equally strong failures seen in one
 * pass are named by the lowest rank). */
static void launch_reap(launch_job *job) {
    for (int r = 0; r < job->nprocs; r++) {
        if (!job->ranks[r].running) continue;
        int status = 0;
        pid_t w = waitpid(job->ranks[r].pid, &status, WNOHANG);
        if (w < 0 && errno == ECHILD)
            status = 255 << 8; /* reaped elsewhere: status lost */
        else if (w != job->ranks[r].pid)
            continue;
        int weight = launch_record_exit(job, r, status);
        launch_candidate(job, r, weight,
                         weight == LAUNCH_W_SIGNAL ? LAUNCH_SIGNALED : LAUNCH_EXITED);
    }
}

/* Names the cause once the settle window is over, or nobody is left to wait for. */
static void launch_settle(launch_job *job, double now) {
    if (job->cand_rank < 0 || job->stopping) return;
    if (now >= job->t_settle || job->nrunning == 0)
        launch_fail(job, job->cand_cause, job->cand_rank);
}

static void launch_take_aborts(launch_job *job) {
    int r;
    while (job->ns != NULL && (r = pmixhost_ns_take_abort(job->srv, job->ns)) >= 0) {
        pmixhost_ns_rank_state(job->srv, job->ns, &job->ranks[r]);
        launch_candidate(job, r, LAUNCH_W_ABORT, LAUNCH_ABORTED);
    }
}

/* ---- the event loop --------------------------------------------------------------------- */

static int launch_pfd_reserve(launch_job *job, size_t n) {
    if (n <= job->pfd_cap) return 0;
    struct pollfd *p = realloc(job->pfds, n * sizeof *p);
    if (p == NULL) return BT_ENOMEM;
    job->pfds = p;
    int *w = realloc(job->pfd_who, n * sizeof *w);
    if (w == NULL) return BT_ENOMEM;
    job->pfd_who = w;
    job->pfd_cap = n;
    return 0;
}

static size_t launch_pfd_add(launch_job *job, size_t i, int fd, int who) {
    job->pfds[i] = (struct pollfd){.fd = fd, .events = POLLIN};
    job->pfd_who[i] = who;
    return i + 1;
}

/* Fills the poll set; *nopidfd is set when a running rank has no pidfd. */
static size_t launch_pfd_fill(launch_job *job, struct pollfd *extra, size_t nextra, int *nopidfd) {
    size_t n = launch_pfd_add(job, 0, job->srv->wake[0], LAUNCH_FD_WAKE);
    *nopidfd = 0;
    for (int r = 0; r < job->nprocs; r++) {
        const launch_io *io = &job->io[r];
        if (job->ranks[r].running && io->pidfd < 0) *nopidfd = 1;
        if (io->pidfd >= 0) n = launch_pfd_add(job, n, io->pidfd, r * 4 + LAUNCH_FD_PID);
        if (io->fd[0] >= 0) n = launch_pfd_add(job, n, io->fd[0], r * 4 + LAUNCH_FD_OUT);
        if (io->fd[1] >= 0) n = launch_pfd_add(job, n, io->fd[1], r * 4 + LAUNCH_FD_ERR);
    }
    for (size_t i = 0; i < nextra; i++) {
        job->pfds[n] = extra[i];
        job->pfds[n].revents = 0;
        job->pfd_who[n++] = -1 - (int)i;
    }
    return n;
}

static int launch_ms_until(double t, double now) {
    double ms = (t - now) * 1e3 + 1;
    return ms <= 0 ? 0 : ms > 1e9 ? 1000000000 : (int)ms;
}

static int launch_min_timeout(int a, int b) {
    if (a < 0) return b;
    if (b < 0) return a;
    return a < b ? a : b;
}

static int launch_timeout(launch_job *job, int caller_ms, int nopidfd, double now) {
    int t = caller_ms;
    if (nopidfd) t = launch_min_timeout(t, LAUNCH_NOPIDFD_POLL_MS);
    if (!job->stopping && job->opts.timeout_s > 0)
        t = launch_min_timeout(t, launch_ms_until(job->t_start + job->opts.timeout_s, now));
    if (job->stopping && job->t_kill > 0)
        t = launch_min_timeout(t, launch_ms_until(job->t_kill, now));
    if (!job->stopping && job->cand_rank >= 0)
        t = launch_min_timeout(t, launch_ms_until(job->t_settle, now));
    return launch_min_timeout(t, pmixhost_progress(job->srv, now));
}

static void launch_pfd_dispatch(launch_job *job, size_t n, struct pollfd *extra) {
    for (size_t i = 0; i < n; i++) {
        int who = job->pfd_who[i];
        if (who < 0) {
            extra[-1 - who].revents = job->pfds[i].revents;
            continue;
        }
        int kind = who % 4;
        if (job->pfds[i].revents == 0 || (kind != LAUNCH_FD_OUT && kind != LAUNCH_FD_ERR)) continue;
        launch_read(job, who / 4, kind - LAUNCH_FD_OUT, LAUNCH_READ_BUDGET);
    }
}

/* Every rank is reaped: takes the output still in the pipes (a grandchild that keeps a
 * pipe open must not keep the job alive), then settles the cause. */
static void launch_finish(launch_job *job) {
    launch_settle(job, bt_clock_now());
    for (int r = 0; r < job->nprocs; r++)
        for (int s = 0; s < 2; s++) {
            launch_read(job, r, s, SIZE_MAX);
            launch_flush(job, r, s);
            launch_close_fd(&job->io[r].fd[s]);
        }
    if (job->cause == LAUNCH_RUNNING) job->cause = LAUNCH_SUCCESS;
    job->elapsed_s = bt_clock_now() - job->t_start;
    job->finished = 1;
}

int launch_job_step(launch_job *job, struct pollfd *extra, size_t nextra, int timeout_ms) {
    if (!job->started) return BT_EINVAL;
    if (job->nrunning == 0) {
        if (!job->finished) launch_finish(job);
        return 0;
    }
    if (launch_pfd_reserve(job, 1 + 3 * (size_t)job->nprocs + nextra) != 0) return BT_ENOMEM;
    int nopidfd;
    size_t n = launch_pfd_fill(job, extra, nextra, &nopidfd);
    int t = launch_timeout(job, timeout_ms, nopidfd, bt_clock_now());
    if (poll(job->pfds, n, t) < 0 && errno != EINTR) return BT_EIO;
    launch_pfd_dispatch(job, n, extra);
    /* Aborts first: an abort is recorded before the aborting rank can exit. */
    launch_take_aborts(job);
    launch_reap(job);
    double now = bt_clock_now();
    pmixhost_progress(job->srv, now);
    launch_settle(job, now);
    launch_check_deadlines(job, now);
    if (job->nrunning > 0) return 1;
    launch_finish(job);
    return 0;
}

int launch_job_wait(launch_job *job) {
    int rc;
    while ((rc = launch_job_step(job, NULL, 0, -1)) > 0) {
    }
    return rc;
}

/* ---- close ------------------------------------------------------------------------------ */

void launch_job_close(launch_job *job) {
    if (job->started && job->nrunning > 0) {
        launch_signal_all(job, SIGKILL);
        for (int r = 0; r < job->nprocs; r++) {
            if (!job->ranks[r].running) continue;
            int status = 0;
            pid_t w;
            do
                w = waitpid(job->ranks[r].pid, &status, 0);
            while (w < 0 && errno == EINTR);
            launch_record_exit(job, r, w == job->ranks[r].pid ? status : 255 << 8);
        }
    }
    for (int r = 0; job->io != NULL && r < job->nprocs; r++) {
        launch_close_fd(&job->io[r].fd[0]);
        launch_close_fd(&job->io[r].fd[1]);
        launch_close_fd(&job->io[r].pidfd);
    }
    if (job->ns != NULL) pmixhost_ns_deregister(job->srv, job->ns);
    job->ns = NULL;
    /* relative to the dir it was made in, held, never through a path: see bt_rmtree.h */
    if (job->dir[0] != '\0') bt_rmtree_name(job->dir_fd, job->nspace);
    job->dir[0] = '\0';
    launch_close_fd(&job->dir_fd);
    free(job->io);
    free(job->ranks);
    free(job->exe);
    free(job->pfds);
    free(job->pfd_who);
    job->io = NULL;
    job->ranks = NULL;
    job->exe = NULL;
    job->pfds = NULL;
    job->pfd_who = NULL;
}

/* ---- reporting ------------------------------------------------------------------------ */

int launch_job_exit_status(const launch_job *job) {
    const launch_rank *r = job->failed_rank >= 0 ? &job->ranks[job->failed_rank] : NULL;
    switch (job->cause) {
    case LAUNCH_SUCCESS:
        return 0;
    case LAUNCH_EXITED:
        return r->exit_status != 0 ? r->exit_status : 1;
    case LAUNCH_SIGNALED:
        return 128 + r->term_signal;
    case LAUNCH_ABORTED:
        return r->abort_status >= 1 && r->abort_status <= 255 ? r->abort_status : 1;
    case LAUNCH_TIMED_OUT:
        return 124;
    case LAUNCH_SPAWN_FAILED:
        return 127;
    default:
        return 1;
    }
}

int launch_job_blame(launch_job *job, int r) {
    if (job->cause != LAUNCH_EXITED || r < 0 || r >= job->nprocs || r == job->failed_rank) return 0;
    const launch_rank *rk = &job->ranks[r];
    if (rk->running || !rk->exited || rk->exit_status == 0) return 0;
    job->failed_rank = r;
    return 1;
}

static const char *launch_signame(int sig, char *buf, size_t cap) {
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL)
        snprintf(buf, cap, "SIG%s", abbrev);
    else
        snprintf(buf, cap, "%d", sig);
    return buf;
}

void launch_job_who(const launch_job *job, int r, char *buf, size_t cap) {
    const launch_rank *rk = &job->ranks[r];
    snprintf(buf, cap, "rank %d (node node%d, pid %ld)", r, rk->node, (long)rk->pid);
}

void launch_rank_ranges(const unsigned char *in, int n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int r = 0; r < n && len < cap; r++) {
        if (!in[r]) continue;
        int end = r;
        while (end + 1 < n && in[end + 1])
            end++;
        if (end - r >= 2) /* three or more in a row */
            len += (size_t)snprintf(buf + len, cap - len, "%s%d-%d", len ? " " : "", r, end);
        else
            for (int k = r; k <= end && len < cap; k++)
                len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? " " : "", k);
        r = end;
    }
}

/* The ranks the launcher stopped, e.g. "; stopped 3 other ranks: 0 1 3" or
 * "; stopped 127 other ranks: 0-4 6-127". */
void launch_job_describe_stopped(const launch_job *job, char *buf, size_t cap) {
    size_t len = strlen(buf);
    int n = 0;
    unsigned char *in = calloc((size_t)job->nprocs, 1);
    for (int r = 0; in != NULL && r < job->nprocs; r++)
        n += in[r] = job->ranks[r].stopped && r != job->failed_rank;
    if (n > 0 && len < cap) {
        len += (size_t)snprintf(buf + len, cap - len, "; stopped %d %srank%s: ", n,
                                job->failed_rank >= 0 ? "other " : "", n == 1 ? "" : "s");
        if (len < cap) launch_rank_ranges(in, job->nprocs, buf + len, cap - len);
    }
    free(in);
}

void launch_job_describe(const launch_job *job, char *buf, size_t cap) {
    char who[96], sig[32];
    int r = job->failed_rank;
    if (r >= 0) launch_job_who(job, r, who, sizeof who);
    const launch_rank *rk = r >= 0 ? &job->ranks[r] : NULL;
    buf[0] = '\0';
    switch (job->cause) {
    case LAUNCH_EXITED:
        snprintf(buf, cap, "%s exited with status %d%s", who, rk->exit_status,
                 rk->connected && !rk->finalized ? " without calling PMIx_Finalize" : "");
        break;
    case LAUNCH_SIGNALED:
        snprintf(buf, cap, "%s killed by signal %s%s", who,
                 launch_signame(rk->term_signal, sig, sizeof sig),
                 rk->term_signal == SIGXFSZ ? " (a file it wrote reached the file-size limit, "
                                              "ulimit -f)"
                                            : "");
        break;
    case LAUNCH_ABORTED:
        snprintf(buf, cap, "%s called PMIx_Abort(%d): %s", who, rk->abort_status, rk->abort_msg);
        break;
    case LAUNCH_TIMED_OUT:
        snprintf(buf, cap, "job timed out after %g s", job->opts.timeout_s);
        break;
    case LAUNCH_SPAWN_FAILED:
        snprintf(buf, cap, "rank %d (node node%d) could not be started", r, r >= 0 ? rk->node : 0);
        break;
    case LAUNCH_STOPPED:
        snprintf(buf, cap, "job stopped");
        break;
    default:
        return;
    }
    launch_job_describe_stopped(job, buf, cap);
}
