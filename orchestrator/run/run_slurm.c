/* The supervisor's Slurm side: an attempt as one srun step (launch_slurm.h), who failed
 * in it, and which hosts were lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_slurm.h"
#include "run_ctx.h"
#include "util/kv_wire.h"

/* After a failed attempt: one sinfo for every host of the job, one probe step over every
 * host Slurm has nothing against, and a second sinfo over those that did not answer. A probe
 * step on live hosts takes well under a second; Slurm starts its tasks in a tree, so its
 * limit grows a little with its hosts (47 s at 16384). */
#define RUN_SLURM_STATE_S      30.0
#define RUN_SLURM_PROBE_S      15.0
#define RUN_SLURM_PROBE_HOST_S 0.002
/* Hosts silent in a probe step (no answer; nothing said of them by srun, nor by Slurm when
 * asked again) are lost only when they are few: at most one in RUN_SLURM_SILENT_PER of the
 * hosts probed (one at least). More is a slow or failing step (a launch of thousands cut
 * off at its limit part-way), not lost hosts. */
#define RUN_SLURM_SILENT_PER 100

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
    unsigned char lost[RUN_MAX_NODES]; /* SLURM_LOST_*, RUN_SLURM_NAMED, RUN_SLURM_SILENT or 0 */
    char why[RUN_MAX_NODES][SLURM_WHY_MAX];
    /* the hosts of one probe step or sinfo: positions in node[], their nodes, verdicts */
    uint32_t pos[RUN_MAX_NODES], sel[RUN_MAX_NODES];
    unsigned char got[RUN_MAX_NODES];
    char got_why[RUN_MAX_NODES][SLURM_WHY_MAX];
} run_slurm_hosts;

#define RUN_SLURM_NAMED  3 /* srun named the host failing in the probe step */
#define RUN_SLURM_SILENT 4 /* the host did not answer the probe step */

/* The hosts of h whose verdict is v into pos/sel; their number. */
static uint32_t run_slurm_select(run_slurm_hosts *h, unsigned char v) {
    uint32_t n = 0;
    for (uint32_t k = 0; k < h->n; k++)
        if (h->lost[k] == v) h->pos[n] = k, h->sel[n++] = h->node[k];
    return n;
}

/* The verdicts v of h cleared (no evidence after all): how many; the first one's k in *first. */
static uint32_t run_slurm_clear(run_slurm_hosts *h, unsigned char v, uint32_t *first) {
    uint32_t n = 0;
    for (uint32_t k = 0; k < h->n; k++)
        if (h->lost[k] == v) {
            if (n++ == 0) *first = k;
            h->lost[k] = 0;
        }
    return n;
}

/* The hosts silent in the probe step asked about again (one sinfo): those Slurm now has
 * down or not responding are lost on its word (the step may have been refused as a whole
 * for one of them, gone down since the first sinfo). */
static void run_slurm_rejudge(run_ctx *c, run_slurm_hosts *h) {
    uint32_t n = run_slurm_select(h, RUN_SLURM_SILENT);
    char note[1024];
    if (launch_slurm_judge(c->o->slurm, h->sel, n, h->got, h->got_why, RUN_SLURM_STATE_S, note,
                           sizeof note) != 0) {
        run_progress_end(&c->prog);
        run_err(c, "warning: cannot read Slurm's node states again (%s)\n", note);
    }
    for (uint32_t j = 0; j < n; j++)
        if (h->got[j] == SLURM_LOST_STATE) {
            h->lost[h->pos[j]] = SLURM_LOST_STATE;
            memcpy(h->why[h->pos[j]], h->got_why[j], SLURM_WHY_MAX);
        }
}

/* What a probe step over `probed` hosts, `failed` of them failing, is evidence of: none
 * when it failed on every one of several hosts (probes that cannot run), else the hosts
 * srun named, and the silent ones when they are few (RUN_SLURM_SILENT_PER). */
static void run_slurm_weigh(run_ctx *c, run_slurm_hosts *h, uint32_t probed, uint32_t failed,
                            const char *end) {
    uint32_t first = 0, per = probed / RUN_SLURM_SILENT_PER;
    if (probed > 1 && failed == probed) {
        uint32_t named = run_slurm_clear(h, RUN_SLURM_NAMED, &first);
        uint32_t k = first, silent = run_slurm_clear(h, RUN_SLURM_SILENT, &first);
        if (named + silent == 0) return;
        run_progress_end(&c->prog);
        run_err(c,
                "a probe step failed on every host probed (%u: %s): not a host's fault, none "
                "excluded on its word\n",
                probed, h->why[named ? k : first]);
        return;
    }
    uint32_t silent = 0;
    for (uint32_t k = 0; k < h->n; k++)
        silent += h->lost[k] == RUN_SLURM_SILENT;
    if (silent <= (per > 1 ? per : 1)) return;
    run_slurm_clear(h, RUN_SLURM_SILENT, &first);
    run_progress_end(&c->prog);
    run_err(c,
            "no answer from %u of the %u hosts probed, and neither srun nor Slurm has anything "
            "against them (the probe step %s): more than 1 in %d, taken for a slow or failing "
            "step, not lost hosts; none of them excluded\n",
            silent, probed, end, RUN_SLURM_SILENT_PER);
}

