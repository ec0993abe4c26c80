/* metrics.jsonl and valid.jsonl as the sink writes them (control_metrics.h): appended
 * whole lines (rec_append.h) and rewound, the lines of a stage from a step on dropped.
 *
 * A rewind drops the lines it cuts from the records held back in memory, then from the
 * file: where they are the file's last lines (always, but in a file edited by hand or
 * written by another recipe), the file is cut in place (ftruncate, fsync), which needs no
 * room on the disk; else it is written without them to a temp file, synced and renamed
 * over it. Either way a reader sees the old file or the new one. A rewrite that fails
 * (a full disk) is no append of the repeated records after the stale ones: the cut is
 * kept, every record held back in memory meanwhile, and the rewrite tried again before
 * each later write (control_jsonl_retry), said once when it fails and when it is done. */
#ifndef BATON_CONTROL_JSONL_H
#define BATON_CONTROL_JSONL_H

#include <stdint.h>
#include <stdio.h>

#include "rec_append.h"
#include "util/err.h"

/* The lines a rewind drops: those of stage `stage` from step `from` on. A line without a
 * stage index and step is not ours to judge: kept. */
typedef struct control_jsonl_cut {
    uint32_t stage;
    uint64_t from;
} control_jsonl_cut;

#define CONTROL_JSONL_MAX_CUTS 8

typedef struct control_jsonl {
    rec_append a; /* fd -1: not writing */
    /* rewinds not done yet (their rewrite failed): a.hold is set while there are any */
    control_jsonl_cut cuts[CONTROL_JSONL_MAX_CUTS];
    size_t n_cuts;
    /* set by the caller: a rewind rewrites (a new file renamed over the old one, which a
     * reader holding it open still reads whole), never cuts in place */
    int no_cut;
} control_jsonl;

/* Called with each line a scan keeps (the file's, then those held back), with its stage
 * index and step when it has them (has). */
typedef void (*control_jsonl_keep_fn)(void *arg, const char *line, int has, uint64_t stage,
                                      uint64_t step);

/* Reads path's whole lines (and the records held back, unless j is NULL), each one to
 * keep; *torn: the file ends in a line without its newline (a writer killed mid-line). */
int control_jsonl_read(const control_jsonl *j, const char *path, int *torn,
                       control_jsonl_keep_fn keep, void *arg, bt_diag *diag);

/* Drops the lines cut drops (cut NULL: none, only a torn last line), as said above; keep
 * gets every line kept. 0 also when the rewrite is left pending (said by j->a's note). */
int control_jsonl_rewind(control_jsonl *j, const char *path, const control_jsonl_cut *cut,
                         control_jsonl_keep_fn keep, void *arg, bt_diag *diag);

/* A torn last line (a writer killed mid-line) cut off the file just opened: now, or,
 * where that fails, before the next write (rec_append.dirty; a cut that fails then is
 * said by j->a's note and the records held back meanwhile). Never holds records back by
 * itself. An error only where path cannot be read. */
int control_jsonl_cut_torn(control_jsonl *j, const char *path, bt_diag *diag);

/* The pending rewrite tried again, if there is one: 0 when none is left. keep as above
 * (called only when a rewrite is done). */
int control_jsonl_retry(control_jsonl *j, const char *path, control_jsonl_keep_fn keep, void *arg,
                        bt_diag *diag);

#endif
