/* OpenBLAS's buffers under an address-space limit (ulimit -v).
 *
 * Each OpenBLAS thread takes one GEMM buffer of 128 MB (Debian's 0.3.21 on x86-64: 32 << 22
 * bytes and a page) when it starts, the calling thread on its first GEMM. Where the
 * allocation fails, OpenBLAS retries it forever: a thread pool started as the library
 * loads spins a CPU, and its fork handler (which joins the pool) then hangs every fork()
 * of the process, signals blocked (`baton run` under `ulimit -v 200000`). A worker spins
 * in its first GEMM and is taken for a hang.
 *
 * So no pool starts as the library loads: OpenBLAS sizes it by the CPUs the process may
 * run on, so a program's .preinit_array (which runs before any library's initializer)
 * calls cpu_blas_threads_defer, which narrows the affinity mask to one CPU, and main
 * calls cpu_blas_threads_restore first thing, which gives the whole mask back (not an
 * environment variable: glibc sets environ again after .preinit_array). A program that
 * multiplies then starts its threads through cpu_threads_apply and takes every buffer at
 * once through cpu_blas_buffers_reserve, which first makes sure the address space has
 * room and says so where it has not. The buffers then come before the model's memory,
 * whose allocation fails with a message of its own. Where the user set
 * OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS, OpenBLAS starts that pool as
 * it loads, as before. */
#ifndef BATON_CPU_BLAS_MEM_H
#define BATON_CPU_BLAS_MEM_H

#include <stddef.h>

#include "util/err.h"

/* The address space one OpenBLAS thread's buffer takes (with malloc's page around it). */
#define CPU_BLAS_BUFFER_BYTES (((size_t)32 << 22) + 8192)

/* From .preinit_array, with the envp it is given (getenv does not work yet): narrows the
 * calling (only) thread's affinity to its first CPU unless one of the variables above is
 * set. */
void cpu_blas_threads_defer(char **envp);

/* First thing in main (before any thread starts, and before cpu_blas_core_ensure, whose
 * execv would carry the narrow mask): gives back the affinity cpu_blas_threads_defer
 * narrowed. */
void cpu_blas_threads_restore(void);

/* Checks that `threads` buffers fit in the address space left under RLIMIT_AS, then has
 * OpenBLAS take them (one GEMM that every thread works on). BT_ENOMEM with a message
 * naming the sizes and the limit where they do not fit (nothing then spins). */
int cpu_blas_buffers_reserve(int threads, bt_diag *diag);

/* Where RLIMIT_AS is finite: writes " (the address-space limit, ulimit -v, is N KB)" to
 * out and returns 1; else writes "" and returns 0. */
int cpu_mem_as_limit_note(char *out, size_t cap);

#endif
