/* The supervisor's private state (supervise.c), shared with the pieces split off it:
 * rollbacks (run_rollback.c), the per-attempt checks and the verdict on a stage
 * (run_checks.c) and how an attempt ends (run_end.c). */
#ifndef BATON_RUN_CTX_H
#define BATON_RUN_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "control_server.h"
#include "journal.h"
#include "launch.h"
#include "manifest.pb-c.h"
#include "recipe.h"
#include "run_dir.h"
#include "run_nodes.h"
#include "run_progress.h"
#include "run_state.h"
#include "supervise.h"

/* skipped sample windows over the whole run: every stage's rollbacks (cmd_run.c refuses a
 * recipe of more than RUN_MAX_STAGES stages), so a stage never meets the run's limit */
#define RUN_MAX_SKIPS (RUN_MAX_STAGES * RUN_MAX_ROLLBACKS)

/* A global sample window a rollback skips in every later attempt of its stage. */
typedef struct run_skip {
    uint32_t stage;
    uint64_t from, to;
} run_skip;

typedef struct run_ctx {
    run_dir *dir;
    recipe_doc *doc;
    const run_opts *o;
    journal j;
    run_state st;
    launch_server srv;
    int sfd;              /* signalfd: SIGINT, SIGTERM, SIGHUP */
    int cfd;              /* signalfd: SIGCONT, read by run_pause_check only */
    int cont_carry;       /* a SIGCONT read last turn: the next gap (only) may hold its stop */
    double slow_forgiven; /* this attempt's gaps forgiven without a SIGCONT (at most hang_s) */
    int got_signal;       /* a stop was asked for */
    int killed_now;       /* a second SIGINT/SIGTERM: the workers were killed at once */
    uint32_t signal_pid;  /* the process that sent the stop's signal (kill), else 0 */
    double signal_at;     /* monotonic time it was read */
    double failed_at;     /* monotonic time of the last failure (recovery pending), else 0 */
    run_progress prog;
    control_server cs; /* the control channel: Hello, heartbeats, metrics, Fatal, Stop */
    int cs_open;
    bt_diag cs_diag; /* the server reports late errors (metrics writes) here */
    char hang_why[256];
    int hang_rank;   /* the rank a hang was judged on (stopped, else silent longest), or -1 */
    run_nodes nodes; /* usable, excluded and this attempt's nodes */
    const Baton__StageSpec *spec; /* this attempt's */
    int topo_checked, topo_refused;
    int build_checked;    /* a rank's worker of another build was said (run_check_build) */
    int build_refused;    /* ... and refused: not BATON_WORKER_ANY_BUILD=1 */
    char build_why[1000]; /* ... the attempt's failure, naming the worker and both builds */
    char nodes_note[256]; /* what the node plan changed for this attempt */
    run_skip skips[RUN_MAX_SKIPS]; /* from the ROLLBACK records, in journal order */
    size_t n_skips;
    char rollback_note[768]; /* for the next attempt's journal detail, then cleared */
    /* attempts of the current stage in a row whose workers found no usable checkpoint */
    uint32_t no_ckpt_streak;
    /* the current stage's previous attempt failed on a loss that was not finite at step,
     * having started from start (control_fatal.nonfinite): have 0 when it did not */
    struct {
        int have;
        uint64_t step, start;
    } nonfinite_prev;
    int progressed;     /* a step or a stage completed in this process (run_opts.afresh_spent) */
    int journal_broken; /* an append failed: the run stops (nothing more is journaled) */
    int dir_gone;       /* the run directory was removed or moved under the run (journal_where) */
    char dir_moved_to[4096]; /* where it was moved, or "" */
    int dir_away;            /* not at its path, where it went unknown (JOURNAL_AWAY) */
    double dir_suspect_at;   /* when it was first seen not at its path, or 0 */
    /* per stage, the newest CHECKPOINT_COMMITTED the journal holds that no later ROLLBACK
     * set aside ("" when none): what a later attempt must find in checkpoints/ */
    struct {
        char name[64];
        uint64_t step;
        /* past the newest step journaled committed, less what rollbacks set aside: the
         * stage's checkpoints from this step on are not in the journal yet */
        uint64_t past;
        long attempt; /* the record's attempt (-1: none): whose spec it was saved under */
    } journaled[RUN_MAX_STAGES];
    /* per stage, where its data ended (run_data.c): final, read from its final checkpoint
     * as the stage was found finished, for its STAGE_COMPLETED record; done, the newest
     * such record's (data_end), what later stages over the same data start from; old_step,
     * the step of such a record without it (an older baton's), whose final checkpoint
     * tells instead; said, that neither did (said once) */
    struct {
        uint64_t final, done, old_step;
        int has_final, has_done, has_old, said;
    } data_end[RUN_MAX_STAGES];
    int no_channel_said; /* the warning that rank 0 never connected, once per baton run */
    /* the metrics log found still locked after the wait (run_metrics.c): not waited again */
    int metrics_locked;
    uint32_t metrics_locked_stage, metrics_locked_attempt;
} run_ctx;

