#include "backend_select.h"

#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"

static backend_open_fn cuda_open;
static backend_close_fn cuda_close;

void backend_register_cuda(backend_open_fn open, backend_close_fn close) {
    cuda_open = open, cuda_close = close;
}

int backend_open(backend *be, int cuda, int local_rank, int *opened, bt_diag *diag) {
    *opened = 0;
    if (!cuda) {
        cpu_backend_init(be);
        return 0;
    }
    if (cuda_open == NULL) {
        memset(be, 0, sizeof *be);
        bt_diag_set(diag, "cluster.device is cuda but this program was built without the CUDA "
                          "backend (no nvcc at build time, or a sanitizer build); rebuild on a "
                          "machine with the CUDA toolkit or set cluster.device: cpu");
        return BT_EUNSUPPORTED;
    }
    int rc = cuda_open(be, local_rank, diag);
    *opened = rc == 0;
    return rc;
}

void backend_close(backend *be, int opened) {
    if (opened && cuda_close != NULL) cuda_close(be);
}

void *backend_side_queue(backend *be, const char *purpose, bt_diag *diag) {
    void *s = be->stream_new != NULL ? be->stream_new(be) : NULL;
    if (s != NULL && be->sync(be) == 0) return s;
    if (s != NULL) be->stream_free(be, s);
    bt_diag_set(diag, "cannot create a side queue on the %s backend for %s", be->name, purpose);
    return NULL;
}

int backend_env_switch(const char *name, int automatic) {
    const char *v = getenv(name);
    if (v != NULL && strcmp(v, "0") == 0) return 0;
    if (v != NULL && strcmp(v, "1") == 0) return 1;
    return automatic;
}
