/* Which compute backend a stage runs on: the recipe's cluster.device. "cpu" is the CPU
 * backend (worker/cpu, always built). "cuda" is worker/cuda's, which lives in a library
 * of its own (built only where nvcc is): a program linked with it registers it here
 * (baton-worker when built with CUDA, the GPU tests), so the engine itself needs no CUDA.
 * Without a registration a CUDA stage fails with BT_EUNSUPPORTED and a message that says
 * so. */
#ifndef BATON_BACKEND_SELECT_H
#define BATON_BACKEND_SELECT_H

#include "backend.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens the backend on the device of a process that is local_rank-th on its node (the
 * implementation maps it to a device: local_rank % devices); 0 or a negative BT_ code with
 * diag set. close releases what open set up. */
typedef int (*backend_open_fn)(backend *be, int local_rank, bt_diag *diag);
typedef void (*backend_close_fn)(backend *be);

void backend_register_cuda(backend_open_fn open, backend_close_fn close);

/* Fills be: the CUDA backend when cuda is set (the registered one), else the CPU backend.
 * *opened tells backend_close whether there is anything to release. */
int backend_open(backend *be, int cuda, int local_rank, int *opened, bt_diag *diag);
void backend_close(backend *be, int opened);

/* An on/off setting from the environment: "0" off, "1" on, anything else (or unset)
 * `automatic`. */
int backend_env_switch(const char *name, int automatic);

/* A side queue of be (backend.h: stream_new) for `purpose` (e.g. "the pipeline
 * transfers"); NULL with diag set when the backend could not make one. */
void *backend_side_queue(backend *be, const char *purpose, bt_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
