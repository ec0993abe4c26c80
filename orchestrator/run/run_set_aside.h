/* Setting checkpoints aside after loss spikes (run_rollback.c): what a rollback, and the
 * request a stage's rollback limit refuses, do to the run's checkpoint root. */
#ifndef BATON_RUN_SET_ASIDE_H
#define BATON_RUN_SET_ASIDE_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.pb-c.h"
#include "util/err.h"

/* Moves the complete checkpoints under root (ckpt_list) that sort at or after stage's
 * step first (training order, ckpt_name_cmp: by stage and step as numbers, so
 * s00-step100000000 after s00-step99999999) into the directory aside, made (mode 0700)
 * on the first move; its parent must exist. Then removes root/latest, so that the newest
 * checkpoint left predates first. The newest one left into kept ("none" when none is).
 * Returns 0, or BT_EIO / ckpt_list's error with diag set (what was moved stays moved). */
int run_set_aside(const char *root, const char *aside, uint32_t stage, uint64_t first, char *kept,
                  size_t cap, bt_diag *diag);

/* The step from which the request a stage's rollback limit refuses, for spikes from step
 * first on, sets the checkpoints aside, by the newest one of the stage left before first
 * (at step kept_step, with the loss-spike guard's window g: NULL when it saved none or is
 * not the stage's own). When g (lists of one length, every value finite, as the worker
 * takes it back) holds at least one step and, with the steps between kept_step and first,
 * SPIKE_GUARD_WARMUP of them, a resume from it meets the spikes armed: first itself.
 * Otherwise SPIKE_GUARD_WARMUP steps before first (at least 1), so that a resume starts
 * early enough to warm the guard up before them (provided those steps are applied). */
uint64_t run_set_aside_refused_from(const Baton__SpikeGuardState *g, uint64_t kept_step,
                                    uint64_t first);

#endif
