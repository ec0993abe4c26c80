/* baton launch -n N [--nodes K] [--timeout T] [--kill-grace T] -- CMD [ARGS...]: starts N
 * copies of CMD as PMIx clients of an embedded PMIx server, prefixes their output with
 * the rank, and on the first failure stops the others and says which rank failed and
 * why. Any PMIx program runs under it unchanged. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cli.h"
#include "launch.h"
#include "launch_tmpdir.h"
#include "util/stop_signals.h"

static void launch_usage(FILE *f) {
    fprintf(f, "usage: baton launch -n N [--nodes K] [--timeout T] [--kill-grace T]\n"
               "                    -- CMD [ARGS...]\n\n"
               "Starts N processes of CMD on this machine as clients of an embedded PMIx server\n"
               "(namespace baton-<pid>-0, ranks 0..N-1), prefixes each output line with\n"
               "\"[rank] \", and when a rank fails (nonzero exit, a signal, PMIx_Abort) stops\n"
               "the others: SIGTERM to each rank's process group, SIGKILL after the grace.\n"
               "The ranks' stdin is /dev/null. Set BATON_LAUNCH_DEBUG=1 to trace the PMIx\n"
               "server's callbacks.\n\n"
               "  -n N                  number of processes (ranks); also -nN, -n=N, --np N\n"
               "  --nodes K             spread the ranks over K virtual nodes node0..nodeK-1\n"
               "                        (block distribution; default 1), each with its own\n"
               "                        host name, node id, local ranks and local peers;\n"
               "                        one PMIx server still serves them all, so data put\n"
               "                        with PMIX_REMOTE scope does not reach other nodes\n"
               "                        (PMIX_GLOBAL does)\n"
               "  --timeout T           stop the whole job after T, a duration as recipes\n"
               "                        write it: 90 (seconds), 30s, 5m, 1h (default: no\n"
               "                        limit)\n"
               "  --kill-grace T        SIGTERM -> SIGKILL delay when stopping (default 5s)\n"
               "  --help                show this help\n\n"
               "A rank that exits without PMIx_Finalize after PMIx_Init has failed, even with\n"
               "status 0 (its peers' fences can no longer complete).\n\n"
               "Exit status: 0 when every rank exited 0; else the failing rank's exit status\n"
               "(1 if that was 0), 128+SIG when it was killed by signal SIG, its PMIx_Abort\n"
               "status (1 if not in 1..255), 124 on --timeout, 128+SIG when baton launch\n"
               "itself got SIGINT, SIGTERM or SIGHUP, 126 when CMD is not executable, 127 when\n"
               "it is not found or a rank could not be started, 2 for bad usage, 1 when the\n"
               "launcher itself failed or could not write the ranks' output, 141\n"
               "(128+SIGPIPE) when its stdout's reader went away (baton launch ... | head):\n"
               "the ranks are stopped then, as a pipeline ends.\n");
}

typedef struct launch_args {
    int nprocs, nnodes;
    double timeout_s, kill_grace_s;
    char **cmd;
    const char *given[4]; /* each option's value so far (-n and --np are one), or NULL */
} launch_args;

