/* The supervisor behind `baton run` and `baton resume`: walks a recipe's stages in
 * order, each stage as attempts of one job of baton-worker ranks launched through the
 * embedded PMIx server (one server for the whole run, a fresh namespace per attempt),
 * and restarts a failed attempt from the newest complete checkpoint.
 *
 * Per attempt: the stage's StageSpec (recipe_resolve_stage) with the run directory,
 * the attempt number and init_checkpoint = the run directory when it holds any complete
 * checkpoint (the worker then resumes this stage, or takes the previous stage's final
 * weights: stages/ckpt names sort in training order), written to specs/sNN-aMM.pb;
 * every rank's output goes to logs/sNN-aMM.log, rank 0's progress to the terminal.
 *
 * Failures: a rank's nonzero exit, a signal, PMIx_Abort, or no progress for the stage's
 * restart.heartbeat_timeout (a hang: the attempt is killed). Exit status 2 of a worker
 * (bad spec) is a configuration error and never retried; anything else is retried
 * after restart.backoff, at most restart.max_restarts times per stage. Every stage,
 * attempt, failure, recovery (time from the failure to the next completed step) and
 * checkpoint is journaled (journal.h) before the next action, so a `baton run` killed
 * at any point continues from the journal and the checkpoints when started again.
 *
 * Rollbacks: exit status 76 (RUN_WORKER_EXIT_ROLLBACK) of a rank is the loss-spike
 * guard's request (worker/engine/train_spike.h): its message names the global sample
 * window [from, to) of the spiking steps. The checkpoints of the stage taken at or after
 * the first spiking step are moved to RUN_DIR/rolled-back/sNN-aMM/ (so the newest remaining one
 * predates the spikes), a ROLLBACK record (step: the first spiking step; detail: the
 * window as "skip [from, to)") is journaled, and every later attempt of the stage, also
 * after `baton run` is started again, gets the window in StageSpec.skip_samples. A
 * rollback is not a failure: it does not count against max_restarts; at most
 * RUN_MAX_ROLLBACKS per stage, counted over the run's journal (a resume's included): a
 * request after those is a failure, not retried, and the run fails; its checkpoints from
 * the first spiking step on (from SPIKE_GUARD_WARMUP steps before it when the checkpoint
 * left has no saved window) are set aside all the same, journaled as a ROLLBACK without a
 * window (step: the first one set aside), so that a resume restarts early enough to meet
 * the spikes with the guard armed (run_rollback_refused).
 *
 * Under Slurm (run_opts.slurm) an attempt is one `srun --mpi=pmix` step on the hosts of
 * its nodes (run_slurm.c); the control channel listens on a routable address, a failed
 * attempt's hosts are checked with Slurm and a probe step, and a lost one is excluded.
 *
 * SIGINT/SIGTERM/SIGHUP: the workers are asked to stop (SIGTERM: they checkpoint and
 * exit), and baton run exits with status 75 (resumable). Hang detection goes on meanwhile;
 * a second SIGINT/SIGTERM kills the workers at once (SIGKILL), still exit 75. A SIGTERM or
 * SIGINT that a rank gets from another process makes every rank save a stop checkpoint and
 * exit 75 too: a failed attempt, retried from that checkpoint, named after that rank and
 * its signal where it said so over the control channel (run_stop_signal.c). */
#ifndef BATON_SUPERVISE_H
#define BATON_SUPERVISE_H

#include "recipe.h"
#include "run_dir.h"

#define RUN_EXIT_STOPPED         75
#define RUN_WORKER_EXIT_STOPPED  75 /* a worker's WORKER_EXIT_STOPPED */
#define RUN_WORKER_EXIT_ROLLBACK 76 /* a worker's WORKER_EXIT_ROLLBACK */
#define RUN_MAX_ROLLBACKS        5  /* per stage */
/* Not an exit status: run_supervise's when the embedded PMIx server wedged and
 * run_opts.afresh allowed the caller to continue the run in a fresh process (cmd_run.c
 * executes 'baton resume RUN_DIR' in this one's place). The failure is journaled with
 * server_stuck: the fresh process's attempt is a restart, its first step a recovery. */
#define RUN_EXIT_AFRESH 256

struct launch_slurm;

typedef struct run_opts {
    const char *worker;         /* path of baton-worker */
    const char *worker_note;    /* said when worker is not found: where baton looked for its
                                   default one, or the kept one's file (NULL: --worker
                                   given, or the default one beside baton) */
    int worker_given;           /* worker is --worker's */
    int quiet;                  /* no progress lines */
    struct launch_slurm *slurm; /* opened: every attempt is an srun step (launch_slurm.h);
                                   NULL: the embedded PMIx server on this host */
    const char *prog;           /* what messages begin with: "baton resume"; NULL "baton run" */
    int afresh;                 /* the PMIx server wedged: end with RUN_EXIT_AFRESH, the
                                   caller continuing in a fresh process (0: exit 1) */
    int afresh_spent;           /* afresh only where this process completed a step or a
                                   stage first (run_afresh.h: those without are used up) */
    int *progressed;            /* set where it did (NULL: not asked) */
} run_opts;

/* The per-stage table of a run (the text of `baton status`), printed at the end of a
 * completed run; in cmd_status.c. */
void run_print_summary(const run_dir *dir);

/* Before the run is journaled and the PMIx server and the control channel start (whose
 * libraries fail on EMFILE with messages of their own, or none: libevent exits): the soft
 * RLIMIT_NOFILE is raised for the largest layout the cluster allows, as each launch would
 * (launch_fds.h); a hard limit too low for that is left to the launch to refuse
 * (journaled), unless even the servers would not fit: BT_ERANGE, said, then, and the
 * caller refuses the run before it starts. 0 under Slurm (srun counts its own). */
int run_fds_check(const recipe_doc *doc, const run_opts *o);

/* Runs (or continues) every stage; returns the process exit status. */
int run_supervise(run_dir *dir, recipe_doc *doc, const run_opts *o);
/* Blocks SIGINT, SIGTERM and SIGHUP from here on, so that one arriving while the recipe
 * is loaded and checked is taken by run_supervise (a stop: exit 75), not by the default
 * action (exit 143). The launchers unblock them in the children they start. */
void run_signals_block(void);

#endif
