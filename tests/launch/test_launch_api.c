/* The launch library as `baton run` will drive it: one embedded server, several job
 * attempts in a row (each a fresh namespace), output through a callback, the caller's
 * own fd polled with the job, and a stop requested by the caller; the temp dirs of killed
 * servers swept.
 *   test_launch_api PMIX_PROBE TAG   (TAG goes on the probes' command lines) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"
#include "launch_tmpdir.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

typedef struct captured {
    int ok_lines[8]; /* per rank: "...: ok" lines seen on stdout */
    int lines;
} captured;

static void on_output(void *arg, int rank, int stream, const char *line, size_t len) {
    captured *c = arg;
    c->lines++;
    if (stream == 1 && rank >= 0 && rank < 8 && len >= 4 && memcmp(line + len - 4, ": ok", 4) == 0)
        c->ok_lines[rank]++;
}

/* Runs one job to its end; returns its cause. */
static launch_cause run_job(launch_server *srv, char **argv, int n, captured *c, char *nspace) {
    launch_opts o = {.nprocs = n,
                     .nnodes = 2,
                     .argv = argv,
                     .kill_grace_s = 1,
                     .timeout_s = 30,
                     .on_output = on_output,
                     .output_arg = c};
    bt_diag d;
    bt_diag_init(&d);
    launch_job job;
    int rc = launch_job_init(&job, srv, &o, &d);
    CHECK(rc == 0, "init: %s", d.msg);
    if (rc != 0) return LAUNCH_RUNNING;
    rc = launch_job_start(&job, &d);
    CHECK(rc == 0, "start: %s", d.msg);
    rc = launch_job_wait(&job);
    CHECK(rc == 0, "wait: %d", rc);
    launch_cause cause = job.cause;
    snprintf(nspace, 64, "%s", job.nspace);
    if (cause == LAUNCH_EXITED) {
        CHECK(job.failed_rank == 1, "failed rank %d, expected 1", job.failed_rank);
        CHECK(job.ranks[1].exited && job.ranks[1].exit_status == 5, "rank 1 status %d",
              job.ranks[1].exit_status);
        CHECK(launch_job_exit_status(&job) == 5, "exit status %d", launch_job_exit_status(&job));
    }
    for (int r = 0; r < n; r++)
        CHECK(!job.ranks[r].running, "rank %d still running after wait", r);
    launch_job_close(&job);
    return cause;
}

/* A job the caller stops while polling its own pipe with it. */
static void stop_job(launch_server *srv, char **argv) {
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    captured c = {0};
    launch_opts o = {
        .nprocs = 2, .argv = argv, .kill_grace_s = 1, .on_output = on_output, .output_arg = &c};
    bt_diag d;
    bt_diag_init(&d);
    launch_job job;
    CHECK(launch_job_init(&job, srv, &o, &d) == 0, "init: %s", d.msg);
    CHECK(launch_job_start(&job, &d) == 0, "start: %s", d.msg);
    CHECK(write(p[1], "x", 1) == 1, "write");
    struct pollfd extra = {.fd = p[0], .events = POLLIN};
    int seen = 0, rc;
    while ((rc = launch_job_step(&job, &extra, 1, 5000)) > 0) {
        if ((extra.revents & POLLIN) && !seen) {
            seen = 1;
            launch_job_kill(&job, LAUNCH_STOPPED);
        }
    }
    CHECK(rc == 0 && seen, "step %d, caller fd seen %d", rc, seen);
    CHECK(job.cause == LAUNCH_STOPPED, "cause %s", launch_cause_str(job.cause));
    /* rank 0 hangs until stopped; rank 1, in a fence with it, may see it gone and exit on
     * its own first where the launcher is descheduled between the two SIGTERMs */
    for (int r = 0; r < 2; r++)
        CHECK(job.ranks[r].stopped &&
                  ((job.ranks[r].term_signal == SIGTERM && job.ranks[r].signal_from_launcher) ||
                   (r == 1 && job.ranks[r].exited)),
              "rank %d: stopped %d signal %d (exited %d, status %d)", r, job.ranks[r].stopped,
              job.ranks[r].term_signal, job.ranks[r].exited, job.ranks[r].exit_status);
    launch_job_close(&job);
    close(p[0]);
    close(p[1]);
}

/* Runs a two-rank shell job (not a PMIx client) to its end and checks launch_job_blame:
 * the rank the launcher did not name may be named in its place when it exited nonzero on its own
 * (both=1: both exit 3), never when the launcher stopped it (both=0: rank 0 exits 3 and
 * rank 1 sleeps until stopped). */
static void blame_job(launch_server *srv, int both) {
    char *argv[] = {"/bin/sh", "-c",
                    both ? "exit 3" : "[ \"$PMIX_RANK\" = 0 ] && exit 3; exec sleep 30", NULL};
    captured c = {0};
    launch_opts o = {.nprocs = 2,
                     .argv = argv,
                     .kill_grace_s = 1,
                     .timeout_s = 30,
                     .on_output = on_output,
                     .output_arg = &c};
    bt_diag d;
    bt_diag_init(&d);
    launch_job job;
    CHECK(launch_job_init(&job, srv, &o, &d) == 0, "init: %s", d.msg);
    CHECK(launch_job_start(&job, &d) == 0, "start: %s", d.msg);
    CHECK(launch_job_wait(&job) == 0, "wait");
    /* both exit at once: either may be reaped first, and named */
    int named = job.failed_rank, other = 1 - named;
    CHECK(job.cause == LAUNCH_EXITED && (named == 0 || (both && named == 1)), "cause %s, rank %d",
          launch_cause_str(job.cause), named);
    if (named != 0 && named != 1) named = 0, other = 1;
    CHECK(launch_job_blame(&job, named) == 0 && launch_job_blame(&job, 2) == 0 &&
              launch_job_blame(&job, -1) == 0,
          "blamed the named rank again or one out of range");
    char why[256];
    if (both) {
        CHECK(launch_job_blame(&job, other) == 1 && job.failed_rank == other, "rank %d not blamed",
              other);
        launch_job_describe(&job, why, sizeof why);
        char want[16];
        snprintf(want, sizeof want, "rank %d ", other);
        CHECK(strncmp(why, want, strlen(want)) == 0 && strstr(why, "exited with status 3") != NULL,
              "described as: %s", why);
        CHECK(launch_job_exit_status(&job) == 3, "exit status %d", launch_job_exit_status(&job));
    } else {
        CHECK(launch_job_blame(&job, 1) == 0 && job.failed_rank == 0,
              "rank 1, stopped by the launcher, was blamed");
    }
    launch_job_close(&job);
}

