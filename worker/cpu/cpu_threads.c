/* OpenBLAS's thread count per worker (cpu_threads.h). */
#define _GNU_SOURCE
#include "cpu_threads.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <cblas.h>

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

/* The first of OpenBLAS's own variables that is set, in the order it reads them. */
static const char *cpu_threads_env(void) {
    static const char *const names[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                        "OMP_NUM_THREADS"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && *v != '\0') return names[i];
    }
    return NULL;
}

void cpu_threads_apply(cpu_threads *out, int host_ranks) {
    out->cpus = cpu_threads_cpus();
    out->host_ranks = host_ranks > 0 ? host_ranks : 1;
    out->env = cpu_threads_env();
    if (out->env == NULL) openblas_set_num_threads(cpu_threads_share(out->cpus, out->host_ranks));
    out->threads = openblas_get_num_threads();
}
