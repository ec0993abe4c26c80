/* baton status RUN_DIR [--json]: a run's state from its journal, checkpoints and
 * metrics (read by status_load.c), said as text or JSON; also the summary table `baton
 * run` prints at the end. */
#define _GNU_SOURCE /* sigabbrev_np */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "cli.h"
#include "launch_slurm.h"
#include "recipe.h"
#include "run/run_ctx.h"
#include "run/run_dir.h"
#include "run/run_edit.h"
#include "run/supervise.h"
#include "status_load.h"
#include "util/buf.h"
#include "util/file.h"
#include "util/shquote.h"

static void status_usage(FILE *f) {
    fprintf(f, "usage: baton status RUN_DIR [--json]\n\n"
               "A run's state: per stage its state, steps, loss, tokens/s, wall time, attempts\n"
               "and restarts; every failure with its cause and time to recover; the\n"
               "checkpoints; and for a running stage the latest step and an ETA. A run\n"
               "that baton run or submit made and no attempt started yet (a job waiting in\n"
               "the queue) is shown as not started, with the job id submit kept; one a\n"
               "baton run is making at that moment (no journal yet, no attempt's spec) as\n"
               "being created. A running run names the process working in it (baton run\n"
               "or resume, its pid and host, since when: 'baton stop RUN_DIR' stops it), and\n"
               "warns when RUN_DIR/recipe.yaml was edited after that process read it (the\n"
               "edit is taken at the next 'baton resume'): the steps and ETA shown are then\n"
               "those of the recipe it read (RUN_DIR/running-recipe.yaml), as they are\n"
               "while recipe.yaml is missing; an edit that resume would refuse as it reads\n"
               "it (one that cannot be read, moves the run's stages or is not valid) is\n"
               "said.\n\n"
               "  --json   one JSON object instead: run_dir, state (completed, running,\n"
               "           stopped, failed, not_started: made by baton run or submit, no\n"
               "           attempt yet), failures, restarts, recoveries, failure (why a\n"
               "           failed run gave up, else null), job_id (baton submit's job, else\n"
               "           null), worker (the --worker the run was started with, else\n"
               "           null), holder (the process working in a running run: pid,\n"
               "           host, this_host, since in unix seconds, command: run, resume\n"
               "           or submit, recipe_edited: the kept recipe edited since it\n"
               "           read it, kept_recipe: ok, edited, missing or unreadable, and\n"
               "           running_copy: its copy of the recipe it read where the kept one\n"
               "           is not that (taken, missing, other or unreadable; else null);\n"
               "           null when not running or not known),\n"
               "           recipe_mismatch (how the kept recipe's stages were\n"
               "           removed, inserted or reordered among the run's, which resume\n"
               "           refuses; the stages are then the run's, under the names they\n"
               "           trained with; else null), steps_from (the recipe the steps\n"
               "           and ETA are of: recipe.yaml, or running-recipe.yaml, what the\n"
               "           running process read, recipe.yaml edited since; null: none,\n"
               "           steps null, no ETA), eta_s, stages (per stage: name,\n"
               "           state, step, steps, loss, tokens_per_s, wall_s, eta_s, attempts,\n"
               "           restarts, recoveries, recovery_s_avg (null without one),\n"
               "           skipped_steps (steps whose update was skipped, null before any\n"
               "           step), valid_loss), recovery_s,\n"
               "           failure_list (per failure: stage, stage_index, attempt, time, step,\n"
               "           rank, node, pid, exit_status, signal, cause, retryable,\n"
               "           server_stuck, continued: true once a later process's attempt\n"
               "           (the fresh one, or a baton resume) retried a stuck server's\n"
               "           failure, null while a fresh one is due, else false),\n"
               "           recovery_list (stage, stage_index, attempt, time, step,\n"
               "           recovery_s) and checkpoints; an unknown value is null\n"
               "  --help   show this help\n\n"
               "Exit status: 0 shown, 2 usage or RUN_DIR is not a run directory, or its\n"
               "journal was lost (checkpoints or specs there without one: restore it),\n"
               "a baton run holding the directory or not.\n");
}

/* The recipe's stage that row i shows: the same position, or with the stages moved the
 * one of the name the run's stage i trained with; -1 when none (or no recipe). */
static long status_recipe_stage(const status_view *v, size_t i) {
    if (!v->have_doc) return -1;
    if (!v->moved) return i < v->doc.recipe->n_stages ? (long)i : -1;
    for (size_t j = 0; i < v->n_rec && v->rec_names[i] && j < v->doc.recipe->n_stages; j++)
        if (strcmp(v->doc.recipe->stages[j]->name, v->rec_names[i]) == 0) return (long)j;
    return -1;
}

/* Row i's name: the recipe's; with its stages moved, or when what runs is not known (its
 * journal's stages then), the name the run's stage trained with. */
static const char *status_stage_name(const status_view *v, size_t i) {
    if (v->moved) return i < v->n_rec && v->rec_names[i] ? v->rec_names[i] : "?";
    if (v->journal_rows && i < v->n_rec && v->rec_names[i]) return v->rec_names[i];
    if (v->have_doc && i < v->doc.recipe->n_stages) return v->doc.recipe->stages[i]->name;
    return "?";
}

/* Whether the recipe shown gives the stages' planned steps (status_plan): it reads, and
 * for a running run whose kept recipe was edited, it is the one that process read. */
static int status_has_plan(const status_view *v) {
    return v->have_doc && v->plan != STATUS_PLAN_NONE;
}

/* Whether row i's planned steps are known: the recipe has them, and its stage. */
static int status_steps_known(const status_view *v, size_t i) {
    return status_has_plan(v) && (!v->moved || status_recipe_stage(v, i) >= 0);
}

static uint64_t status_stage_steps(const status_view *v, size_t i) {
    Baton__Stage *eff = NULL;
    uint64_t n = 0;
    if (!status_has_plan(v)) return 0; /* no ETA either */
    long j = status_recipe_stage(v, i);
    if (j < 0 && !v->moved && v->have_doc) j = (long)i; /* past the recipe's: its last */
    if (j >= 0 && recipe_effective_stage(&v->doc, (size_t)j, &eff) == 0 && eff) n = eff->steps;
    if (eff) protobuf_c_message_free_unpacked(&eff->base, NULL);
    return n;
}

