/* Monotonic time for durations and deadlines (never the wall clock, which can jump). */
#ifndef BATON_CLOCK_H
#define BATON_CLOCK_H

/* Seconds on CLOCK_MONOTONIC. */
double bt_clock_now(void);

#endif
