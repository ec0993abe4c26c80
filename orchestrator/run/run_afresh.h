/* A run continued in a fresh process: after the embedded PMIx server wedged (PMIx 4.2,
 * openpmix#3584: a rank killed while it connects), no job can start in the process that
 * holds it, so 'baton run' (or resume) executes 'baton resume RUN_DIR' in its own place
 * (bt_exec_self: same pid, same name), the run's locks kept across (RUN_DIR_LOCKS_ENV).
 * $BATON_AFRESH counts such continuations in a row that completed no step or stage: at
 * most RUN_MAX_AFRESH of them; one whose process made progress first starts the count
 * again. */
#ifndef BATON_RUN_AFRESH_H
#define BATON_RUN_AFRESH_H

#define RUN_MAX_AFRESH 3

/* Whether this process may continue a run in a fresh one: 0 where it was started through
 * the dynamic loader (bt_exec_self_runnable), else 1. */
int run_afresh_possible(void);

/* Whether it may do so without progress first: fewer than RUN_MAX_AFRESH continuations
 * in a row brought it here. */
int run_afresh_allowed(void);

/* Test hook: BATON_FAULT_AFRESH_WAIT=S makes a fresh process ($BATON_AFRESH set) wait S
 * seconds as it starts, before it takes the run's locks (kept for it meanwhile). */
void run_afresh_fault_wait(void);

/* What run_afresh continues. */
typedef struct run_afresh_to {
    char dir[4160]; /* the run directory */
    int lock_fd;    /* its locks (run_dir.h), kept open for the fresh process */
    int dir_lock_fd;
    int progressed; /* this process completed a step or a stage: the count starts again */
} run_afresh_to;

/* Executes 'baton resume [--quiet] [--worker W] -- RUN_DIR' in this process's place, its
 * descriptors other than 0-2 and the locks closed; returns only where it could not (1,
 * said with "baton PROG:", naming the resume to run). Test hook: BATON_FAULT_AFRESH_EXEC
 * set (not empty) makes that execution fail with EACCES, as one refused would (the
 * binary's file system remounted noexec since, say). */
int run_afresh(const char *prog, int quiet, const char *worker, const run_afresh_to *to);

#endif
