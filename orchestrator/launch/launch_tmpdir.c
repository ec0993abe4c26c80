/* The launch server's temp dir (launch_tmpdir.h).
 *
 * Liveness is a lock, not a pid: the server holds flock(LOCK_EX) on DIR/lock for as long
 * as it lives, so a sweeper in another PID namespace sharing TMPDIR (containers) sees the
 * dir taken, where its kill(pid, 0) would name another process or none. A dir is only ever
 * seen under its public name with the lock already held: it is made under a hidden name
 * (".baton-launch-..."), locked there, then renamed. Dirs without a lock file (made by an
 * older baton, or whose lock file a temp cleaner removed) are judged by the pid in their
 * name, as before. */
#define _GNU_SOURCE
#include "launch_tmpdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmix_host.h"

#define LAUNCH_TMPDIR_PREFIX "baton-launch-"
#define LAUNCH_TMPDIR_LOCK   "lock"
#define LAUNCH_TMPDIR_TRIES  16
/* The longest $TMPDIR taken: the launcher's files go a few levels below it (its temp dir,
 * a job's directory, the rendezvous files), each path at most PATH_MAX bytes. */
#define LAUNCH_TMPDIR_ROOT_MAX (PATH_MAX - 128)

static const char *launch_tmpdir_root(void) {
    const char *root = getenv("TMPDIR");
    return root == NULL || root[0] == '\0' ? "/tmp" : root;
}

/* How root is named in a message: "$TMPDIR (PATH)", or "/tmp" when TMPDIR is unset. */
static void launch_tmpdir_name(char *out, size_t cap) {
    const char *env = getenv("TMPDIR");
    if (env != NULL && env[0] != '\0')
        snprintf(out, cap, "$TMPDIR (%s)", env);
    else
        snprintf(out, cap, "%s (TMPDIR is unset)", launch_tmpdir_root());
}

