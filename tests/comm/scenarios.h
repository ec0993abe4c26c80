/* The scenarios of scenarios_fault.c, listed in scenarios.c's table. */
#ifndef BATON_TEST_COMM_SCENARIOS_H
#define BATON_TEST_COMM_SCENARIOS_H

#include "runner.h"

int child_fail_kill(const child_env *env);
int child_fail_leave(const child_env *env);
int on_event_kill(supervisor *s, int rank, const char *key, double val);
int check_kill(supervisor *s);
int child_fail_hang(const child_env *env);
int on_event_hang(supervisor *s, int rank, const char *key, double val);
int check_hang(supervisor *s);
int child_fail_nostart(const child_env *env);
int check_nostart(supervisor *s);
int child_retry_prefix(const child_env *env);

#endif
