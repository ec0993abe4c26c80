/* Records appended whole or not at all (rec_append.h). */
#include "rec_append.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/file.h"

/* A test hook's window: the calls numbered lo..hi (from 1) of `var`=N or N-M fail. */
typedef struct rec_fault_window {
    const char *var;
    long n, lo, hi;
    int parsed;
} rec_fault_window;

static int rec_fault_hit(rec_fault_window *f) {
    if (!f->parsed) {
        const char *v = getenv(f->var);
        char *end = NULL;
        f->parsed = 1;
        f->lo = v ? strtol(v, &end, 10) : 0;
        f->hi = end && *end == '-' ? strtol(end + 1, NULL, 10) : f->lo;
    }
    if (f->lo <= 0) return 0;
    f->n++;
    return f->n >= f->lo && f->n <= f->hi;
}

int rec_append_fault(void) {
    static rec_fault_window w = {.var = "BATON_FAULT_METRICS_ENOSPC"};
    if (!rec_fault_hit(&w)) return 0;
    errno = ENOSPC;
    return 1;
}

/* Test hook: BATON_FAULT_METRICS_REOPEN=N or N-M makes the opens again of a file renamed
 * over (rec_append_reopen, and its tries) numbered N to M fail with EMFILE. */
static int rec_reopen_fault(void) {
    static rec_fault_window w = {.var = "BATON_FAULT_METRICS_REOPEN"};
    if (!rec_fault_hit(&w)) return 0;
    errno = EMFILE;
    return 1;
}

/* Test hook: BATON_FAULT_METRICS_CUT=N or N-M makes the cuts in place (ftruncate)
 * numbered N to M fail with EIO. */
static int rec_cut(int fd, off_t at) {
    static rec_fault_window w = {.var = "BATON_FAULT_METRICS_CUT"};
    if (rec_fault_hit(&w)) {
        errno = EIO;
        return -1;
    }
    return ftruncate(fd, at);
}

