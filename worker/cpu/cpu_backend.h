/* The CPU compute backend: OpenBLAS cblas_sgemm for every matrix product (on the
 * worker's share of the host's CPUs, cpu_threads.h), plain C loops (written so the
 * compiler can vectorize them) for the rest, on one thread; deterministic at a given
 * thread count. It is the numeric reference for the CUDA backend. */
#ifndef BATON_CPU_BACKEND_H
#define BATON_CPU_BACKEND_H

#include "backend.h"

/* Fills the table. The CPU backend keeps no state; there is nothing to release. */
void cpu_backend_init(backend *be);

#endif
