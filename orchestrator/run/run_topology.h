/* The topology check of an attempt: once every rank has said hello on the control
 * channel (naming the host the launcher placed it on), each TP, CP, EP, DP and PP group
 * is listed with the hosts its members landed on and compared with the plan (ranks
 * node-major, gpus_per_node per node). A bandwidth-hungry group (TP, CP, EP) spread over
 * several hosts is a warning — with cluster.strict_topology, a configuration error — and
 * so is a rank on another host than the plan put it. */
#ifndef BATON_RUN_TOPOLOGY_H
#define BATON_RUN_TOPOLOGY_H

#include "control_server.h"
#include "stage_spec.pb-c.h"
#include "util/buf.h"

typedef struct run_topology {
    int hungry_crossing; /* TP/CP/EP groups spread over several hosts */
    int misplaced;       /* ranks on another host than the plan's node */
} run_topology;

/* Writes the report (one line per group, or for a single rank its host, then the
 * verdict) into out; 0 or BT_EINVAL when the layout cannot be built. */
int run_topology_check(const Baton__StageSpec *spec, const control_server *cs, bt_buf *out,
                       run_topology *t, bt_diag *diag);

#endif
