/* Worker bootstrap: who am I, and a rendezvous with the other ranks, through PMIx.
 *
 * The worker is a plain PMIx client, so the same binary runs under `baton launch`,
 * `srun --mpi=pmix` and `mpirun`. Everything that can wait on a peer takes a timeout
 * and returns an error instead of hanging when a peer is dead or stuck.
 *
 * Blobs are how ranks exchange small bootstrap data (an NCCL unique id, a Gloo
 * address): put and commit your own, fence, then get any rank's. Keys live in baton's
 * own space ("baton.<key>"), apart from PMIx's reserved "pmix.*" keys.
 *
 * PMIx is process-global: boot_init once per process, boot_finalize at the end. */
#ifndef BATON_BOOT_H
#define BATON_BOOT_H

#include <stddef.h>

#include "util/err.h"

typedef struct boot_info {
    int rank, size;             /* in the job (PMIx namespace) */
    int local_rank, local_size; /* on this node */
    int node_rank;              /* on this node, across jobs */
    int node_id, num_nodes;
    char hostname[256]; /* the node's name as the launcher assigned it */
    char nspace[256];   /* the PMIx namespace: one per job attempt */
} boot_info;

/* PMIx_Init and the job's facts. BT_EIO (with the PMIx status in diag) when this
 * process was not started by a PMIx launcher or the server is unreachable. */
int boot_init(boot_info *info, bt_diag *diag);
/* The host the launcher placed rank of this job on (PMIX_HOSTNAME); -1 if unknown. */
int boot_hostname_of(const boot_info *info, int rank, char *out, size_t cap);

/* Publishes len bytes under key, visible to every rank after boot_commit + a fence. */
int boot_put_blob(const boot_info *info, const char *key, const void *data, size_t len,
                  bt_diag *diag);
int boot_commit(bt_diag *diag);

/* Barrier over all ranks that also exchanges committed blobs. BT_EIO when it times out
 * after timeout_s seconds (> 0; rounded up to whole seconds, PMIx's unit) or a peer
 * is gone; never waits longer. */
int boot_fence(const boot_info *info, double timeout_s, bt_diag *diag);

/* Copies rank's blob under key into buf (cap bytes) and its length into *len.
 * BT_ENOENT when rank has no such blob, BT_ERANGE (with *len set) when cap is too
 * small, BT_EIO on timeout (timeout_s as for boot_fence) or a lost peer. */
int boot_get_blob(const boot_info *info, int rank, const char *key, void *buf, size_t cap,
                  size_t *len, double timeout_s, bt_diag *diag);

/* Asks the launcher to abort the whole job with status and msg; returns once the
 * launcher has it (the caller then exits, e.g. with status). */
int boot_abort(int status, const char *msg, bt_diag *diag);

int boot_finalize(bt_diag *diag);

#endif