/* Which recipe's stages, steps and ETA status shows for a running run whose kept recipe is
 * not what its process read (status_plan): that one's copy, or why it is not there. */
static void status_shown(const status_view *v, char *out, size_t cap) {
    char why[1600];
    const char *copy = RUN_DIR_RUNNING_RECIPE;
    if (v->copy == STATUS_COPY_TAKEN) {
        snprintf(out, cap,
                 "the stages, steps and ETA shown are those of the recipe it read, kept as "
                 "%s/%s",
                 v->dir, copy);
        return;
    }
    if (v->copy == STATUS_COPY_MISSING)
        snprintf(why, sizeof why,
                 "its copy of the recipe it read, %s/%s, is missing (a baton older than this "
                 "one started it, or the copy could not be written)",
                 v->dir, copy);
    else if (v->copy == STATUS_COPY_OTHER)
        snprintf(why, sizeof why,
                 "%s/%s holds other bytes than the recipe it read (CRC32C %08x, its record "
                 "names %08x)",
                 v->dir, copy, (unsigned)v->copy_crc32c, (unsigned)v->holder.recipe_crc32c);
    else
        snprintf(why, sizeof why, "its copy of the recipe it read, %s/%s, cannot be read (%s)",
                 v->dir, copy, v->copy_why);
    snprintf(out, cap,
             "%s: planned steps are shown as '?' (null in --json), with no ETA, and only the "
             "stages its journal has (%zu; the recipe it read may have more)",
             why, v->st.n_stages);
}

/* What status says of a running run whose recipe was edited after its process read it, or
 * is missing or cannot be read now while that process's copy is shown (where there is no
 * copy either, the kept recipe's own warning says so), and which recipe's stages, steps and
 * ETA it shows then (status_shown). */
static void status_warn_edited(const status_view *v) {
    int gone = v->kept_err && v->plan == STATUS_PLAN_RUNNING;
    if (!v->recipe_edited && !gone) return;
    bt_buf cmd;
    bt_buf_init(&cmd);
    char shown[4600], pid[80];
    status_shown(v, shown, sizeof shown);
    snprintf(pid, sizeof pid, "%s%ld",
             v->holder_state == RUN_HOLDER_OTHER_NS ? "in another PID namespace, its pid " : "pid ",
             (long)v->holder.pid);
    const char *resume = bt_shell_cmd(&cmd, "baton resume", v->dir);
    if (gone) {
        char now[300] = "is missing";
        int missing = v->kept_err == ENOENT;
        if (!missing) snprintf(now, sizeof now, "cannot be read (%s)", bt_file_why(v->kept_err));
        fprintf(stderr,
                "baton status: warning: %s/recipe.yaml, which the running baton %s (%s) read, "
                "%s now: that process trains the recipe it read, and %s refuses the run until "
                "it is %s (%s)\n",
                v->dir, v->holder.command, pid, now, resume, missing ? "back" : "readable again",
                shown);
    } else
        fprintf(stderr,
                "baton status: warning: %s/recipe.yaml was edited after the running baton %s "
                "(%s) read it: that process trains the recipe it read, and the edit is taken "
                "at the next %s (%s)\n",
                v->dir, v->holder.command, pid, resume, shown);
    bt_buf_free(&cmd);
}

static size_t status_n_stages(const status_view *v) {
    if (v->moved) return v->n_rec; /* the recipe's stages are not the run's */
    size_t n = v->have_doc && !v->journal_rows ? v->doc.recipe->n_stages : 0;
    n = v->st.n_stages > n ? v->st.n_stages : n;
    return n < RUN_MAX_STAGES ? n : RUN_MAX_STAGES;
}

/* Whether stage i has work left: not completed, or completed and given more steps since
 * (run_edit_extends), its progress then past the steps it completed with. */
static int status_stage_todo(const status_view *v, size_t i) {
    return !v->st.stage[i].completed ||
           (status_has_plan(v) && !v->moved && run_edit_extends(&v->doc, &v->st, i));
}

/* The step stage i reached: metrics.jsonl's last where that is its and it has work
 * left, else the journal's. */
static uint64_t status_stage_step(const status_view *v, size_t i) {
    if (status_stage_todo(v, i) && v->have_metrics && v->m_stage == i) return v->m_step;
    return v->st.stage[i].last_step;
}

static const char *status_stage_state(const status_view *v, size_t i) {
    const run_stage_state *s = &v->st.stage[i];
    if (!status_stage_todo(v, i)) return "done";
    if (!s->started) return "pending";
    if (v->running) return "running";
    return s->failed ? "failed" : "stopped";
}

/* A run that completed whose recipe (edited since) has more: stages appended, more steps
 * for its last stage (run_edit.h). Stopped, for 'baton resume' to train them. */
static int status_more(const status_view *v) {
    return v->st.completed && status_has_plan(v) && !v->moved &&
           run_edit_work_left(&v->doc, &v->st) != 0;
}

/* A run the supervisor gave up on is failed, not stopped: a stopped run was asked to stop
 * (a signal) or was killed, and `baton resume` is what it waits for. */
static const char *status_run_state(const status_view *v) {
    if (v->st.completed && !status_more(v)) return "completed";
    if (v->running) return "running";
    if (v->not_started) return "not_started";
    return v->st.failed_stage ? "failed" : "stopped";
}

/* A stuck server's record: its failure, or its stage continued in a fresh process. */
static int status_stuck(const Baton__JournalRecord *r) {
    return r->has_server_stuck && r->server_stuck;
}

/* Why the run gave up: the reason journaled with STAGE_FAILED ("giving up after 5
 * restarts (max_restarts)"; NULL for journals older than that record) and the cause of
 * the failed stage's last failure (NULL when none was journaled). */
