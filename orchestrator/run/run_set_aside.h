/* Setting checkpoints aside after loss spikes (run_rollback.c): what a rollback, and the
 * request a stage's rollback limit refuses, do to the run's checkpoint root. */
#ifndef BATON_RUN_SET_ASIDE_H
#define BATON_RUN_SET_ASIDE_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Moves the complete checkpoints under root (ckpt_list) that sort at or after stage's
 * step first (training order, ckpt_name_cmp: by stage and step as numbers, so
 * s00-step100000000 after s00-step99999999) into the directory aside, made (mode 0700)
 * on the first move; its parent must exist. Then removes root/latest, so that the newest
 * checkpoint left predates first. The newest one left into kept ("none" when none is).
 * Returns 0, or BT_EIO / ckpt_list's error with diag set (what was moved stays moved). */
int run_set_aside(const char *root, const char *aside, uint32_t stage, uint64_t first, char *kept,
                  size_t cap, bt_diag *diag);

#endif
