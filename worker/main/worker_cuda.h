/* The CUDA engine as a module that baton-worker loads only for a stage that runs on GPUs.
 *
 * Why a module: the CUDA libraries (cuBLASLt alone is over 500 MB) cost a process that
 * links them about 0.4 s of CPU and 100 MB of touched pages before main() runs. A
 * baton-worker on the CPU engine never uses them, so they are not linked into it: the
 * CUDA backend (worker/cuda) and the NCCL comm backend (comm/comm_nccl.c) are built into
 * baton-cuda.so (worker/CMakeLists.txt), next to the executables' directory in lib/
 * (<dir of baton-worker>/../lib/baton-cuda.so, in the build tree and in the GPU bundle
 * alike). The module's own references to the engine (backend_register_cuda, comm_fail,
 * bt_diag_set, ...) resolve to baton-worker's, which exports its symbols for it.
 *
 * The module exports one function, baton_cuda_module, returning its table. */
#ifndef BATON_WORKER_CUDA_H
#define BATON_WORKER_CUDA_H

#include "comm.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BATON_CUDA_MODULE_ABI    1
#define BATON_CUDA_MODULE_FILE   "baton-cuda.so"
#define BATON_CUDA_MODULE_SYMBOL "baton_cuda_module"

typedef struct baton_cuda_table {
    int abi; /* BATON_CUDA_MODULE_ABI of the module's build */
    /* registers the CUDA backend for cluster.device: cuda (backend_select.h) */
    void (*backend_register)(void);
    /* comm_nccl.h's; NULL in a module built without NCCL */
    int (*nccl_device_count)(int *count, bt_diag *diag);
    int (*nccl_init)(comm **out, const comm_bootstrap *bs, int device, bt_diag *diag);
} baton_cuda_table;

typedef const baton_cuda_table *(*baton_cuda_module_fn)(void);

/* Loads the module and registers its backend (once: later calls after a success return
 * 0). 0, or BT_EUNSUPPORTED with diag naming the module's path and the reason
 * (not built: no nvcc at build time, a sanitizer build; or dlopen's error). */
int worker_cuda_load(bt_diag *diag);

/* Where this worker takes its CUDA engine from and whether it is there, in words, for
 * --help (nothing is loaded). */
void worker_cuda_status(char *out, size_t cap);

/* The NCCL functions of the loaded module; BT_EUNSUPPORTED with diag when there are none
 * (not loaded, or built without NCCL). */
int worker_nccl_device_count(int *count, bt_diag *diag);
int worker_nccl_init(comm **out, const comm_bootstrap *bs, int device, bt_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
