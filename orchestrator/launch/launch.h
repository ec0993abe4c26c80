/* Local launcher: an embedded PMIx server and N client processes on this machine.
 *
 * Lifetimes follow libuv: the caller owns every handle's memory and drives
 *   launch_server_init -> (launch_job_init -> launch_job_start -> launch_job_step/wait
 *   -> launch_job_close)* -> launch_server_close.
 * One server serves the whole process (PMIx allows one server per process), and each
 * job or attempt registers a fresh namespace `baton-<pid>-<attempt>` on it, so that a
 * supervisor can relaunch without finalizing the PMIx library (which is not safe after
 * a client died; see notes/pmix-server.md).
 *
 * Threads: PMIx runs its own progress thread and calls the server's callbacks from
 * there; everything they share with the caller is behind launch_server.mu. The caller
 * itself is single-threaded with respect to this module: one thread drives the server
 * and its jobs. Fences are released only while a job is being stepped.
 *
 * Functions return 0 or a negative BT_ code (util/err.h) and fill a bt_diag. Nothing
 * here exits the process. Process-wide side effects, all made by launch_server_init and
 * documented there: SIGPIPE is ignored and PMIX_MCA_gds is set to "hash". */
#ifndef BATON_LAUNCH_H
#define BATON_LAUNCH_H

#include <poll.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/err.h"

/* ---- server ------------------------------------------------------------------------ */

typedef struct launch_server {
    /* Read-only for the caller. */
    char tmpdir[4096]; /* private 0700 directory holding the server's rendezvous files */
    /* Private; what PMIx's thread also touches is guarded by pmix_host.c's lock. */
    int wake[2];                   /* pipe: PMIx thread -> the stepping thread */
    struct pmixhost_ns *nspaces;   /* registered namespaces (linked list) */
    struct pmixhost_fence *fences; /* parked fence requests */
    double fence_grace_s;          /* see pmixhost_progress */
    int debug;                     /* BATON_LAUNCH_DEBUG set: trace PMIx callbacks */
    int started;                   /* PMIx_server_init succeeded */
    int next_attempt;              /* numbers the namespaces */
    int lock_fd;                   /* tmpdir, flock-ed: tells other servers' sweeps it is in use */
    /* Read-only for the caller: a call into PMIx timed out, its thread is stuck (pmix_host.c),
     * so no later job of this process can start: only a fresh process can go on. */
    int wedged;
    /* Read-only for the caller: how many times tmpdir was found gone as a job started and
     * was made again (launch_tmpdir.h: a temp-file cleaner, an older baton's sweep). */
    int tmpdir_remade;
    /* Read-only for the caller, who may clear it once said: "" or what a job found at
     * tmpdir's name instead of it (a squatter) and the new tmpdir made in its place. */
    char tmpdir_note[2048];
} launch_server;

/* Starts the embedded PMIx server: a private temp dir under $TMPDIR (or /tmp) for its
 * files, PMIX_MCA_gds=hash (the default ds21 store can deadlock on a mutex held by a
 * killed client), SIGPIPE ignored (a write to a dead client would otherwise kill us).
 * At most one server per process: BT_EINVAL if one is already running. */
int launch_server_init(launch_server *srv, bt_diag *diag);

/* Removes the temp dir. Every job must be closed first. PMIx_server_finalize is not
 * called: it crashes in a few percent of runs after a client died unfinalized, and the
 * library's memory and thread go away with the process. A later launch_server_init in
 * the same process is therefore refused. */
void launch_server_close(launch_server *srv);

/* ---- jobs ---------------------------------------------------------------------------- */

/* Why a job ended (or is ending). One failure is the cause; what the launcher does next
 * (stopping the other ranks) has consequences that are recorded per rank but are not
 * causes. The failure that names the cause is the strongest one seen within 0.2 s of
 * the first (killed by a signal > PMIx_Abort > exit without PMIx_Finalize > nonzero
 * exit after it), since the order in which deaths are observed is not the order in
 * which ranks failed; the other ranks are signalled only after that window. */
typedef enum launch_cause {
    LAUNCH_RUNNING = 0, /* not finished yet */
    LAUNCH_SUCCESS,     /* every rank exited with status 0 */
    LAUNCH_EXITED,      /* a rank exited with a nonzero status, or without PMIx_Finalize */
    LAUNCH_SIGNALED,    /* a rank was killed by a signal the launcher did not send */
    LAUNCH_ABORTED,     /* a rank called PMIx_Abort */
    LAUNCH_TIMED_OUT,   /* the whole-job timeout expired */
    LAUNCH_STOPPED,     /* the caller stopped the job with launch_job_kill */
    LAUNCH_SPAWN_FAILED /* a rank could not be started (fork or exec failed) */
} launch_cause;

