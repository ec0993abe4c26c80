/* The launch library as `baton run` will drive it: one embedded server, several job
 * attempts in a row (each a fresh namespace), output through a callback, the caller's
 * own fd polled with the job, and a stop requested by the caller; the temp dirs of killed
 * servers swept.
 *   test_launch_api PMIX_PROBE TAG   (TAG goes on the probes' command lines) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "util/rmtree.h"
#include "launch_tmpdir.h"
#include "pmix_host.h"

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

/* TMPDIR/NAME as a directory with a file in it (FILE, e.g. "pmix-socket" or the marker). */
static void fake_dir(const char *name, const char *file, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", launch_tmpdir_root(), name);
    CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
    char f_path[600];
    snprintf(f_path, sizeof f_path, "%s/%s", path, file);
    FILE *f = fopen(f_path, "w");
    CHECK(f != NULL, "create %s", f_path);
    if (f) fclose(f);
}

/* Sets the dir's modification time s seconds back: a hidden dir made that long ago. */
static void age_dir(const char *path, int s) {
    struct timespec t[2] = {{time(NULL) - s, 0}, {time(NULL) - s, 0}};
    CHECK(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW) == 0, "cannot age %s", path);
}

static void remove_dir(const char *path) {
    bt_rmtree(path);
}

/* Whether the dir itself is locked by someone (a try from a descriptor of our own fails). */
static int dir_locked(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int locked = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return locked;
}

/* A child process holding DIR locked until it is killed: a live server of another PID
 * namespace, whose pid in the dir's name means nothing here. */
static pid_t hold_lock(const char *dir) {
    int ready[2];
    if (pipe(ready) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY);
        char ok = fd >= 0 && flock(fd, LOCK_EX) == 0;
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    char ok = 0;
    CHECK(pid > 0 && read(ready[0], &ok, 1) == 1 && ok, "no child holds %s's lock", dir);
    close(ready[0]);
    close(ready[1]);
    return pid;
}

static void unhold(pid_t holder) {
    if (holder <= 0) return;
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
}

/* Launch temp dirs left by servers killed with their process (launch_tmpdir.h): the next
 * server removes the marked ones whose lock it can take, whatever pid their name holds;
 * without a marker (an older baton's), those of processes that are gone; hidden ones (a
 * server killed while making its dir) marked with their lock free, or unmarked once a
 * minute old with their process gone; and only those. */
