/* The parent and child halves of the multi-process runner (see runner.h).
 *
 * Usage: test_comm SCENARIO        run one scenario (what ctest calls)
 *        test_comm --list          print the scenario names
 * Exit status: 0 pass, 1 fail, 2 usage. */
#define _GNU_SOURCE
#include "runner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm_shm.h"

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void child_event(const child_env *env, const char *key, double val) {
    char line[128];
    int n = snprintf(line, sizeof line, "%d %s %.9f\n", env->rank, key, val);
    if (n > 0 && write(env->event_fd, line, (size_t)n) != n) perror("event pipe");
}

int child_init(const child_env *env, const char *prefix, int timeout_ms, comm **out,
               bt_diag *diag) {
    comm_bootstrap bs = {0};
    bs.rank = env->rank;
    bs.size = env->world;
    bs.store_dir = env->dir;
    bs.prefix = prefix;
    bs.timeout_ms = timeout_ms;
    return comm_cpu_init(out, &bs, diag);
}

int sup_value(const supervisor *s, int rank, const char *key, double *val) {
    const rank_state *r = &s->ranks[rank];
    for (int i = r->nkeys - 1; i >= 0; i--)
        if (strcmp(r->keys[i], key) == 0) {
            *val = r->vals[i];
            return 1;
        }
    return 0;
}

int sup_count(const supervisor *s, const char *key) {
    int n = 0;
    double v;
    for (int r = 0; r < s->world; r++)
        n += sup_value(s, r, key, &v);
    return n;
}

void sup_signal(supervisor *s, int rank, int sig) {
    if (s->ranks[rank].pid > 0 && !s->ranks[rank].reaped) kill(s->ranks[rank].pid, sig);
}

int sup_expect_exit(supervisor *s, int rank, int code, int sig) {
    int st = s->ranks[rank].status;
    int ok =
        sig ? (WIFSIGNALED(st) && WTERMSIG(st) == sig) : (WIFEXITED(st) && WEXITSTATUS(st) == code);
    if (!ok)
        fprintf(stderr, "rank %d: expected %s %d, got %s %d\n", rank, sig ? "signal" : "exit",
                sig ? sig : code, WIFSIGNALED(st) ? "signal" : "exit",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return ok ? 0 : 1;
}

static const scenario *find_scenario(const char *name) {
    for (const scenario *sc = comm_scenarios; sc->name; sc++)
        if (strcmp(sc->name, name) == 0) return sc;
    return NULL;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir) {
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "cannot remove %s: %s\n", dir, strerror(errno));
}

/* Starts rank r as a re-executed copy of this binary. */
static pid_t spawn_child(const scenario *sc, int r, const char *dir, int wfd) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* A child outlives neither the parent nor, through it, the test's timeout. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char rank[16], fd[16];
    snprintf(rank, sizeof rank, "%d", r);
    snprintf(fd, sizeof fd, "%d", wfd);
    char *argv[] = {"test_comm", "--child", (char *)sc->name, rank, (char *)dir, fd, NULL};
    execv("/proc/self/exe", argv);
    perror("execv /proc/self/exe");
    _exit(127);
}

/* Reads whatever events are pending and hands them to the scenario. */
static void read_events(const scenario *sc, supervisor *s, int rfd, char *buf, size_t *len,
                        size_t cap) {
    ssize_t n = read(rfd, buf + *len, cap - 1 - *len);
    if (n <= 0) return;
    *len += (size_t)n;
    buf[*len] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
        *nl = '\0';
        int rank;
        char key[32];
        double val;
        if (sscanf(line, "%d %31s %lf", &rank, key, &val) == 3 && rank >= 0 && rank < s->world) {
            rank_state *rs = &s->ranks[rank];
            if (rs->nkeys < RUNNER_MAX_KEYS) {
                snprintf(rs->keys[rs->nkeys], sizeof rs->keys[0], "%s", key);
                rs->vals[rs->nkeys++] = val;
            }
            if (sc->on_event) s->failures += sc->on_event(s, rank, key, val);
        }
        line = nl + 1;
    }
    *len = strlen(line);
    memmove(buf, line, *len + 1);
}

/* Reaps what has exited; returns how many children are still running. A child that
 * fails when the scenario has no custom check ends the run early. */
static int reap(const scenario *sc, supervisor *s, int *early_failure) {
    int running = 0;
    for (int r = 0; r < s->world; r++) {
        rank_state *rs = &s->ranks[r];
        if (!rs->started || rs->reaped) continue;
        if (waitpid(rs->pid, &rs->status, WNOHANG) == rs->pid) {
            rs->reaped = 1;
            if (sc->check == NULL && !(WIFEXITED(rs->status) && WEXITSTATUS(rs->status) == 0))
                *early_failure = 1;
        } else {
            running++;
        }
    }
    return running;
}

