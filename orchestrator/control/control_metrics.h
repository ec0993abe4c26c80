/* Where rank 0's training metrics go: RUN_DIR/metrics.jsonl and TensorBoard.
 *
 * metrics.jsonl: one JSON object per line, appended and flushed per line:
 *   {"time": unix seconds, "stage": name, "stage_index", "attempt", "step", "global_step",
 *    "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory_bytes", "step_time_s",
 *    "skipped_steps", and for fp16 "loss_scale", "overflow"}
 * (a non-finite number is written as null). TensorBoard: scalars train/loss, train/lr,
 * train/grad_norm, train/tokens_per_s, train/step_time_s, train/skipped_steps (and for
 * fp16 train/loss_scale and train/overflow, 1 for a step skipped on Inf/NaN gradients)
 * at global_step.
 *
 * global_step = step_offset + step, where the caller's step_offset is the sum of the
 * steps of the recipe's stages before this one (for a completed stage, those it completed
 * with): the stages follow each other on one x axis.
 *
 * Each step of a stage is in metrics.jsonl once. A record of a stage whose step is not
 * past the largest the file holds of that stage (an attempt resumed from a checkpoint at
 * step S repeats S + 1 ...) first rewrites the file without that stage's records of that
 * step and later ones (a temp file, fsync, rename: a reader sees the old file or the new
 * one; where the dropped records end the file, as they do, it is cut in place instead,
 * which needs no room: control_jsonl.h), and writes TensorBoard's restart marker at its global step
 * (tb_writer_session_start), so TensorBoard drops the stale events too. Records are told
 * apart by stage index and step, never by global_step: the records of the other stages
 * stay whatever their global steps (a recipe edited since may count them otherwise), and
 * a step past the stage's own is no restart, whatever its global step. The "attempt"
 * field tells which attempt wrote a record.
 *
 * RUN_DIR/valid.jsonl: one line per stage's closing validation,
 *   {"time", "stage", "stage_index", "attempt", "step", "global_step", "valid_loss",
 *    "bits_per_token", "windows"}
 * and the TensorBoard scalar valid/loss at global_step. A stage completed again (a resume
 * that trains no step evaluates the same checkpoint on the same windows) adds nothing: a
 * (stage_index, step) the file holds is not written twice. A repeated step drops the
 * stage's lines of it and later steps here too (the same rewrite), as a torn last line
 * is dropped on open.
 *
 * A full disk: every record of the three files is written whole or not at all, and one
 * that cannot be written is held back in memory, with the ones after it, and written
 * with the next record that can be (rec_append.h); a rewind that cannot be done holds
 * the records back until it can (control_jsonl.h). Each file says so once through the
 * note callback (control_metrics_set_note), and again when it is written again. */
#ifndef BATON_CONTROL_METRICS_H
#define BATON_CONTROL_METRICS_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "control_jsonl.h"
#include "tb_writer.h"
#include "util/err.h"

typedef struct control_metrics {
    uint32_t rank;
    uint64_t step; /* optimizer steps taken in the stage */
    double loss, grad_norm, lr, tokens_per_s, mfu, step_time_s;
    uint64_t memory_bytes;
    uint64_t skipped_steps; /* updates skipped so far in the stage (overflow, loss spike) */
    double loss_scale;      /* fp16's dynamic loss scale after the step; 0: not fp16 */
    int overflow;           /* fp16: the step's gradients held Inf/NaN (skipped) */
    int moe_experts;        /* MoE: experts of moe_expert_load; 0: a dense model */
    double moe_load_max_mean, moe_dropped, moe_aux_loss; /* MoE (control.proto) */
    float moe_expert_load[512]; /* each expert's load / the mean (PLAN_MAX_EXPERTS of them) */
    double time;                /* unix seconds when the orchestrator received it */
} control_metrics;

/* Which stage attempt the metrics belong to. */
typedef struct control_metrics_where {
    const char *stage_name;
    uint32_t stage_index, attempt;
    uint64_t step_offset;
} control_metrics_where;

/* A stage's records in metrics.jsonl: its index and the largest step of them. */
typedef struct control_metrics_held {
    uint32_t stage;
    uint64_t step;
} control_metrics_held;