/* What one attempt came to. */
typedef enum attempt_end {
    ATTEMPT_DONE = 0,
    ATTEMPT_RETRY,    /* failed, worth another attempt */
    ATTEMPT_FATAL,    /* a configuration error: never retried */
    ATTEMPT_STOPPED,  /* stopped on request (signal) */
    ATTEMPT_ROLLBACK, /* loss spikes: rolled back, retry with a window skipped */
    ATTEMPT_BROKEN,   /* failed as every further attempt would: the run fails, not retried */
} attempt_end;

/* Appends a record of kind for stage (r may be NULL); a failure is printed. */
int run_journal(run_ctx *c, Baton__JournalRecord__Kind kind, uint32_t stage,
                Baton__JournalRecord *r);

/* run_stop_signal.c: a rank that stopped the ranks on a signal of its own (SIGTERM, SIGINT
 * that baton run did not send, as its Stop said: control_stop_signal) as the attempt's
 * cause. Before the attempt is judged: where the rank the launcher blames exited 75
 * (stopped on request) and no Fatal names another, that rank takes the blame
 * (launch_job_blame). */
void run_signal_blame(run_ctx *c, launch_job *job);
/* why, the failure launch_job_describe gave: made "rank 2 (node node1, pid 4655) received
 * SIGTERM from pid 1234 (not from baton run): every rank saved a stop checkpoint at step
 * 12 and exited 75" when the blamed rank is that one (returns 1); else the signal is
 * added as a note (the stop under way when the failure came), returns 0. */
int run_signal_describe(const run_ctx *c, const launch_job *job, uint32_t stage, char *why,
                        size_t cap);

/* run_give_ups.c: whether the attempt just ended failed on a non-finite loss at the step,
 * and from the start, of the attempt before it (noting it for the next). */
int run_nonfinite_again(run_ctx *c);
/* Failures no restart would cure, from the training's numbers: again (that non-finite
 * loss), spent (loss spikes after the stage's RUN_MAX_ROLLBACKS). The words run_classify
 * adds to the attempt's failure ("" for neither), and the run's STAGE_FAILED. */
void run_give_up_advice(const run_ctx *c, int again, int spent, char *out, size_t cap);
void run_give_up_numbers(run_ctx *c, uint32_t stage, int again, int spent);

/* run_rollback.c */
int run_skip_parse(const char *text, uint64_t *from, uint64_t *to);
/* -1 when RUN_MAX_SKIPS windows are already held. */
int run_skip_add(run_ctx *c, uint32_t stage, uint64_t from, uint64_t to);
int run_skip_apply(run_ctx *c, uint32_t stage, Baton__StageSpec *s);
uint32_t run_rollbacks(const run_ctx *c, uint32_t stage);
int run_rollback(run_ctx *c, uint32_t stage, uint32_t attempt);
/* The request after the stage's RUN_MAX_ROLLBACKS, refused: the checkpoints from the
 * spikes on (from the guard's warm-up before them when the checkpoint left has no saved
 * window) set aside, no window kept, a ROLLBACK without one journaled (said where it
 * cannot be done). */
void run_rollback_refused(run_ctx *c, uint32_t stage, uint32_t attempt);

/* run_data.c: where each stage's data ends and the next starts, by the journal. */
/* The sample past the last one stage read, by its final checkpoint's manifest m (read
 * by run_stage_finished): kept for its STAGE_COMPLETED record. */
