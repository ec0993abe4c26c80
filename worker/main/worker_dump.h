/* baton-worker --dump-params: the parameters as one process holds them, in the order of
 * the model's tensors, from whatever layout trains them. */
#ifndef BATON_WORKER_DUMP_H
#define BATON_WORKER_DUMP_H

#include "train.h"

/* The one-process parameters, tensor after tensor, into path: every rank takes part (under
 * tp the slices are gathered over the tp group; under pp each stage's tensors are sent to
 * stage 0, which writes them at their places), world rank 0 writes. world: every rank's
 * group (NULL when alone), world_rank: this rank's place in it. 0 when path is NULL. */
int worker_dump_params(trainer *t, comm *world, int world_rank, const char *path, bt_diag *diag);

#endif
