/* OpenBLAS's thread count per worker (cpu_threads.h). */
#define _GNU_SOURCE
#include "cpu_threads.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <cblas.h>

#include "cpu_blas_mem.h"

int cpu_threads_share(int cpus, int host_ranks) {
    if (cpus < 1) cpus = 1;
    if (host_ranks < 1) host_ranks = 1;
    return cpus / host_ranks > 1 ? cpus / host_ranks : 1;
}

static int cpu_threads_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The first of OpenBLAS's own variables set to a positive count, in the order it reads
 * them (it reads them as atoi does, a count of 0 or less as unset), and *n its count. */
static const char *cpu_threads_env(int *n) {
    static const char *const names[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                        "OMP_NUM_THREADS"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && atoi(v) > 0) {
            *n = atoi(v);
            return names[i];
        }
    }
    return NULL;
}

void cpu_threads_choose(cpu_threads *out, int host_ranks) {
    int n = 0;
    out->cpus = cpu_threads_cpus();
    out->host_ranks = host_ranks > 0 ? host_ranks : 1;
    out->env = cpu_threads_env(&n);
    if (out->env != NULL)
        out->threads = n < out->cpus ? n : out->cpus;
    else
        out->threads = cpu_threads_share(out->cpus, out->host_ranks);
}

int cpu_threads_apply(cpu_threads *out, int host_ranks, bt_diag *diag) {
    cpu_threads_choose(out, host_ranks);
    int rc = cpu_blas_threads_start(out->threads, diag);
    if (rc == 0) out->threads = openblas_get_num_threads();
    return rc;
}
