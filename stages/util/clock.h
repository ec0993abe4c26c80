/* Monotonic time for durations and deadlines (never the wall clock, which can jump). */
#ifndef BATON_CLOCK_H
#define BATON_CLOCK_H

#include <pthread.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
double bt_clock_now(void);
/* This process's CPU seconds so far, every thread's (CLOCK_PROCESS_CPUTIME_ID). */
double bt_clock_cpu(void);

/* A condition variable whose pthread_cond_timedwait deadlines are on CLOCK_MONOTONIC
 * (the default, CLOCK_REALTIME, moves with the wall clock: set back an hour, a wait of a
 * second lasts an hour and one). pthread_cond_init's result. */
int bt_cond_init(pthread_cond_t *cv);

/* The CLOCK_MONOTONIC deadline `s` seconds from now (s <= 0: now), for
 * pthread_cond_timedwait on a condition variable made by bt_cond_init. */
struct timespec bt_clock_deadline(double s);

#endif
