/* The nodes a run may use: the cluster's `nodes`, then its `spare_nodes`, named node0,
 * node1, ... in that order. A node that is lost is excluded for the rest of the run
 * (journaled, so a restarted `baton run` excludes it too). Each attempt takes the first
 * nodes still usable — a spare replaces a lost node and the layout stays — and when too
 * few are left, data parallelism shrinks so that the layout fits them, keeping the global
 * batch (more gradient accumulation per rank); when that is impossible the run stops.
 *
 * Locally the nodes are the launcher's virtual nodes: an attempt's ranks run on virtual
 * nodes 0..k-1, which stand for the logical nodes listed in `active`. */
#ifndef BATON_RUN_NODES_H
#define BATON_RUN_NODES_H

#include <stddef.h>
#include <stdint.h>

#include "recipe.h"
#include "stage_spec.pb-c.h"
#include "util/err.h"

#define RUN_MAX_NODES RECIPE_RUN_MAX_NODES /* nodes + spares; validation refuses more */

typedef struct run_nodes {
    uint32_t planned, total, gpn; /* cluster nodes, nodes + spares, devices per node */
    unsigned char excluded[RUN_MAX_NODES];
    uint32_t active[RUN_MAX_NODES]; /* this attempt's nodes (logical indexes) */
    uint32_t n_active;
} run_nodes;

/* The cluster's nodes and spares. BT_EINVAL with a message when there are more than
 * RUN_MAX_NODES (recipe_validate_run refuses such a recipe first): never fewer taken than
 * the recipe asks for, which the first attempt would read as nodes lost. */
int run_nodes_init(run_nodes *n, const Baton__Cluster *c, bt_diag *diag);
/* Excludes "node<K>"; returns 0, or -1 for a name that is not one of ours. */
int run_nodes_exclude(run_nodes *n, const char *name);
/* Chooses the attempt's nodes for spec (its cluster and parallel.dp are rewritten when
 * data parallelism must shrink). note gets what changed ("" when nothing did).
 * BT_EINVAL with a message when the layout cannot fit the nodes left. */
int run_nodes_plan(run_nodes *n, Baton__StageSpec *spec, char *note, size_t cap, bt_diag *diag);
/* The logical name of the attempt's virtual node k. */
void run_nodes_name(const run_nodes *n, int k, char *out, size_t cap);

#endif
