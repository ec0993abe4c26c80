/* The scenarios of scenarios_fault.c, scenarios_p2p.c and scenarios_split.c, listed in
 * scenarios.c's table. */
#ifndef BATON_TEST_COMM_SCENARIOS_H
#define BATON_TEST_COMM_SCENARIOS_H

#include "runner.h"

int child_fail_kill(const child_env *env);
int child_fail_kill_p2p(const child_env *env);
int child_fail_leave(const child_env *env);
/* Reports (an event) whether c's error names victim, and returns 0 where it must and does
 * not: over shared memory. Over Gloo a survivor that failed first closes its connections
 * at once, which the other survivor may take for its death (naming it) or see as a reset
 * Gloo names no peer for: check_leave then wants only some survivor to name the victim.
 * (The caller CHECKs the result: check.h's failure count is per file.) */
int leave_names_victim(const child_env *env, comm *c, int victim);
int check_leave(supervisor *s);
int on_event_kill(supervisor *s, int rank, const char *key, double val);
int check_kill(supervisor *s);
int child_fail_hang(const child_env *env);
int child_fail_hang_p2p(const child_env *env);
int on_event_hang(supervisor *s, int rank, const char *key, double val);
int check_hang(supervisor *s);
int child_fail_nostart(const child_env *env);
int check_nostart(supervisor *s);
int child_retry_prefix(const child_env *env);
int child_p2p_large(const child_env *env);
int child_fail_leave_p2p(const child_env *env);
int child_fail_split(const child_env *env);
int on_event_split(supervisor *s, int rank, const char *key, double val);
int check_split(supervisor *s);

#endif
