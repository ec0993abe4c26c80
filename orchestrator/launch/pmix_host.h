/* The embedded PMIx server, as launch.c sees it (internal to the launch module).
 *
 * PMIx calls the server module's callbacks from its own progress thread with no
 * user pointer, so pmix_host.c keeps the one static pointer to the running
 * launch_server; everything those callbacks share with the stepping thread is guarded
 * by launch_server.mu, and they wake the stepping thread through launch_server.wake. */
#ifndef BATON_LAUNCH_PMIX_HOST_H
#define BATON_LAUNCH_PMIX_HOST_H

#include <stddef.h>

#include "launch.h"

/* Where each rank of a namespace runs: block distribution over nnodes virtual nodes
 * (the first nprocs % nnodes nodes get one rank more). */
int pmixhost_node_of(int rank, int nprocs, int nnodes);
int pmixhost_node_first(int node, int nprocs, int nnodes);
int pmixhost_node_size(int node, int nprocs, int nnodes);

int pmixhost_init(launch_server *srv, bt_diag *diag);
void pmixhost_close(launch_server *srv);

/* Registers namespace `name` (nprocs ranks over nnodes virtual nodes) and its job, node
 * and process info, and links *out into srv. */
int pmixhost_ns_register(launch_server *srv, const char *name, int nprocs, int nnodes,
                         struct pmixhost_ns **out, bt_diag *diag);
/* Unlinks and deregisters the namespace, answers its parked fences, frees it. */
void pmixhost_ns_deregister(launch_server *srv, struct pmixhost_ns *ns);

/* Registers the client and returns in *env (a malloc'd NULL-terminated array of
 * malloc'd strings, to be freed with pmixhost_env_free) the environment it must be
 * started with: `base` without any inherited PMIX_* variable other than PMIX_MCA_*,
 * plus PMIx's own variables and PMIX_HOSTNAME of its virtual node. */
int pmixhost_client_setup(launch_server *srv, struct pmixhost_ns *ns, int rank, char *const *base,
                          char ***env, bt_diag *diag);
void pmixhost_env_free(char **env);

/* The launcher reaped this rank: fences that need it can no longer complete. */
void pmixhost_ns_mark_terminated(launch_server *srv, struct pmixhost_ns *ns, int rank);

/* Copies the per-rank PMIx state (finalized, aborted + status + message) into r. */
void pmixhost_ns_rank_state(launch_server *srv, struct pmixhost_ns *ns, launch_rank *r);

/* The first rank that called PMIx_Abort and has not been reported yet, or -1. */
int pmixhost_ns_take_abort(launch_server *srv, struct pmixhost_ns *ns);

/* Drains the wake pipe and answers parked fences that are due: an error at once if a
 * participant is gone, success once the grace period has passed. Returns the
 * milliseconds until the next fence is due, or -1 if none is parked. */
int pmixhost_progress(launch_server *srv, double now);

#endif
