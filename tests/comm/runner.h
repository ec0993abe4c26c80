/* A multi-process test runner for the communication interface, after libuv's: the test
 * binary forks one child per rank and re-executes itself as that child
 * (`test_comm --child SCENARIO RANK DIR FD`); the parent supervises them with a
 * deadline, acts on their events (kill or stop a rank), kills and reaps every child on
 * failure and removes the scenario's temporary directory in every case.
 *
 * Children report events to the parent as lines "RANK KEY VALUE" on a pipe (one write
 * each, so lines from different children never interleave). Times are CLOCK_MONOTONIC
 * seconds, comparable across processes. */
#ifndef BATON_TEST_COMM_RUNNER_H
#define BATON_TEST_COMM_RUNNER_H

#include <sys/types.h>

#include "comm.h"

enum { RUNNER_MAX_RANKS = 16, RUNNER_MAX_KEYS = 16 };

/* What a child sees. */
typedef struct child_env {
    const char *scenario;
    int rank;
    int world;
    const char *dir; /* the scenario's private directory; the rendezvous store lives here */
    int event_fd;
} child_env;

/* What the parent keeps per rank. */
typedef struct rank_state {
    pid_t pid;   /* 0: not started or reaped */
    int started; /* 1 if this rank was started */
    int status;  /* waitpid status once reaped */
    int reaped;
    int nkeys;
    char keys[RUNNER_MAX_KEYS][32];
    double vals[RUNNER_MAX_KEYS];
} rank_state;

typedef struct supervisor {
    int world;
    rank_state ranks[RUNNER_MAX_RANKS];
    double marks[4]; /* times the scenario records (when it killed or stopped a rank) */
    int failures;
} supervisor;

typedef struct scenario {
    const char *name;
    int world;
    int absent;     /* the last `absent` ranks are never started */
    int deadline_s; /* the parent kills everything after this */
    /* Runs in each child; returns its exit status (0 = pass). */
    int (*child)(const child_env *env);
    /* Parent side, optional: on each event, and once after all children are reaped.
     * Both return the number of failed checks. Without `check`, every started rank
     * must exit 0. */
    int (*on_event)(supervisor *s, int rank, const char *key, double val);
    int (*check)(supervisor *s);
} scenario;

extern const scenario comm_scenarios[];

/* Child side helpers. */
double now_s(void);
void sleep_ms(int ms);
void child_event(const child_env *env, const char *key, double val);
/* comm_gloo_init on the scenario directory with the given prefix and timeout. */
int child_init(const child_env *env, const char *prefix, int timeout_ms, comm **out, bt_diag *diag);

/* Parent side helpers. */
int sup_value(const supervisor *s, int rank, const char *key, double *val);
int sup_count(const supervisor *s, const char *key);
void sup_signal(supervisor *s, int rank, int sig);
/* Checks that rank exited with status code (sig == 0) or was killed by sig. */
int sup_expect_exit(supervisor *s, int rank, int code, int sig);

#endif
