/* The launch server's temp dir (launch_tmpdir.h): made, checked as each job starts, made
 * again. The sweep of dead servers' dirs is in launch_tmpdir_sweep.c. */
#define _GNU_SOURCE
#include "launch_tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/rmtree.h"

#define LAUNCH_TMPDIR_TRIES 16
/* The longest $TMPDIR taken: the launcher's files go a few levels below it (its temp dir,
 * a job's directory, the rendezvous files), each path at most PATH_MAX bytes. */
#define LAUNCH_TMPDIR_ROOT_MAX (PATH_MAX - 128)

const char *launch_tmpdir_root(void) {
    const char *root = getenv("TMPDIR");
    return root == NULL || root[0] == '\0' ? "/tmp" : root;
}

void launch_tmpdir_absolute(void) {
    const char *env = getenv("TMPDIR");
    if (env == NULL || env[0] == '\0' || env[0] == '/') return;
    char abs[PATH_MAX], cwd[PATH_MAX];
    if (realpath(env, abs) == NULL) { /* not there (yet): said by launch_tmpdir_check */
        int n = getcwd(cwd, sizeof cwd) ? snprintf(abs, sizeof abs, "%s/%s", cwd, env) : -1;
        if (n < 0 || (size_t)n >= sizeof abs) return;
    }
    setenv("TMPDIR", abs, 1);
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

/* Opens the dir made at path and locks it (flock on the dir itself: the lock goes with the
 * inode, through the rename that publishes it, and cannot be removed on its own), then
 * makes its marker (LAUNCH_TMPDIR_MARK: the lock is what judges this dir). Into *fd: the
 * dir's descriptor (close-on-exec: the ranks do not hold it), locked where the file system
 * has flock on a directory (not NFS: there it is only the dir's identity, no marker is
 * made and the pid rule judges the dir). 0, or an errno. */
static int launch_tmpdir_lock(const char *path, int *fd) {
    *fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0) return errno;
    int rc;
    do /* blocking: a sweeper holds it a moment to read a young hidden dir's age */
        rc = flock(*fd, LOCK_EX);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) return 0; /* ENOLCK, EOPNOTSUPP, EBADF (NFS): no marker, the pid rule */
    int mark = openat(*fd, LAUNCH_TMPDIR_MARK, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (mark >= 0) return close(mark), 0;
    int err = errno;
    close(*fd);
    *fd = -1;
    return err;
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
 * root/baton-launch-<pid>-XXXXXX (written to out). It is made under a hidden name
 * (".baton-launch-...") and locked there before it is renamed, so that no sweeper ever
 * sees it under its public name unlocked. 0, or an errno. */
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
        if (fd >= 0) {
            bt_rmtree_held(tmp, fd, BT_RMTREE_DEPTH);
            close(fd);
        } else {
            bt_rmtree(tmp);
        }
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

/* Makes the dir at path again, where it was, into *fd: 0, or an errno (EEXIST: something
 * else took the name meanwhile). */
static int launch_tmpdir_remake(const char *path, int *fd) {
    char root[4096];
    snprintf(root, sizeof root, "%s", path);
    char *slash = strrchr(root, '/');
    if (slash == NULL) return EINVAL; /* launch_tmpdir_make's paths have one */
    if (slash == root)
        slash[1] = '\0'; /* TMPDIR=/ */
    else
        *slash = '\0';
    return launch_tmpdir_create(root, path, NULL, 0, fd);
}

/* What holds the name of our dir now, st its lstat: for a message. */
static const char *launch_tmpdir_what(const struct stat *st) {
    if (S_ISLNK(st->st_mode)) return "a symbolic link";
    if (!S_ISDIR(st->st_mode)) return "not a directory";
    if (st->st_uid != getuid()) return "another user's directory";
    return "another directory";
}

/* The name dir holds something that is not our dir (what): a new dir is made under another
 * name, and dir (cap bytes) becomes it. 2, or BT_EIO; diag says which. */
static int launch_tmpdir_renew(char *dir, size_t cap, int *lock_fd, const char *what,
                               bt_diag *diag) {
    char fresh[4096];
    int fd, rc = launch_tmpdir_make(fresh, sizeof fresh, &fd, diag);
    if (rc == 0 && strlen(fresh) >= cap) {
        if (fd >= 0) {
            bt_rmtree_held(fresh, fd, BT_RMTREE_DEPTH);
            close(fd);
        }
        rc = BT_EIO;
        bt_diag_set(diag, "%s is too long", fresh);
    }
    if (rc != 0) {
        char why[4400];
        snprintf(why, sizeof why, "%s", diag->msg);
        bt_diag_set(diag,
                    "the launcher's temp dir %s is now %s (not this run's: left alone), and no "
                    "new one can be made: %s",
                    dir, what, why);
        return BT_EIO;
    }
    bt_diag_set(diag,
                "the launcher's temp dir %s is now %s (not this run's, a squatter?): left "
                "alone; made a new one, %s",
                dir, what, fresh);
    if (*lock_fd >= 0) close(*lock_fd); /* after: the new one is locked already */
    *lock_fd = fd;
    snprintf(dir, cap, "%s", fresh);
    return 2;
}

int launch_tmpdir_keep(char *dir, size_t cap, int *lock_fd, bt_diag *diag) {
    struct stat st, mine;
    if (lstat(dir, &st) == 0) {
        if (*lock_fd >= 0 && fstat(*lock_fd, &mine) == 0 && mine.st_ino == st.st_ino &&
            mine.st_dev == st.st_dev)
            return 0; /* ours, locked all along */
        return launch_tmpdir_renew(dir, cap, lock_fd, launch_tmpdir_what(&st), diag);
    }
    int err = errno, fd = -1;
    if (err == ENOENT) err = launch_tmpdir_remake(dir, &fd);
    if (err == 0) {
        if (*lock_fd >= 0) close(*lock_fd); /* the removed dir's: after the new one's lock */
        *lock_fd = fd;
        return 1;
    }
    if (err == EEXIST && lstat(dir, &st) == 0) /* taken between our lstat and the rename */
        return launch_tmpdir_renew(dir, cap, lock_fd, launch_tmpdir_what(&st), diag);
    bt_diag_set(diag, "the launcher's temp dir %s is gone and cannot be made again: %s", dir,
                strerror(err));
    return BT_EIO;
}