static void check_sweep(void) {
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid no process has now */
    int me = (int)getppid(); /* a live pid */
    char name[64], dead[512], alive[512], odd[512], old[512], held[512], free_[512];
    char making[512], made[512], lost[512], lost_alive[512], lost_held[512], legacy[512];
    const char *mark = LAUNCH_TMPDIR_MARK;
    snprintf(name, sizeof name, "baton-launch-%d-Ab12Cd", (int)child);
    fake_dir(name, "pmix-socket", dead, sizeof dead);
    snprintf(name, sizeof name, "baton-launch-%d-Ab12Cd", me);
    fake_dir(name, "pmix-socket", alive, sizeof alive);
    snprintf(name, sizeof name, "baton-launch-%d-short", (int)child);
    fake_dir(name, mark, odd, sizeof odd);
    fake_dir("baton-launch-Ab12Cd", mark, old, sizeof old);
    snprintf(name, sizeof name, "baton-launch-%d-Lk12Cd", (int)child);
    fake_dir(name, mark, held, sizeof held);
    pid_t holder = hold_lock(held);
    snprintf(name, sizeof name, "baton-launch-%d-Lk34Cd", me);
    fake_dir(name, mark, free_, sizeof free_);
    snprintf(name, sizeof name, "baton-launch-%d-Lk56Cd", me); /* a lock file: not a marker */
    fake_dir(name, "lock", legacy, sizeof legacy);
    snprintf(name, sizeof name, ".baton-launch-%d-Hd12Cd", (int)child);
    fake_dir(name, "pmix-socket", making, sizeof making);
    snprintf(name, sizeof name, ".baton-launch-%d-Hd34Cd", (int)child);
    fake_dir(name, mark, made, sizeof made);
    snprintf(name, sizeof name, ".baton-launch-%d-Hd56Cd", (int)child);
    fake_dir(name, "pmix-socket", lost, sizeof lost);
    age_dir(lost, 2 * LAUNCH_TMPDIR_HIDDEN_S);
    snprintf(name, sizeof name, ".baton-launch-%d-Hd78Cd", me);
    fake_dir(name, "pmix-socket", lost_alive, sizeof lost_alive);
    age_dir(lost_alive, 2 * LAUNCH_TMPDIR_HIDDEN_S);
    snprintf(name, sizeof name, ".baton-launch-%d-Hd90Cd", (int)child);
    fake_dir(name, "pmix-socket", lost_held, sizeof lost_held);
    pid_t hidden_holder = hold_lock(lost_held);
    age_dir(lost_held, 2 * LAUNCH_TMPDIR_HIDDEN_S);
    int removed = launch_tmpdir_sweep();
    CHECK(removed == 4, "swept %d dirs, expected 4", removed);
    CHECK(access(dead, F_OK) != 0, "the dead server's %s was not removed", dead);
    CHECK(access(alive, F_OK) == 0, "a live process's %s was removed", alive);
    CHECK(access(odd, F_OK) == 0 && access(old, F_OK) == 0, "a dir of another name was removed");
    CHECK(access(held, F_OK) == 0, "%s, locked by a live server, was removed", held);
    CHECK(access(free_, F_OK) != 0, "%s, marked, its lock free, was not removed", free_);
    CHECK(access(legacy, F_OK) == 0, "%s, unmarked, of a live pid, was removed", legacy);
    CHECK(access(making, F_OK) == 0, "%s, being made, was removed", making);
    CHECK(access(made, F_OK) != 0, "%s, marked, its lock free, was not removed", made);
    CHECK(access(lost, F_OK) != 0, "%s, a minute old, its pid gone, was not removed", lost);
    CHECK(access(lost_alive, F_OK) == 0, "%s, of a live pid, was removed", lost_alive);
    CHECK(access(lost_held, F_OK) == 0, "%s, locked, was removed", lost_held);
    unhold(holder);
    unhold(hidden_holder);
    CHECK(launch_tmpdir_sweep() == 2 && access(held, F_OK) != 0 && access(lost_held, F_OK) != 0,
          "%s and %s were not removed once their server was gone", held, lost_held);
    const char *keep[] = {alive, odd, old, making, legacy, lost_alive};
    for (int i = 0; i < 6; i++)
        remove_dir(keep[i]);
}

/* The server's temp dir is locked and marked, never swept while it lives. */
static void check_tmpdir_lock(launch_server *srv) {
    CHECK(dir_locked(srv->tmpdir), "the server's %s is not locked", srv->tmpdir);
    char mark[4200];
    snprintf(mark, sizeof mark, "%s/%s", srv->tmpdir, LAUNCH_TMPDIR_MARK);
    CHECK(access(mark, F_OK) == 0, "the server's %s has no marker", srv->tmpdir);
    launch_tmpdir_sweep();
    CHECK(access(srv->tmpdir, F_OK) == 0, "the server's own %s was swept", srv->tmpdir);
}

/* Something removes the server's temp dir (a temp-file cleaner, say: PMIx needs no file of
 * it), or only the files in it (a cleaner by age: the lock stays with the dir). */
static void remove_tmpdir(launch_server *srv, int files_only) {
    char mark[4200];
    snprintf(mark, sizeof mark, "%s/%s", srv->tmpdir, LAUNCH_TMPDIR_MARK);
    if (files_only)
        CHECK(unlink(mark) == 0, "cannot remove %s", mark);
    else
        remove_dir(srv->tmpdir);
}

/* The server's temp dir removed and its name taken by a symbolic link (another user's, in
 * a shared /tmp): the next job leaves it alone, says so, and goes on in a new dir. */
