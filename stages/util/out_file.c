#define _GNU_SOURCE /* realpath, O_PATH */
/* A user-named output file written atomically where that is safe, in place where the
 * name is a device, a FIFO or an open descriptor (out_file.h). Whatever was looked at by
 * name is checked again on the descriptor opened (fstat: the same file, of the kind
 * seen), and the .partial is made and renamed in one directory opened once, so that a
 * name changed in between (by another user who may write a directory on the way) is
 * never written through. */
#include "out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

/* The descriptor path names as the shell reads it: /dev/stdout 1, /dev/stderr 2,
 * /dev/fd/N and /proc/self/fd/N N; -1 for any other path. */
static int out_named_fd(const char *path) {
    if (strcmp(path, "/dev/stdout") == 0) return 1;
    if (strcmp(path, "/dev/stderr") == 0) return 2;
    const char *n = NULL;
    if (strncmp(path, "/dev/fd/", 8) == 0) n = path + 8;
    if (strncmp(path, "/proc/self/fd/", 14) == 0) n = path + 14;
    size_t len = n ? strlen(n) : 0;
    if (len == 0 || len > 6 || strspn(n, "0123456789") != len) return -1;
    return atoi(n);
}

/* Descriptor fd, named by path, as where the bytes go: 0, or BT_EIO (closed, or not open
 * for writing). */
static int out_use_fd(bt_out *o, int fd, const char *path, bt_diag *diag) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        return BT_EIO;
    }
    if ((fl & O_ACCMODE) == O_RDONLY) {
        bt_diag_set(diag, "%s: cannot write: descriptor %d is not open for writing", path, fd);
        return BT_EIO;
    }
    o->fd = fd;
    return 0;
}

/* Whether the open file st (what a name led to) is stdout's or stderr's, open for
 * writing: that descriptor, else -1. `//dev/stdout`, `/dev/fd/../fd/1` or a user's link
 * to /dev/stdout are the descriptor too, not the file it has open (which a `>> log`
 * would otherwise see replaced). */
static int out_same_as_std(const struct stat *st) {
    for (int fd = 1; fd <= 2; fd++) {
        struct stat fs;
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY && fstat(fd, &fs) == 0 &&
            fs.st_dev == st->st_dev && fs.st_ino == st->st_ino)
            return fd;
    }
    return -1;
}

/* path's directory and last component: dir gets "." for a bare name. -1 when path ends
 * in '/' (no file name) or is too long. */
static int out_split(const char *path, char *dir, size_t dcap, char *base, size_t bcap) {
    const char *slash = strrchr(path, '/');
    const char *b = slash ? slash + 1 : path;
    if (*b == '\0' || snprintf(base, bcap, "%s", b) >= (int)bcap) return -1;
    if (slash == NULL) return snprintf(dir, dcap, ".") >= (int)dcap ? -1 : 0;
    int n = slash == path ? 1 : (int)(slash - path); /* "/x": "/" */
    return snprintf(dir, dcap, "%.*s", n, path) >= (int)dcap ? -1 : 0;
}

/* The .partial made new in o->dir_fd (O_EXCL: never a FIFO, link or another's file
 * written through). One there already is removed first only when it is a leftover of
 * this user's (a regular file of its own, no other link to it); else refused, named. */