static void status_failure(const status_view *v, const char **reason, const char **cause) {
    *reason = NULL, *cause = NULL;
    uint32_t stage = v->st.failed_stage - 1;
    for (size_t i = 0; i < v->n; i++) {
        const Baton__JournalRecord *r = v->rec[i];
        if (r->stage_index != stage) continue;
        if (r->kind == BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED) *reason = NULL, *cause = NULL;
        if (r->kind == BATON__JOURNAL_RECORD__KIND__STAGE_FAILED && !status_stuck(r))
            *reason = r->detail;
        if (r->kind == BATON__JOURNAL_RECORD__KIND__FAILURE) *cause = r->detail;
    }
}

/* A stage's loss and tokens/s: of the latest step any attempt reported, whether the
 * journal has it (an attempt's end, the stage's completion) or only metrics.jsonl (a
 * stage completed by an attempt that trained no step, its last step's attempt killed
 * before it was journaled). 0 for unknown: never shown as a value. */
static int status_newer(int has_j, double j, double j_at, int has_m, double m, double m_at,
                        double *out) {
    int journal = has_j && (!has_m || j_at >= m_at);
    *out = journal ? j : m;
    return journal || has_m;
}

static int status_stage_loss(const status_view *v, size_t i, double *loss) {
    const run_stage_state *s = &v->st.stage[i];
    const status_last *l = &v->last[i];
    return status_newer(s->has_loss, s->loss, s->loss_at, l->has_loss, l->loss, l->time, loss);
}

static int status_stage_tok(const status_view *v, size_t i, double *tok) {
    const run_stage_state *s = &v->st.stage[i];
    const status_last *l = &v->last[i];
    return status_newer(s->has_tokens_per_s, s->tokens_per_s, s->tokens_per_s_at, l->has_tok,
                        l->tok, l->time, tok);
}

/* A stage's wall time: its ended attempts (run_state), and an attempt that has not ended
 * from its ATTEMPT_STARTED record: to now while the run is supervised, else (its `baton
 * run` was killed before journaling the end) to the last sign of it, the stage's last
 * record or line of metrics.jsonl. */
static double status_stage_wall(const status_view *v, size_t i) {
    const run_stage_state *s = &v->st.stage[i];
    double w = s->wall_s, end = s->last_at;
    if (s->completed || s->open_at <= 0) return w;
    if (v->last[i].time > end) end = v->last[i].time;
    if (v->running) end = v->now;
    return end > s->open_at ? w + (end - s->open_at) : w;
}

/* Seconds per step of the running stage lately: over the last lines of metrics.jsonl from
 * its current attempt (checkpoint saves and evaluation included), else the last step's
 * step_time_s; 0: unknown. */
static double status_pace(const status_view *v) {
    size_t n = v->n_lines < STATUS_RECENT ? v->n_lines : STATUS_RECENT;
    if (n == 0) return v->m_step_time;
    const status_point *last = &v->recent[(v->n_lines - 1) % STATUS_RECENT], *first = last;
    for (size_t k = 2; k <= n; k++) {
        const status_point *p = &v->recent[(v->n_lines - k) % STATUS_RECENT];
        if (p->stage != last->stage || p->attempt != last->attempt || p->step >= first->step) break;
        first = p;
    }
    if (last->step > first->step && last->time > first->time)
        return (last->time - first->time) / (double)(last->step - first->step);
    return v->m_step_time;
}

/* Seconds until stage i ends at the recent pace; only for the stage a supervised run is
 * training. */
static int status_stage_eta(const status_view *v, size_t i, double *eta) {
    const run_stage_state *s = &v->st.stage[i];
    if (!v->running || !v->have_metrics || v->m_stage != i || !status_stage_todo(v, i) ||
        !s->started)
        return 0;
    double pace = status_pace(v);
    uint64_t total = status_stage_steps(v, i);
    if (pace <= 0 || total == 0) return 0;
    *eta = total > v->m_step ? (double)(total - v->m_step) * pace : 0;
    return 1;
}

/* 0 when squeue says the job will not start any more (ended, cancelled, failed, or gone:
 * state gets squeue's word); 1 while it is queued or running, or when squeue cannot tell
 * (not installed, no controller: state ""). */
static int status_job_queued(const char *job, char *state, size_t cap) {
    char out[512], arg[96];
    snprintf(arg, sizeof arg, "--jobs=%.80s", job);
    char *argv[] = {"squeue", "--noheader", arg, "--format=%T", NULL};
    int rc = launch_slurm_exec(argv, out, sizeof out, 5);
    out[strcspn(out, "\n")] = '\0';
    state[0] = '\0';
    if (rc != 0) {
        if (rc < 0 || rc == 124 || strstr(out, "Invalid job id") == NULL) return 1;
        snprintf(state, cap, "it does not know the job");
        return 0;
    }
    snprintf(state, cap, "%.40s", out[0] ? out : "nothing");
    static const char *live[] = {"PENDING",      "CONFIGURING", "RUNNING",
                                 "REQUEUED",     "RESIZING",    "SUSPENDED",
                                 "REQUEUE_HOLD", "REQUEUE_FED", "COMPLETING"};
    for (size_t i = 0; i < sizeof live / sizeof *live; i++)
        if (strcmp(out, live[i]) == 0) return 1;
    return 0;
}

/* The first line of a run that has not started: submitted (as which job, where its
 * script is) or made by baton run, and what starts it. */
static void status_text_new(bt_buf *b, const status_view *v) {
    char script[4200];
    snprintf(script, sizeof script, "%s/baton.sbatch", v->dir);
    int sbatch = access(script, F_OK) == 0;
    bt_buf_printf(b, "run %s: not started yet", v->dir);
    char state[64];
    int queued = sbatch && v->job_id[0] ? status_job_queued(v->job_id, state, sizeof state) : 1;
    bt_buf word, cmd;
    bt_buf_init(&word), bt_buf_init(&cmd);
    if (sbatch && v->job_id[0] && queued)
        bt_buf_printf(b,
                      " (submitted as Slurm job %s, batch script %s; it starts when the job "
                      "does: squeue -j %s%s%s)",
                      v->job_id, script, v->job_id, state[0] ? " says " : "", state);
    else if (sbatch && v->job_id[0])
        bt_buf_printf(b,
                      " (submitted as Slurm job %s, which is no longer queued: squeue says "
                      "%s; its output is %s/slurm-%s.out; sbatch %s submits the run again)",
                      v->job_id, state, v->dir, v->job_id, bt_shell_word_of(&word, script));
    else if (sbatch)
        bt_buf_printf(b,
                      " (batch script %s written, no job id kept: --dry-run, or not "
                      "submitted; sbatch %s submits it)",
                      script, bt_shell_word_of(&word, script));
    else
        bt_buf_printf(b, " (made by baton run, no attempt journaled; %s starts it)",
                      bt_shell_cmd(&cmd, "baton resume", v->dir));
    bt_buf_free(&word), bt_buf_free(&cmd);
}

