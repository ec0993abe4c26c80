/* Registers the CUDA backend with the engine's backend choice (backend_select.h). */
#include "backend_select.h"
#include "cuda_backend.h"
#include "cuda_internal.cuh"

static int cuda_open_local(backend *be, int local_rank, bt_diag *diag) {
    int n = cuda_device_count(diag);
    if (n < 0) return n; /* no device: BT_EUNSUPPORTED, the reason in diag */
    int rc = cuda_backend_init(be, (local_rank < 0 ? 0 : local_rank) % n, diag);
    if (rc == 0) be->error = cuda_backend_error, be->stream = ((cuda_ctx *)be->ctx)->stream;
    return rc;
}

extern "C" void cuda_backend_register(void) {
    backend_register_cuda(cuda_open_local, cuda_backend_free);
}
