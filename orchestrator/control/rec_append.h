/* Appending records to a file whole or not at all: metrics.jsonl, valid.jsonl and a
 * TensorBoard event file (control_metrics.h, tb_writer.h).
 *
 * A record goes out with write(2) on an O_APPEND descriptor. One not written whole (a
 * full disk: ENOSPC, EDQUOT; an I/O error) is cut off again, the file truncated back to
 * the end of the last whole record, so that no reader meets a torn record in the middle
 * of the file (a JSON-lines reader stops or skips there, TensorBoard's takes it for the
 * end). The record is then held back in memory, and so is every one after it while any
 * is held: each later append first writes those held back, in order, one record at a
 * time up to the first that fails (cut off again, it and those after it still held). A
 * disk full for a moment thus loses nothing, and one regaining its space a little at a
 * time takes the records as they fit. At most
 * REC_APPEND_MAX_HELD bytes are held back (max_held); a record past that is dropped, and
 * counted.
 *
 * What a user must know goes to the note callback (set by the caller; NULL: nothing
 * said), once per episode: the first failure, naming the file and the error; the first
 * record dropped; the recovery, with how many records were held back (and dropped); at
 * close, records that could never be written.
 *
 * A record may carry a key (a stage index and a step) by which held records are dropped
 * (rec_append_drop_held): a rewind of metrics.jsonl drops those it repeats. */
#ifndef BATON_REC_APPEND_H
#define BATON_REC_APPEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

#define REC_APPEND_MAX_HELD (64u << 20)

typedef void (*rec_note_fn)(void *arg, const char *msg);

/* A record held back: its key and its bytes in rec_append.buf. */
typedef struct rec_held {
    int keyed;
    uint32_t stage;
    uint64_t step;
    size_t at, n;
} rec_held;

typedef struct rec_append {
    int fd;     /* -1: closed, or to be opened again (reopen) */
    int reopen; /* path is to be opened again (a new file was renamed over it, and opening it
                 * failed): no record goes to the old, unlinked file; each later write or
                 * flush tries again, the records held back meanwhile */
    char path[4096];
    off_t end;    /* where the last whole record ends */
    int dirty;    /* bytes past end may be there (a cut that failed): cut before any write */
    int hold;     /* hold every record back (the caller's rewrite of the file is pending) */
    uint8_t *buf; /* the held records' bytes, in order */
    size_t len, cap;
    rec_held *held;
    size_t n_held, cap_held;
    size_t max_held;  /* REC_APPEND_MAX_HELD unless the caller sets another */
    int failing;      /* an episode of failed writes is going on (said) */
    uint64_t dropped; /* records dropped in this episode */
    uint64_t written; /* held records written in this episode (flushes that got part way) */
    rec_note_fn note;
    void *note_arg;
} rec_append;

/* Opens path for appending, created 0600 (flags: 0, or O_EXCL for a new file only). */
int rec_append_open(rec_append *a, const char *path, int flags, bt_diag *diag);

/* Whether the file is open for appending, or is to be opened again (rec_append_reopen). */
int rec_append_is_open(const rec_append *a);

/* Appends the record rec (n bytes; key NULL or {stage, step}): 0 when written or held
 * back; BT_EIO when dropped (over max_held) or the file is not open, BT_ENOMEM, diag
 * saying so. */
int rec_append_write(rec_append *a, const void *rec, size_t n, const rec_held *key, bt_diag *diag);

/* Writes what is held back: 0 when nothing is held back any more. */
int rec_append_flush(rec_append *a, bt_diag *diag);

/* The file cut in place to its first at bytes (whole records) and synced. */
int rec_append_truncate(rec_append *a, off_t at, bt_diag *diag);

/* path opened again (a new file renamed over it): appends go to that one. The old
 * descriptor is closed first, so that where the open fails (EMFILE) nothing is appended to
 * the old file, which no name reaches any more: the records are held back and the open
 * tried again before each later write (reopen). */
int rec_append_reopen(rec_append *a, bt_diag *diag);

/* Drops the held records keyed with stage `stage` and a step of `from` or later. */
void rec_append_drop_held(rec_append *a, uint32_t stage, uint64_t from);

/* Calls fn with each held record (a JSON line: NUL-terminated copy) until it returns
 * nonzero. */
int rec_append_each_held(const rec_append *a, int (*fn)(void *arg, const char *rec, size_t n),
                         void *arg);

/* Tries once more to write what is held back, says what is lost, closes. */
void rec_append_close(rec_append *a);

/* Test hook: BATON_FAULT_METRICS_ENOSPC=N or N-M makes the metrics writes of this process
 * numbered N to M (from 1; one: an append, the writing of a record held back, or a
 * rewrite of metrics.jsonl or valid.jsonl) fail with ENOSPC, an append after writing
 * half its bytes (a short write, as on a full disk). 1: this write fails (errno ENOSPC).
 * BATON_FAULT_METRICS_REOPEN=N or N-M alike fails the opens again (rec_append_reopen and
 * its later tries) numbered N to M with EMFILE, and BATON_FAULT_METRICS_CUT=N or N-M the
 * cuts in place (ftruncate) numbered N to M with EIO. */
int rec_append_fault(void);

#endif