typedef struct control_metrics_sink {
    control_jsonl jsonl; /* metrics.jsonl; its fd -1: not writing */
    char jsonl_path[4096];
    tb_writer tb;
    /* per stage index metrics.jsonl holds records of, the largest step among them: what
     * a repeated step is judged by (a stage's own steps, never global steps, which a
     * recipe edited since would count otherwise) */
    control_metrics_held *held;
    size_t n_held, cap_held;
    int have_last;                     /* metrics.jsonl's last record is of ... */
    uint32_t last_stage, last_attempt; /* ... this stage index and attempt, */
    uint64_t last_step;                /* ... and this step of it */
    unsigned rewinds;                  /* times records were dropped for a repeated step */
    control_jsonl valid;               /* valid.jsonl, appended */
    char valid_path[4096];
    uint64_t *valid_seen; /* n_valid_seen (stage_index, step) pairs it holds */
    size_t n_valid_seen, cap_valid_seen;
} control_metrics_sink;

/* Opens RUN_DIR/metrics.jsonl for appending (reading the global steps it holds, and
 * dropping a torn last line a killed writer left) and a new event file in RUN_DIR/tb/.
 * run_dir NULL or "": the sink writes nothing. */
int control_metrics_open(control_metrics_sink *s, const char *run_dir, bt_diag *diag);
/* Where the sink's notes go (a full disk, the recovery): NULL, nowhere. */
void control_metrics_set_note(control_metrics_sink *s, rec_note_fn note, void *arg);
/* Tries to write what is held back (a rewind pending first): 0 when nothing is. */
int control_metrics_flush(control_metrics_sink *s);
/* Appends m to both files (after dropping the records m repeats, see above). */
int control_metrics_write(control_metrics_sink *s, const control_metrics_where *w,
                          const control_metrics *m, bt_diag *diag);
/* A stage's closing validation: loss (nats per token) over windows windows after the
 * stage's step `step`, into valid.jsonl and TensorBoard (unless already there, above). */
int control_metrics_write_valid(control_metrics_sink *s, const control_metrics_where *w,
                                uint64_t step, double loss, uint32_t windows, double time,
                                bt_diag *diag);
/* Read back (control_metrics_read.c). */
/* The steps of stage stage_index's attempt `attempt` that metrics.jsonl holds, in its
 * order (ascending: the file is in global-step order), into *steps (free it); none when
 * there is no file. */
int control_metrics_attempt_steps(const control_metrics_sink *s, uint32_t stage_index,
                                  uint32_t attempt, uint64_t **steps, size_t *n, bt_diag *diag);
/* Records of metrics.jsonl kept by their places, not read whole (an attempt's steps may
 * be many): each one's step and where its line starts, ascending by step, and the file as
 * it was read, held open (a rewind renames a new metrics.jsonl over it: this one still
 * reads the old lines). */
typedef struct control_metrics_at {
    uint64_t step;
    off_t at;
} control_metrics_at;

typedef struct control_metrics_kept {
    FILE *f;
    const char *path; /* the sink's jsonl_path, for messages */
    control_metrics_at *rec;
    size_t n, cap;
    char *line; /* control_metrics_kept_read's */
    size_t line_cap;
} control_metrics_kept;

/* The records of that attempt that metrics.jsonl holds at the steps of want (n_want of
 * them, ascending) into *out (control_metrics_kept_free it), one per step: where the file
 * holds a step twice (edited), its last line. */
int control_metrics_attempt_records(const control_metrics_sink *s, uint32_t stage_index,
                                    uint32_t attempt, const uint64_t *want, size_t n_want,
                                    control_metrics_kept *out, bt_diag *diag);
/* Record i of k read back into m as written (a null read as NaN; the time as written, to
 * the microsecond). */
int control_metrics_kept_read(control_metrics_kept *k, size_t i, control_metrics *m, bt_diag *diag);
void control_metrics_kept_free(control_metrics_kept *k);

/* One line of valid.jsonl. */
typedef struct control_metrics_valid {
    uint32_t attempt;
    uint64_t step; /* of the stage */
    double loss, time;
    uint32_t windows;
} control_metrics_valid;

/* The lines of valid.jsonl of stage stage_index whose step is at least `from`, into
 * *out (free it), *n of them. */
int control_metrics_valid_since(const control_metrics_sink *s, uint32_t stage_index, uint64_t from,
                                control_metrics_valid **out, size_t *n, bt_diag *diag);
/* Whether a record of stage stage_index's step `step` is not past what metrics.jsonl
 * holds: the file holds a record of the stage at that step or a later one, or one of a
 * later stage. */
int control_metrics_past(const control_metrics_sink *s, uint32_t stage_index, uint64_t step);
void control_metrics_close(control_metrics_sink *s);

#endif