/* A number in [lo, hi] from the value of option opt; -1 with a message if it is not. */
static int launch_number(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = s != NULL ? strtod(s, &end) : 0;
    if (s == NULL || end == s || *end != '\0' || errno != 0 || !(v >= lo && v <= hi)) {
        fprintf(stderr, "baton launch: %s needs a number in %g..%g (got '%s')\n", opt, lo, hi,
                s != NULL ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

/* A whole number in [1, 65535] from the value of option opt. */
static int launch_count(const char *opt, const char *s, int *out) {
    double v;
    if (launch_number(opt, s, 1, 65535, &v) != 0) return -1;
    if (v != (int)v) {
        fprintf(stderr, "baton launch: %s needs a whole number (got '%s')\n", opt, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* An option given before refused (-n and --np are one): -1 after saying so. */
static int launch_once(launch_args *a, const char *opt, const char *val) {
    static const char *const names[] = {"-n", "--nodes", "--timeout", "--kill-grace"};
    int k = strcmp(opt, "--np") == 0 ? 0 : -1;
    for (int i = 0; i < 4 && k < 0; i++)
        if (strcmp(opt, names[i]) == 0) k = i;
    if (k < 0 || val == NULL) return 0;
    if (cli_once("launch", k == 0 ? "-n/--np" : opt, a->given[k], val) != 0) return -1;
    a->given[k] = val;
    return 0;
}

static int launch_option(launch_args *a, const char *opt, const char *val) {
    if (launch_once(a, opt, val) != 0) return -1;
    if (strcmp(opt, "-n") == 0 || strcmp(opt, "--np") == 0) {
        if (launch_count(opt, val, &a->nprocs) != 0) return -1;
    } else if (strcmp(opt, "--nodes") == 0) {
        if (launch_count(opt, val, &a->nnodes) != 0) return -1;
    } else if (val == NULL && (strcmp(opt, "--timeout") == 0 || strcmp(opt, "--kill-grace") == 0)) {
        return cli_no_value("launch", opt);
    } else if (strcmp(opt, "--timeout") == 0) {
        if (cli_duration("launch", opt, val, 0.001, 1e7, &a->timeout_s) != 0) return -1;
    } else if (strcmp(opt, "--kill-grace") == 0) {
        if (cli_duration("launch", opt, val, 0, 1e5, &a->kill_grace_s) != 0) return -1;
    } else {
        fprintf(stderr, "baton launch: unknown option '%s' (see baton launch --help)\n", opt);
        return -1;
    }
    return 0;
}

/* 0 to run, 1 after --help, -1 on a usage error. */
static int launch_parse_args(int argc, char **argv, launch_args *a) {
    int i = 1;
    while (i < argc) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            launch_usage(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (argv[i][0] != '-') break;
        if (strncmp(argv[i], "-n", 2) == 0 && argv[i][2] != '\0') { /* -n4, -n=4 */
            const char *v = argv[i] + 2;
            if (launch_option(a, "-n", v + (*v == '=')) != 0) return -1;
            i++;
            continue;
        }
        if (launch_option(a, argv[i], i + 1 < argc ? argv[i + 1] : NULL) != 0) return -1;
        i += 2; /* every option takes a value */
    }
    if (a->nprocs == 0 || i >= argc) {
        fprintf(stderr, "baton launch: %s\n\n", a->nprocs == 0 ? "-n N is required" : "no CMD");
        launch_usage(stderr);
        return -1;
    }
    if (a->nnodes > a->nprocs) {
        fprintf(stderr, "baton launch: --nodes %d exceeds -n %d; every node needs a rank\n",
                a->nnodes, a->nprocs);
        return -1;
    }
    a->cmd = argv + i;
    return 0;
}

/* SIGINT, SIGTERM and SIGHUP arrive through a signalfd polled with the job. They are
 * blocked before the PMIx server starts its thread, so that thread inherits the mask
 * and the signal cannot kill the process through it. */
static int launch_signals(sigset_t *set) {
    bt_stop_signals(set);
    if (sigprocmask(SIG_BLOCK, set, NULL) != 0) return -1;
    return signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK);
}

#define LAUNCH_STOPPED_EACH 8 /* up to this many stopped ranks: a line each */

static void launch_stopped_how(const launch_rank *rk, char *buf, size_t cap) {
    if (rk->term_signal != 0)
        snprintf(buf, cap, "killed by signal SIG%s", sigabbrev_np(rk->term_signal));
    else
        snprintf(buf, cap, "exited with status %d", rk->exit_status);
}

/* How the ranks the launcher stopped ended: a line each (with node and pid) when there
 * are a few; else a line per way they ended, naming the ranks in ranges. */
static void launch_report_stopped(const launch_job *job) {
    int n = 0;
    char how[64], other[64];
    for (int r = 0; r < job->nprocs; r++)
        n += job->ranks[r].stopped && r != job->failed_rank;
    unsigned char *left = n > LAUNCH_STOPPED_EACH ? calloc((size_t)job->nprocs, 2) : NULL;
    for (int r = 0; r < job->nprocs; r++) {
        const launch_rank *rk = &job->ranks[r];
        if (!rk->stopped || r == job->failed_rank) continue;
        launch_stopped_how(rk, how, sizeof how);
        if (left == NULL)
            fprintf(stderr, "baton launch: stopped rank %d (node node%d, pid %ld): %s\n", r,
                    rk->node, (long)rk->pid, how);
        else
            left[r] = 1;
    }
    if (left == NULL) return;
    unsigned char *same = left + job->nprocs;
    char ranks[2048];
    for (int r = 0; r < job->nprocs; r++) {
        if (!left[r]) continue;
        launch_stopped_how(&job->ranks[r], how, sizeof how);
        int k = 0;
        memset(same, 0, (size_t)job->nprocs);
        for (int q = r; q < job->nprocs; q++) {
            if (!left[q]) continue;
            launch_stopped_how(&job->ranks[q], other, sizeof other);
            if (strcmp(how, other) == 0) same[q] = 1, left[q] = 0, k++;
        }
        launch_rank_ranges(same, job->nprocs, ranks, sizeof ranks);
        fprintf(stderr, "baton launch: stopped %d rank%s (%s): %s\n", k, k == 1 ? "" : "s", ranks,
                how);
    }
    free(left);
}

/* The ranks' output as launch.c writes it by default ("[rank] line"), watching our
 * stdout: a reader that went away (EPIPE: `baton launch ... | head`) stops the job, as a
 * pipeline's writer dies of SIGPIPE; any other failure (a full disk, a closed stdout) is
 * said once and makes a successful job's exit status 1. A non-blocking stdout that is
 * full (EAGAIN) is waited for, as a blocking one would be. */
typedef struct launch_out {
    int gone;   /* stdout's reader went away: stop the job */
    int failed; /* errno of the first failed write to stdout, or 0 */
} launch_out;

/* Until fd can be written (a non-blocking stdout that is full: EAGAIN), as a blocking one
 * would wait in writev: 0, or the errno of a poll that failed. */
static int launch_out_wait(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    while (poll(&p, 1, -1) < 0)
        if (errno != EINTR) return errno;
    return 0;
}

static int launch_out_write(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int err = launch_out_wait(fd);
            if (err != 0) return err;
            continue;
        }
        if (w <= 0) return w < 0 ? errno : EIO;
        for (; n > 0 && (size_t)w >= iov->iov_len; iov++, n--)
            w -= (ssize_t)iov->iov_len;
        if (n > 0) iov->iov_base = (char *)iov->iov_base + w, iov->iov_len -= (size_t)w;
    }
    return 0;
}

static void launch_out_line(void *arg, int rank, int stream, const char *line, size_t len) {
    launch_out *o = arg;
    if (stream == 1 && o->failed) return; /* said once; the job is stopping or goes on */
    char prefix[24];
    int k = snprintf(prefix, sizeof prefix, "[%d] ", rank);
    struct iovec iov[3] = {{prefix, (size_t)k}, {(void *)line, len}, {"\n", 1}};
    int err = launch_out_write(stream, iov, 3);
    if (err == 0 || stream != 1) return; /* a lost stderr cannot be reported */
    o->failed = err, o->gone = err == EPIPE;
    if (o->gone)
        fprintf(stderr, "baton launch: stdout's reader went away (a closed pipe): stopping "
                        "all ranks\n");
    else
        fprintf(stderr, "baton launch: cannot write the ranks' output: %s; the job goes on\n",
                strerror(err));
}

static int launch_run(launch_job *job, int sfd, launch_out *out) {
    int got_signal = 0;
    struct pollfd pfd = {.fd = sfd, .events = POLLIN};
    int rc;
    while ((rc = launch_job_step(job, &pfd, sfd >= 0 ? 1 : 0, -1)) > 0) {
        struct signalfd_siginfo si;
        if (out->gone) launch_job_kill(job, LAUNCH_STOPPED);
        if (!(pfd.revents & POLLIN) || read(sfd, &si, sizeof si) != (ssize_t)sizeof si) continue;
        if (got_signal == 0) {
            got_signal = (int)si.ssi_signo;
            fprintf(stderr, "baton launch: got SIG%s, stopping all ranks\n",
                    sigabbrev_np(got_signal));
        }
        launch_job_kill(job, LAUNCH_STOPPED);
    }
    if (rc < 0) {
        fprintf(stderr, "baton launch: event loop failed: %s\n", bt_strerror(rc));
        return BT_EXIT_FAILURE;
    }
    if (out->gone) return 128 + SIGPIPE; /* as a pipeline's writer ends */
    if (job->cause == LAUNCH_SUCCESS) return out->failed ? BT_EXIT_FAILURE : BT_EXIT_OK;
    char why[1024];
    launch_job_describe(job, why, sizeof why);
    fprintf(stderr, "baton launch: %s\n", why);
    launch_report_stopped(job);
    if (job->cause == LAUNCH_STOPPED && got_signal != 0) return 128 + got_signal;
    return launch_job_exit_status(job);
}

static int launch_init_status(int rc) {
    switch (rc) {
    case BT_ENOENT:
        return 127;
    case BT_EINVAL:
        return 126;
    case BT_ERANGE:
        return BT_EXIT_USAGE;
    default:
        return BT_EXIT_FAILURE;
    }
}

int cmd_launch(int argc, char **argv) {
    launch_args a = {.nnodes = 1, .kill_grace_s = 5};
    int prc = launch_parse_args(argc, argv, &a);
    if (prc != 0) return prc > 0 ? BT_EXIT_OK : BT_EXIT_USAGE;
    sigset_t set;
    int sfd = launch_signals(&set);
    bt_diag diag;
    bt_diag_init(&diag);
    launch_server srv;
    launch_job job;
    launch_out out = {0};
    int status = BT_EXIT_FAILURE;
    if (launch_tmpdir_check(&diag) != 0) {
        fprintf(stderr, "baton launch: %s\n", diag.msg);
        if (sfd >= 0) close(sfd);
        return BT_EXIT_USAGE;
    }
    int rc = launch_server_init(&srv, &diag);
    if (rc != 0) goto done;
    launch_opts o = {.nprocs = a.nprocs,
                     .nnodes = a.nnodes,
                     .argv = a.cmd,
                     .timeout_s = a.timeout_s,
                     .kill_grace_s = a.kill_grace_s,
                     .on_output = launch_out_line,
                     .output_arg = &out};
    rc = launch_job_init(&job, &srv, &o, &diag);
    if (rc != 0) {
        status = launch_init_status(rc);
        launch_server_close(&srv);
        goto done;
    }
    if (job.fds_note[0]) fprintf(stderr, "baton launch: %s\n", job.fds_note);
    rc = launch_job_start(&job, &diag);
    if (rc != 0) fprintf(stderr, "baton launch: %s\n", diag.msg);
    status = launch_run(&job, sfd, &out);
    launch_job_close(&job);
    launch_server_close(&srv);
    rc = 0;
done:
    if (rc != 0) fprintf(stderr, "baton launch: %s\n", diag.msg[0] ? diag.msg : bt_strerror(rc));
    /* The signals stay blocked: one arriving now must not turn our status into a death. */
    if (sfd >= 0) close(sfd);
    return status;
}
