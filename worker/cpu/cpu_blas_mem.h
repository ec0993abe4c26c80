/* OpenBLAS's threads and buffers under an address-space limit (ulimit -v).
 *
 * Each OpenBLAS pool thread takes one GEMM buffer of 128 MB (Debian's 0.3.21 on x86-64:
 * 32 << 22 bytes and a page; another build or architecture may differ, and the check
 * below is then off by the difference) as it starts, the calling thread on its first
 * GEMM. Where the allocation fails, OpenBLAS retries it forever: the thread spins, a GEMM
 * waits on it for ever, and so does the process's exit (OpenBLAS's destructor joins the
 * pool). So no pool starts as the library loads (cpu_blas_defer.h), and a program that
 * multiplies starts its threads through cpu_blas_threads_start, which checks that the
 * address space has room for every buffer before any thread exists, and starts none
 * where it has not. The buffers then come before the model's memory, whose allocation
 * fails with a message of its own. */
#ifndef BATON_CPU_BLAS_MEM_H
#define BATON_CPU_BLAS_MEM_H

#include <stddef.h>

#include "util/err.h"

/* The address space one OpenBLAS thread's buffer takes (with malloc's page around it). */
#define CPU_BLAS_BUFFER_BYTES (((size_t)32 << 22) + 8192)
/* Besides the buffers: the first GEMM's matrices and OpenBLAS's own small allocations. */
#define CPU_BLAS_SLACK_BYTES ((size_t)8 << 20)

/* Checks that the address space left under RLIMIT_AS holds the buffers of `threads`
 * threads (the caller's, and each new pool thread's with its stack), then
 * has OpenBLAS run `threads` threads and take every buffer (one GEMM that every thread
 * works on). BT_ENOMEM, with a message naming the sizes and the limit, where they do not
 * fit: no thread was started then, so nothing spins and the exit does not wait. */
int cpu_blas_threads_start(int threads, bt_diag *diag);

/* Where RLIMIT_AS is finite: writes " (the address-space limit, ulimit -v, is N KB)" to
 * out and returns 1; else writes "" and returns 0. */
int cpu_mem_as_limit_note(char *out, size_t cap);

#endif