/* Steps of stage i whose update was skipped (a non-finite gradient norm, an fp16 overflow,
 * a loss spike), as its last line of metrics.jsonl counts them; 0 when it has none. */
static int status_stage_skipped(const status_view *v, size_t i, uint64_t *n) {
    const status_last *l = &v->last[i];
    *n = l->has_skipped && l->skipped > 0 ? (uint64_t)l->skipped : 0;
    return l->has_skipped;
}

static uint64_t status_skipped_total(const status_view *v) {
    uint64_t total = 0, n;
    for (size_t i = 0; i < status_n_stages(v); i++)
        if (status_stage_skipped(v, i, &n)) total += n;
    return total;
}

/* "  skipped steps: pretrain 14 of 15 ..." when a stage skipped an update; nothing else. */
static void status_skipped_text(bt_buf *b, const status_view *v) {
    int any = 0;
    for (size_t i = 0; i < status_n_stages(v); i++) {
        uint64_t n;
        if (!status_stage_skipped(v, i, &n) || n == 0) continue;
        bt_buf_printf(b, "%s  %s %llu", any++ ? "," : "  skipped steps (update not applied):",
                      status_stage_name(v, i), (unsigned long long)n);
    }
    if (any)
        bt_buf_printf(b, " (a non-finite gradient norm, an fp16 overflow or a loss spike: the "
                         "stage's log says which)\n");
}

/* The length of text's first clause, up to its first "; " ("rank 1 (node node0, pid 9)
 * exited with status 1" of "...; stopped 2 other ranks: 0 2; rank 1 reported: ..."). */
static int status_clause(const char *text) {
    const char *semi = strstr(text, "; ");
    size_t n = semi ? (size_t)(semi - text) : strlen(text);
    return n > 4096 ? 4096 : (int)n;
}

static void status_text(bt_buf *b, const status_view *v) {
    const char *state = status_run_state(v);
    if (strcmp(state, "not_started") == 0)
        status_text_new(b, v);
    else
        bt_buf_printf(b, "run %s: %s", v->dir, state);
    if (strcmp(state, "running") == 0 && v->has_holder) {
        char words[600];
        run_holder_words(&v->holder, v->holder_state, words, sizeof words);
        bt_buf_printf(b, " (%s)", words);
    }
    if (strcmp(state, "not_started") == 0) bt_buf_printf(b, "\n");
    if (strcmp(state, "failed") == 0) {
        const char *reason, *cause;
        status_failure(v, &reason, &cause);
        /* first clauses only: the failure and gave-up lines below say them whole */
        bt_buf_printf(
            b, " (stage %s: %.*s; last failure: %.*s)",
            status_stage_name(v, v->st.failed_stage - 1),
            status_clause(reason ? reason : "not retried"), reason ? reason : "not retried",
            status_clause(cause ? cause : "none journaled"), cause ? cause : "none journaled");
    }
    uint64_t skipped = status_skipped_total(v);
    if (strcmp(state, "not_started") != 0)
        bt_buf_printf(b, "; %u failure%s, recovered %u time%s", v->st.total_failures,
                      v->st.total_failures == 1 ? "" : "s", v->st.total_recoveries,
                      v->st.total_recoveries == 1 ? "" : "s");
    if (strcmp(state, "not_started") != 0 && skipped > 0)
        bt_buf_printf(b, "; %llu step%s skipped", (unsigned long long)skipped,
                      skipped == 1 ? "" : "s");
    if (strcmp(state, "not_started") != 0) bt_buf_printf(b, "\n");
    if (status_more(v) && !v->running) { /* running: it is being trained */
        char what[300];
        run_edit_work_text(&v->doc, &v->st, what, sizeof what);
        bt_buf cmd;
        bt_buf_init(&cmd);
        bt_buf_printf(b,
                      "  the run completed, but its recipe (recipe.yaml) now has more, from %s "
                      "on: %s trains it\n",
                      what, bt_shell_cmd(&cmd, "baton resume", v->dir));
        bt_buf_free(&cmd);
    }
    if (v->worker[0])
        bt_buf_printf(b,
                      "  worker: %s (the --worker the run was started with; baton resume "
                      "uses it)\n",
                      v->worker);
    bt_buf_printf(b, "  %-18s %-8s %13s %10s %10s %9s %8s %8s %12s\n", "stage", "state", "steps",
                  "loss", "tok/s", "wall s", "attempts", "restarts", "recovery s");
    for (size_t i = 0; i < status_n_stages(v); i++) {
        const run_stage_state *s = &v->st.stage[i];
        char steps[40], rec[32] = "-";
        uint64_t step = status_stage_step(v, i);
        if (status_steps_known(v, i))
            snprintf(steps, sizeof steps, "%llu/%llu", (unsigned long long)step,
                     (unsigned long long)status_stage_steps(v, i));
        else /* the recipe cannot be read, or lacks the stage: its steps are not known */
            snprintf(steps, sizeof steps, "%llu/?", (unsigned long long)step);
        if (s->recoveries) snprintf(rec, sizeof rec, "%.2f avg", s->recovery_s_sum / s->recoveries);
        char loss[32] = "-", tok[32] = "-";
        double x;
        if (status_stage_loss(v, i, &x)) snprintf(loss, sizeof loss, "%.4f", x);
        if (status_stage_tok(v, i, &x)) snprintf(tok, sizeof tok, "%.0f", x);
        bt_buf_printf(b, "  %-18s %-8s %13s %10s %10s %9.1f %8u %8u %12s\n",
                      status_stage_name(v, i), status_stage_state(v, i), steps, loss, tok,
                      status_stage_wall(v, i), s->attempts, s->restarts, rec);
    }
    status_skipped_text(b, v);
    int any = 0;
    for (size_t i = 0; i < status_n_stages(v); i++) {
        if (!v->has_valid[i]) continue;
        bt_buf_printf(b, "%s  %s %.4f", any++ ? "" : "  valid loss", status_stage_name(v, i),
                      v->valid[i]);
    }
    if (any) bt_buf_printf(b, "\n");
}