static void squat_tmpdir(launch_server *srv, char **good) {
    char was[sizeof srv->tmpdir], target[4200];
    snprintf(was, sizeof was, "%s", srv->tmpdir);
    snprintf(target, sizeof target, "%s/squatter", launch_tmpdir_root());
    CHECK(mkdir(target, 0700) == 0, "mkdir %s", target);
    remove_dir(srv->tmpdir);
    CHECK(symlink(target, was) == 0, "cannot plant a link at %s", was);
    captured c = {0};
    char ns[64];
    int remade = srv->tmpdir_remade;
    CHECK(run_job(srv, good, 4, &c, ns) == LAUNCH_SUCCESS, "the job after a squatter failed");
    CHECK(strcmp(srv->tmpdir, was) != 0 && strstr(srv->tmpdir, "/baton-launch-") != NULL,
          "the job went on in %s", srv->tmpdir);
    CHECK(srv->tmpdir_remade == remade, "a squatted dir counted as made again");
    CHECK(strstr(srv->tmpdir_note, "is now a symbolic link") != NULL &&
              strstr(srv->tmpdir_note, srv->tmpdir) != NULL,
          "said: '%s'", srv->tmpdir_note);
    struct stat st;
    CHECK(lstat(was, &st) == 0 && S_ISLNK(st.st_mode), "the squatter's link was touched");
    CHECK(rmdir(target) == 0, "the squatter's dir %s is not left empty", target);
    unlink(was);
    check_tmpdir_lock(srv);
}

/* Two jobs on one server, the server's temp dir renamed (mv, as a user tidying /tmp might)
 * while the first lives: the second makes the dir again at its name; the first's own dir,
 * in the dir renamed, goes all the same at its close, removed in the dir it was made in. */
static void moved_tmpdir_jobs(launch_server *srv) {
    char *sleeper[] = {"/bin/sh", "-c", "exec sleep 30", NULL};
    char *quick[] = {"/bin/sh", "-c", ":", NULL};
    launch_opts oa = {.nprocs = 1, .argv = sleeper, .kill_grace_s = 1, .plain = 1};
    launch_opts ob = {.nprocs = 1, .argv = quick, .kill_grace_s = 1, .plain = 1};
    bt_diag d;
    bt_diag_init(&d);
    launch_job a, b;
    CHECK(launch_job_init(&a, srv, &oa, &d) == 0 && launch_job_start(&a, &d) == 0, "job a: %s",
          d.msg);
    char moved[4200], a_dir[4300];
    snprintf(moved, sizeof moved, "%s/moved-launch-dir", launch_tmpdir_root());
    CHECK(rename(srv->tmpdir, moved) == 0, "cannot rename %s", srv->tmpdir);
    snprintf(a_dir, sizeof a_dir, "%s/%s", moved, a.nspace);
    CHECK(access(a_dir, F_OK) == 0, "job a's dir is not in the renamed %s", moved);
    int remade = srv->tmpdir_remade;
    CHECK(launch_job_init(&b, srv, &ob, &d) == 0 && launch_job_start(&b, &d) == 0, "job b: %s",
          d.msg);
    CHECK(srv->tmpdir_remade == remade + 1, "the renamed temp dir was not made again");
    CHECK(launch_job_wait(&b) == 0 && b.cause == LAUNCH_SUCCESS, "job b: %s",
          launch_cause_str(b.cause));
    launch_job_close(&b);
    launch_job_close(&a);
    CHECK(access(a_dir, F_OK) != 0, "job a's dir %s left in the renamed temp dir", a_dir);
    remove_dir(moved);
    check_tmpdir_lock(srv);
}

/* TMPDIR/NAME holding v.txt and deep/d.txt: a victim's files, or a squatter's own. */
static void victim_dir(const char *name, char *path, size_t cap) {
    fake_dir(name, "v.txt", path, cap);
    char deep[600];
    snprintf(deep, sizeof deep, "%s/deep", path);
    CHECK(mkdir(deep, 0700) == 0, "mkdir %s", deep);
    snprintf(deep, sizeof deep, "%s/deep/d.txt", path);
    int fd = open(deep, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0, "create %s", deep);
    if (fd >= 0) close(fd);
}

