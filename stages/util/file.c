#define _DEFAULT_SOURCE /* S_ISVTX */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads f whole and closes it (bt_read_file). The buffer grows while it is under max; once
 * it holds max bytes or more, one byte more tells a file of exactly max bytes (EOF) from a
 * longer one (EFBIG). */
static int bt_read_stream(FILE *f, size_t max, char **out, size_t *len) {
    size_t cap = 1 << 16, n = 0, k;
    int over = 0;
    char *buf = malloc(cap + 1);
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        if ((n += k) < cap) continue;
        if (cap >= max) { /* full: no growing past max */
            over = n > max || fgetc(f) != EOF;
            break;
        }
        char *b = realloc(buf, cap * 2 + 1);
        if (b == NULL) free(buf);
        buf = b, cap *= 2;
    }
    over = over || n > max;
    int failed = ferror(f), err = failed ? (errno ? errno : EIO) : over ? EFBIG : ENOMEM;
    fclose(f);
    if (buf == NULL || over || failed) { /* a read error is no shorter file */
        free(buf);
        errno = err;
        return -1;
    }
    buf[n] = '\0';
    *out = buf, *len = n;
    return 0;
}

int bt_read_file(const char *path, size_t max, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    return f == NULL ? -1 : bt_read_stream(f, max, out, len);
}

int bt_read_private(const char *path, size_t max, int strict, char **out, size_t *len) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    int err = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : 0;
    if (err == 0 && !S_ISREG(st.st_mode)) err = EINVAL;
    if (err == 0 && strict && (st.st_uid != geteuid() || (st.st_mode & 077) != 0)) err = EPERM;
    FILE *f = err == 0 ? fdopen(fd, "rb") : NULL;
    if (f == NULL) {
        err = err ? err : errno;
        if (fd >= 0) close(fd);
        errno = err;
        return -1;
    }
    return bt_read_stream(f, max, out, len);
}

int bt_mkdir_p_made(const char *path, mode_t mode, size_t *made, size_t cap, size_t *n_made) {
    size_t len = strlen(path), k = 0;
    while (len > 1 && path[len - 1] == '/')
        len--;
    char *p = malloc(len + 1);
    if (p == NULL) return -1;
    memcpy(p, path, len);
    p[len] = '\0';
    int rc = 0;
    for (size_t i = 1; rc == 0 && i <= len; i++) {
        if (i < len && (p[i] != '/' || p[i - 1] == '/')) continue; /* "a//b": "a" once */
        p[i] = '\0';
        if (mkdir(p, mode) == 0) {
            if (made != NULL && k < cap) made[k++] = i;
        } else if (errno != EEXIST) {
            rc = -1;
        }
        if (i < len) p[i] = '/';
    }
    int err = errno;
    free(p);
    if (n_made != NULL) *n_made = k;
    errno = err;
    return rc;
}

int bt_mkdir_p(const char *path, mode_t mode) {
    return bt_mkdir_p_made(path, mode, NULL, 0, NULL);
}

/* A file opened O_NONBLOCK (a FIFO there cannot make the open wait for a writer, or for
 * a reader) kept only if it is a regular file (EINVAL else), O_NONBLOCK then cleared
 * unless the caller asked for it (keep): -1 with errno, or fd. */
static int bt_open_regular(int fd, int keep) {
    struct stat st;
    int err = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (err == 0 && !keep && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) err = errno;
    if (err == 0) return fd;
    if (fd >= 0) close(fd);
    errno = err;
    return -1;
}

int bt_open_private(const char *path, int flags) {
    if ((flags & O_ACCMODE) == O_RDONLY) return open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
    /* written: O_NONBLOCK, so that a FIFO without a reader fails (ENXIO, as does a socket)
     * rather than wait for one; O_TRUNC truncates nothing but a regular file */
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd < 0 && errno == ENXIO) errno = EINVAL; /* no regular file says ENXIO */
    return bt_open_regular(fd, flags & O_NONBLOCK);
}

FILE *bt_fopen_private(const char *path, const char *how) {
    int flags = how[0] == 'r'   ? O_RDONLY | O_NONBLOCK
                : how[0] == 'w' ? O_WRONLY | O_CREAT | O_TRUNC
                                : O_WRONLY | O_CREAT | O_APPEND;
    int fd = bt_open_private(path, flags);
    if (how[0] == 'r') fd = bt_open_regular(fd, 0);
    FILE *f = fd >= 0 ? fdopen(fd, how[0] == 'r' ? "r" : how[0] == 'w' ? "w" : "a") : NULL;
    if (f == NULL && fd >= 0) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

int bt_link_planted(const struct stat *link, const struct stat *dir) {
    return (dir->st_mode & S_ISVTX) && (dir->st_mode & S_IWOTH) && link->st_uid != geteuid() &&
           link->st_uid != dir->st_uid;
}

int bt_mkdir_private(const char *path) {
    struct stat st;
    if (mkdir(path, 0700) == 0) return 0;
    if (errno != EEXIST || lstat(path, &st) != 0) return -1;
    if (S_ISDIR(st.st_mode)) return 0;
    errno = S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR;
    return -1;
}

int bt_file_open_read(const char *path, FILE **in, bt_diag *diag) {
    *in = bt_fopen_private(path, "r");
    if (*in != NULL || errno == ENOENT) return 0;
    bt_diag_set(diag, "%s: cannot read: %s", path, bt_file_why(errno));
    return BT_EIO;
}

const char *bt_file_why(int err) {
    if (err == EINVAL) return "not a regular file (a FIFO, a device or a directory?)";
    if (err == ELOOP) return "a symbolic link (a run's own file is never followed)";
    return strerror(err);
}

int bt_file_lines(FILE *in, const char *path, bt_line_fn fn, void *arg, int *torn, bt_diag *diag) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    off_t at = ftello(in);
    int rc = 0;
    *torn = 0;
    at = at < 0 ? 0 : at;
    while (rc == 0 && (errno = 0, n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] != '\n') {
            *torn = 1;
            break;
        }
        rc = fn(arg, line, (size_t)n, at);
        at += n;
    }
    int err = errno;
    if (rc == 0 && n < 0 && err == ENOMEM) rc = BT_ENOMEM;
    if (rc == BT_ENOMEM) bt_diag_set(diag, "%s: out of memory reading it", path);
    if (rc == 0 && ferror(in)) {
        bt_diag_set(diag, "%s: cannot read: %s", path, strerror(err));
        rc = BT_EIO;
    }
    free(line);
    return rc;
}

int bt_json_line_num(const char *line, const char *key, double *out) {
    const char *k = strstr(line, key);
    if (k == NULL) return -1;
    const char *at = k + strlen(key);
    if (strncmp(at, "null", 4) == 0) {
        *out = NAN;
        return 0;
    }
    char *end;
    *out = strtod(at, &end);
    return end == at ? -1 : 0;
}
