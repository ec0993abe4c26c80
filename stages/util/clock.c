#include "clock.h"

double bt_clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bt_clock_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bt_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc != 0) return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

struct timespec bt_clock_deadline(double s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (s <= 0) return ts;
    time_t whole = (time_t)s;
    long ns = ts.tv_nsec + (long)((s - (double)whole) * 1e9);
    ts.tv_sec += whole + ns / 1000000000L, ts.tv_nsec = ns % 1000000000L;
    return ts;
}
