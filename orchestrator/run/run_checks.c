/* Per-attempt checks of where the ranks landed and what they run: the topology report,
 * the workers' build and lost nodes; and the journaled verdict when the run gives up on a
 * stage. */
#define _DEFAULT_SOURCE /* realpath */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "baton_version.h"
#include "control_build.h"
#include "launch_slurm.h"
#include "run_ctx.h"
#include "run_topology.h"
#include "run_worker.h"
#include "util/buf.h"

/* Once every rank has said hello: the topology report (printed, journaled); with
 * strict_topology a spread-out TP/CP/EP group or a misplaced rank stops the attempt as a
 * configuration error. */
void run_check_topology(run_ctx *c, launch_job *job, uint32_t stage, uint32_t attempt) {
    if (c->topo_checked || c->build_refused || !c->cs_open ||
        control_server_connected(&c->cs) < c->cs.world)
        return;
    c->topo_checked = 1;
    bt_buf b;
    bt_buf_init(&b);
    run_topology t;
    bt_diag d;
    bt_diag_init(&d);
    if (run_topology_check(c->spec, &c->cs, &b, &t, &d) != 0) {
        bt_buf_free(&b);
        return;
    }
    int strict = c->spec->cluster && c->spec->cluster->strict_topology;
    int bad = t.hungry_crossing || t.misplaced;
    run_progress_end(&c->prog);
    if (!c->o->quiet || bad)
        printf("[%s] topology of attempt %u (%s):\n%s", c->prog.stage, attempt,
               bad ? (strict ? "REFUSED: strict_topology" : "WARNING") : "as planned",
               bt_buf_str(&b));
    if (bad)
        run_err(c,
                "stage \"%s\": %d TP/CP/EP group(s) span hosts, %d rank(s) off their "
                "planned node%s\n",
                c->prog.stage, t.hungry_crossing, t.misplaced,
                strict ? ": strict_topology refuses to run it" : "");
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    r.detail = (char *)bt_buf_str(&b);
    run_journal(c, BATON__JOURNAL_RECORD__KIND__TOPOLOGY, stage, &r);
    bt_buf_free(&b);
    if (bad && strict) {
        c->topo_refused = 1;
        launch_job_kill(job, LAUNCH_STOPPED);
    }
}

/* What to do about a worker of another build (rank r's), by where it came from: built
 * beside baton (rebuild both), given with --worker, or found in PATH or kept with the run
 * (worker_note says where baton looked); led by the commit both name when only their
 * uncommitted edits differ. */
static void run_build_advice(const run_ctx *c, const control_rank *r, const char *self, char *out,
                             size_t cap) {
    char mine[128], dir[PATH_MAX];
    int same = control_build_commit(BATON_VERSION, r->build, mine, sizeof mine);
    size_t l = (size_t)snprintf(out, cap, "%s%s%s", same ? "both are of git " : "",
                                same ? mine : "", same ? ", with other uncommitted edits; " : "");
    /* the build dir resolved, as /proc/self/exe is (a build dir reached through a link) */
    if (realpath(BATON_BUILD_DIR "/bin/baton", dir) == NULL) dir[0] = '\0';
    size_t sl = strlen(self), dl = strlen(" (deleted)");
    if (sl > dl && strcmp(self + sl - dl, " (deleted)") == 0) /* replaced since it started */
        snprintf(out + l, cap - l,
                 "this baton's program was replaced or removed since it started (another "
                 "build installed over it, likely with its worker): 'baton resume %.600s' with "
                 "the baton installed now continues the run",
                 c->dir->path);
    else if (c->o->worker_given)
        snprintf(out + l, cap - l,
                 "give --worker the baton-worker built with this baton (or a "
                 "wrapper that starts it)");
    else if (c->o->worker_note)
        snprintf(out + l, cap - l, "use the baton-worker built with this baton (%s)",
                 c->o->worker_note);
    else if (dir[0] && strcmp(self, dir) == 0) /* baton run from its build tree */
        snprintf(out + l, cap - l, "rebuild both programs (cmake --build %s)", BATON_BUILD_DIR);
    else
        snprintf(out + l, cap - l,
                 "rebuild both programs from one source, and install both; 'baton resume %.600s' "
                 "then continues the run",
                 c->dir->path);
}

/* A rank's worker is of another build: said and refused (below), or with
 * BATON_WORKER_ANY_BUILD=1 said as a warning only, once per attempt. A refused one is
 * killed with SIGKILL alone, before it trains or saves anything (a stop checkpoint in
 * another build's format, say); under Slurm the step's tasks first, then srun (the tasks
 * of an srun killed alone go on: they trained the stage and saved, Slurm 22.05). */
