/* The supervisor's Slurm side: an attempt as one srun step (launch_slurm.h), who failed
 * in it, and which hosts were lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_slurm.h"
#include "run_ctx.h"
#include "util/kv_wire.h"

/* After a failed attempt: one sinfo for every host of the job, then at most two probe steps
 * (one host, then many). A probe step on live hosts takes well under a second; Slurm starts
 * its tasks in a tree, so its limit grows a little with its hosts (47 s at 16384). */
#define RUN_SLURM_STATE_S      30.0
#define RUN_SLURM_PROBE_S      15.0
#define RUN_SLURM_PROBE_HOST_S 0.002

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

/* The attempt's hosts and what is found of them (calloc'd: pages touched as written). */
typedef struct {
    uint32_t node[RUN_MAX_NODES]; /* the attempt's logical nodes that have a host */
    uint32_t n;
    unsigned char lost[RUN_MAX_NODES]; /* RUN_SLURM_JUDGED, RUN_SLURM_PROBED or 0 */
    unsigned char probed[RUN_MAX_NODES];
    char why[RUN_MAX_NODES][SLURM_WHY_MAX];
    uint32_t probes, probe_failed; /* hosts probed, and those whose probe failed */
    /* one probe step's hosts: their positions in node[], their nodes, the step's verdicts */
    uint32_t pos[RUN_MAX_NODES], sel[RUN_MAX_NODES];
    unsigned char failed[RUN_MAX_NODES];
    char step_why[RUN_MAX_NODES][SLURM_WHY_MAX];
} run_slurm_hosts;

#define RUN_SLURM_JUDGED 1 /* Slurm's state or srun's report */
#define RUN_SLURM_PROBED 2 /* a probe step */

/* One probe step over the host at position only of h (only < 0: over every host neither
 * judged nor probed yet), its failures marked lost. 1 when the job is ending (said). */
static int run_slurm_probe(run_ctx *c, run_slurm_hosts *h, long only, uint32_t stage,
                           uint32_t attempt) {
    uint32_t n = 0;
    for (uint32_t k = 0; k < h->n; k++)
        if (only >= 0 ? k == (uint32_t)only : !h->lost[k] && !h->probed[k])
            h->pos[n] = k, h->sel[n++] = h->node[k];
    if (n == 0) return 0;
    char name[64], path[4200], note[1024];
    snprintf(name, sizeof name, "specs/s%02u-a%02u.probe", stage, attempt);
    run_dir_file(c->dir, name, path, sizeof path);
    double limit = RUN_SLURM_PROBE_S + RUN_SLURM_PROBE_HOST_S * n;
    int rc = launch_slurm_probe(c->o->slurm, path, h->sel, n, limit, h->failed, h->step_why, note,
                                sizeof note);
    if (rc == SLURM_PROBE_ENDING) return run_slurm_ending(c, note);
    if (rc != 0) {
        run_progress_end(&c->prog);
        run_err(c, "cannot run a probe step on %u host%s: %s; no host judged by one\n", n,
                n == 1 ? "" : "s", note);
        return 0;
    }
    for (uint32_t j = 0; j < n; j++) {
        uint32_t k = h->pos[j];
        h->probed[k] = 1, h->probes++;
        if (!h->failed[j]) continue;
        h->lost[k] = RUN_SLURM_PROBED, h->probe_failed++;
        snprintf(h->why[k], sizeof h->why[k], "%s", h->step_why[j]);
    }
    return 0;
}

/* Slurm's word on every host of the attempt (one sinfo), then probe steps only where they
 * tell something: the failed task's host alone when srun pinned the failure to a task (its
 * host answering, the task's own failure: nobody else probed); every host Slurm and srun
 * have nothing against, in one step, when nothing pins it or that host's probe failed (are
 * probes failing everywhere?). 1 when the job is ending. */
static int run_slurm_judge(run_ctx *c, run_slurm_hosts *h, uint32_t stage, uint32_t attempt,
                           int hung) {
    launch_slurm *s = c->o->slurm;
    long f = -1; /* the failed task's host */
    for (uint32_t k = 0; k < c->nodes.n_active; k++) {
        uint32_t node = c->nodes.active[k];
        if (node >= (uint32_t)s->n_hosts) continue;
        if (s->failed_task >= 0 && strcmp(s->hosts[node], s->failed_host) == 0) f = (long)h->n;
        h->node[h->n++] = node;
    }
    char note[1024];
    if (launch_slurm_judge(s, h->node, h->n, h->lost, h->why, RUN_SLURM_STATE_S, note,
                           sizeof note) != 0) {
        run_progress_end(&c->prog);
        run_err(c,
                "warning: cannot read Slurm's node states (%s): hosts judged by srun's "
                "reports and probe steps only\n",
                note);
    }
    int judged = 0;
    for (uint32_t k = 0; k < h->n; k++)
        judged |= h->lost[k] != 0;
    int pinned = f >= 0 && !s->node_trouble && !hung;
    if (pinned && !h->lost[f]) {
        if (run_slurm_probe(c, h, f, stage, attempt)) return 1;
        if (!h->lost[f]) return 0;
    } else if (pinned || judged) {
        return 0; /* the hosts Slurm or srun named explain the failure */
    }
    if (run_slurm_probe(c, h, -1, stage, attempt)) return 1;
    if (h->probes > 1 && h->probe_failed == h->probes) {
        uint32_t first = 0;
        while (h->lost[first] != RUN_SLURM_PROBED)
            first++;
        run_progress_end(&c->prog);
        run_err(c,
                "a probe step failed on every host probed (%u: %s) and Slurm has nothing "
                "against any of them: not a host's fault, none of them excluded\n",
                h->probes, h->why[first]);
        for (uint32_t k = 0; k < h->n; k++)
            h->lost[k] = h->lost[k] == RUN_SLURM_PROBED ? 0 : h->lost[k];
    }
    return 0;
}

/* After a failed attempt: every host of the attempt that Slurm, srun or a probe step finds
 * lost is excluded for the rest of the run (journaled with the evidence). A probe that
 * fails because the job itself is ending, or probes failing on every host probed with
 * Slurm having nothing against any of them, are no evidence against a host. Returns 1 when
 * the job is ending (the attempt is a stop). */
int run_slurm_find_lost(run_ctx *c, uint32_t stage, uint32_t attempt, int hung) {
    launch_slurm *s = c->o->slurm;
    char state[64];
    launch_slurm_cancel_step(s, 0);
    if (launch_slurm_job_ending(s, state, sizeof state)) return run_slurm_ending(c, state);
    run_slurm_hosts *h = calloc(1, sizeof *h);
    if (h == NULL) {
        run_progress_end(&c->prog);
        run_err(c, "cannot judge the attempt's hosts: out of memory; nothing excluded\n");
        return 0;
    }
    int ending = run_slurm_judge(c, h, stage, attempt, hung);
    for (uint32_t k = 0; k < h->n && !ending; k++) {
        if (!h->lost[k]) continue;
        char name[32], detail[1200];
        snprintf(name, sizeof name, "node%u", h->node[k]);
        snprintf(detail, sizeof detail, "%s (Slurm host %s, job %s) lost: %s; excluded", name,
                 s->hosts[h->node[k]], s->job_id, h->why[k]);
        run_exclude_node(c, stage, attempt, name, detail);
    }
    free(h);
    return ending;
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
