/* The supervisor's Slurm side: an attempt as one srun step (launch_slurm.h), who failed
 * in it, and which hosts were lost. */
#include <stdio.h>
#include <string.h>

#include "launch_slurm.h"
#include "run_ctx.h"
#include "util/kv_wire.h"

#define RUN_SLURM_PROBE_S 15.0 /* a probe step on a live host takes well under a second */

int run_slurm_opts(run_ctx *c, launch_opts *lo, char *const *worker_argv, size_t stage,
                   uint32_t attempt, int ntasks, char *store_env, size_t cap, int *stuck,
                   bt_diag *diag) {
    launch_slurm *s = c->o->slurm;
    char name[64], files[4200];
    snprintf(name, sizeof name, "specs/s%02zu-a%02u", stage, attempt);
    run_dir_file(c->dir, name, files, sizeof files); /* beside the attempt's spec */
    snprintf(name, sizeof name, "baton-s%02zu-a%02u", stage, attempt);
    uint32_t gpn = c->nodes.gpn ? c->nodes.gpn : 1;
    char **argv =
        launch_slurm_step_argv(s, c->nodes.active, c->nodes.n_active, c->nodes.excluded,
                               c->nodes.total, ntasks, (int)gpn, name, files, worker_argv, diag);
    if (argv == NULL && s->files_err) *stuck = run_stuck(s->files_err, s->files_at_tmp);
    if (argv == NULL) return s->files_err ? BT_EIO : BT_EINVAL;
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

/* The attempt's failure was the job ending (a time limit, scancel, a requeue): said; a
 * stop, as baton's own SIGTERM would make it. */
static int run_slurm_ending(run_ctx *c, const char *why) {
    run_progress_end(&c->prog);
    run_err(c, "Slurm job %s is ending (%s): stopping, nothing excluded\n", c->o->slurm->job_id,
            why);
    return 1;
}

int run_slurm_stopping(run_ctx *c, const launch_job *job) {
    char state[64];
    if (launch_slurm_stopped(c->o->slurm, job)) {
        run_progress_end(&c->prog);
        run_err(c,
                "the workers of Slurm job %s stopped on a SIGTERM (a time limit, scancel, a "
                "requeue; exit status 75): stopping, as on baton's own\n",
                c->o->slurm->job_id);
        return 1;
    }
    if (launch_slurm_job_ending(c->o->slurm, state, sizeof state))
        return run_slurm_ending(c, state);
    return 0;
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
 * is excluded for the rest of the run (journaled with the evidence). A probe that fails
 * because the job itself is ending, or probes failing on every host of a multi-host
 * attempt with Slurm having nothing against any of them, are no evidence against a host:
 * nothing is excluded then. Returns 1 when the job is ending (the attempt is a stop). */
int run_slurm_find_lost(run_ctx *c, uint32_t stage, uint32_t attempt) {
    launch_slurm *s = c->o->slurm;
    char state[64];
    launch_slurm_cancel_step(s, 0);
    if (launch_slurm_job_ending(s, state, sizeof state)) return run_slurm_ending(c, state);
    static char why[RUN_MAX_NODES][512]; /* untouched pages cost nothing */
    static int verdict[RUN_MAX_NODES];
    int failed = 0, probed = 0;
    for (uint32_t k = 0; k < c->nodes.n_active; k++) {
        uint32_t node = c->nodes.active[k];
        verdict[k] = 0;
        if (node >= (uint32_t)s->n_hosts) continue;
        verdict[k] =
            launch_slurm_host_lost(s, s->hosts[node], RUN_SLURM_PROBE_S, why[k], sizeof why[k]);
        if (verdict[k] == SLURM_PROBE_ENDING) return run_slurm_ending(c, why[k]);
        probed++, failed += verdict[k] == SLURM_PROBE_FAILED;
    }
    if (probed > 1 && failed == probed) {
        run_progress_end(&c->prog);
        run_err(c,
                "a probe step failed on every host of the attempt (%s) and Slurm has nothing "
                "against any of them: not a host's fault, nothing excluded\n",
                why[0]);
        return 0;
    }
    for (uint32_t k = 0; k < c->nodes.n_active; k++) {
        uint32_t node = c->nodes.active[k];
        if (verdict[k] == 0 || node >= (uint32_t)s->n_hosts) continue;
        char name[32], detail[1200];
        snprintf(name, sizeof name, "node%u", node);
        snprintf(detail, sizeof detail, "%s (Slurm host %s, job %s) lost: %s; excluded", name,
                 s->hosts[node], s->job_id, why[k]);
        run_exclude_node(c, stage, attempt, name, detail);
    }
    return 0;
}

void run_slurm_replay_exclusion(run_ctx *c, const Baton__JournalRecord *r) {
    const launch_slurm *s = c->o->slurm;
    char host[SLURM_HOST_MAX], job[32], name[32];
    const char *p = r->detail ? strstr(r->detail, "(Slurm host ") : NULL;
    if (p == NULL || sscanf(p, "(Slurm host %255[^,], job %31[^)])", host, job) != 2 ||
        strcmp(job, s->job_id) != 0)
        return;
    for (uint32_t k = 0; k < c->nodes.total && k < (uint32_t)s->n_hosts; k++)
        if (strcmp(s->hosts[k], host) == 0) {
            snprintf(name, sizeof name, "node%u", k);
            run_nodes_exclude(&c->nodes, name);
        }
}

int run_slurm_cancel_left(run_ctx *c, char *why, size_t cap) {
    int rc = launch_slurm_cancel_step(c->o->slurm, 1);
    if (rc == 0) return 0;
    char advice[1024];
    launch_slurm_cancel_advice(c->o->slurm, advice, sizeof advice);
    size_t l = why ? strlen(why) : 0;
    if (why && l < cap)
        snprintf(why + l, cap - l, "; %s", advice);
    else {
        run_progress_end(&c->prog);
        run_err(c, "%s\n", advice);
    }
    return rc;
}
