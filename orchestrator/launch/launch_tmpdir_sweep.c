/* The sweep of dead launch servers' temp dirs (launch_tmpdir.h): which dir is whose, and
 * whether that server is gone. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "launch_tmpdir.h"
#include "util/rmtree.h"

/* The pid in a launch temp dir's name "baton-launch-<pid>-XXXXXX" (hidden: "." before it,
 * *hidden set), or 0. */
static pid_t launch_tmpdir_pid(const char *name, int *hidden) {
    *hidden = name[0] == '.';
    name += *hidden;
    size_t k = strlen(LAUNCH_TMPDIR_PREFIX);
    if (strncmp(name, LAUNCH_TMPDIR_PREFIX, k) != 0) return 0;
    char *end;
    long pid = strtol(name + k, &end, 10);
    if (end == name + k || *end != '-' || strlen(end + 1) != 6 || pid <= 0) return 0;
    return (pid_t)pid;
}

static int launch_tmpdir_same(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev;
}

/* Whether no process of this PID namespace has pid. */
static int launch_tmpdir_pid_gone(pid_t pid) {
    return pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH;
}

/* Opens the dir at path (st: its lstat) into *fd and tries its lock: 1 taken, -1 no flock
 * on directories here, 0 held by a live server or the dir changed under us (left alone,
 * *fd -1 then). */
static int launch_tmpdir_try(const char *path, const struct stat *st, int *fd) {
    *fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat now;
    int got = 0;
    if (*fd >= 0 && fstat(*fd, &now) == 0 && launch_tmpdir_same(st, &now)) {
        if (flock(*fd, LOCK_EX | LOCK_NB) != 0)
            got = errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        /* still at path once locked: not removed and made again by its live server */
        else if (lstat(path, &now) == 0 && launch_tmpdir_same(st, &now))
            got = 1;
    }
    if (got == 0 && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return got;
}

/* Whether the dir at path (st: its lstat), named after pid, is no live server's; *held
 * keeps its descriptor (and lock), or -1, until the caller has removed it. */
static int launch_tmpdir_stale(const char *path, const struct stat *st, pid_t pid, int hidden,
                               int *held) {
    int locked = launch_tmpdir_try(path, st, held);
    if (locked == 0) return 0;
    /* the marker is made once the lock is held: with it, a free lock is a dead server's */
    if (locked == 1 && faccessat(*held, LAUNCH_TMPDIR_MARK, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
        return 1;
    /* an older baton's, one with no flock here, or a hidden one its maker has not locked
     * yet (it does so at once: give it a minute) */
    if (hidden && time(NULL) - st->st_mtime < LAUNCH_TMPDIR_HIDDEN_S) return 0;
    return launch_tmpdir_pid_gone(pid);
}

int launch_tmpdir_sweep(void) {
    const char *root = launch_tmpdir_root();
    DIR *d = opendir(root);
    if (d == NULL) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int hidden, held = -1;
        pid_t pid = launch_tmpdir_pid(e->d_name, &hidden);
        if (pid == 0) continue;
        char path[4352];
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
        /* by the dir judged (held), its name only while it still is that dir */
        if (launch_tmpdir_stale(path, &st, pid, hidden, &held) && held >= 0 &&
            bt_rmtree_at(dirfd(d), e->d_name, held, BT_RMTREE_DEPTH) == 0)
            removed++;
        if (held >= 0) close(held);
    }
    closedir(d);
    return removed;
}