static void rec_note(const rec_append *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void rec_note(const rec_append *a, const char *fmt, ...) {
    if (a->note == NULL) return;
    char msg[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    a->note(a->note_arg, msg);
}

int rec_append_open(rec_append *a, const char *path, int flags, bt_diag *diag) {
    rec_note_fn note = a->note;
    void *note_arg = a->note_arg;
    memset(a, 0, sizeof *a);
    a->note = note, a->note_arg = note_arg;
    a->max_held = REC_APPEND_MAX_HELD;
    snprintf(a->path, sizeof a->path, "%s", path);
    a->fd = bt_open_private(path, O_WRONLY | O_CREAT | O_APPEND | flags);
    if (a->fd < 0) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", path, bt_file_why(errno));
        return BT_EIO;
    }
    a->end = lseek(a->fd, 0, SEEK_END);
    if (a->end < 0) a->end = 0;
    return 0;
}

/* n bytes at p written whole: 0; else -1 with errno, what reached the file cut off (or
 * a->dirty set where that cannot be done). */
static int rec_put(rec_append *a, const uint8_t *p, size_t n) {
    size_t done = 0;
    int err = 0;
    if (a->dirty) {
        if (rec_cut(a->fd, a->end) != 0) return -1;
        a->dirty = 0;
    }
    if (rec_append_fault()) {
        ssize_t w = write(a->fd, p, n / 2); /* a torn record, as a full disk leaves one */
        (void)w;
        err = ENOSPC;
    }
    while (err == 0 && done < n) {
        ssize_t w = write(a->fd, p + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) err = w < 0 ? errno : ENOSPC;
        if (w > 0) done += (size_t)w;
    }
    if (err == 0) {
        a->end += (off_t)n;
        return 0;
    }
    if (rec_cut(a->fd, a->end) != 0) a->dirty = 1;
    errno = err;
    return -1;
}

/* The limit on what is held back, for messages: "64 MiB". */
static const char *rec_limit(const rec_append *a, char *buf, size_t cap) {
    if (a->max_held >= (1u << 20))
        snprintf(buf, cap, "%zu MiB", a->max_held >> 20);
    else
        snprintf(buf, cap, "%zu bytes", a->max_held);
    return buf;
}

/* A write, or the open before it (what), failed (why): said once per episode. */
static void rec_failed(rec_append *a, const char *what, const char *why) {
    if (a->failing) return;
    char lim[32];
    a->failing = 1, a->dropped = 0, a->written = 0;
    rec_note(a, "%s: %s: %s; %s held back in memory (up to %s) to be written once it can be",
             a->path, what, why,
             a->fd >= 0 ? "cut back to its last whole record, and the records from there on"
                        : "the records",
             rec_limit(a, lim, sizeof lim));
}

/* The open rec_append_reopen asks for, where it is pending: 0 when the file is open. */
static int rec_reopen_try(rec_append *a) {
    if (!a->reopen) return 0;
    int fd = rec_reopen_fault() ? -1 : bt_open_private(a->path, O_WRONLY | O_CREAT | O_APPEND);
    if (fd < 0) return -1;
    a->fd = fd, a->reopen = 0, a->dirty = 0;
    a->end = lseek(fd, 0, SEEK_END);
    if (a->end < 0) a->end = 0;
    return 0;
}

int rec_append_is_open(const rec_append *a) {
    return a->fd >= 0 || a->reopen;
}

/* rec kept after the records held back, or dropped past max_held. */
static int rec_hold(rec_append *a, const void *rec, size_t n, const rec_held *key, bt_diag *diag) {
    if (a->len + n > a->max_held) {
        char lim[32];
        rec_limit(a, lim, sizeof lim);
        if (a->dropped++ == 0)
            rec_note(a,
                     "%s: over %s of records held back: dropping the new ones until it can "
                     "be written",
                     a->path, lim);
        bt_diag_set(diag, "%s: a record dropped (over %s held back)", a->path, lim);
        return BT_EIO;
    }
    if (bt_grow(&a->buf, &a->cap, a->len + n, 1) != 0 ||
        bt_grow(&a->held, &a->cap_held, a->n_held + 1, sizeof *a->held) != 0) {
        bt_diag_set(diag, "%s: out of memory for a record held back", a->path);
        return BT_ENOMEM;
    }
    rec_held *h = &a->held[a->n_held++];
    *h = key ? *key : (rec_held){0};
    h->keyed = key != NULL, h->at = a->len, h->n = n;
    memcpy(a->buf + a->len, rec, n);
    a->len += n;
    return 0;
}

/* The first k held records dropped (written), the rest moved to the front. */
static void rec_drop_first(rec_append *a, size_t k) {
    if (k == 0) return;
    size_t from = k < a->n_held ? a->held[k].at : a->len;
    memmove(a->buf, a->buf + from, a->len - from);
    memmove(a->held, a->held + k, (a->n_held - k) * sizeof *a->held);
    a->n_held -= k, a->len -= from;
    for (size_t i = 0; i < a->n_held; i++)
        a->held[i].at -= from;
}

/* The held records written one at a time, in order, up to the first that fails (only that
 * one cut off again): those written are no longer held, so that a disk regaining part of
 * its space takes what fits. 0 when all are written, else -1 with errno. */
static int rec_put_held(rec_append *a) {
    size_t k = 0;
    int rc = 0;
    while (k < a->n_held && (rc = rec_put(a, a->buf + a->held[k].at, a->held[k].n)) == 0)
        k++;
    int err = errno;
    rec_drop_first(a, k);
    a->written += k;
    errno = err;
    return rc;
}

int rec_append_flush(rec_append *a, bt_diag *diag) {
    if (a->hold) return a->n_held ? BT_EIO : 0;
    if (rec_reopen_try(a) != 0) {
        const char *why = bt_file_why(errno);
        bt_diag_set(diag, "%s: cannot open for appending: %s", a->path, why);
        rec_failed(a, "cannot open for appending", why);
        return a->n_held ? BT_EIO : 0;
    }
    if (a->fd < 0) return a->n_held ? BT_EIO : 0;
    if (a->n_held == 0 && !a->failing) return 0;
    if (rec_put_held(a) != 0) {
        bt_diag_set(diag, "%s: cannot append: %s", a->path, strerror(errno));
        return BT_EIO;
    }
    if (a->failing && a->dropped)
        rec_note(a,
                 "%s: written again: the %llu record(s) held back are in it now; %llu "
                 "dropped meanwhile (over the limit on those held back) are not",
                 a->path, (unsigned long long)a->written, (unsigned long long)a->dropped);
    else if (a->failing)
        rec_note(a, "%s: written again: the %llu record(s) held back are in it now", a->path,
                 (unsigned long long)a->written);
    a->failing = 0, a->dropped = 0, a->written = 0;
    return 0;
}

int rec_append_write(rec_append *a, const void *rec, size_t n, const rec_held *key, bt_diag *diag) {
    if (!rec_append_is_open(a)) {
        bt_diag_set(diag, "%s: not open for appending", a->path);
        return BT_EIO;
    }
    if (a->n_held > 0 || a->hold || a->dirty || a->reopen) rec_append_flush(a, NULL);
    if (a->n_held == 0 && !a->hold && a->fd >= 0) {
        if (rec_put(a, rec, n) == 0) return rec_append_flush(a, diag); /* says a recovery */
        rec_failed(a, "cannot append", strerror(errno));
    }
    return rec_hold(a, rec, n, key, diag);
}

int rec_append_truncate(rec_append *a, off_t at, bt_diag *diag) {
    if (rec_reopen_try(a) != 0 || rec_cut(a->fd, at) != 0 || fsync(a->fd) != 0) {
        bt_diag_set(diag, "%s: cannot cut it to %lld bytes: %s", a->path, (long long)at,
                    strerror(errno));
        return BT_EIO;
    }
    a->end = at, a->dirty = 0;
    return 0;
}

int rec_append_reopen(rec_append *a, bt_diag *diag) {
    if (a->fd >= 0) close(a->fd);
    a->fd = -1, a->reopen = 1;
    if (rec_reopen_try(a) != 0) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", a->path, bt_file_why(errno));
        return BT_EIO;
    }
    return 0;
}

