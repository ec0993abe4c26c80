/* The launcher's open-files check (orchestrator/launch/launch_fds.h) as launch_job_init
 * makes it, for a local job and for a Slurm step (launch_slurm_wrap): under a lowered
 * RLIMIT_NOFILE, a job is refused (BT_ERANGE, the message naming its ranks) exactly when
 * the descriptors this process holds for it would not fit. A Slurm step is one srun
 * process here, but `baton run` holds a control connection and a rendezvous-store
 * connection for every rank of it: those count, not the one process. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "launch.h"
#include "launch_fds.h"
#include "launch_slurm.h"

static char *argv_true[] = {"/bin/true", NULL};

/* Descriptors open now. */
static long open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    long n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    if (d != NULL) closedir(d);
    return n - 1;
}

static void set_limit(long soft, long hard) {
    struct rlimit rl = {(rlim_t)soft, (rlim_t)hard};
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
}

/* launch_job_init of lo: its code, diag's and the note's texts. */
static int init(const launch_opts *lo, char *msg, char *note) {
    static launch_server srv; /* not started: the jobs here are plain or refused first */
    launch_job job;
    bt_diag d;
    bt_diag_init(&d);
    int rc = launch_job_init(&job, &srv, lo, &d);
    snprintf(msg, 2048, "%s", d.msg);
    snprintf(note, 256, "%s", rc == 0 ? job.fds_note : "");
    if (rc == 0) launch_job_close(&job);
    return rc;
}

/* A `baton run --launcher slurm` attempt of ntasks ranks, as run_slurm_opts makes it. */
static int init_slurm(int ntasks, char *msg, char *note) {
    static launch_slurm s;
    memset(&s, 0, sizeof s);
    launch_opts lo = {.nprocs = ntasks, .nnodes = 1, .argv = argv_true, .fds_per_rank = 1};
    launch_slurm_wrap(&s, &lo, argv_true);
    CHECK(lo.nprocs == 1 && lo.plain == 1 && lo.argv == argv_true);
    return init(&lo, msg, note);
}

int main(void) {
    char msg[2048], note[256];
    long base = open_fds();
    /* a Slurm step of 16 ranks: 2 per rank (control, store), srun's 3, 8 while starting;
     * over the soft limit, under the hard one: the soft limit is raised, said in the note */
    set_limit(base + 20, base + 60);
    CHECK(init_slurm(16, msg, note) == 0);
    CHECK(strstr(note, "16 ranks need about") != NULL);
    if (strstr(note, "16 ranks need about") == NULL) fprintf(stderr, "note: \"%s\"\n", note);
    set_limit(base + 60, base + 60);
    /* 32 ranks' 64 connections cannot fit: refused, naming the ranks and 2 per rank */
    int rc = init_slurm(32, msg, note);
    CHECK(rc == BT_ERANGE);
    CHECK(strstr(msg, "32 ranks need about") != NULL && strstr(msg, "(2 per rank") != NULL);
    if (rc != BT_ERANGE || strstr(msg, "(2 per rank") == NULL)
        fprintf(stderr, "slurm, 32 ranks: rc %d, \"%s\"\n", rc, msg);
    /* a local job: 5 per rank (stdout, stderr, pidfd, PMIx, control) */
    launch_opts lo = {.nprocs = 16, .nnodes = 1, .argv = argv_true, .fds_per_rank = 1};
    rc = init(&lo, msg, note);
    CHECK(rc == BT_ERANGE && strstr(msg, "16 ranks need about") != NULL &&
          strstr(msg, "(5 per rank") != NULL);
    if (rc != BT_ERANGE) fprintf(stderr, "local, 16 ranks: rc %d, \"%s\"\n", rc, msg);
    lo.nprocs = 8;
    lo.plain = 1; /* 4 per rank; plain: no PMIx namespace to register on srv */
    CHECK(init(&lo, msg, note) == 0);
    /* a one-rank step connects to no store: its control connection, srun's 3, the job's
     * hold on the launcher's temp dir and 8 while starting fit exactly (soft = hard: no
     * raising), with a store connection they would not; one descriptor fewer and they do
     * not fit either, so nothing here is slack. Last: the hard limit cannot be raised
     * again unprivileged. */
    long one = base + 1 + 3 + 1 + LAUNCH_FDS_STARTING;
    set_limit(one, one);
    rc = init_slurm(1, msg, note);
    CHECK(rc == 0);
    if (rc != 0) fprintf(stderr, "slurm, 1 rank, limit %ld: rc %d, \"%s\"\n", one, rc, msg);
    set_limit(one - 1, one - 1);
    rc = init_slurm(1, msg, note);
    CHECK(rc == BT_ERANGE && strstr(msg, "(1 per rank") != NULL);
    if (rc != BT_ERANGE) fprintf(stderr, "slurm, 1 rank, limit %ld: rc %d\n", one - 1, rc);
    return check_status();
}