/* The stage's first STAGE_FAILED or ATTEMPT_STARTED after v->rec[i] (its index in *at),
 * else NULL. */
static const Baton__JournalRecord *status_next_turn(const status_view *v, size_t i, size_t *at) {
    for (size_t j = i + 1; j < v->n; j++) {
        const Baton__JournalRecord *r = v->rec[j];
        if (r->stage_index != v->rec[i]->stage_index) continue;
        if (r->kind == BATON__JOURNAL_RECORD__KIND__STAGE_FAILED ||
            r->kind == BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED) {
            *at = j;
            return r;
        }
    }
    return NULL;
}

/* What became of a stuck server's failure or its stage's continuation, v->rec[i]. */
typedef enum {
    AFRESH_NONE,    /* a failure this process gave up on itself (its continuations spent) */
    AFRESH_PENDING, /* handed to a fresh process that has started no attempt of the stage
                     * yet: its execution failed, it was killed first, or it is starting */
    AFRESH_RETRIED, /* an attempt of the stage started in a later process */
    AFRESH_DROPPED, /* the fresh process gave up on the stage before an attempt (a
                     * checkpoint gone) */
} status_afresh;

/* A stuck server's STAGE_FAILED, v->rec[i] (the stage handed to a fresh process): what
 * that process did first, as the journal's next record of the stage says. */
static status_afresh status_handed_of(const status_view *v, size_t i) {
    size_t j;
    const Baton__JournalRecord *r = status_next_turn(v, i, &j);
    if (r == NULL) return AFRESH_PENDING;
    return r->kind == BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED ? AFRESH_RETRIED
                                                                   : AFRESH_DROPPED;
}

/* A stuck server's failure, v->rec[i]: retried once an attempt of its stage started after
 * it, in whatever process (none retries such a failure itself): the fresh one baton run
 * started, or a baton resume by hand after that one was killed or gave up, or after this
 * one gave up. Else pending while the stage's last turn handed it to a fresh process,
 * dropped where that process gave up before its attempt, none where this one gave up. */
static status_afresh status_failure_afresh(const status_view *v, size_t i) {
    const Baton__JournalRecord *r, *last = NULL;
    int handed = 0;
    for (size_t j = i; (r = status_next_turn(v, j, &j)) != NULL; last = r) {
        if (r->kind == BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED) return AFRESH_RETRIED;
        handed |= status_stuck(r);
    }
    if (last != NULL && status_stuck(last)) return AFRESH_PENDING;
    return handed ? AFRESH_DROPPED : AFRESH_NONE;
}

/* A failure's line: the step where the journal has one (JSON step, else null: before the
 * attempt's first step), whether it was retried. */
static void status_failure_line(bt_buf *b, const status_view *v, size_t i) {
    static const char *afresh[] = {
        [AFRESH_NONE] = " (not retried in this process)",
        [AFRESH_PENDING] = " (to be retried in a fresh process)",
        [AFRESH_RETRIED] = " (retried in a fresh process)",
        [AFRESH_DROPPED] = " (not retried)",
    };
    const Baton__JournalRecord *r = v->rec[i];
    const char *retried = r->retryable       ? ""
                          : !status_stuck(r) ? " (not retried)"
                                             : afresh[status_failure_afresh(v, i)];
    char at[48] = " before its first step";
    if (r->has_step) snprintf(at, sizeof at, " at step %llu", (unsigned long long)r->step);
    bt_buf_printf(b, "  failure: stage %s attempt %u%s: %s%s\n",
                  status_stage_name(v, r->stage_index), r->attempt, at, r->detail ? r->detail : "?",
                  retried);
}

/* A STAGE_FAILED's line: the run gave up on the stage, or (a stuck server) handed it to a
 * fresh process: "continued" once an attempt started after it, "given up before its
 * attempt" where that process gave up first (its own line follows). */
static void status_stage_failed_line(bt_buf *b, const status_view *v, size_t i) {
    static const char *afresh[] = {
        [AFRESH_NONE] = "gave up",
        [AFRESH_PENDING] = "not continued yet",
        [AFRESH_RETRIED] = "continued",
        [AFRESH_DROPPED] = "given up before its attempt",
    };
    const Baton__JournalRecord *r = v->rec[i];
    bt_buf_printf(b, "  %s: stage %s: %s\n",
                  status_stuck(r) ? afresh[status_handed_of(v, i)] : "gave up",
                  status_stage_name(v, r->stage_index), r->detail ? r->detail : "?");
}

/* A ROLLBACK's line: one that skips a window, or a request refused after the stage's
 * RUN_MAX_ROLLBACKS (journaled without a window: not rolled back). */
static void status_rollback_line(bt_buf *b, const status_view *v, const Baton__JournalRecord *r) {
    uint64_t from, to;
    bt_buf_printf(b, "  rollback%s: stage %s attempt %u: %s\n",
                  run_skip_parse(r->detail, &from, &to) == 0 ? "" : " refused",
                  status_stage_name(v, r->stage_index), r->attempt, r->detail ? r->detail : "?");
}