/* Whether the victim_dir at path still holds both its files. */
static int victim_whole(const char *path) {
    char f[600], g[600];
    snprintf(f, sizeof f, "%s/v.txt", path);
    snprintf(g, sizeof g, "%s/deep/d.txt", path);
    return access(f, F_OK) == 0 && access(g, F_OK) == 0;
}

static int is_link(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* In a child: its server started into srv, or the child ends (exit 1) saying why. */
static void child_server(launch_server *srv, bt_diag *d) {
    if (launch_server_init(srv, d) == 0) return;
    fprintf(stderr, "FAIL server: %s\n", d->msg);
    _exit(1);
}

/* In a child: a server whose temp dir is removed while a job runs, its name then taken by
 * a link to a squatter's dir (lair) that holds a link named after the job's dir to a
 * victim's files. The job's close and the server's close remove neither link nor anything
 * either leads to; the job's dir and the server's dir, held, are emptied all the same. */
static void squat_link_child(const char *victim, const char *lair) {
    bt_diag d;
    bt_diag_init(&d);
    launch_server srv;
    child_server(&srv, &d);
    char *argv[] = {"/bin/sh", "-c", "exec sleep 1", NULL};
    launch_opts o = {.nprocs = 1, .argv = argv, .kill_grace_s = 1, .timeout_s = 30};
    launch_job job;
    CHECK(launch_job_init(&job, &srv, &o, &d) == 0, "init: %s", d.msg);
    CHECK(launch_job_start(&job, &d) == 0, "start: %s", d.msg);
    char name[sizeof srv.tmpdir], bait[600];
    snprintf(name, sizeof name, "%s", srv.tmpdir);
    snprintf(bait, sizeof bait, "%s/%s", lair, job.nspace);
    CHECK(bt_rmtree(name) == 0, "cannot remove %s", name); /* a temp-file cleaner */
    CHECK(symlink(lair, name) == 0 && symlink(victim, bait) == 0, "cannot plant the links");
    CHECK(launch_job_wait(&job) == 0, "wait");
    launch_job_close(&job);
    CHECK(victim_whole(victim), "the job's close removed files of %s, through %s", victim, bait);
    CHECK(is_link(bait), "the squatter's %s was removed", bait);
    launch_server_close(&srv);
    CHECK(victim_whole(victim) && victim_whole(lair),
          "the server's close removed files of "
          "%s or %s, through %s",
          victim, lair, name);
    CHECK(is_link(name) && is_link(bait), "the squatter's link %s or %s was removed", name, bait);
    unlink(bait);
    unlink(name);
    _exit(failures != 0);
}

/* In a child: the server's temp dir removed, and its name taken by a dir of the same user
 * (not this server's: a squatter, another baton's) with a file: left alone at close. */
static void squat_dir_child(void) {
    bt_diag d;
    bt_diag_init(&d);
    launch_server srv;
    child_server(&srv, &d);
    char name[sizeof srv.tmpdir], theirs[4200];
    snprintf(name, sizeof name, "%s", srv.tmpdir);
    CHECK(bt_rmtree(name) == 0, "cannot remove %s", name);
    CHECK(mkdir(name, 0700) == 0, "mkdir %s", name);
    snprintf(theirs, sizeof theirs, "%s/theirs", name);
    int fd = open(theirs, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0, "create %s", theirs);
    if (fd >= 0) close(fd);
    launch_server_close(&srv);
    CHECK(access(theirs, F_OK) == 0, "the squatter's %s was removed at close", theirs);
    bt_rmtree(name);
    _exit(failures != 0);
}

/* Runs one squatter case in a child (one server per process) and checks it passed. */
static void squat_case(int link) {
    char victim[512], lair[512];
    if (link) {
        victim_dir("victim", victim, sizeof victim);
        victim_dir("lair", lair, sizeof lair);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (link)
            squat_link_child(victim, lair);
        else
            squat_dir_child();
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          "the squatter case (link %d) failed: status %d", link, status);
    if (link) {
        CHECK(victim_whole(victim), "files of %s were removed", victim);
        bt_rmtree(victim);
        bt_rmtree(lair);
    }
}

/* The server's hwloc runs neither its OpenCL plugin (drivers) nor its GL one, which
 * opens X displays :0 to :9 (pmixhost_hwloc_env): both excluded, and neither plugin nor
 * libX11 mapped once the server has run a job (its topology loaded). */
static void check_hwloc_plugins(void) {
    const char *v = getenv("HWLOC_COMPONENTS"), *b = getenv("HWLOC_PLUGINS_BLACKLIST");
    CHECK(v != NULL && strcmp(v, "-opencl,-gl") == 0, "HWLOC_COMPONENTS is '%s'",
          v ? v : "(unset)");
    CHECK(b != NULL && strcmp(b, "hwloc_opencl,hwloc_gl") == 0, "HWLOC_PLUGINS_BLACKLIST is '%s'",
          b ? b : "(unset)");
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL, "/proc/self/maps: %s", strerror(errno));
    char line[512];
    int mapped = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        mapped += strstr(line, "hwloc_gl") || strstr(line, "hwloc_opencl") ||
                  strstr(line, "libX11") || strstr(line, "libOpenCL");
    CHECK(mapped == 0, "%d mappings of hwloc's GL or OpenCL plugin or their libraries", mapped);
    if (f != NULL) fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_launch_api PMIX_PROBE TAG\n");
        return 2;
    }
    check_sweep();
    squat_case(1);
    squat_case(0);
    bt_diag d;
    bt_diag_init(&d);
    launch_server srv;
    unsetenv("HWLOC_COMPONENTS"); /* the server's own choice (check_hwloc_plugins) */
    unsetenv("HWLOC_PLUGINS_BLACKLIST");
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
    check_hwloc_plugins();
    check_tmpdir_lock(&srv);
    remove_tmpdir(&srv, 0); /* a temp-file cleaner, say: PMIx needs no file of it */
    CHECK(run_job(&srv, good, 4, &c2, ns2) == LAUNCH_SUCCESS, "attempt 2 failed");
    CHECK(srv.tmpdir_remade == 1, "temp dir made again %d times, not once", srv.tmpdir_remade);
    check_tmpdir_lock(&srv);
    CHECK(strcmp(ns0, ns1) != 0 && strcmp(ns1, ns2) != 0, "namespaces %s %s %s", ns0, ns1, ns2);
    for (int r = 0; r < 4; r++)
        CHECK(c1.ok_lines[r] == 1 && c2.ok_lines[r] == 1, "rank %d ok lines %d %d", r,
              c1.ok_lines[r], c2.ok_lines[r]);
    /* ranks stopped as they connect (a stop signal in PMIx_Init) must leave the server
     * able to start the next job (boot_pmix_init; openpmix#3584) */
    for (int i = 0; i < 40; i++)
        stop_job(&srv, hang);
    remove_tmpdir(&srv, 1); /* the lock is the dir's own: no file of it to lose */
    CHECK(dir_locked(srv.tmpdir), "%s is not locked with its files removed", srv.tmpdir);
    launch_tmpdir_sweep();
    CHECK(access(srv.tmpdir, F_OK) == 0, "%s, its files removed, was swept", srv.tmpdir);
    blame_job(&srv, 1);
    CHECK(srv.tmpdir_remade == 1, "temp dir made again %d times with its files removed",
          srv.tmpdir_remade);
    squat_tmpdir(&srv, good);
    blame_job(&srv, 0);
    moved_tmpdir_jobs(&srv);
    char dir[sizeof srv.tmpdir];
    snprintf(dir, sizeof dir, "%s", srv.tmpdir);
    launch_server_close(&srv);
    CHECK(access(dir, F_OK) != 0, "temp dir %s left behind", dir);
    if (failures) return 1;
    printf("ok: attempts %s (failed), %s, %s; caller stop; blame\n", ns0, ns1, ns2);
    return 0;
}