static int out_open_partial(bt_out *o, const char *path, bt_diag *diag) {
    for (int tries = 0; tries < 2; tries++) {
        o->fd =
            openat(o->dir_fd, o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (o->fd >= 0 || errno != EEXIST) break;
        struct stat st;
        if (fstatat(o->dir_fd, o->tmp, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        const char *why = S_ISLNK(st.st_mode)                   ? "a symbolic link"
                          : !S_ISREG(st.st_mode)                ? "not a regular file"
                          : st.st_uid != geteuid()              ? "another user's file"
                          : st.st_nlink != 1                    ? "a file with other hard links"
                          : unlinkat(o->dir_fd, o->tmp, 0) != 0 ? strerror(errno)
                                                                : NULL;
        if (why != NULL) {
            bt_diag_set(diag,
                        "%s: cannot write: %s.partial, where it is written first, is there and "
                        "is %s, not a leftover of yours; remove it",
                        path, path, why);
            return BT_EIO;
        }
    }
    if (o->fd < 0) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

/* The replaced file's permissions kept: a file made private stays so. (Not its owner:
 * root replacing a file another user planted must not hand that user the new one.) */
static int out_keep_mode(bt_out *o, const struct stat *old, const char *path, bt_diag *diag) {
    if (fchmod(o->fd, old->st_mode & 0777) != 0) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

/* Writes to the regular file at final (old: what is there, NULL for a new name) through
 * final.partial, both in final's directory opened once. */
static int out_open_atomic(bt_out *o, const char *final, const char *path, const struct stat *old,
                           bt_diag *diag) {
    char dir[4096];
    if (out_split(final, dir, sizeof dir, o->final, sizeof o->final) != 0 ||
        snprintf(o->tmp, sizeof o->tmp, "%s.partial", o->final) >= (int)sizeof o->tmp) {
        bt_diag_set(diag, "%s: the name is too long, or names no file", path);
        return BT_EINVAL;
    }
    o->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (o->dir_fd < 0 && errno == EACCES) o->dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat now;
    if (o->dir_fd < 0) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        return BT_EIO;
    }
    if (old != NULL && (fstatat(o->dir_fd, o->final, &now, AT_SYMLINK_NOFOLLOW) != 0 ||
                        now.st_dev != old->st_dev || now.st_ino != old->st_ino)) {
        bt_diag_set(diag, "%s: cannot write: the file changed while it was being opened", path);
        return BT_EIO;
    }
    int rc = out_open_partial(o, path, diag);
    if (rc == 0) o->own_fd = 1;
    if (rc == 0 && old != NULL) rc = out_keep_mode(o, old, path, diag);
    return rc;
}

/* Writes into path as it is, a character device or a FIFO (st: as stat'ed; link: path is
 * a link, followed): the descriptor opened must be that very file (a name swapped for a
 * block device or a regular file meanwhile is refused), and never a controlling tty. */
static int out_open_in_place(bt_out *o, const char *path, const struct stat *st, int link,
                             bt_diag *diag) {
    o->fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC | (link ? 0 : O_NOFOLLOW));
    if (o->fd < 0) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        return BT_EIO;
    }
    o->own_fd = 1;
    struct stat fs;
    if (fstat(o->fd, &fs) == 0 && (S_ISCHR(fs.st_mode) || S_ISFIFO(fs.st_mode)) &&
        fs.st_dev == st->st_dev && fs.st_ino == st->st_ino)
        return 0;
    bt_diag_set(diag, "%s: cannot write: it changed while it was being opened", path);
    return BT_EIO;
}

/* A symbolic link another user may have planted (bt_link_planted: in a sticky directory
 * others may write, neither this user's nor the directory owner's) is never followed:
 * each link of the chain at path's end is checked. */
static int out_check_links(const char *path, bt_diag *diag) {
    char cur[PATH_MAX], next[PATH_MAX], dir[PATH_MAX], base[NAME_MAX + 1];
    snprintf(cur, sizeof cur, "%s", path);
    for (int hop = 0; hop < 40; hop++) {
        struct stat ls, ds;
        if (lstat(cur, &ls) != 0 || !S_ISLNK(ls.st_mode) ||
            out_split(cur, dir, sizeof dir, base, sizeof base) != 0 || stat(dir, &ds) != 0)
            return 0;
        if (bt_link_planted(&ls, &ds)) {
            bt_diag_set(diag,
                        "%s: not followed: the symbolic link %s is uid %u's, in %s, a sticky "
                        "directory others may write (mode %04o), so another user may have "
                        "planted it; name the file itself",
                        path, cur, (unsigned)ls.st_uid, dir, (unsigned)(ds.st_mode & 07777));
            return BT_EINVAL;
        }
        ssize_t n = readlink(cur, next, sizeof next - 1);
        if (n <= 0) return 0;
        next[n] = '\0';
        if (next[0] == '/')
            snprintf(cur, sizeof cur, "%s", next);
        else if (snprintf(cur, sizeof cur, "%s/%s", dir, next) >= (int)sizeof cur)
            return 0;
    }
    return 0;
}

/* path, a symbolic link: stdout's or stderr's file (that descriptor), a regular file
 * (its target replaced atomically, the link kept), a device or FIFO in place. */
static int out_open_link(bt_out *o, const char *path, struct stat *st, bt_diag *diag) {
    if (out_check_links(path, diag) != 0) return BT_EINVAL;
    if (stat(path, st) != 0) {
        if (errno != ENOENT) {
            bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
            return BT_EIO;
        }
        bt_diag_set(diag, "%s: a symbolic link to a missing file; name the file to write", path);
        return BT_EINVAL;
    }
    int fd = out_same_as_std(st);
    if (fd >= 0) return out_use_fd(o, fd, path, diag);
    if (!S_ISREG(st->st_mode)) return 1;
    char real[PATH_MAX];
    if (realpath(path, real) == NULL) {
        bt_diag_set(diag, "%s: cannot follow the link: %s", path, strerror(errno));
        return BT_EIO;
    }
    return out_open_atomic(o, real, path, st, diag);
}

/* path, lstat'ed as st, is neither a new name nor a regular file: a link followed, a
 * device or FIFO written in place, anything else refused. */
static int out_open_special(bt_out *o, const char *path, struct stat *st, bt_diag *diag) {
    int link = S_ISLNK(st->st_mode);
    if (link) {
        int rc = out_open_link(o, path, st, diag);
        if (rc <= 0) return rc;
    }
    if (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode))
        return out_open_in_place(o, path, st, link, diag);
    const char *what = S_ISDIR(st->st_mode)    ? "a directory"
                       : S_ISBLK(st->st_mode)  ? "a block device"
                       : S_ISSOCK(st->st_mode) ? "a socket"
                                               : "something else";
    bt_diag_set(diag, "%s: %s%s, not a file; name a file to write", path, link ? "a link to " : "",
                what);
    return BT_EINVAL;
}

int bt_out_open(bt_out *o, const char *path, bt_diag *diag) {
    memset(o, 0, sizeof *o);
    o->fd = o->dir_fd = -1;
    if (path[0] == '\0') {
        bt_diag_set(diag, "'': an empty file name; name the file to write");
        return BT_EINVAL;
    }
    int fd = out_named_fd(path), rc;
    struct stat st;
    if (fd >= 0)
        rc = out_use_fd(o, fd, path, diag);
    else if (lstat(path, &st) != 0)
        rc = out_open_atomic(o, path, path, NULL, diag);
    else if (S_ISREG(st.st_mode))
        rc = out_open_atomic(o, path, path, &st, diag);
    else
        rc = out_open_special(o, path, &st, diag);
    if (rc != 0) {
        if (o->own_fd) close(o->fd);
        if (o->own_fd && o->tmp[0]) unlinkat(o->dir_fd, o->tmp, 0);
        if (o->dir_fd >= 0) close(o->dir_fd);
        o->fd = o->dir_fd = -1, o->own_fd = 0;
    }
    return rc;
}

int bt_out_close(bt_out *o, int ok, const char *path, bt_diag *diag) {
    int err = errno; /* a failed write's, when !ok */
    int atomic = o->tmp[0] != '\0';
    if (ok && atomic && fsync(o->fd) != 0) ok = 0, err = errno;
    if (o->own_fd && close(o->fd) != 0 && ok) ok = 0, err = errno;
    if (ok && atomic && renameat(o->dir_fd, o->tmp, o->dir_fd, o->final) != 0) ok = 0, err = errno;
    if (!ok && atomic) unlinkat(o->dir_fd, o->tmp, 0);
    /* the rename itself made durable (as ckpt_write_file_atomic does); a directory
     * opened O_PATH (not readable), or a file system without it (EINVAL), is left be */
    if (ok && atomic && fsync(o->dir_fd) != 0 && errno != EBADF && errno != EINVAL)
        ok = 0, err = errno;
    if (o->dir_fd >= 0) close(o->dir_fd);
    o->fd = o->dir_fd = -1;
    if (ok) return 0;
    bt_diag_set(diag, "%s: cannot write: %s", path, strerror(err));
    return BT_EIO;
}

int bt_out_write_file(const char *path, const void *buf, size_t n, bt_diag *diag) {
    bt_out o;
    int rc = bt_out_open(&o, path, diag);
    if (rc != 0) return rc;
    const char *p = buf;
    int ok = 1;
    while (ok && n > 0) {
        ssize_t w = write(o.fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        ok = w > 0;
        if (w == 0) errno = EIO;
        if (ok) p += w, n -= (size_t)w;
    }
    return bt_out_close(&o, ok, path, diag);
}

int bt_stdout_check(const char *prog) {
    errno = 0;
    int flushed = fflush(stdout) == 0;
    if (flushed && !ferror(stdout)) return 0;
    if (!flushed && errno == EPIPE) return 0;
    if (!flushed && errno != 0) {
        fprintf(stderr, "%s: write error: %s\n", prog, strerror(errno));
        return -1;
    }
    /* an earlier write failed and its errno is gone: a standard output closed (or opened
     * on /dev/null read-only in its place: bt_proc_start) is still named */
    int fl = fcntl(STDOUT_FILENO, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
        fprintf(stderr, "%s: write error: %s\n", prog, strerror(EBADF));
    else
        fprintf(stderr, "%s: write error\n", prog);
    return -1;
}
