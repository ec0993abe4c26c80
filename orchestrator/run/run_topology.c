#include "run_topology.h"

#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "plan.h"

static const char *topo_host(const control_server *cs, uint32_t r) {
    return r < cs->world && cs->ranks[r].host[0] ? cs->ranks[r].host : "?";
}

/* "tp group [0 1]: node0 node0" for every group of dim (each listed once). */
static int topo_dim(const layout *l, enum layout_dim dim, const control_server *cs, bt_buf *out,
                    run_topology *t) {
    uint32_t *g = calloc(l->size[dim] ? l->size[dim] : 1, sizeof *g);
    if (g == NULL) return BT_ENOMEM;
    int hungry = dim == LAYOUT_TP || dim == LAYOUT_CP || dim == LAYOUT_EP;
    for (uint32_t r = 0; r < l->world; r++) {
        uint32_t n = layout_group(l, dim, r, g), first = g[0];
        for (uint32_t k = 1; k < n; k++)
            first = g[k] < first ? g[k] : first;
        if (first != r) continue; /* list each group once, from its lowest rank */
        int cross = 0;
        bt_buf_printf(out, "  %s group [", layout_dim_name(dim));
        for (uint32_t k = 0; k < n; k++)
            bt_buf_printf(out, "%s%u", k ? " " : "", g[k]);
        bt_buf_printf(out, "]:");
        for (uint32_t k = 0; k < n; k++) {
            bt_buf_printf(out, " %s", topo_host(cs, g[k]));
            cross |= strcmp(topo_host(cs, g[k]), topo_host(cs, g[0])) != 0;
        }
        int planned = layout_group_crosses_nodes(l, dim, r);
        if (cross && hungry) {
            t->hungry_crossing++;
            bt_buf_printf(out, "  <- spans hosts%s",
                          planned ? " (as the plan's layout puts it)" : "");
        }
        bt_buf_printf(out, "\n");
    }
    free(g);
    return 0;
}

/* Ranks whose host differs from the host of the first rank of their planned node, or
 * shares a host with another planned node. */
static void topo_placement(const layout *l, const control_server *cs, bt_buf *out,
                           run_topology *t) {
    for (uint32_t r = 0; r < l->world; r++) {
        uint32_t node = layout_node_of(l, r), lead = node * l->gpus_per_node;
        int bad = strcmp(topo_host(cs, r), topo_host(cs, lead)) != 0;
        for (uint32_t o = 0; !bad && o < l->world; o += l->gpus_per_node)
            bad = o != lead && strcmp(topo_host(cs, o), topo_host(cs, r)) == 0;
        if (!bad) continue;
        t->misplaced++;
        bt_buf_printf(out, "  rank %u landed on %s, the plan put it on node %u\n", r,
                      topo_host(cs, r), node);
    }
}

int run_topology_check(const Baton__StageSpec *spec, const control_server *cs, bt_buf *out,
                       run_topology *t, bt_diag *diag) {
    const Baton__Parallel *p = spec->stage->parallel;
    uint32_t gpn = spec->cluster && spec->cluster->gpus_per_node ? spec->cluster->gpus_per_node : 1;
    layout l;
    memset(t, 0, sizeof *t);
    const Baton__Moe *moe = spec->model ? spec->model->moe : NULL;
    int rc = layout_init(&l, p->tp, p->cp, p->dp, p->pp, p->ep ? p->ep : 1,
                         plan_parallel_folds_experts(p, moe), p->order, gpn, diag);
    static const enum layout_dim dims[] = {LAYOUT_TP, LAYOUT_CP, LAYOUT_EP, LAYOUT_DP, LAYOUT_PP};
    for (size_t i = 0; rc == 0 && i < sizeof dims / sizeof dims[0]; i++)
        if (l.size[dims[i]] > 1) rc = topo_dim(&l, dims[i], cs, out, t);
    if (rc == 0 && l.world == 1) /* no group to list: where the one rank is */
        bt_buf_printf(out, "  rank 0: %s (the only rank: no tp, cp, ep, dp or pp group)\n",
                      topo_host(cs, 0));
    if (rc == 0) topo_placement(&l, cs, out, t);
    return rc;
}