/* What happened to one rank. Filled as the launcher observes it; final once every rank
 * is reaped (launch_job_step returned 0). */
typedef struct launch_rank {
    int rank, node;           /* node: index of the virtual node, named "node<node>" */
    pid_t pid;                /* 0 until forked */
    int running;              /* forked and not yet reaped */
    int exited;               /* exited normally with exit_status */
    int exit_status;          /* 0..255 */
    int term_signal;          /* killed by this signal, or 0 */
    int signal_from_launcher; /* term_signal is one the launcher sent while stopping */
    int aborted;              /* called PMIx_Abort ... */
    int abort_status;         /* ... with this status ... */
    char abort_msg[256];      /* ... and message (truncated) */
    int connected;            /* called PMIx_Init (connected to the server) */
    int finalized;            /* called PMIx_Finalize */
    int stopped;              /* still running when the launcher began stopping the job */
} launch_rank;

/* One line of a rank's output, without its newline. stream is 1 (stdout) or 2 (stderr). */
typedef void (*launch_output_cb)(void *arg, int rank, int stream, const char *line, size_t len);

typedef struct launch_opts {
    int nprocs;                 /* N >= 1 */
    int nnodes;                 /* K virtual nodes, 1 <= K <= N; 0 means 1. One server
                                   serves them all, so PMIX_REMOTE-scoped data does not
                                   cross virtual nodes (PMIX_GLOBAL does). */
    char *const *argv;          /* the program and its arguments, NULL-terminated */
    char *const *env_extra;     /* "NAME=value" strings added to every rank's env, or NULL */
    double timeout_s;           /* whole-job limit; <= 0 means none */
    double kill_grace_s;        /* SIGTERM -> SIGKILL delay when stopping; < 0 means 5 s */
    launch_output_cb on_output; /* NULL: write "[rank] line" to our stdout/stderr */
    void *output_arg;
    int plain;        /* the processes are not PMIx clients of ours but a launcher that wires its
                         own ranks (srun --mpi=pmix): no namespace, no PMIX_* variables in their
                         env, no BATON_JOB_DIR or BATON_HOST_RANKS (every rank's: the job's
                         process count, all on this host); supervised like ranks otherwise */
    int fds_per_rank; /* descriptors the caller itself holds per rank (a control channel's
                         connection): counted in launch_job_init's RLIMIT_NOFILE check */
    int fds_ranks;    /* the ranks fds_per_rank is held for where they are not the processes
                         started (a Slurm step: one srun, its tasks the ranks); 0: nprocs */
    /* How a stop's signal reaches the ranks where the processes started are not them (a
     * Slurm step: srun turns a SIGTERM into SIGKILL for every task): called with SIGTERM or
     * SIGKILL before it is sent to the live processes; returns 1 when it sent the signal to
     * the ranks itself (the processes then get none: srun ends as its tasks do), 0 to have
     * it sent to them as usual. NULL: always sent. */
    int (*on_signal)(void *arg, int sig);
    void *signal_arg;
} launch_opts;

typedef struct launch_job {
    /* Read-only for the caller. */
    int nprocs, nnodes;
    char nspace[64];    /* "baton-<pid>-<attempt>" */
    char dir[4096];     /* the job's private scratch directory (BATON_JOB_DIR), or "" */
    launch_rank *ranks; /* nprocs results, indexed by rank */
    launch_cause cause; /* LAUNCH_RUNNING until the job is over */
    int failed_rank;    /* the rank behind cause, or -1 (success, timeout, stop) */
    double elapsed_s;   /* from start to the last reap */
    char fds_note[256]; /* "" or: the soft RLIMIT_NOFILE was raised for the job (say it) */
    /* Private. */
    launch_server *srv;
    launch_opts opts;
    struct pmixhost_ns *ns;
    struct launch_io *io;       /* per rank: pipes, pidfd, partial output lines */
    char *exe;                  /* argv[0] resolved through PATH */
    double t_start, t_kill;     /* t_kill: when SIGKILL follows the SIGTERMs, or 0 */
    double t_settle;            /* end of the settle window opened by the first failure */
    int cand_rank, cand_weight; /* the strongest failure seen in it (see launch.c) */
    launch_cause cand_cause;
    int stopping; /* SIGTERM sent to every live rank */
    int nrunning;
    int started, finished;
    struct pollfd *pfds; /* poll set, rebuilt each step; pfd_who[i] = rank * 4 + kind */
    int *pfd_who;
    size_t pfd_cap;
    /* the server's temp dir that dir was made in, held (a dup): still that dir where the
     * server made another since (launch_tmpdir_keep); -1 without one */
    int dir_fd;
} launch_job;