static void status_failures(bt_buf *b, const status_view *v) {
    for (size_t i = 0; i < v->n; i++) {
        const Baton__JournalRecord *r = v->rec[i];
        if (r->kind == BATON__JOURNAL_RECORD__KIND__FAILURE)
            status_failure_line(b, v, i);
        else if (r->kind == BATON__JOURNAL_RECORD__KIND__ROLLBACK)
            status_rollback_line(b, v, r);
        else if (r->kind == BATON__JOURNAL_RECORD__KIND__STAGE_FAILED)
            status_stage_failed_line(b, v, i);
        else if (r->kind == BATON__JOURNAL_RECORD__KIND__NODE_EXCLUDED)
            bt_buf_printf(b, "  node excluded: stage %s attempt %u: %s\n",
                          status_stage_name(v, r->stage_index), r->attempt,
                          r->detail ? r->detail : "?");
        else if (r->kind == BATON__JOURNAL_RECORD__KIND__ATTEMPT_STARTED && r->detail &&
                 strchr(r->detail, '('))
            bt_buf_printf(b, "  attempt %u of stage %s: %s\n", r->attempt,
                          status_stage_name(v, r->stage_index), strchr(r->detail, '('));
        else if (r->kind == BATON__JOURNAL_RECORD__KIND__RECOVERED)
            bt_buf_printf(
                b,
                "  recovered: stage %s attempt %u, step %llu completed %.2f s after the failure\n",
                status_stage_name(v, r->stage_index), r->attempt, (unsigned long long)r->step,
                r->recovery_s);
    }
}

static void status_ckpts(bt_buf *b, const status_view *v, int json) {
    char root[4200];
    snprintf(root, sizeof root, "%s/%s", v->dir, CKPT_ROOT_IN_RUN);
    char **names;
    size_t n;
    bt_diag d;
    bt_diag_init(&d);
    if (ckpt_list(root, &names, &n, &d) != 0) n = 0, names = NULL;
    if (!json) bt_buf_printf(b, "  checkpoints:%s", n ? "" : " none");
    for (size_t i = 0; i < n; i++) {
        if (json) {
            bt_buf_printf(b, "%s", i ? ", " : "");
            bt_buf_json_string(b, names[i]);
        } else {
            bt_buf_printf(b, " %s", names[i]);
        }
    }
    if (!json) bt_buf_printf(b, "\n");
    ckpt_names_free(names, n);
}

/* Seconds until the run ends: the running stage's ETA, then every later stage's tokens
 * (steps x global_batch x seq_len) at the running stage's tokens/s (a guess: their layout
 * and length may run faster or slower). */
static int status_run_eta(const status_view *v, double *eta) {
    if (!status_stage_eta(v, v->m_stage, eta)) return 0;
    for (size_t k = (size_t)v->m_stage + 1; k < status_n_stages(v) && v->m_tok > 0; k++) {
        Baton__Stage *eff = NULL;
        if (status_has_plan(v) && !v->moved && !v->st.stage[k].completed &&
            recipe_effective_stage(&v->doc, k, &eff) == 0 && eff)
            *eta +=
                (double)eff->steps * (double)eff->global_batch * (double)eff->seq_len / v->m_tok;
        if (eff) protobuf_c_message_free_unpacked(&eff->base, NULL);
    }
    return 1;
}

/* Seconds, then from an hour on the same in days, hours and minutes: "9000 s (2h 30m)". */
static void status_seconds(bt_buf *b, double s) {
    bt_buf_printf(b, "%.0f s", s);
    if (!(s >= 3599.5) || s > 1e15) return;
    unsigned long long m = ((unsigned long long)llround(s) + 30) / 60, d = m / 1440;
    if (d > 0)
        bt_buf_printf(b, " (%llud %02lluh %02llum)", d, m / 60 % 24, m % 60);
    else
        bt_buf_printf(b, " (%lluh %02llum)", m / 60, m % 60);
}

static void status_eta(bt_buf *b, const status_view *v) {
    double eta, run;
    if (!status_stage_eta(v, v->m_stage, &eta) || !status_run_eta(v, &run)) return;
    bt_buf_printf(b,
                  "  now: stage %s step %llu/%llu, loss %.4f, %.0f tok/s, %.1f s in the stage, "
                  "stage ETA ",
                  status_stage_name(v, v->m_stage), (unsigned long long)v->m_step,
                  (unsigned long long)status_stage_steps(v, v->m_stage), v->m_loss, v->m_tok,
                  status_stage_wall(v, v->m_stage));
    status_seconds(b, eta);
    if (run > eta) {
        bt_buf_printf(b, ", run ETA ");
        status_seconds(b, run);
        bt_buf_printf(b, " (later stages at this tokens/s)");
    }
    bt_buf_printf(b, "\n");
}

/* An optional integer of a journal record: its value, or null when the record lacks it. */
static void status_json_opt(bt_buf *b, const char *key, int has, long long x) {
    if (has)
        bt_buf_printf(b, ", \"%s\": %lld", key, x);
    else
        bt_buf_printf(b, ", \"%s\": null", key);
}

/* The fields every listed event has: its stage (name and index), attempt and time. */
static void status_json_event(bt_buf *b, const status_view *v, const Baton__JournalRecord *r) {
    bt_buf_printf(b, "{\"stage\": ");
    bt_buf_json_string(b, status_stage_name(v, r->stage_index));
    bt_buf_printf(b, ", \"stage_index\": %u, \"attempt\": %u, \"time\": %.3f", r->stage_index,
                  r->attempt, r->wall_time);
}

/* A failure's server_stuck and continued (the text's "(retried in a fresh process)":
 * true; "(to be retried in a fresh process)": null, not known yet; else false). */
static void status_json_afresh(bt_buf *b, const status_view *v, size_t i) {
    int stuck = status_stuck(v->rec[i]) && !v->rec[i]->retryable;
    status_afresh a = stuck ? status_failure_afresh(v, i) : AFRESH_NONE;
    bt_buf_printf(b, ", \"server_stuck\": %s, \"continued\": %s}",
                  status_stuck(v->rec[i]) ? "true" : "false",
                  a == AFRESH_RETRIED   ? "true"
                  : a == AFRESH_PENDING ? "null"
                                        : "false");
}

/* Every failure the text lists ("failure: ..."), in journal order: where it happened,
 * which rank (node, pid; a hang's, the rank it was judged on; null where the journal does
 * not say: a whole-job cause such as a timeout, a Slurm task's pid, a journal older than
 * the field), how it ended (exit status, null for a hang: baton run killed the ranks; the
 * signal that killed the rank, by name, else null), the cause as the text
 * words it, and whether it was retryable (a configuration error is not; the last failure
 * before the run gave up is, though it was not retried). */
