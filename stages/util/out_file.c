#define _DEFAULT_SOURCE /* realpath */
/* A user-named output file written atomically where that is safe, in place where the
 * name is a device, a FIFO or an open descriptor (out_file.h). */
#include "out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Writes to the regular file at final through final.partial. */
static int out_open_atomic(bt_out *o, const char *final, const char *path, bt_diag *diag) {
    if (snprintf(o->final, sizeof o->final, "%s", final) >= (int)sizeof o->final ||
        snprintf(o->tmp, sizeof o->tmp, "%s.partial", final) >= (int)sizeof o->tmp) {
        bt_diag_set(diag, "%s: the name is too long", path);
        return BT_EINVAL;
    }
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (o->fd < 0) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        return BT_EIO;
    }
    o->own_fd = 1;
    return 0;
}

/* Writes into path as it is (a character device or a FIFO). */
static int out_open_in_place(bt_out *o, const char *path, bt_diag *diag) {
    o->fd = open(path, O_WRONLY | O_CLOEXEC);
    if (o->fd < 0) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        return BT_EIO;
    }
    o->own_fd = 1;
    return 0;
}

/* path, lstat'ed as st, is neither a new name nor a regular file: a link followed, a
 * device or FIFO written in place, anything else refused. */
static int out_open_special(bt_out *o, const char *path, struct stat *st, bt_diag *diag) {
    int link = S_ISLNK(st->st_mode);
    if (link && stat(path, st) != 0) {
        if (errno != ENOENT) {
            bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
            return BT_EIO;
        }
        bt_diag_set(diag, "%s: a symbolic link to a missing file; name the file to write", path);
        return BT_EINVAL;
    }
    if (S_ISREG(st->st_mode)) { /* only a link gets here with a regular file */
        char real[PATH_MAX];
        if (realpath(path, real) == NULL) {
            bt_diag_set(diag, "%s: cannot follow the link: %s", path, strerror(errno));
            return BT_EIO;
        }
        return out_open_atomic(o, real, path, diag);
    }
    if (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode)) return out_open_in_place(o, path, diag);
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
    o->fd = -1;
    if (path[0] == '\0') {
        bt_diag_set(diag, "'': an empty file name; name the file to write");
        return BT_EINVAL;
    }
    int fd = out_named_fd(path);
    if (fd >= 0) {
        if (fcntl(fd, F_GETFD) < 0) {
            bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
            return BT_EIO;
        }
        o->fd = fd;
        return 0;
    }
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return out_open_atomic(o, path, path, diag);
    return out_open_special(o, path, &st, diag);
}

int bt_out_close(bt_out *o, int ok, const char *path, bt_diag *diag) {
    int err = errno; /* a failed write's, when !ok */
    if (ok && o->tmp[0] && fsync(o->fd) != 0) ok = 0, err = errno;
    if (o->own_fd && close(o->fd) != 0 && ok) ok = 0, err = errno;
    if (ok && o->tmp[0] && rename(o->tmp, o->final) != 0) ok = 0, err = errno;
    if (!ok && o->tmp[0]) unlink(o->tmp);
    o->fd = -1;
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
    if (!flushed && errno != 0)
        fprintf(stderr, "%s: write error: %s\n", prog, strerror(errno));
    else /* an earlier write failed; its errno is gone */
        fprintf(stderr, "%s: write error\n", prog);
    return -1;
}