/* Validates opts, checks that the job's descriptors fit under RLIMIT_NOFILE (launch_fds.h;
 * BT_ERANGE when they cannot, the soft limit raised to the hard one when that is enough,
 * said in job->fds_note), resolves the program through PATH and registers the namespace.
 * The job keeps pointers into opts->argv and opts->env_extra until close. */
int launch_job_init(launch_job *job, launch_server *srv, const launch_opts *opts, bt_diag *diag);
/* A program as execve needs it (*out, malloc'ed): cmd as given when it has a slash, else
 * found through PATH. BT_ENOENT when there is none, BT_EINVAL when it is a directory or
 * not executable (diag names cmd and why). What launch_job_init checks argv[0] with. */
int launch_resolve_program(const char *cmd, char **out, bt_diag *diag);
/* The ranks r < n with in[r] set, in order, runs of three or more as "a-b":
 * "0 1 3", "0-4 6-127". */
void launch_rank_ranges(const unsigned char *in, int n, char *buf, size_t cap);

/* Forks and execs every rank, each in its own process group, with the PMIx env. On an
 * error after some ranks started, those are being stopped: keep stepping (or close). */
int launch_job_start(launch_job *job, bt_diag *diag);

/* One turn of the event loop: polls the ranks' output, their exits, PMIx requests and
 * the caller's own fds (extra, may be NULL; revents are filled in), for at most
 * timeout_ms (-1: until something happens). Returns 1 while ranks are still running,
 * 0 once all are reaped (job->cause is then final), or a negative BT_ code. */
int launch_job_step(launch_job *job, struct pollfd *extra, size_t nextra, int timeout_ms);

/* Steps until the job is over; returns 0 or a negative BT_ code. */
int launch_job_wait(launch_job *job);

/* Starts stopping every live rank: SIGTERM to its process group now (or through
 * opts.on_signal), SIGKILL after the kill grace. cause is recorded unless a failure was already
 * recorded. Keep stepping. */
void launch_job_kill(launch_job *job, launch_cause cause);

/* The same with another SIGTERM -> SIGKILL delay than the job's kill_grace_s (e.g. longer
 * when the ranks are asked to checkpoint before they exit). */
void launch_job_kill_after(launch_job *job, launch_cause cause, double grace_s);

/* SIGKILL to every live rank now, also when a stop (launch_job_kill) is under way and
 * its grace has not run out: a rank that is hung or stopped (SIGSTOP) ignores SIGTERM.
 * Keep stepping. */
void launch_job_kill_now(launch_job *job, launch_cause cause);

/* SIGKILL only, no SIGTERM first: for ranks that must not act on a stop request, such as
 * a worker of another build saving a checkpoint in its own format. Under Slurm the rank is
 * srun, whose SIGKILL alone leaves the tasks running: opts.on_signal cancels the step's
 * tasks with SIGKILL first (launch_slurm_signal). Keep stepping. */
void launch_job_kill_hard(launch_job *job, launch_cause cause);

/* Stops (SIGKILL) and reaps any rank still running, deregisters the namespace and frees
 * what init allocated. Safe after a failed init or start. */
void launch_job_close(launch_job *job);

/* The exit status `baton launch` reports for a finished job: 0 on success; the failing
 * rank's exit status (1 if it exited 0 without PMIx_Finalize after PMIx_Init); 128 +
 * signal for a rank killed by a signal; the PMIx_Abort status
 * (1 if it is not in 1..255); 124 on timeout; 127 when a rank could not be executed;
 * 1 otherwise. */
int launch_job_exit_status(const launch_job *job);

/* One line saying why the job failed, e.g. "rank 2 (node node0, pid 123) exited with
 * status 3", written into buf (empty on success). */
void launch_job_describe(const launch_job *job, char *buf, size_t cap);
/* "rank R (node nodeK, pid P)", as launch_job_describe names a rank, into buf. */
void launch_job_who(const launch_job *job, int r, char *buf, size_t cap);
/* Appends to buf what launch_job_describe ends with: the ranks the launcher stopped, other
 * than the failed one ("; stopped 2 other ranks: 0 3"), or nothing. */
void launch_job_describe_stopped(const launch_job *job, char *buf, size_t cap);

/* Names rank r as the job's failure in place of the rank the launcher named, where both
 * exited on their own with a nonzero status: say r said why on the control channel first
 * and the named rank was a peer whose error path reacted to it, reaped before r. Returns
 * 1 when it did; 0 (nothing changed) for any other cause, such as a rank killed by a
 * signal, or for a rank that did not exit nonzero. */
int launch_job_blame(launch_job *job, int r);

const char *launch_cause_str(launch_cause cause);

#endif
