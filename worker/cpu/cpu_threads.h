/* How many threads OpenBLAS runs in each worker of the CPU engine.
 *
 * OpenBLAS starts one thread per CPU in every process. With several ranks on one host
 * that is ranks x CPUs threads, and OpenBLAS's idle threads spin on sched_yield, so
 * the ranks take the CPUs from each other (4-rank tests on 2 CPUs: 68-100k involuntary
 * context switches in 4 s, 20-45% more wall time than with one thread each). So each
 * worker takes its share, the CPUs it may run on divided by the ranks on its host
 * (torchrun sets one OpenMP thread per process for the same reason). The usual
 * variables still decide when set to a positive count: OPENBLAS_NUM_THREADS,
 * GOTO_NUM_THREADS, OMP_NUM_THREADS, in OpenBLAS's own order, capped at the CPUs as
 * OpenBLAS caps them. OpenBLAS itself starts no thread as it loads (cpu_blas_defer.h):
 * the count is applied here, after checking that the threads' buffers fit. */
#ifndef BATON_CPU_THREADS_H
#define BATON_CPU_THREADS_H

#include "util/err.h"

typedef struct cpu_threads {
    int threads;     /* OpenBLAS's thread count (chosen; in effect once applied) */
    int cpus;        /* the CPUs this process may run on (its affinity mask) */
    int host_ranks;  /* the worker processes on this host */
    const char *env; /* the variable that set threads, or NULL when chosen here */
} cpu_threads;

/* The share of one rank: cpus / host_ranks, at least 1. */
int cpu_threads_share(int cpus, int host_ranks);

/* The count this process should run: the variables' (see above), else its share.
 * host_ranks < 1 counts as 1. Changes nothing. */
void cpu_threads_choose(cpu_threads *out, int host_ranks);

/* cpu_threads_choose, then has OpenBLAS run that many threads and take their buffers
 * (cpu_blas_threads_start); out->threads is then the count in effect. BT_ENOMEM with a
 * message where the buffers do not fit the address space (no thread started). */
int cpu_threads_apply(cpu_threads *out, int host_ranks, bt_diag *diag);

#endif
