/* A stage attempt's metrics log (metrics_log.h). */
#define _GNU_SOURCE /* F_OFD_SETLK */
#include "metrics_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/crc32c.h"
#include "util/file.h"

void metrics_log_path(const char *run_dir, uint32_t stage, uint32_t attempt, char *out,
                      size_t cap) {
    snprintf(out, cap, "%s/logs/s%02u-a%02u.metrics", run_dir, stage, attempt);
}

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* An open-file-description lock of type on fd, not waiting: 0 taken, -1 (errno) not. */
static int log_lock(int fd, short type) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

int metrics_log_open(metrics_log *l, const char *path, bt_diag *diag) {
    snprintf(l->path, sizeof l->path, "%s", path);
    l->size = 0;
    l->fd = bt_open_private(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND);
    if (l->fd < 0) {
        bt_diag_set(diag, "%s: cannot create: %s", path, bt_file_why(errno));
        return BT_EIO;
    }
    /* a file system without locks (ENOLCK) only loses the reader's wait */
    log_lock(l->fd, F_WRLCK);
    return 0;
}

/* A record not written whole (w bytes of it, errno err; a full disk): the file cut back to
 * its last whole record, as a reader stops at a torn one and would never see the records
 * appended after it; where that cannot be done, nothing more is appended. */
static int log_append_failed(metrics_log *l, ssize_t w, int err, bt_diag *diag) {
    const char *why = w < 0 ? strerror(err) : "short write";
    if (w <= 0 || ftruncate(l->fd, (off_t)l->size) == 0) {
        bt_diag_set(diag, "%s: cannot append: %s%s", l->path, why,
                    w > 0 ? " (the torn record cut off)" : "");
        return BT_EIO;
    }
    bt_diag_set(diag,
                "%s: cannot append: %s, and the torn record cannot be cut off (%s): nothing more "
                "is appended",
                l->path, why, strerror(errno));
    close(l->fd);
    l->fd = -1;
    return BT_EIO;
}

int metrics_log_append(metrics_log *l, const Baton__Metrics *m, bt_diag *diag) {
    if (l->fd < 0) return 0;
    size_t n = baton__metrics__get_packed_size(m);
    if (n > METRICS_LOG_MAX_RECORD) return 0; /* not a record of ours: never */
    uint8_t stack[4096], *buf = n + 8 <= sizeof stack ? stack : malloc(n + 8);
    if (buf == NULL) return BT_ENOMEM;
    baton__metrics__pack(m, buf + 8);
    put_u32(buf, (uint32_t)n);
    put_u32(buf + 4, crc32c_update(0, buf + 8, n));
    ssize_t w = write(l->fd, buf, n + 8); /* O_APPEND: one record, whole or torn */
    int err = errno;
    if (buf != stack) free(buf);
    if (w == (ssize_t)(n + 8)) {
        l->size += (uint64_t)w;
        return 0;
    }
    return log_append_failed(l, w, err, diag);
}

int metrics_log_sync(metrics_log *l, bt_diag *diag) {
    if (l->fd < 0 || fdatasync(l->fd) == 0) return 0;
    bt_diag_set(diag, "%s: cannot sync: %s", l->path, strerror(errno));
    return BT_EIO;
}

void metrics_log_close(metrics_log *l) {
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
}

/* Waits up to wait_s for the writer's lock to go (its process to end); 1 if it did not. */
static int log_wait_writer(int fd, double wait_s) {
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (double waited = 0;; waited += 0.02) {
        if (log_lock(fd, F_RDLCK) == 0) return 0;
        if (errno != EAGAIN && errno != EACCES) return 0; /* no locks here: no wait either */
        if (waited >= wait_s) return 1;
        nanosleep(&nap, NULL);
    }
}

/* The next whole record of f into *m (NULL at the end, or at a torn or damaged one). */
static int log_next(FILE *f, uint8_t **buf, size_t *cap, Baton__Metrics **m) {
    uint8_t head[8];
    *m = NULL;
    if (fread(head, 1, 8, f) != 8) return ferror(f) ? BT_EIO : 0;
    uint32_t n = get_u32(head);
    if (n > METRICS_LOG_MAX_RECORD) return 0;
    if (n > *cap) {
        uint8_t *b = realloc(*buf, n);
        if (b == NULL) return BT_ENOMEM;
        *buf = b, *cap = n;
    }
    if (fread(*buf, 1, n, f) != n) return ferror(f) ? BT_EIO : 0;
    if (crc32c_update(0, *buf, n) != get_u32(head + 4)) return 0;
    *m = baton__metrics__unpack(NULL, n, *buf);
    return 0;
}

int metrics_log_read(const char *path, double wait_s, int *busy, metrics_log_fn fn, void *arg,
                     bt_diag *diag) {
    *busy = 0;
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        if (errno == ENOENT) return 0;
        bt_diag_set(diag, "%s: cannot read: %s", path, strerror(errno));
        return BT_EIO;
    }
    *busy = log_wait_writer(fileno(f), wait_s);
    uint8_t *buf = NULL;
    size_t cap = 0;
    Baton__Metrics *m;
    int rc;
    while ((rc = log_next(f, &buf, &cap, &m)) == 0 && m != NULL) {
        int frc = fn(arg, m); /* its failure (a write of what was read) says why itself */
        baton__metrics__free_unpacked(m, NULL);
        if (frc != 0) {
            free(buf);
            fclose(f);
            return frc;
        }
    }
    if (rc == BT_EIO) bt_diag_set(diag, "%s: cannot read: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    return rc;
}
