/* LD_PRELOAD'ed by check-process.sh's clock-step case: the wall clock (CLOCK_REALTIME by
 * clock_gettime, gettimeofday and time) reads BATON_TEST_RT_SHIFT_S seconds off the
 * kernel's in baton and BATON_TEST_RT_SHIFT_WORKER_S in baton-worker, as if it had been
 * stepped by minus that much just after each read. A wait whose deadline was taken on the
 * wall clock then lasts that much longer (a positive shift) or ends at once (a negative
 * one): the kernel times pthread_cond_timedwait on its own clock. CLOCK_MONOTONIC is left
 * alone. */
#define _GNU_SOURCE /* RTLD_NEXT, program_invocation_short_name */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* By the program's name (argv[0]; /proc/self/exe would be valgrind's under valgrind). */
static long rt_shift(void) {
    const char *p = program_invocation_short_name, *s = NULL;
    if (strcmp(p, "baton") == 0) s = getenv("BATON_TEST_RT_SHIFT_S");
    if (strcmp(p, "baton-worker") == 0) s = getenv("BATON_TEST_RT_SHIFT_WORKER_S");
    return s != NULL ? atol(s) : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (real == NULL)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += rt_shift();
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec, tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t != NULL) *t = ts.tv_sec;
    return ts.tv_sec;
}
