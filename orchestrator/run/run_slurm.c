/* The supervisor's Slurm side: an attempt as one srun step (launch_slurm.h), who failed
 * in it, and which hosts were lost. */
#include <stdio.h>
#include <string.h>

#include "launch_slurm.h"
#include "run_ctx.h"
#include "util/kv_wire.h"

#define RUN_SLURM_PROBE_S 15.0 /* a probe step on a live host takes well under a second */

int run_slurm_opts(run_ctx *c, launch_opts *lo, char *const *worker_argv, size_t stage,
                   uint32_t attempt, int ntasks, char *store_env, size_t cap, bt_diag *diag) {
    launch_slurm *s = c->o->slurm;
    char name[64];
    snprintf(name, sizeof name, "baton-s%02zu-a%02u", stage, attempt);
    uint32_t gpn = c->nodes.gpn ? c->nodes.gpn : 1;
    char **argv = launch_slurm_step_argv(s, c->nodes.active, c->nodes.n_active, c->nodes.excluded,
                                         c->nodes.total, ntasks, (int)gpn, name, worker_argv, diag);
    if (argv == NULL) return BT_EINVAL;
    snprintf(store_env, cap, "%s=%s", KV_ENV_ADDRESS, s->kv.address);
    launch_slurm_wrap(s, lo, argv);
    return 0;
}

/* The logical name ("node<K>") of an allocation host, or "" when it is not one of ours. */
static void run_slurm_node_of(const run_ctx *c, const char *host, char *out, size_t cap) {
    out[0] = '\0';
    for (uint32_t k = 0; k < c->nodes.total && k < (uint32_t)c->o->slurm->n_hosts; k++)
        if (strcmp(c->o->slurm->hosts[k], host) == 0) snprintf(out, cap, "node%u", k);
}

void run_slurm_blame(const run_ctx *c, Baton__JournalRecord *r, char *node, size_t cap) {
    const launch_slurm *s = c->o->slurm;
    r->has_rank = s->failed_task >= 0, r->rank = s->failed_task >= 0 ? (uint32_t)s->failed_task : 0;
    r->has_signal = 0;
    r->has_pid = 0; /* the launcher's child is srun, not the failed task */
    run_slurm_node_of(c, s->failed_host, node, cap);
    r->node = node[0] ? node : NULL;
}

/* After a failed attempt: every host of the attempt that Slurm or a probe step finds lost
 * is excluded for the rest of the run (journaled with the evidence). */
void run_slurm_find_lost(run_ctx *c, uint32_t stage, uint32_t attempt) {
    launch_slurm *s = c->o->slurm;
    launch_slurm_cancel_step(s);
    for (uint32_t k = 0; k < c->nodes.n_active; k++) {
        uint32_t node = c->nodes.active[k];
        if (node >= (uint32_t)s->n_hosts) continue;
        char why[512], name[32], detail[700];
        if (!launch_slurm_host_lost(s, s->hosts[node], RUN_SLURM_PROBE_S, why, sizeof why))
            continue;
        snprintf(name, sizeof name, "node%u", node);
        snprintf(detail, sizeof detail, "%s (Slurm host %s) lost: %s; excluded", name,
                 s->hosts[node], why);
        run_exclude_node(c, stage, attempt, name, detail);
    }
}