/* The probe step said the job is ending: 1 (a stop, said) unless squeue has it RUNNING (a
 * word of one host's, or of the step's, then: no verdict from the step). */
static int run_slurm_probe_ending(run_ctx *c, const char *words) {
    char state[64];
    if (launch_slurm_job_ending(c->o->slurm, state, sizeof state) || strcmp(state, "RUNNING") != 0)
        return run_slurm_ending(c, words);
    run_progress_end(&c->prog);
    run_err(c,
            "a probe step said the job is ending (%s) but squeue has job %s RUNNING: no host "
            "judged by the step\n",
            words, c->o->slurm->job_id);
    return 0;
}

/* ONE probe step over every host Slurm and srun have nothing against, its failures weighed
 * (run_slurm_rejudge, run_slurm_weigh). 1 when the job is ending. */
static int run_slurm_probe(run_ctx *c, run_slurm_hosts *h, uint32_t stage, uint32_t attempt) {
    uint32_t n = run_slurm_select(h, 0);
    if (n == 0) return 0;
    char name[64], path[4200], note[1024];
    snprintf(name, sizeof name, "specs/s%02u-a%02u.probe", stage, attempt);
    run_dir_file(c->dir, name, path, sizeof path);
    double limit = RUN_SLURM_PROBE_S + RUN_SLURM_PROBE_HOST_S * n;
    int rc = launch_slurm_probe(c->o->slurm, path, h->sel, n, limit, h->got, h->got_why, note,
                                sizeof note);
    if (rc == SLURM_PROBE_ENDING) return run_slurm_probe_ending(c, note);
    if (rc != 0) {
        run_progress_end(&c->prog);
        run_err(c, "cannot run a probe step on %u host%s: %s; no host judged by one\n", n,
                n == 1 ? "" : "s", note);
        return 0;
    }
    uint32_t failed = 0, silent = 0;
    for (uint32_t j = 0; j < n; j++) {
        if (!h->got[j]) continue;
        uint32_t k = h->pos[j];
        h->lost[k] = h->got[j] == SLURM_PROBE_NAMED ? RUN_SLURM_NAMED : RUN_SLURM_SILENT;
        memcpy(h->why[k], h->got_why[j], SLURM_WHY_MAX);
        failed++, silent += h->got[j] == SLURM_PROBE_SILENT;
    }
    if (silent) run_slurm_rejudge(c, h);
    if (failed) run_slurm_weigh(c, h, n, failed, note);
    return 0;
}

/* Slurm's word alone condemning more than half of the attempt's hosts (two at least) is
 * taken for Slurm's own trouble (a controller cut off from its nodes marks them all not
 * responding): none of them excluded on it, said. */
static void run_slurm_state_guard(run_ctx *c, run_slurm_hosts *h) {
    uint32_t n = 0, first = 0;
    for (uint32_t k = 0; k < h->n; k++)
        n += h->lost[k] == SLURM_LOST_STATE;
    if (n < 2 || (uint64_t)n * 2 <= h->n) return;
    run_slurm_clear(h, SLURM_LOST_STATE, &first);
    run_progress_end(&c->prog);
    run_err(c,
            "Slurm has %u of the attempt's %u hosts down, failing or not responding (%s): more "
            "than half, taken for Slurm's own trouble, not lost hosts; none of them excluded on "
            "its word\n",
            n, h->n, h->why[first]);
}

/* Slurm's word on every host of the attempt (one sinfo), then ONE probe step over every
 * host it and srun have nothing against, the failed task's too (a dead host whose peers'
 * tasks failed first is found; Slurm may not know it is dead for minutes). 1 when the job
 * is ending. */
static int run_slurm_judge(run_ctx *c, run_slurm_hosts *h, uint32_t stage, uint32_t attempt) {
    launch_slurm *s = c->o->slurm;
    for (uint32_t k = 0; k < c->nodes.n_active; k++)
        if (c->nodes.active[k] < (uint32_t)s->n_hosts) h->node[h->n++] = c->nodes.active[k];
    char note[1024];
    if (launch_slurm_judge(s, h->node, h->n, h->lost, h->why, RUN_SLURM_STATE_S, note,
                           sizeof note) != 0) {
        run_progress_end(&c->prog);
        run_err(c,
                "warning: cannot read Slurm's node states (%s): hosts judged by srun's "
                "reports and a probe step only\n",
                note);
    }
    if (run_slurm_probe(c, h, stage, attempt)) return 1;
    run_slurm_state_guard(c, h);
    return 0;
}

/* After a failed attempt: every host of the attempt that Slurm, srun or the probe step finds
 * lost is excluded for the rest of the run (journaled with the evidence). A probe step that
 * fails because the job itself is ending, or on every host probed, or many hosts silent in
 * it, or Slurm condemning most hosts, are no evidence against a host. Returns 1 when the
 * job is ending (the attempt is a stop). */
int run_slurm_find_lost(run_ctx *c, uint32_t stage, uint32_t attempt) {
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
    int ending = run_slurm_judge(c, h, stage, attempt);
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