void run_data_end_seen(run_ctx *c, uint32_t stage, const Baton__Manifest *m);
/* Before a record of kind for stage is journaled: a STAGE_COMPLETED gets the data end
 * run_data_end_seen kept (data_end). */
void run_data_end_fill(run_ctx *c, Baton__JournalRecord__Kind kind, uint32_t stage,
                       Baton__JournalRecord *r);
/* Notes a journal record (read back or appended): a STAGE_COMPLETED's data_end. */
void run_data_note_record(run_ctx *c, const Baton__JournalRecord *r);
/* Stage's start_sample in its spec s: after where the earlier stages over the same data
 * ended, as their STAGE_COMPLETED records say (a recipe edited since they completed no
 * longer tells), or, for a record of an older baton without it, their final checkpoints'
 * manifests; else by the recipe plus the windows their rollbacks skipped (said once, where
 * the record did not say and the checkpoint is gone). */
int run_data_start(run_ctx *c, uint32_t stage, Baton__StageSpec *s);

/* run_slurm.c: the attempt as an srun step (lo's argv, ranks, output); the failed task
 * and its node for the journal; lost hosts excluded. run_slurm_opts: 0; BT_EIO when a
 * host file could not be written (*stuck set as run_stuck says); else BT_EINVAL (a
 * configuration error). */
int run_slurm_opts(run_ctx *c, launch_opts *lo, char *const *worker_argv, size_t stage,
                   uint32_t attempt, int ntasks, char *store_env, size_t cap, int *stuck,
                   bt_diag *diag);
void run_slurm_blame(const run_ctx *c, Baton__JournalRecord *r, char *node, size_t cap);
/* After a failed attempt: lost hosts found (a state query, one probe step over the hosts
 * it has nothing against) and excluded. 1 when the job is ending (a stop). */
int run_slurm_find_lost(run_ctx *c, uint32_t stage, uint32_t attempt);
/* 1 when a failed attempt's step was a stop: the workers stopped on Slurm's request
 * (launch_slurm_stopped) or the job is ending (said on stderr). */
int run_slurm_stopping(run_ctx *c, const launch_job *job);
/* A journaled exclusion, replayed under Slurm: only one made in this same job (a requeued
 * job keeps its id), applied to whichever logical node its host is now; one from another
 * job (or from before exclusions named their job) is not: a new allocation starts with
 * every host Slurm gave it. */
void run_slurm_replay_exclusion(run_ctx *c, const Baton__JournalRecord *r);
/* SIGKILL to what is left of the attempt's step (launch_slurm_cancel_step, hard); where
 * that failed, the user is told how to cancel it by hand, into why (cap bytes: appended
 * after "; ") where given, else said. 0, or BT_EIO. */
int run_slurm_cancel_left(run_ctx *c, char *why, size_t cap);

/* run_checks.c */
void run_check_topology(run_ctx *c, launch_job *job, uint32_t stage, uint32_t attempt);
/* A rank whose Hello names another build than this baton's, or none (a worker older than
 * the check): c->build_refused and c->build_why set once, and the job (when not NULL:
 * still running) killed at once, SIGKILL only (under Slurm the step's tasks too); with
 * BATON_WORKER_ANY_BUILD=1 only said, as a warning. */
void run_check_build(run_ctx *c, launch_job *job);
/* The FAILURE record r of an attempt baton killed (a hang, a refusal) blames rank k (-1:
 * none): rank, and pid and node where this host's launcher started it; no exit status. */
void run_blame_rank(const run_ctx *c, const launch_job *job, int k, Baton__JournalRecord *r,
                    char *node, size_t node_cap);
/* An attempt baton refused (a worker of another build, strict_topology): 1 with why and
 * r's rank (run_blame_rank) set; else 0. */
int run_refused(const run_ctx *c, const launch_job *job, Baton__JournalRecord *r, char *why,
                size_t cap, char *node, size_t node_cap);
/* Excludes node `name` from later attempts, journals it (NODE_EXCLUDED with detail) and
 * says so on stderr. */
void run_exclude_node(run_ctx *c, uint32_t stage, uint32_t attempt, const char *name,
                      const char *detail);
void run_find_lost_nodes(run_ctx *c, const launch_job *job, uint32_t stage, uint32_t attempt);
/* The run gives up on stage: journals STAGE_FAILED with the formatted reason as its detail
 * (what `baton status` reports as the stage's and the run's failure) and, when say is
 * set, prints it on stderr. */
