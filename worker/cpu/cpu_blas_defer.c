/* OpenBLAS's thread pool kept from starting as the library loads (cpu_blas_defer.h). */
#define _GNU_SOURCE /* sched_setaffinity, CPU_COUNT */
#include "cpu_blas_defer.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The mask the process started with and the CPU it runs on while narrowed (cpu_blas_defer.h
 * says why this is process state). */
static cpu_set_t cpu_blas_mask;
static int cpu_blas_narrowed;
static int cpu_blas_cpu = -1;

void cpu_blas_threads_defer(void) {
    if (sched_getaffinity(0, sizeof cpu_blas_mask, &cpu_blas_mask) != 0) return;
    int n = CPU_COUNT(&cpu_blas_mask);
    if (n < 2) return;
    int pick = (int)(getpid() % n), seen = 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int k = 0; k < CPU_SETSIZE && cpu_blas_cpu < 0; k++)
        if (CPU_ISSET(k, &cpu_blas_mask) && seen++ == pick) {
            CPU_SET(k, &one);
            cpu_blas_cpu = k;
        }
    cpu_blas_narrowed = cpu_blas_cpu >= 0 && sched_setaffinity(0, sizeof one, &one) == 0;
}

int cpu_blas_threads_restore(const char *prog) {
    if (!cpu_blas_narrowed) return 0;
    cpu_blas_narrowed = 0;
    if (sched_setaffinity(0, sizeof cpu_blas_mask, &cpu_blas_mask) == 0) return 0;
    int err = errno;
    fprintf(stderr,
            "%s: warning: cannot give back the CPUs narrowed while the libraries loaded "
            "(sched_setaffinity: %s): this process, its threads and its children run on "
            "CPU %d only\n",
            prog, strerror(err), cpu_blas_cpu);
    return -err;
}
