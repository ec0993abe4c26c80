/* A run continued in a fresh process: after the embedded PMIx server wedged (PMIx 4.2,
 * openpmix#3584: a rank killed while it connects), no job can start in the process that
 * holds it, so 'baton run' (or resume) executes 'baton resume RUN_DIR' in its own place,
 * at most RUN_MAX_AFRESH times per command (counted in $BATON_AFRESH across them). */
#ifndef BATON_RUN_AFRESH_H
#define BATON_RUN_AFRESH_H

#define RUN_MAX_AFRESH 3

/* Whether this process may still continue a run in a fresh one. */
int run_afresh_allowed(void);

/* Executes 'baton resume [--quiet] [--worker W] -- RUN_DIR' in this process's place, its
 * descriptors other than 0-2 closed; returns only where it could not (1, said with
 * "baton PROG:"). */
int run_afresh(const char *prog, int quiet, const char *worker, const char *run_dir);

#endif
