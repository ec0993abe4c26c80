/* The worker program a run starts (baton run, baton resume): checked before anything is
 * made or journaled, and the one kept with a run (RUN_DIR/worker, run_dir.h) replaced by
 * a --worker given when it cannot be launched. */
#ifndef BATON_RUN_WORKER_H
#define BATON_RUN_WORKER_H

#include "run_dir.h"
#include "util/err.h"

/* The words a failure to launch a stage's workers is journaled with (supervise.c). */
#define RUN_LAUNCH_FAILED "cannot launch the workers"
/* ... and that a rank's worker is of another build than baton (run_check_build). */
#define RUN_WORKER_OTHER_BUILD "the worker is of another build"

/* 0 when worker can be launched as launch_job_init finds it (a path with a slash: an
 * executable file; a name: found through PATH); else BT_ENOENT or BT_EINVAL, diag
 * "cannot launch the workers: WORKER: why". */
int run_worker_check(const char *worker, bt_diag *diag);
/* Whether the worker kept with the run (kept) cannot start it: it cannot be launched now
 * (run_worker_check), or the run's last journaled failure is that its workers could not
 * be launched (an executable that exec refuses: not a program for this host) or were of
 * another build than baton. */
int run_worker_unusable(const char *run_dir_path, const char *kept);
/* RUN_DIR/worker := worker (written whole, 0600). */
int run_worker_keep(const run_dir *d, const char *worker, bt_diag *diag);

#endif
