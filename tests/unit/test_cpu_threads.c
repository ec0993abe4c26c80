/* cpu_threads: each worker's share of the host's CPUs for OpenBLAS, and the variables
 * that override it. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>

#include <cblas.h>

#include "check.h"
#include "cpu_threads.h"

static void test_share(void) {
    CHECK_EQ_U64(cpu_threads_share(2, 4), 1); /* more ranks than CPUs: one each */
    CHECK_EQ_U64(cpu_threads_share(16, 4), 4);
    CHECK_EQ_U64(cpu_threads_share(7, 2), 3); /* rounded down: never more than the host */
    CHECK_EQ_U64(cpu_threads_share(2, 1), 2);
    CHECK_EQ_U64(cpu_threads_share(0, 0), 1);
    CHECK_EQ_U64(cpu_threads_share(8, -3), 8);
}

/* Without the variables: the share is what OpenBLAS runs, within its compiled maximum. */
static void test_apply(void) {
    unsetenv("OPENBLAS_NUM_THREADS"), unsetenv("GOTO_NUM_THREADS"), unsetenv("OMP_NUM_THREADS");
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    cpu_threads t;
    bt_diag d;
    bt_diag_init(&d);
    CHECK_EQ_U64(cpu_threads_apply(&t, 1, &d), 0);
    CHECK_EQ_U64(t.cpus, CPU_COUNT(&set));
    CHECK_EQ_U64(t.host_ranks, 1);
    CHECK(t.env == NULL);
    CHECK(t.threads == t.cpus || (t.threads < t.cpus && t.threads >= 32));
    CHECK_EQ_U64(cpu_threads_apply(&t, 1000, &d), 0);
    CHECK_EQ_U64(t.threads, 1);
    CHECK_EQ_U64(openblas_get_num_threads(), 1);
    cpu_threads_choose(&t, 0);
    CHECK_EQ_U64(t.host_ranks, 1);
}

/* A variable set to a positive count: its count (at most the CPUs, as OpenBLAS has it) is
 * applied, and the variable named; OpenBLAS starts no pool as it loads (cpu_blas_defer.h),
 * so nothing else would. */
static void test_override(void) {
    cpu_threads t;
    bt_diag d;
    bt_diag_init(&d);
    CHECK_EQ_U64(cpu_threads_apply(&t, 1000, &d), 0); /* 1 thread */
    int two = t.cpus < 2 ? t.cpus : 2;
    setenv("OMP_NUM_THREADS", "3", 1);
    cpu_threads_choose(&t, 1);
    CHECK(t.env != NULL && strcmp(t.env, "OMP_NUM_THREADS") == 0);
    CHECK_EQ_U64(t.threads, t.cpus < 3 ? t.cpus : 3);
    setenv("OPENBLAS_NUM_THREADS", "2", 1); /* OpenBLAS reads it first */
    CHECK_EQ_U64(cpu_threads_apply(&t, 1, &d), 0);
    CHECK(t.env != NULL && strcmp(t.env, "OPENBLAS_NUM_THREADS") == 0);
    CHECK_EQ_U64(t.threads, two);
    CHECK_EQ_U64(openblas_get_num_threads(), two);
    setenv("OPENBLAS_NUM_THREADS", "", 1); /* empty: not set */
    cpu_threads_choose(&t, 1);
    CHECK(t.env != NULL && strcmp(t.env, "OMP_NUM_THREADS") == 0);
    setenv("OPENBLAS_NUM_THREADS", "0", 1); /* 0: not set, as OpenBLAS reads it */
    cpu_threads_choose(&t, 1);
    CHECK(t.env != NULL && strcmp(t.env, "OMP_NUM_THREADS") == 0);
    setenv("OMP_NUM_THREADS", "100000", 1); /* capped at the CPUs */
    cpu_threads_choose(&t, 1);
    CHECK_EQ_U64(t.threads, t.cpus);
    CHECK_EQ_U64(cpu_threads_apply(&t, 1000, &d), 0);
    unsetenv("OPENBLAS_NUM_THREADS"), unsetenv("OMP_NUM_THREADS");
}

int main(void) {
    test_share();
    test_apply();
    test_override();
    return check_status();
}