static void status_json_failures(bt_buf *b, const status_view *v) {
    int k = 0;
    for (size_t i = 0; i < v->n; i++) {
        const Baton__JournalRecord *r = v->rec[i];
        if (r->kind != BATON__JOURNAL_RECORD__KIND__FAILURE) continue;
        bt_buf_printf(b, "%s", k++ ? ", " : "");
        status_json_event(b, v, r);
        status_json_opt(b, "step", r->has_step, (long long)r->step);
        status_json_opt(b, "rank", r->has_rank, r->rank);
        bt_buf_printf(b, ", \"node\": ");
        if (r->node)
            bt_buf_json_string(b, r->node);
        else
            bt_buf_printf(b, "null");
        status_json_opt(b, "pid", r->has_pid, r->pid);
        status_json_opt(b, "exit_status", r->has_exit_code, r->exit_code);
        const char *sig = r->has_signal && r->signal != 0 ? sigabbrev_np(r->signal) : NULL;
        if (sig)
            bt_buf_printf(b, ", \"signal\": \"SIG%s\"", sig);
        else
            status_json_opt(b, "signal", r->has_signal && r->signal != 0, r->signal);
        bt_buf_printf(b, ", \"cause\": ");
        bt_buf_json_string(b, r->detail ? r->detail : "?");
        bt_buf_printf(b, ", \"retryable\": %s", r->retryable ? "true" : "false");
        status_json_afresh(b, v, i);
    }
}

/* Every recovery the text lists ("recovered: ..."): the first step completed after a
 * failure and how long after it. */
static void status_json_recoveries(bt_buf *b, const status_view *v) {
    int k = 0;
    for (size_t i = 0; i < v->n; i++) {
        const Baton__JournalRecord *r = v->rec[i];
        if (r->kind != BATON__JOURNAL_RECORD__KIND__RECOVERED) continue;
        bt_buf_printf(b, "%s", k++ ? ", " : "");
        status_json_event(b, v, r);
        bt_buf_printf(b, ", \"step\": %llu, \"recovery_s\": %.3f}", (unsigned long long)r->step,
                      r->recovery_s);
    }
}

/* Why a failed run gave up (JSON "failure"), else null. */
static void status_json_failure(bt_buf *b, const status_view *v, const char *state) {
    if (strcmp(state, "failed") != 0) {
        bt_buf_printf(b, "null");
        return;
    }
    const char *reason, *cause;
    status_failure(v, &reason, &cause);
    bt_buf_printf(b, "{\"stage\": ");
    bt_buf_json_string(b, status_stage_name(v, v->st.failed_stage - 1));
    bt_buf_printf(b, ", \"reason\": ");
    bt_buf_json_string(b, reason ? reason : "not retried");
    bt_buf_printf(b, ", \"last_cause\": ");
    if (cause)
        bt_buf_json_string(b, cause);
    else
        bt_buf_printf(b, "null");
    bt_buf_printf(b, "}");
}

/* A string, or null when it is empty. */
static void status_json_opt_string(bt_buf *b, const char *s) {
    if (s[0])
        bt_buf_json_string(b, s);
    else
        bt_buf_printf(b, "null");
}

/* The kept recipe against what the running process read: "ok", "edited", "missing" or
 * "unreadable" (holder.kept_recipe). */
static const char *status_kept_word(const status_view *v) {
    if (v->kept_err) return v->kept_err == ENOENT ? "missing" : "unreadable";
    return v->recipe_edited ? "edited" : "ok";
}

/* The running process's copy of its recipe, where it was looked for (the kept one is not
 * what it read): "taken", "missing", "other" (bytes) or "unreadable" (or not parsed); else
 * "" (null: holder.running_copy). */
static const char *status_copy_word(const status_view *v) {
    static const char *const word[] = {
        [STATUS_COPY_TAKEN] = "taken",
        [STATUS_COPY_MISSING] = "missing",
        [STATUS_COPY_OTHER] = "other",
        [STATUS_COPY_BAD] = "unreadable",
    };
    if (v->creating || (!v->recipe_edited && !v->kept_err)) return "";
    return word[v->copy];
}

/* The process holding a running run (run_holder.h), else null. */
static void status_json_holder(bt_buf *b, const status_view *v) {
    if (!v->running || !v->has_holder) {
        bt_buf_printf(b, "null");
        return;
    }
    const run_holder *h = &v->holder;
    int other_ns = v->holder_state == RUN_HOLDER_OTHER_NS; /* its pid means nothing here */
    bt_buf_printf(b, "{\"host\": ");
    bt_buf_json_string(b, h->host);
    status_json_opt(b, "pid", !other_ns, h->pid);
    bt_buf_printf(b,
                  ", \"this_host\": %s, \"other_pid_namespace\": %s, \"verified\": %s, "
                  "\"since\": %lld",
                  run_holder_here(h) ? "true" : "false", other_ns ? "true" : "false",
                  v->holder_state == RUN_HOLDER_HELD ? "true" : "false", h->since);
    status_json_opt(b, "stopping_since", h->stopping != 0, h->stopping);
    bt_buf_printf(b, ", \"command\": ");
    bt_buf_json_string(b, h->command);
    bt_buf_printf(b, ", \"recipe_edited\": %s, \"kept_recipe\": \"%s\", \"running_copy\": ",
                  v->recipe_edited ? "true" : "false", status_kept_word(v));
    status_json_opt_string(b, status_copy_word(v));
    bt_buf_printf(b, "}");
}