void rec_append_drop_held(rec_append *a, uint32_t stage, uint64_t from) {
    size_t k = 0, len = 0;
    for (size_t i = 0; i < a->n_held; i++) {
        rec_held h = a->held[i];
        if (h.keyed && h.stage == stage && h.step >= from) continue;
        memmove(a->buf + len, a->buf + h.at, h.n);
        h.at = len, len += h.n;
        a->held[k++] = h;
    }
    a->n_held = k, a->len = len;
}

int rec_append_each_held(const rec_append *a, int (*fn)(void *arg, const char *rec, size_t n),
                         void *arg) {
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < a->n_held; i++) {
        char *copy = malloc(a->held[i].n + 1);
        if (copy == NULL) return BT_ENOMEM;
        memcpy(copy, a->buf + a->held[i].at, a->held[i].n);
        copy[a->held[i].n] = '\0';
        rc = fn(arg, copy, a->held[i].n);
        free(copy);
    }
    return rc;
}

void rec_append_close(rec_append *a) {
    if (rec_append_is_open(a)) {
        /* held for a rewrite that never came: written, they would repeat records */
        if (a->n_held > 0 && (a->hold || rec_append_flush(a, NULL) != 0))
            rec_note(a, "%s: %zu record(s) held back could not be written: lost", a->path,
                     a->n_held);
        if (a->fd >= 0) close(a->fd);
    }
    a->fd = -1, a->reopen = 0;
    free(a->buf);
    free(a->held);
    a->buf = NULL, a->held = NULL;
    a->len = a->cap = a->n_held = a->cap_held = 0;
}
