/* How a worker joins its job: under a PMIx launcher (baton launch, srun --mpi=pmix,
 * mpirun) it learns its rank from PMIx and connects the world group over Gloo; started
 * by hand it is rank 0 of 1. */
#ifndef BATON_WORKER_RANKS_H
#define BATON_WORKER_RANKS_H

#include "boot.h"
#include "comm.h"

typedef struct worker_ranks {
    int under_pmix; /* boot_init succeeded: finalize at the end */
    boot_info info;
    comm *world;     /* NULL for one process */
    char store[512]; /* rendezvous directory this worker created, to remove; "" if none */
} worker_ranks;

/* Joins the job. timeout_s bounds the rendezvous and every collective. */
int worker_ranks_join(worker_ranks *w, double timeout_s, bt_diag *diag);
/* Leaves: destroys the groups, finalizes PMIx, removes the rendezvous directory. */
void worker_ranks_leave(worker_ranks *w);

#endif
