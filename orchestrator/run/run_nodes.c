#include "run_nodes.h"

#include <stdio.h>
#include <string.h>

#include "plan.h"

#define PLURAL(n) ((n) == 1 ? "" : "s") /* "1 node", "2 nodes" */

int run_nodes_init(run_nodes *n, const Baton__Cluster *c, bt_diag *diag) {
    memset(n, 0, sizeof *n);
    n->planned = c && c->nodes ? c->nodes : 1;
    n->gpn = c && c->gpus_per_node ? c->gpus_per_node : 1;
    uint64_t total = (uint64_t)n->planned + (c ? c->spare_nodes : 0);
    if (total <= RUN_MAX_NODES) {
        n->total = (uint32_t)total;
        return 0;
    }
    bt_diag_set(diag, "the cluster has %llu nodes (nodes + spare_nodes); a run takes at most %u",
                (unsigned long long)total, RUN_MAX_NODES);
    n->planned = n->total = 0; /* nothing to run on */
    return BT_EINVAL;
}

int run_nodes_exclude(run_nodes *n, const char *name) {
    unsigned k;
    int end = 0;
    if (sscanf(name, "node%u%n", &k, &end) != 1 || name[end] != '\0' || k >= n->total) return -1;
    n->excluded[k] = 1;
    return 0;
}

void run_nodes_name(const run_nodes *n, int k, char *out, size_t cap) {
    snprintf(out, cap, "node%u", k >= 0 && (uint32_t)k < n->n_active ? n->active[k] : 0u);
}

static uint32_t nodes_usable(const run_nodes *n, uint32_t *list) {
    uint32_t m = 0;
    for (uint32_t k = 0; k < n->total; k++)
        if (!n->excluded[k]) list[m++] = k;
    return m;
}

/* The largest dp <= limit that keeps the global batch whole and the experts divisible:
 * ep divides dp x cp, or tp x dp x cp when the tp ranks fold into the experts'
 * parallelism (stages/layout.h). */
static uint32_t nodes_shrunk_dp(const Baton__StageSpec *s, uint32_t limit) {
    const Baton__Parallel *p = s->stage->parallel;
    uint32_t ep = p->ep ? p->ep : 1;
    uint64_t fold = plan_parallel_folds_experts(p, s->model ? s->model->moe : NULL) ? p->tp : 1;
    for (uint32_t dp = limit; dp >= 1; dp--)
        if (s->stage->global_batch % (s->stage->micro_batch * dp) == 0 &&
            (fold * dp * p->cp) % ep == 0)
            return dp;
    return 0;
}

static int nodes_shrink(run_nodes *n, Baton__StageSpec *s, uint32_t usable, char *note, size_t cap,
                        bt_diag *diag) {
    Baton__Parallel *p = s->stage->parallel;
    uint32_t per_replica = p->tp * p->pp * p->cp;
    uint32_t dp = nodes_shrunk_dp(s, usable * n->gpn / per_replica);
    if (dp == 0) {
        bt_diag_set(
            diag,
            "stage \"%s\": only %u node%s of %u device%s%s %s left and no spare: tp%u x pp%u "
            "x cp%u needs %u device%s per replica, global_batch %llu must split over dp and "
            "ep %u must divide the expert ranks; the run cannot continue on %s",
            s->stage->name, usable, PLURAL(usable), n->gpn, PLURAL(n->gpn),
            usable == 1 ? "" : " each", usable == 1 ? "is" : "are", p->tp, p->pp, p->cp,
            per_replica, PLURAL(per_replica), (unsigned long long)s->stage->global_batch,
            p->ep ? p->ep : 1, usable == 1 ? "it" : "them");
        return BT_EINVAL;
    }
    uint32_t world = per_replica * dp, need = (world + n->gpn - 1) / n->gpn, lost = 0;
    for (uint32_t k = 0; k < n->total; k++)
        lost += n->excluded[k];
    snprintf(note, cap,
             "%u node%s lost, no spare left: data parallelism shrinks from %u to %u on %u "
             "node%s, global batch %llu kept",
             lost, PLURAL(lost), p->dp, dp, need, PLURAL(need),
             (unsigned long long)s->stage->global_batch);
    p->dp = dp;
    s->cluster->nodes = need;
    n->n_active = need;
    return 0;
}

int run_nodes_plan(run_nodes *n, Baton__StageSpec *s, char *note, size_t cap, bt_diag *diag) {
    uint32_t list[RUN_MAX_NODES], usable = nodes_usable(n, list);
    const Baton__Parallel *p = s->stage->parallel;
    uint32_t world = p->tp * p->pp * p->cp * p->dp, need = (world + n->gpn - 1) / n->gpn;
    note[0] = '\0';
    int rc = 0;
    if (usable >= need) {
        n->n_active = need;
    } else {
        rc = nodes_shrink(n, s, usable, note, cap, diag);
        if (rc != 0) return rc;
    }
    memcpy(n->active, list, n->n_active * sizeof *list);
    int spare = 0;
    for (uint32_t k = 0; k < n->n_active; k++)
        spare |= n->active[k] >= n->planned;
    if (spare && note[0] == '\0')
        snprintf(note, cap, "a spare node replaces a lost one: the layout stays");
    return 0;
}
