/* An attempt's progress and what its ranks print: every line to the attempt's log file.
 * Progress (step, loss, tokens/s, fp16's loss scale, the count of skipped updates) comes
 * from rank 0's Metrics over the control channel (run_progress_metrics), which arrive
 * whatever becomes of the ranks' stdout (a --worker wrapper may send it to a file); rank
 * 0's step lines on stdout count only until the first Metrics arrive (no control
 * channel, or a rank 0 that could not connect), and a step's Metrics replace the rounded
 * values of its line read before them. Shown on the terminal: a bar redrawn in
 * place on a tty, a plain line every 5% otherwise ("skipped N" once N is not 0, "scale S"
 * for fp16), rank 0's "started from" line and the loss-spike guard's window taken back
 * with it, and the closing validation; stderr lines of any rank shown with the rank,
 * each rank's last one kept (run_words.h).
 * Checkpoint commits come over the control channel too (control_server's on_checkpoint),
 * never from these lines. */
#ifndef BATON_RUN_PROGRESS_H
#define BATON_RUN_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#include "control_server.h"
#include "run_words.h"

typedef struct run_progress {
    FILE *log;
    const char *stage;
    int tty, quiet;
    int metrics;     /* Metrics arrived this attempt: stdout's step lines no longer count */
    int valid_shown; /* the closing validation's line was printed (from either source) */
    /* rank 0's latest step (Metrics, else its step line) */
    int have_step;
    uint64_t step, total;
    double loss, lr, grad_norm, tokens_per_s;
    int step_text;       /* those are from its printed line (rounded): its Metrics replace them */
    double loss_scale;   /* fp16's, after the latest step; 0: not fp16 */
    uint64_t skipped;    /* updates skipped so far (fp16 overflow, loss spike, Inf/NaN) */
    double last_step_at; /* monotonic time of the latest step line */
    uint64_t steps_seen; /* step lines this attempt */
    uint64_t first_step; /* the first of them (steps_seen > 0): a recovery's */
    double first_step_at;
    int bar_open;    /* a progress bar is on the terminal line */
    int no_ckpt;     /* a rank said "no usable checkpoint": it refused every candidate */
    run_words words; /* each rank's last line on stderr, for a failure without a Fatal */
} run_progress;

/* launch_output_cb for launch_opts.on_output; arg is a run_progress. */
void run_progress_line(void *arg, int rank, int stream, const char *line, size_t len);
/* control_metrics_cb for control_server.on_metrics; arg is a run_progress. */
void run_progress_metrics(void *arg, const control_metrics *m, const control_valid *v);
/* Rank 0 stands at step (it resumed there; a heartbeat's): the attempt has done that many
 * steps before its first one of its own (or without one, when step is the stage's last). */
void run_progress_at(run_progress *p, uint64_t step);
/* Ends a bar left on the terminal line. */
void run_progress_end(run_progress *p);

#endif
