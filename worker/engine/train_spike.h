/* The loss-spike guard of a stage (recipe restart.spike_zscore, 0 = off).
 *
 * It keeps the loss (the dp mean) and the global gradient norm (before clipping) of the
 * last TRAIN_SPIKE_WINDOW steps whose update was applied. Once it holds at least
 * TRAIN_SPIKE_WARMUP of them, a step whose loss or norm exceeds mean + z std of the window
 * is a spike: its update is undone (weights, Adam moments and the optimizer's step count
 * as before the step; the trainer's step still advances, so the data moves on, as for a
 * non-finite norm, while the LR schedule, which follows the updates applied, does not). Both values
 * are reduced over every group before the decision, so every rank decides the same.
 *
 * train_dp_update applies the update as soon as it has the norm, so the guard snapshots
 * the weights and this rank's moments before each armed step and restores them on a
 * spike: backend memory (device memory on a GPU) of one more copy of the parameters and of the
 * optimizer state, allocated at init only when the guard is on.
 *
 * TRAIN_SPIKE_ROLLBACK_AFTER spikes in a row mean the damage is in the data or already in
 * the weights: the worker stops without saving and exits WORKER_EXIT_ROLLBACK, naming the
 * logical global sample window of those steps; the orchestrator rolls back to an earlier
 * checkpoint and skips that window (StageSpec.skip_samples, train_spike_map_sample).
 *
 * Checkpoints keep the window and the current run of spikes (manifest spike_guard,
 * train_spike_to_pb), and a resume of the stage takes them back (train_spike_from_pb), so
 * that its first steps are judged as in the run that never stopped, whatever the layout.
 * A start without them (a checkpoint from before they were saved, another stage's
 * hand-off, an import, a save with the guard off) warms the guard up again.
 *
 * Fault injection (tests only): BATON_FAULT_SPIKE_STEPS=K or K-L multiplies the loss
 * scale of the backward of steps K..L (1-based optimizer steps of the stage) by
 * TRAIN_SPIKE_FAULT_FACTOR, so the gradients and their norm blow up as in a real spike;
 * BATON_FAULT_SPIKE_ATTEMPT=A restricts it to the StageSpec's attempt A. */
#ifndef BATON_TRAIN_SPIKE_H
#define BATON_TRAIN_SPIKE_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.pb-c.h"
#include "optim.h"
#include "spike_guard.h"
#include "stage_spec.pb-c.h"

#define TRAIN_SPIKE_WINDOW         20
#define TRAIN_SPIKE_WARMUP         SPIKE_GUARD_WARMUP /* stages/spike_guard.h */
#define TRAIN_SPIKE_ROLLBACK_AFTER 3
#define TRAIN_SPIKE_FAULT_FACTOR   1000.0f

typedef struct train_spike {
    double z; /* threshold in standard deviations; 0 = off */
    double loss[TRAIN_SPIKE_WINDOW], norm[TRAIN_SPIKE_WINDOW];
    uint32_t n, next; /* samples held; ring position of the next one */
    /* The current run of consecutive spikes. */
    uint32_t run;
    uint64_t run_first_step, run_last_step;    /* 1-based optimizer steps */
    uint64_t run_first_sample, run_end_sample; /* logical global samples [first, end) */
    /* The snapshot taken before an armed step, in the backend's memory (a device copy: one
     * more set of parameters and moments on the GPU, no host transfer per step). */
    backend *be;
    float *params, *m, *v;
    size_t n_params, n_opt;
    uint64_t opt_step;
    /* Fault injection. */
    uint64_t fault_from, fault_to; /* 0: none */
} train_spike;

/* Sets up the guard for z (0: off: nothing is allocated) over n_params parameters and
 * n_opt floats of optimizer state (be's memory), reading the fault hook's variables for
 * spec's attempt. Returns 0 or BT_ENOMEM. */
int train_spike_init(train_spike *s, backend *be, double z, size_t n_params, size_t n_opt,
                     const Baton__StageSpec *spec);
void train_spike_free(train_spike *s);

/* Whether the next step is judged (on and warmed up). */
int train_spike_armed(const train_spike *s);
void train_spike_save(train_spike *s, const float *params, const optim_adamw *o);
void train_spike_restore(const train_spike *s, float *params, optim_adamw *o);

/* Whether (loss, norm) is a spike against the window; *z gets the larger of the two
 * z-scores. */
int train_spike_check(const train_spike *s, double loss, double norm, double *z);
/* Adds an applied step's values to the window (and ends any run of spikes). */
void train_spike_push(train_spike *s, double loss, double norm);
/* Counts a spike at 1-based step `step` over samples [first, end); returns the length of
 * the current run of consecutive spikes. */
uint32_t train_spike_note(train_spike *s, uint64_t step, uint64_t first, uint64_t end);

/* The window, oldest first, into loss[] and norm[] (TRAIN_SPIKE_WINDOW each), and the run
 * of spikes, into out, which points at them: what a checkpoint keeps. 0 (out untouched)
 * when there is nothing to keep: the guard off, or no step applied yet. */
int train_spike_to_pb(const train_spike *s, Baton__SpikeGuardState *out, double *loss,
                      double *norm);
/* Takes back a checkpoint's state (NULL: none saved: the window stays empty). Of a longer
 * window than TRAIN_SPIKE_WINDOW the newest values; a state whose lists differ in length
 * or hold a non-finite value is ignored (nothing the guard ever pushes), and so is a run of
 * TRAIN_SPIKE_ROLLBACK_AFTER spikes or more (never saved: a damaged count). Nothing with
 * the guard off: its window would miss the steps trained meanwhile. */
void train_spike_from_pb(train_spike *s, const Baton__SpikeGuardState *in);
/* Empties the window and ends any run of spikes (the snapshot and fault hook stay). */
void train_spike_forget(train_spike *s);

/* The loss-scale multiplier of the fault hook for 1-based step `step` (1 normally). */
float train_spike_fault_scale(const train_spike *s, uint64_t step);

/* The sample actually read for logical global sample g. skip_samples are in the order the
 * rollbacks recorded them, each in the logical indices of the windows before it; they
 * apply newest first (g += a window's length when g is at or past its start), so a
 * skipped window's samples are never read and every later sample moves past it (none is
 * read twice), whatever the order of the windows. */
uint64_t train_spike_map_sample(const Baton__StageSpec *spec, uint64_t g);

#endif
