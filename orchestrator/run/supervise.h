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
 * SIGINT/SIGTERM/SIGHUP: the workers are asked to stop (SIGTERM: they checkpoint and
 * exit), and baton run exits with status 75 (resumable). */
#ifndef BATON_SUPERVISE_H
#define BATON_SUPERVISE_H

#include "recipe.h"
#include "run_dir.h"

#define RUN_EXIT_STOPPED 75

typedef struct run_opts {
    const char *worker; /* path of baton-worker */
    int quiet;          /* no progress lines */
} run_opts;

/* Runs (or continues) every stage; returns the process exit status. */
int run_supervise(run_dir *dir, recipe_doc *doc, const run_opts *o);

#endif