static void status_json(bt_buf *b, const status_view *v) {
    bt_buf_printf(b, "{\"run_dir\": ");
    bt_buf_json_string(b, v->dir);
    const char *state = status_run_state(v);
    bt_buf_printf(b,
                  ", \"state\": \"%s\", \"failures\": %u, \"restarts\": %u, \"recoveries\": %u, "
                  "\"failure\": ",
                  state, v->st.total_failures, v->st.total_restarts, v->st.total_recoveries);
    status_json_failure(b, v, state);
    bt_buf_printf(b, ", \"job_id\": ");
    status_json_opt_string(b, v->job_id);
    bt_buf_printf(b, ", \"worker\": ");
    status_json_opt_string(b, v->worker);
    bt_buf_printf(b, ", \"holder\": ");
    status_json_holder(b, v);
    bt_buf_printf(b, ", \"recipe_mismatch\": ");
    status_json_opt_string(b, v->moved ? v->moved_what : "");
    bt_buf_printf(b, ", \"steps_from\": "); /* the recipe the steps and ETA are of */
    status_json_opt_string(b, !status_has_plan(v)              ? ""
                              : v->plan == STATUS_PLAN_RUNNING ? RUN_DIR_RUNNING_RECIPE
                                                               : "recipe.yaml");
    double eta;
    if (v->have_metrics && v->m_stage < RUN_MAX_STAGES && status_run_eta(v, &eta))
        bt_buf_printf(b, ", \"eta_s\": %.3f", eta); /* the run's (status_run_eta) */
    else
        bt_buf_printf(b, ", \"eta_s\": null");
    bt_buf_printf(b, ", \"stages\": [");
    for (size_t i = 0; i < status_n_stages(v); i++) {
        const run_stage_state *s = &v->st.stage[i];
        bt_buf_printf(b, "%s{\"name\": ", i ? ", " : "");
        bt_buf_json_string(b, status_stage_name(v, i));
        /* an unknown loss or tokens/s is null, never 0 */
        char loss[32] = "null", tok[32] = "null";
        double x;
        if (status_stage_loss(v, i, &x) && isfinite(x)) snprintf(loss, sizeof loss, "%.9g", x);
        if (status_stage_tok(v, i, &x) && isfinite(x)) snprintf(tok, sizeof tok, "%.6g", x);
        char eta[32] = "null"; /* known for the stage a supervised run is training */
        if (status_stage_eta(v, i, &x)) snprintf(eta, sizeof eta, "%.3f", x);
        char rec_avg[32] = "null", skipped[32] = "null"; /* null: no recovery, no metrics */
        if (s->recoveries)
            snprintf(rec_avg, sizeof rec_avg, "%.3f", s->recovery_s_sum / s->recoveries);
        uint64_t n_skipped;
        if (status_stage_skipped(v, i, &n_skipped))
            snprintf(skipped, sizeof skipped, "%llu", (unsigned long long)n_skipped);
        char valid[32] = "null"; /* the stage's closing validation, once it had one */
        char total[32] = "null"; /* the recipe's steps, unless it cannot be read */
        if (status_steps_known(v, i))
            snprintf(total, sizeof total, "%llu", (unsigned long long)status_stage_steps(v, i));
        if (v->has_valid[i] && isfinite(v->valid[i]))
            snprintf(valid, sizeof valid, "%.9g", v->valid[i]);
        bt_buf_printf(b,
                      ", \"state\": \"%s\", \"step\": %llu, \"steps\": %s, \"loss\": %s, "
                      "\"tokens_per_s\": %s, \"wall_s\": %.3f, \"eta_s\": %s, \"attempts\": %u, "
                      "\"restarts\": %u, \"recoveries\": %u, \"recovery_s_avg\": %s, "
                      "\"skipped_steps\": %s, \"valid_loss\": %s}",
                      status_stage_state(v, i), (unsigned long long)status_stage_step(v, i), total,
                      loss, tok, status_stage_wall(v, i), eta, s->attempts, s->restarts,
                      s->recoveries, rec_avg, skipped, valid);
    }
    bt_buf_printf(b, "], \"recovery_s\": [");
    int k = 0;
    for (size_t i = 0; i < v->n; i++)
        if (v->rec[i]->kind == BATON__JOURNAL_RECORD__KIND__RECOVERED)
            bt_buf_printf(b, "%s%.3f", k++ ? ", " : "", v->rec[i]->recovery_s);
    bt_buf_printf(b, "], \"failure_list\": [");
    status_json_failures(b, v);
    bt_buf_printf(b, "], \"recovery_list\": [");
    status_json_recoveries(b, v);
    bt_buf_printf(b, "], \"checkpoints\": [");
    status_ckpts(b, v, 1);
    bt_buf_printf(b, "]}\n");
}

void run_print_summary(const run_dir *dir) {
    status_view v;
    bt_diag d;
    bt_diag_init(&d);
    if (status_load(&v, dir->path, 1, &d) != 0) return; /* the kept recipe: resume's next */
    v.running = 0;
    bt_buf b;
    bt_buf_init(&b);
    status_text(&b, &v);
    fputs(bt_buf_str(&b), stdout);
    bt_buf_free(&b);
    status_free(&v);
}

int cmd_status(int argc, char **argv) {
    const char *dir = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            status_usage(stdout);
            return BT_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            if (json) return cli_twice("status", "--json");
            json = 1;
        } else if (argv[i][0] != '-' && dir == NULL) {
            dir = argv[i];
        } else {
            cli_bad_dir_arg("status", dir, argv[i]);
            status_usage(stderr);
            return BT_EXIT_USAGE;
        }
    }
    if (dir == NULL) {
        fprintf(stderr, "baton status: no run directory given\n");
        status_usage(stderr);
        return BT_EXIT_USAGE;
    }
    status_view v;
    bt_diag d;
    bt_diag_init(&d);
    if (status_load(&v, dir, 0, &d) != 0) {
        cli_error("status", &d, 0);
        return BT_EXIT_USAGE;
    }
    status_warn_edited(&v);
    bt_buf b;
    bt_buf_init(&b);
    if (json) {
        status_json(&b, &v);
    } else if (v.creating) { /* a moment: its recipe, journal and workdir are on their way */
        bt_buf_printf(&b, "run %s: being created by a running baton run (no attempt yet)\n", dir);
    } else {
        status_text(&b, &v);
        status_eta(&b, &v);
        status_failures(&b, &v);
        status_ckpts(&b, &v, 0);
    }
    fputs(bt_buf_str(&b), stdout);
    bt_buf_free(&b);
    status_free(&v);
    return BT_EXIT_OK;
}