/* A message on stderr that begins with the command (c->o->prog: "baton run: ..."). */
void run_err(const run_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void run_give_up(run_ctx *c, uint32_t stage, int say, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* run_metrics.c: what the stage attempt's metrics log holds and metrics.jsonl (written
 * from what baton run received) lacks is written there, TensorBoard and valid.jsonl too,
 * saying so (control_server_replay). before 0: the log of attempt itself, once it ended;
 * before 1: that of the newest earlier attempt of the stage that left one (a killed
 * baton run's); call it before anything else of the new attempt. Either waits a moment
 * for a rank 0 that still holds the log's lock, once per log. */
void run_metrics_take(run_ctx *c, uint32_t stage, uint32_t attempt, int before,
                      uint64_t step_offset);
/* RUN_DIR/metrics.jsonl and valid.jsonl, which the control channel opens: something there
 * it cannot open (a FIFO, a directory, a link, a file this user may not read and write)
 * would leave the run without the channel (no hang detection, no check of the workers'
 * build, the validation records lost), so it is refused before anything starts, naming
 * the file (run_err): -1; else 0 (also when either is missing: it is made). */
int run_metrics_files_check(const run_ctx *c);

/* run_resume_check.c: the kept recipe against the checkpoint the first stage not completed
 * resumes (its own newest in checkpoints/), before anything starts: its steps below the
 * checkpoint's, another model shape, or a seed, seq_len or mixture weight that makes the
 * checkpoint's data position index other samples (ckpt_resume.h), or a checkpoint the
 * workers would start from that a newer baton wrote (its format), are said (run_err) and
 * BT_EINVAL returned; else 0, also when no such checkpoint can be read (the attempt then
 * says why). */
int run_resume_check(run_ctx *c);

/* run_fit.c: each stage the run has still to train whose heaviest rank, as `baton plan`
 * counts it, does not fit in cluster.gpu.memory: a warning on stderr, once, naming the
 * stage and the figures; the run goes on (the plan leaves out nothing the engines
 * allocate, but on the CPU engine the memory is only declared). */
void run_fit_warn(const run_ctx *c);

/* run_ckpts.c */
/* The recipe's name as the stages' specs, and so the workers' manifests, carry it. */
const char *run_recipe_name(const run_ctx *c);
/* Notes a journal record (read back or appended) in c->journaled (and c->data_end:
 * run_data_note_record). */
void run_ckpt_note_record(run_ctx *c, const Baton__JournalRecord *r);
/* Journals, as attempt's CHECKPOINT_COMMITTED records in training order, the stage's own
 * checkpoints in the run's checkpoint root (by a manifest that reads, ckpt_list's complete
 * ones) that the journal does not record yet: those committed while rank 0 had no control
 * channel to say so (its token dropped by a --worker wrapper, a failed connect, a channel
 * lost part-way). Call it once the attempt's ranks are gone and the channel drained; and
 * with RUN_NO_ATTEMPT (records without an attempt) as an attempt starts, before its ranks
 * do, for those no attempt of this baton run saved (one a killed baton run never saw end
 * saved, or put there by hand: which attempt is not known), so that those found when it
 * ends are its own. Returns how many were journaled. */
#define RUN_NO_ATTEMPT UINT32_MAX
size_t run_ckpt_journal_found(run_ctx *c, uint32_t stage, uint32_t attempt);
/* The newest complete checkpoint in the run's checkpoint root that stage may start from:
 * its own or an earlier stage's, never a later one's, judged as the worker judges it, by
 * the manifest's stage index (ckpt_stage_relation; by the name only where the manifest
 * cannot be read) (name into out, cap > 0); 0 when there is none, -1 when the checkpoint
 * root cannot be listed (d says why). */
int run_ckpt_start_from(run_ctx *c, uint32_t stage, char *out, size_t cap, bt_diag *d);
/* The newest complete checkpoint stage saved itself (by its manifest, as above): 1 with its
 * name in out and its step in *step, 0 when there is none, -1 as above. */
int run_ckpt_own(run_ctx *c, uint32_t stage, char *out, size_t cap, uint64_t *step, bt_diag *d);
/* 0 when stage can start as the journal says it must: from a checkpoint of its own when
 * the journal records one of the stage committed, else of its own or an earlier stage
 * when the journal records one of those (else a fresh start is what the run did).
 * Otherwise 1 with why: the journaled checkpoint that is gone (the stage's own, with only
 * an earlier stage's left, whose hand-off would start it again from step 0; or every one
 * it could start from); or -1 with why naming the checkpoint root and the error when it
 * cannot be listed (EACCES, EIO: nothing can be told, and the cause may pass). */
int run_ckpt_missing(run_ctx *c, uint32_t stage, char *why, size_t cap);
/* What run_stage_finished says of a stage whose workers all exited 0. */
enum {
    RUN_FINAL_DONE = 1,    /* its final checkpoint is there: the stage is complete */
    RUN_FINAL_SHORT = 0,   /* no final checkpoint (the step reached): not retried */
    RUN_FINAL_UNREAD = -1, /* there, not read (EIO, EMFILE, damaged): worth another attempt */
    RUN_FINAL_BROKEN = -2, /* there, not read for a cause another attempt would meet the same
                            * (EACCES, ENOTDIR, a newer format): the run fails at once */
};
/* Whether the run's checkpoint root holds stage's final checkpoint (stage_final, at step
 * `steps`): what makes workers that all exited 0 a completed stage (RUN_FINAL_*; why
 * says what is missing or the path and error when not RUN_FINAL_DONE). */
int run_stage_finished(run_ctx *c, uint32_t stage, uint64_t steps, char *why, size_t cap);
/* Removes the run's stale checkpoints/NAME.partial directories (a failed or killed save;
 * never a valid checkpoint, and on a full disk what holds the space the next save needs),
 * saying so in one line, and the NAME.deleting ones (a retention's removal cut short),
 * in another. Only real directories directly in the checkpoint root whose name ends so;
 * a symbolic link is left alone. Call it only while no worker runs. */
void run_sweep_partials(run_ctx *c);

/* run_edit.c: the kept recipe (edited since the run's last command) against the run's
 * history, before anything starts (run_edit.h): BT_EINVAL, diag saying what changed and
 * how to go on, for stages moved, removed or inserted among those the run trained, and
 * for the recipe's name changed under a stage that continues from its own checkpoint. */
int run_edit_check(run_ctx *c, bt_diag *diag);

/* run_end.c: how an attempt ends, beyond the ranks' exit statuses */
/* Why an attempt's own file could not be written (run_stuck): a full disk or quota, or
 * something planted where its open failed; else 0. */
enum { RUN_STUCK_FULL = 1, RUN_STUCK_PLANTED = 2 };
int run_stuck(int err, int at_open);
/* The journaled detail of an attempt that failed before its spec was written. */
#define RUN_NO_SPEC "not started: no spec written"
/* Every rank of the job exited with status 0 (none killed by a signal). */
int run_all_exited_zero(const launch_job *job);
/* A stopped attempt whose stop checkpoint was not committed: said, r's step set. */
void run_check_stop(run_ctx *c, const launch_job *job, uint32_t stage, Baton__JournalRecord *r);
/* A rank said the disk is full: said, and the stage given up (exit 1). */
void run_disk_full(run_ctx *c, uint32_t stage, int in_failure);
/* A stop that came once the ranks were past the stage's last step: 1 (said) when the
 * stage is complete all the same. */
int run_stopped_after_end(run_ctx *c, const launch_job *job, uint32_t stage);
/* The attempt's spec or log could not be made (no worker started): said and journaled. */
attempt_end run_spec_failed(run_ctx *c, uint32_t stage, uint32_t attempt, int rc, int stuck,
                            const char *detail, const char *msg);
/* Whether a stuck PMIx server ends this process for a fresh one (RUN_EXIT_AFRESH). */
int run_may_afresh(const run_ctx *c);
/* The workers could not be started: said and journaled. */
attempt_end run_launch_failed(run_ctx *c, uint32_t stage, uint32_t attempt, int rc,
                              const char *msg);
/* The checkpoint root cannot be listed as the attempt starts: a failed attempt, retried. */
attempt_end run_unlisted(run_ctx *c, uint32_t stage, uint32_t attempt, const char *why);

#endif
