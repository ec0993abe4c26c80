/* The directory-backed rendezvous store: one file per key in a directory shared by the
 * ranks of a job attempt.
 *
 * A key's file appears atomically and is never replaced: the value is written to a
 * private temporary file which is then hard-linked to the key's name; link(2) fails
 * with EEXIST when the key exists, so a reused prefix is detected without a race.
 * Readers poll for the file (1 ms, backing off to 20 ms) up to their timeout, which is
 * kept to the millisecond. Key characters outside [A-Za-z0-9_.-] are escaped as %XX,
 * so keys with '/' map to flat, readable file names. */
#include "comm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct file_store {
    char dir[4096];
} file_store;

/* The escaped file name of key; BT_ERANGE if it does not fit. */
static int store_file_name(const char *key, char *out, size_t cap) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' ||
                    (*p == '.' && p != (const unsigned char *)key);
        if (n + 4 >= cap) return BT_ERANGE;
        if (plain)
            out[n++] = (char)*p;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", *p);
    }
    if (n == 0) return BT_ERANGE;
    out[n] = '\0';
    return 0;
}

static int store_path(const file_store *fs, const char *key, char *path, size_t cap,
                      bt_diag *diag) {
    char name[1024];
    if (store_file_name(key, name, sizeof name) < 0 ||
        (size_t)snprintf(path, cap, "%s/%s", fs->dir, name) >= cap) {
        bt_diag_set(diag, "rendezvous key '%.200s' is empty or too long", key);
        return BT_EINVAL;
    }
    return 0;
}

static int store_write_all(int fd, const void *val, size_t len) {
    const char *p = val;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int store_set(void *ctx, const char *key, const void *val, size_t len, bt_diag *diag) {
    file_store *fs = ctx;
    char path[4096 + 1100], tmp[4096 + 1200];
    int rc = store_path(fs, key, path, sizeof path, diag);
    if (rc < 0) return rc;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        bt_diag_set(diag, "rendezvous store: cannot create %s: %s", tmp, strerror(errno));
        return BT_EIO;
    }
    int werr = store_write_all(fd, val, len);
    if (close(fd) != 0) werr = -1;
    if (werr != 0) {
        bt_diag_set(diag, "rendezvous store: cannot write %s: %s", tmp, strerror(errno));
        unlink(tmp);
        return BT_EIO;
    }
    rc = link(tmp, path) == 0 ? 0 : errno;
    unlink(tmp);
    if (rc == EEXIST) {
        bt_diag_set(diag,
                    "rendezvous key '%s' already exists in %s: the prefix was used before; "
                    "every job attempt needs a fresh prefix (or an empty store directory)",
                    key, fs->dir);
        return BT_EINVAL;
    }
    if (rc != 0) {
        bt_diag_set(diag, "rendezvous store: cannot publish %s: %s", path, strerror(rc));
        return BT_EIO;
    }
    return 0;
}

static double store_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void store_sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1e3),
                          (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Reads the whole file behind fd into a malloc'd buffer. */
static int store_read_all(int fd, void **val, size_t *len) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = malloc(n > 0 ? n : 1);
    if (buf == NULL) return -1;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            return -1;
        }
        got += (size_t)r;
    }
    *val = buf;
    *len = n;
    return 0;
}

static int store_get(void *ctx, const char *key, void **val, size_t *len, int timeout_ms,
                     bt_diag *diag) {
    file_store *fs = ctx;
    char path[4096 + 1100];
    int rc = store_path(fs, key, path, sizeof path, diag);
    if (rc < 0) return rc;
    double deadline = store_now_ms() + timeout_ms, pause = 1.0;
    for (;;) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            rc = store_read_all(fd, val, len);
            close(fd);
            if (rc == 0) return 0;
            bt_diag_set(diag, "rendezvous store: cannot read %s", path);
            return BT_EIO;
        }
        if (errno != ENOENT) {
            bt_diag_set(diag, "rendezvous store: cannot open %s: %s", path, strerror(errno));
            return BT_EIO;
        }
        double left = deadline - store_now_ms();
        if (left <= 0) {
            bt_diag_set(diag, "rendezvous key '%s' did not appear in %s within %d ms", key, fs->dir,
                        timeout_ms);
            return BT_ENOENT;
        }
        store_sleep_ms(pause < left ? pause : left);
        pause = pause * 2 < 20 ? pause * 2 : 20;
    }
}

static void store_close(void *ctx) {
    free(ctx);
}

int comm_store_file(comm_store *st, const char *dir, bt_diag *diag) {
    memset(st, 0, sizeof *st);
    struct stat sb;
    if (dir == NULL || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        bt_diag_set(diag, "rendezvous store directory '%s' %s", dir ? dir : "(null)",
                    dir ? "does not exist or is not a directory" : "is not set");
        return BT_ENOENT;
    }
    file_store *fs = calloc(1, sizeof *fs);
    if (fs == NULL) return BT_ENOMEM;
    if ((size_t)snprintf(fs->dir, sizeof fs->dir, "%s", dir) >= sizeof fs->dir) {
        free(fs);
        bt_diag_set(diag, "rendezvous store directory path too long");
        return BT_EINVAL;
    }
    st->ctx = fs;
    st->set = store_set;
    st->get = store_get;
    st->close = store_close;
    return 0;
}
