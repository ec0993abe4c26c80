/* How many threads OpenBLAS runs in each worker of the CPU engine.
 *
 * OpenBLAS starts one thread per CPU in every process. With several ranks on one host
 * that is ranks x CPUs threads, and OpenBLAS's idle threads spin on sched_yield, so
 * the ranks take the CPUs from each other (4-rank tests on 2 CPUs: 68-100k involuntary
 * context switches in 4 s, 20-45% more wall time than with one thread each). So each
 * worker takes its share, the CPUs it may run on divided by the ranks on its host
 * (torchrun sets one OpenMP thread per process for the same reason). The usual
 * variables still decide when set: OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS,
 * OMP_NUM_THREADS, in OpenBLAS's own order. */
#ifndef BATON_CPU_THREADS_H
#define BATON_CPU_THREADS_H

typedef struct cpu_threads {
    int threads;     /* OpenBLAS's thread count now */
    int cpus;        /* the CPUs this process may run on (its affinity mask) */
    int host_ranks;  /* the worker processes on this host */
    const char *env; /* the variable that set threads, or NULL when chosen here */
} cpu_threads;

/* The share of one rank: cpus / host_ranks, at least 1. */
int cpu_threads_share(int cpus, int host_ranks);

/* Sets OpenBLAS's thread count to this process's share (unless one of the variables
 * above is set) and reports what is in effect. host_ranks < 1 counts as 1. */
void cpu_threads_apply(cpu_threads *out, int host_ranks);

#endif