int launch_tmpdir_check(bt_diag *diag) {
    const char *root = launch_tmpdir_root();
    struct stat st;
    const char *why = NULL;
    char too_long[128];
    if (stat(root, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(root, W_OK | X_OK) != 0)
        why = errno == EACCES ? "not writable by this user" : strerror(errno);
    else if (strlen(root) > LAUNCH_TMPDIR_ROOT_MAX)
        why = too_long;
    if (why == NULL) return 0;
    snprintf(too_long, sizeof too_long,
             "too long (%zu bytes, at most %d: the launcher's files go below it)", strlen(root),
             LAUNCH_TMPDIR_ROOT_MAX);
    char name[4200];
    launch_tmpdir_name(name, sizeof name);
    bt_diag_set(diag,
                "%s: %s; the launcher's sockets and rendezvous files go there: set TMPDIR to "
                "a writable directory (or unset it for /tmp)",
                name, why);
    return BT_EINVAL;
}

/* Makes DIR/lock, locked, into *fd (O_CLOEXEC: the ranks do not hold it): made under a
 * temp name and renamed, so that a sweeper never locks it before we do. Where the file
 * system has no flock, no lock file is left (the pid rule judges the dir) and *fd is -1.
 * 0, or an errno. */
static int launch_tmpdir_lock(const char *dir, int *fd) {
    *fd = -1;
    char tmp[4400], lock[4400];
    snprintf(tmp, sizeof tmp, "%s/" LAUNCH_TMPDIR_LOCK "-XXXXXX", dir);
    snprintf(lock, sizeof lock, "%s/" LAUNCH_TMPDIR_LOCK, dir);
    int f = mkostemp(tmp, O_CLOEXEC); /* mode 0600 */
    if (f < 0) return errno;
    if (flock(f, LOCK_EX | LOCK_NB) != 0) { /* ENOLCK, EOPNOTSUPP: no locks here */
        unlink(tmp);
        close(f);
        return 0;
    }
    if (rename(tmp, lock) != 0) {
        int err = errno;
        unlink(tmp);
        close(f);
        return err;
    }
    *fd = f;
    return 0;
}

/* Renames the dir tmp to final unless final exists: 0, or an errno (EEXIST). */
static int launch_tmpdir_publish(const char *tmp, const char *final) {
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return errno;
    struct stat st; /* a file system without RENAME_NOREPLACE (NFS) */
    if (lstat(final, &st) == 0) return EEXIST;
    return rename(tmp, final) == 0 ? 0 : errno;
}

/* Makes a 0700 dir, locked, under root: at final when given, else at
 * root/baton-launch-<pid>-XXXXXX (written to out). 0, or an errno. */
static int launch_tmpdir_create(const char *root, const char *final, char *out, size_t cap,
                                int *lock_fd) {
    *lock_fd = -1;
    for (int tries = 0; tries < LAUNCH_TMPDIR_TRIES; tries++) {
        char tmp[4400];
        int n =
            snprintf(tmp, sizeof tmp, "%s/." LAUNCH_TMPDIR_PREFIX "%d-XXXXXX", root, (int)getpid());
        if (n < 0 || (size_t)n >= sizeof tmp || (final == NULL && (size_t)n >= cap))
            return ENAMETOOLONG;
        if (mkdtemp(tmp) == NULL) return errno; /* mode 0700 */
        int fd, err = launch_tmpdir_lock(tmp, &fd);
        if (err == 0) {
            if (final == NULL) snprintf(out, cap, "%s/%s", root, strrchr(tmp, '/') + 2);
            err = launch_tmpdir_publish(tmp, final ? final : out);
        }
        if (err == 0) {
            *lock_fd = fd;
            return 0;
        }
        pmixhost_rmtree(tmp);
        if (fd >= 0) close(fd);
        if (err != EEXIST || final != NULL) return err;
    }
    return EEXIST;
}

int launch_tmpdir_make(char *out, size_t cap, int *lock_fd, bt_diag *diag) {
    const char *root = launch_tmpdir_root();
    int err = launch_tmpdir_create(root, NULL, out, cap, lock_fd);
    if (err == ENAMETOOLONG) {
        bt_diag_set(diag, "TMPDIR '%s' is too long for a temp dir path", root);
        out[0] = '\0';
        return BT_EINVAL;
    }
    if (err != 0) {
        char name[4200];
        launch_tmpdir_name(name, sizeof name);
        bt_diag_set(diag, "cannot create a temp dir under %s: %s", name, strerror(err));
        out[0] = '\0';
        return BT_EIO;
    }
    return 0;
}

/* Makes the dir at path again, where it was: 0, or an errno. */
static int launch_tmpdir_remake(const char *path, int *lock_fd) {
    if (*lock_fd >= 0) close(*lock_fd);
    *lock_fd = -1;
    char root[4096];
    snprintf(root, sizeof root, "%s", path);
    char *slash = strrchr(root, '/');
    if (slash == NULL) return EINVAL; /* launch_tmpdir_make's paths have one */
    if (slash == root)
        slash[1] = '\0'; /* TMPDIR=/ */
    else
        *slash = '\0';
    return launch_tmpdir_create(root, path, NULL, 0, lock_fd);
}

int launch_tmpdir_keep(const char *dir, int *lock_fd, bt_diag *diag) {
    struct stat st;
    int err = 0, remade = 0;
    if (lstat(dir, &st) != 0) {
        err = errno;
        if (err == ENOENT) err = launch_tmpdir_remake(dir, lock_fd), remade = 1;
    } else if (!S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
        err = EEXIST; /* something else took its name */
    } else if (*lock_fd < 0 || fstat(*lock_fd, &st) != 0 || st.st_nlink == 0) {
        if (*lock_fd >= 0) close(*lock_fd); /* its lock file was removed: a new one */
        err = launch_tmpdir_lock(dir, lock_fd);
    }
    if (err == 0) return remade;
    bt_diag_set(diag, "the launcher's temp dir %s is gone and cannot be made again: %s", dir,
                strerror(err));
    return BT_EIO;
}

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

/* Whether the dir at path, named after pid, is no live server's: its lock can be taken
 * (then held in *held until the dir is gone), or, with no lock file (an older baton's, or
 * a hidden one being made: never), no process has that pid. */
static int launch_tmpdir_stale(const char *path, pid_t pid, int hidden, int *held) {
    char lock[4400];
    snprintf(lock, sizeof lock, "%s/" LAUNCH_TMPDIR_LOCK, path);
    *held = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (*held >= 0) {
        if (flock(*held, LOCK_EX | LOCK_NB) == 0) return 1;
        int err = errno;
        close(*held);
        *held = -1;
        if (err == EWOULDBLOCK || err == EINTR) return 0;
    }
    if (hidden) return 0;
    return pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH;
}

int launch_tmpdir_sweep(void) {
    const char *root = launch_tmpdir_root();
    DIR *d = opendir(root);
    if (d == NULL) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int hidden, held;
        pid_t pid = launch_tmpdir_pid(e->d_name, &hidden);
        if (pid == 0) continue;
        char path[4352];
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
        if (!launch_tmpdir_stale(path, pid, hidden, &held)) continue;
        pmixhost_rmtree(path);
        if (held >= 0) close(held);
        removed++;
    }
    closedir(d);
    return removed;
}
