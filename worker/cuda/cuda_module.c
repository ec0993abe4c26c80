/* baton-cuda.so's entry point (worker/main/worker_cuda.h): the CUDA backend and, when
 * built with NCCL, the NCCL comm backend, as one table. */
#include "cuda_backend.h"
#include "worker_cuda.h"
#ifdef BATON_HAVE_NCCL
#include "comm_nccl.h"
#endif

__attribute__((visibility("default"))) const baton_cuda_table *baton_cuda_module(void);

const baton_cuda_table *baton_cuda_module(void) {
    static const baton_cuda_table table = {
        .abi = BATON_CUDA_MODULE_ABI,
        .backend_register = cuda_backend_register,
#ifdef BATON_HAVE_NCCL
        .nccl_device_count = comm_nccl_device_count,
        .nccl_init = comm_nccl_init,
#endif
    };
    return &table;
}
