/* Per-attempt checks of where the ranks landed and what they run: the topology report,
 * the workers' build and lost nodes; and the journaled verdict when the run gives up on a
 * stage. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "baton_version.h"
#include "run_ctx.h"
#include "run_worker.h"
#include "run_topology.h"
#include "util/buf.h"

/* Once every rank has said hello: the topology report (printed, journaled); with
 * strict_topology a spread-out TP/CP/EP group or a misplaced rank stops the attempt as a
 * configuration error. */
void run_check_topology(run_ctx *c, launch_job *job, uint32_t stage, uint32_t attempt) {
    if (c->topo_checked || !c->cs_open || control_server_connected(&c->cs) < c->cs.world) return;
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

/* The worker is of another build: killed with SIGKILL, before it trains or saves anything
 * (a stop checkpoint of another build's format, say), and the attempt fails as a
 * configuration error. Under Slurm too: the ranks' Hello comes from the nodes. */
void run_check_build(run_ctx *c, launch_job *job) {
    if (c->build_refused || !c->cs_open || c->cs.other_build < 0) return;
    const control_rank *r = &c->cs.ranks[c->cs.other_build];
    char self[1024], said[200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    if (r->build[0])
        snprintf(said, sizeof said, "is baton-worker %s", r->build);
    else
        snprintf(said, sizeof said, "names no build (a baton-worker older than the check)");
    const char *note = c->o->worker_note;
    /* a long note is cut short at its end (the return value used: no truncation warning) */
    int len = snprintf(
        c->build_why, sizeof c->build_why,
        "%s: %.300s (rank %d on %.64s, pid %d) %s, but this baton (%.300s) is %s; use "
        "the baton-worker built with this baton (%s)",
        RUN_WORKER_OTHER_BUILD, c->o->worker, c->cs.other_build, r->host, (int)r->pid, said,
        n > 0 ? self : "?", BATON_VERSION, note ? note : "beside it, or give --worker PATH");
    if (len < 0) snprintf(c->build_why, sizeof c->build_why, "%s", RUN_WORKER_OTHER_BUILD);
    c->build_refused = 1;
    if (job) launch_job_kill_now(job, LAUNCH_STOPPED);
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
