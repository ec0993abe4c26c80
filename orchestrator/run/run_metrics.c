/* Metrics rank 0 sent that baton run never received, taken from the attempt's metrics log
 * (stages/metrics_log.h): the workers go on training and committing checkpoints while
 * baton run is stopped or starved, and for a moment after it dies, and a record still in
 * the socket, in a killed worker's outbox or in a line torn by the crash would otherwise
 * be lost for good, as the next attempt resumes after it. Also, before a run starts,
 * whether the run's metrics files can be opened at all. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "metrics_log.h"
#include "run_ctx.h"
#include "util/buf.h"
#include "util/file.h"
#include "util/shquote.h"

/* How long a live rank 0 of an earlier baton run (killed: its ranks follow it within
 * 0.2 s) may hold its log before it is read as it stands. */
#define RUN_METRICS_WAIT_S 10.0

/* Replays stage's attempt's log; 1 when the log exists. A log found still locked once is
 * not waited for again (a stale lock, such as a dead node's on a network file system,
 * would cost the wait at every read). */
static int run_metrics_replay(run_ctx *c, uint32_t stage, uint32_t attempt, uint64_t step_offset) {
    char path[4200];
    metrics_log_path(c->dir->path, stage, attempt, path, sizeof path);
    FILE *f = bt_fopen_private(path, "r"); /* a FIFO there is refused, never waited on */
    if (f == NULL) return 0;
    fclose(f);
    control_metrics_where w = {.stage_name = c->doc->recipe->stages[stage]->name,
                               .stage_index = stage,
                               .attempt = attempt,
                               .step_offset = step_offset};
    int waited = c->metrics_locked && c->metrics_locked_stage == stage &&
                 c->metrics_locked_attempt == attempt;
    double wait_s = waited ? 0.0 : RUN_METRICS_WAIT_S;
    unsigned n = 0;
    int busy = 0;
    bt_diag d;
    bt_diag_init(&d);
    int rc = control_server_replay(&c->cs, &w, path, wait_s, &n, &busy, &d);
    if ((busy && !waited) || rc != 0 || n > 0) run_progress_end(&c->prog);
    if (busy && !waited)
        run_err(c,
                "%s: rank 0's metrics log is still locked after %.0f s (a worker still "
                "running, or a stale lock on a network file system); read it as it is\n",
                path, wait_s);
    if (busy)
        c->metrics_locked = 1, c->metrics_locked_stage = stage, c->metrics_locked_attempt = attempt;
    if (rc != 0)
        run_err(c, "stage \"%s\": cannot take the metrics baton run did not receive: %s\n",
                w.stage_name, d.msg[0] ? d.msg : bt_strerror(rc));
    if (n > 0)
        run_err(c,
                "stage \"%s\": %u step record(s) of attempt %u that baton run had not "
                "received taken from %s into metrics.jsonl and TensorBoard\n",
                w.stage_name, n, attempt, path);
    return 1;
}

void run_metrics_take(run_ctx *c, uint32_t stage, uint32_t attempt, int before,
                      uint64_t step_offset) {
    if (!c->cs_open) return; /* no metrics.jsonl is written either */
    if (!before) {
        run_metrics_replay(c, stage, attempt, step_offset);
        return;
    }
    /* the newest that ran: each before it was taken before the next one started */
    for (uint32_t a = attempt; a-- > 0;)
        if (run_metrics_replay(c, stage, a, step_offset)) return;
}

int run_metrics_files_check(const run_ctx *c) {
    static const char *const names[] = {"metrics.jsonl", "valid.jsonl"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[4200];
        run_dir_file(c->dir, names[k], path, sizeof path);
        int fd = bt_open_private(path, O_RDWR | O_APPEND); /* a FIFO: refused, not waited on */
        if (fd >= 0) close(fd);
        if (fd >= 0 || errno == ENOENT) continue;
        int err = errno;
        bt_buf cmd;
        bt_buf_init(&cmd);
        run_err(c,
                "%s: cannot open: %s (the run's %s records are kept there: without it the "
                "run would have no control channel; %s, then %s)\n",
                path, bt_file_why(err), k == 0 ? "metrics" : "validation",
                err == EACCES || err == EPERM ? "make it readable and writable by you, or "
                                                "remove it"
                                              : "remove it",
                bt_shell_cmd(&cmd, "baton resume", c->dir->path));
        bt_buf_free(&cmd);
        return -1;
    }
    return 0;
}