/* TMPDIR/NAME as a directory with a file in it. */
static void fake_dir(const char *name, char *path, size_t cap) {
    const char *tmp = getenv("TMPDIR");
    snprintf(path, cap, "%s/%s", tmp && *tmp ? tmp : "/tmp", name);
    CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
    char file[600];
    snprintf(file, sizeof file, "%s/pmix-socket", path);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL, "create %s", file);
    if (f) fclose(f);
}

/* Launch temp dirs left by servers killed with their process (launch_tmpdir.h): the next
 * server removes those of processes that are gone, and only those. */
static void check_sweep(void) {
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid no process has now */
    char name[64], dead[512], alive[512], odd[512], old[512];
    snprintf(name, sizeof name, "baton-launch-%d-Ab12Cd", (int)child);
    fake_dir(name, dead, sizeof dead);
    snprintf(name, sizeof name, "baton-launch-%d-Ab12Cd", (int)getppid());
    fake_dir(name, alive, sizeof alive);
    snprintf(name, sizeof name, "baton-launch-%d-short", (int)child);
    fake_dir(name, odd, sizeof odd);
    fake_dir("baton-launch-Ab12Cd", old, sizeof old);
    int removed = launch_tmpdir_sweep();
    CHECK(removed == 1, "swept %d dirs, expected 1", removed);
    CHECK(access(dead, F_OK) != 0, "the dead server's %s was not removed", dead);
    CHECK(access(alive, F_OK) == 0, "a live process's %s was removed", alive);
    CHECK(access(odd, F_OK) == 0 && access(old, F_OK) == 0, "a dir of another name was removed");
    const char *keep[] = {alive, odd, old};
    for (int i = 0; i < 3; i++) {
        char file[600];
        snprintf(file, sizeof file, "%s/pmix-socket", keep[i]);
        unlink(file);
        rmdir(keep[i]);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_launch_api PMIX_PROBE TAG\n");
        return 2;
    }
    check_sweep();
    bt_diag d;
    bt_diag_init(&d);
    launch_server srv;
    if (launch_server_init(&srv, &d) != 0) {
        fprintf(stderr, "FAIL server: %s\n", d.msg);
        return 1;
    }
    char mine[64];
    snprintf(mine, sizeof mine, "/baton-launch-%d-", (int)getpid());
    CHECK(strstr(srv.tmpdir, mine) != NULL, "temp dir %s is not named after this process",
          srv.tmpdir);
    launch_server other;
    bt_diag_init(&d);
    CHECK(launch_server_init(&other, &d) == BT_EINVAL, "a second server was allowed");
    char *fail[] = {argv[1],       "--size", "4",    "--nodes", "2",     "--fault-rank", "1",
                    "--exit-code", "5",      "--at", "init",    "--tag", argv[2],        NULL};
    char *good[] = {argv[1], "--size", "4", "--nodes", "2", "--tag", argv[2], NULL};
    char *hang[] = {argv[1], "--size", "2", "--fault-rank", "0", "--hang", "--tag", argv[2], NULL};
    char ns0[64], ns1[64], ns2[64];
    captured c0 = {0}, c1 = {0}, c2 = {0};
    /* Attempt 0 fails, attempt 1 (same server, fresh namespace) succeeds, and so does
     * a third: a failed client must not break the server for later attempts. */
    CHECK(run_job(&srv, fail, 4, &c0, ns0) == LAUNCH_EXITED, "attempt 0 did not fail");
    CHECK(run_job(&srv, good, 4, &c1, ns1) == LAUNCH_SUCCESS, "attempt 1 failed");
    CHECK(run_job(&srv, good, 4, &c2, ns2) == LAUNCH_SUCCESS, "attempt 2 failed");
    CHECK(strcmp(ns0, ns1) != 0 && strcmp(ns1, ns2) != 0, "namespaces %s %s %s", ns0, ns1, ns2);
    for (int r = 0; r < 4; r++)
        CHECK(c1.ok_lines[r] == 1 && c2.ok_lines[r] == 1, "rank %d ok lines %d %d", r,
              c1.ok_lines[r], c2.ok_lines[r]);
    /* ranks stopped as they connect (a stop signal in PMIx_Init) must leave the server
     * able to start the next job (boot_pmix_init; openpmix#3584) */
    for (int i = 0; i < 40; i++)
        stop_job(&srv, hang);
    blame_job(&srv, 1);
    blame_job(&srv, 0);
    char dir[sizeof srv.tmpdir];
    snprintf(dir, sizeof dir, "%s", srv.tmpdir);
    launch_server_close(&srv);
    CHECK(access(dir, F_OK) != 0, "temp dir %s left behind", dir);
    if (failures) return 1;
    printf("ok: attempts %s (failed), %s, %s; caller stop; blame\n", ns0, ns1, ns2);
    return 0;
}