void run_check_build(run_ctx *c, launch_job *job) {
    if (c->build_checked || !c->cs_open || c->cs.other_build < 0) return;
    c->build_checked = 1;
    const control_rank *r = &c->cs.ranks[c->cs.other_build];
    char self[1024], said[200], advice[1400];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    if (r->build[0])
        snprintf(said, sizeof said, "is baton-worker %s", r->build);
    else
        snprintf(said, sizeof said, "names no build (a baton-worker older than the check)");
    run_build_advice(c, r, self, advice, sizeof advice);
    /* a long note is cut short at its end (the return value used: no truncation warning) */
    int len = snprintf(c->build_why, sizeof c->build_why,
                       "%s: %.300s (rank %d on %.64s, pid %d) %s, but this baton (%.300s) is %s; "
                       "%s",
                       RUN_WORKER_OTHER_BUILD, c->o->worker, c->cs.other_build, r->host,
                       (int)r->pid, said, n > 0 ? self : "?", BATON_VERSION, advice);
    if (len < 0) snprintf(c->build_why, sizeof c->build_why, "%s", RUN_WORKER_OTHER_BUILD);
    const char *any = getenv("BATON_WORKER_ANY_BUILD");
    if (any && strcmp(any, "1") == 0) {
        run_progress_end(&c->prog);
        run_err(c, "stage \"%s\": warning: %s; going on, as BATON_WORKER_ANY_BUILD=1 asks\n",
                c->prog.stage, c->build_why);
        return;
    }
    c->build_refused = 1;
    if (job == NULL) return; /* ended already (its Hello read in the drain) */
    if (c->o->slurm)         /* srun's death would not end its tasks */
        run_slurm_cancel_left(c, c->build_why, sizeof c->build_why);
    launch_job_kill_hard(job, LAUNCH_STOPPED);
}

/* The FAILURE record's rank k, where baton killed the ranks (a hang, a refusal): where
 * this host's launcher started it (not a Slurm step's srun), its pid and node; no exit
 * status (launch_job_exit_status's 1, or 0, is none of the rank's). */
void run_blame_rank(const run_ctx *c, const launch_job *job, int k, Baton__JournalRecord *r,
                    char *node, size_t cap) {
    r->has_exit_code = 0;
    if (k < 0) return;
    r->has_rank = 1, r->rank = k;
    if (job->opts.plain || k >= job->nprocs) return;
    const launch_rank *lr = &job->ranks[k];
    r->has_pid = lr->pid > 0, r->pid = (int32_t)lr->pid;
    run_nodes_name(&c->nodes, lr->node, node, cap);
    r->node = node;
}

int run_refused(const run_ctx *c, const launch_job *job, Baton__JournalRecord *r, char *why,
                size_t cap, char *node, size_t node_cap) {
    if (c->build_refused) {
        snprintf(why, cap, "%s", c->build_why);
        run_blame_rank(c, job, c->cs.other_build, r, node, node_cap);
    } else if (c->topo_refused) {
        snprintf(why, cap,
                 "topology: a TP/CP/EP group spans hosts or a rank is off its planned node, "
                 "and cluster.strict_topology is set");
        run_blame_rank(c, job, -1, r, node, node_cap);
    }
    return c->build_refused || c->topo_refused;
}

/* Virtual node k of the job is lost when every one of its ranks was killed by a signal
 * the launcher did not send: each such node is excluded and journaled. */
void run_find_lost_nodes(run_ctx *c, const launch_job *job, uint32_t stage, uint32_t attempt) {
    for (int k = 0; k < job->nnodes && job->nnodes > 1; k++) {
        int all = 1, any = 0;
        for (int r = 0; r < job->nprocs; r++) {
            const launch_rank *rk = &job->ranks[r];
            if (rk->node != k) continue;
            any = 1;
            all = all && rk->term_signal != 0 && !rk->signal_from_launcher;
        }
        if (!any || !all) continue;
        char name[32], detail[128];
        run_nodes_name(&c->nodes, k, name, sizeof name);
        snprintf(detail, sizeof detail, "%s lost: every rank on it was killed; excluded", name);
        run_exclude_node(c, stage, attempt, name, detail);
    }
}

void run_exclude_node(run_ctx *c, uint32_t stage, uint32_t attempt, const char *name,
                      const char *detail) {
    run_nodes_exclude(&c->nodes, name);
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.has_attempt = 1, r.attempt = attempt;
    r.node = (char *)name, r.detail = (char *)detail;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__NODE_EXCLUDED, stage, &r);
    run_progress_end(&c->prog);
    run_err(c, "%s\n", detail);
}

void run_give_up(run_ctx *c, uint32_t stage, int say, const char *fmt, ...) {
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
    r.detail = why;
    run_journal(c, BATON__JOURNAL_RECORD__KIND__STAGE_FAILED, stage, &r);
    if (say) run_err(c, "stage \"%s\": %s\n", c->prog.stage, why);
}
