/* OpenBLAS's thread pool kept from starting as the library loads.
 *
 * OpenBLAS starts a pool of threads in its initializer, sized by the CPUs the process may
 * run on, or by OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS where set, capped
 * at those CPUs. Each pool thread takes a 128 MB GEMM buffer as it starts and retries that
 * allocation for ever when it fails: under an address-space limit (ulimit -v) such a pool
 * spins a CPU, OpenBLAS's fork handler (which joins the pool) then hangs every fork() of
 * the process, signals blocked, and its exit handler hangs the exit. So a program's
 * .preinit_array (which runs before any library's initializer) calls
 * cpu_blas_threads_defer, which narrows the affinity mask to one CPU whatever the
 * variables say: OpenBLAS then starts no pool. main calls cpu_blas_threads_restore first
 * thing, which gives the whole mask back (not an environment variable: glibc sets environ
 * again after .preinit_array). A program that multiplies starts its threads itself, after
 * checking that they fit (cpu_threads_apply, cpu_blas_mem.h), honouring the variables.
 *
 * The mask kept between the two calls is the one piece of mutable process state in the
 * CPU engine (STYLE §3's exception): a .preinit_array function can hand nothing to main
 * otherwise. A side effect: OpenBLAS's openblas_get_num_procs() stays 1 for the life of
 * the process (OpenBLAS keeps the smallest count it has seen); nothing here calls it. */
#ifndef BATON_CPU_BLAS_DEFER_H
#define BATON_CPU_BLAS_DEFER_H

/* From .preinit_array (the only thread, stdio not set up yet): narrows the affinity mask
 * to one of its CPUs, picked by the process id so that processes started together do
 * their libraries' initialization on different CPUs. */
void cpu_blas_threads_defer(void);

/* First thing in main (before any thread starts, and before cpu_blas_core_ensure, whose
 * execv would carry the narrow mask): gives back the mask cpu_blas_threads_defer narrowed.
 * Where that fails, says on stderr, as `prog: warning: ...`, that the process runs on one
 * CPU, and returns -errno; else 0. */
int cpu_blas_threads_restore(const char *prog);

#endif
