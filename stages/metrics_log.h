/* A stage attempt's metrics log, RUN_DIR/logs/sNN-aMM.metrics: every Metrics message
 * (schema/control.proto) rank 0 sends over the control channel, appended by the worker
 * itself before it sends it, so that a record `baton run` never received (it was stopped,
 * starved or killed while the worker went on training and checkpointing) is still in the
 * run directory. Before a checkpoint is committed the log is synced (fdatasync): every
 * step up to a committed checkpoint is on disk in the log. `baton run` takes the records
 * metrics.jsonl lacks from it (orchestrator/control/control_replay.c).
 *
 * Format: records one after the other, each a little-endian uint32 length n, the
 * little-endian uint32 CRC32C of the n bytes, and the n bytes of a serialized
 * baton.Metrics. A torn last record (the worker killed mid-append) is where reading
 * stops. The writer holds an open-file-description write lock on the file while it runs;
 * a reader waits for it, so that it reads only a log no live worker still appends to. */
#ifndef BATON_METRICS_LOG_H
#define BATON_METRICS_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "util/err.h"

#define METRICS_LOG_MAX_RECORD (1u << 20) /* bytes; a longer length is damage */

typedef struct metrics_log {
    int fd; /* -1: not open (or given up after a torn record it could not cut off) */
    char path[4200];
    uint64_t size; /* bytes of the whole records appended */
} metrics_log;

/* RUN_DIR/logs/sNN-aMM.metrics into out. */
void metrics_log_path(const char *run_dir, uint32_t stage, uint32_t attempt, char *out, size_t cap);

/* Creates (truncating) path and takes its write lock. BT_EIO with diag on failure. */
int metrics_log_open(metrics_log *l, const char *path, bt_diag *diag);
/* Appends m as one record (one write). BT_EIO with diag (naming the error) on failure;
 * a record written in part (a full disk) is cut off again (ftruncate), so that later
 * records stay readable, or where that fails the log appends nothing more. */
int metrics_log_append(metrics_log *l, const Baton__Metrics *m, bt_diag *diag);
/* fdatasync: the records appended so far survive a crash of the machine. */
int metrics_log_sync(metrics_log *l, bt_diag *diag);
void metrics_log_close(metrics_log *l);

typedef int (*metrics_log_fn)(void *arg, const Baton__Metrics *m);

/* Calls fn with each whole record of path, in order, stopping at a torn or damaged one
 * (or at fn's nonzero return, which it returns). First waits up to wait_s seconds for a
 * live writer's lock (*busy set when one still held it then; read all the same). A
 * missing file has no records. BT_EIO with diag when it cannot be read; fn's own failure
 * is returned as it is, with whatever fn said in its diag. */
int metrics_log_read(const char *path, double wait_s, int *busy, metrics_log_fn fn, void *arg,
                     bt_diag *diag);

#endif