static void kill_all(supervisor *s) {
    for (int r = 0; r < s->world; r++) {
        rank_state *rs = &s->ranks[r];
        if (!rs->started || rs->reaped) continue;
        kill(rs->pid, SIGKILL);
        waitpid(rs->pid, &rs->status, 0);
        rs->reaped = 1;
    }
}

static int supervise(const scenario *sc, supervisor *s, int rfd) {
    char buf[8192];
    size_t len = 0;
    double deadline = now_s() + sc->deadline_s;
    int early_failure = 0;
    while (reap(sc, s, &early_failure) > 0 && !early_failure) {
        if (now_s() > deadline) {
            fprintf(stderr, "%s: deadline of %d s passed; killing every rank\n", sc->name,
                    sc->deadline_s);
            kill_all(s);
            return 1;
        }
        struct pollfd p = {rfd, POLLIN, 0};
        if (poll(&p, 1, 20) > 0) read_events(sc, s, rfd, buf, &len, sizeof buf);
    }
    if (early_failure) {
        fprintf(stderr, "%s: a rank failed; killing the others\n", sc->name);
        kill_all(s);
        return 1;
    }
    struct pollfd p = {rfd, POLLIN, 0};
    while (poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
        size_t before = len;
        read_events(sc, s, rfd, buf, &len, sizeof buf);
        if (len == before) break;
    }
    return 0;
}

/* Shared-memory segments (comm_shm.h) are unlinked once every member mapped them: none
 * created by a rank may be left in /dev/shm, whatever became of the ranks. A segment is
 * named by its creator's pid; one from before the scenario started is an earlier
 * process's that had the same pid (pids are reused; a process killed while its group
 * formed leaves its segment), not one of these ranks'. */
static int shm_leftovers(const supervisor *s, time_t started) {
    DIR *d = opendir("/dev/shm");
    int left = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        for (int r = 0; r < s->world; r++) {
            char prefix[64];
            struct stat st;
            snprintf(prefix, sizeof prefix, "baton-comm-%d-", (int)s->ranks[r].pid);
            if (s->ranks[r].started && strncmp(e->d_name, prefix, strlen(prefix)) == 0 &&
                fstatat(dirfd(d), e->d_name, &st, 0) == 0 && st.st_ctime >= started) {
                fprintf(stderr, "rank %d left /dev/shm/%s behind\n", r, e->d_name);
                left++;
            }
        }
    if (d != NULL) closedir(d);
    return left;
}

static int run_parent(const scenario *sc) {
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/baton-comm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int fds[2];
    if (pipe(fds) != 0 || fcntl(fds[0], F_SETFD, FD_CLOEXEC) != 0) {
        perror("pipe");
        remove_tree(dir);
        return 1;
    }
    supervisor s = {.world = sc->world};
    time_t started = time(NULL);
    for (int r = 0; r < sc->world - sc->absent; r++) {
        s.ranks[r].started = 1;
        s.ranks[r].pid = spawn_child(sc, r, dir, fds[1]);
    }
    close(fds[1]);
    int fail = supervise(sc, &s, fds[0]);
    close(fds[0]);
    if (!fail) fail = s.failures;
    if (!fail && sc->check) fail = sc->check(&s);
    for (int r = 0; !fail && !sc->check && r < sc->world - sc->absent; r++)
        fail += sup_expect_exit(&s, r, 0, 0);
    fail += shm_leftovers(&s, started);
    remove_tree(dir);
    printf("%s: %s\n", sc->name, fail ? "FAILED" : "passed");
    return fail ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (const scenario *sc = comm_scenarios; sc->name; sc++)
            printf("%s\n", sc->name);
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "--child") == 0) {
        const scenario *sc = find_scenario(argv[2]);
        if (sc == NULL) return 2;
        /* Line-buffered so that output of ranks killed later is not lost. */
        setvbuf(stdout, NULL, _IOLBF, 0);
        child_env env = {sc->name, atoi(argv[3]), sc->world, argv[4], atoi(argv[5])};
        return sc->child(&env);
    }
    const scenario *sc = argc == 2 ? find_scenario(argv[1]) : NULL;
    if (sc == NULL) {
        fprintf(stderr, "usage: %s SCENARIO (see --list)\n", argv[0]);
        return 2;
    }
    return run_parent(sc);
}
