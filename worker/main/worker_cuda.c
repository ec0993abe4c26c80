/* Loading baton-cuda.so (worker_cuda.h). Three builds:
 *  - BATON_CUDA_MODULE: the module was built next to this executable; it is dlopen'ed;
 *  - BATON_CUDA_EMULATED (tests/gpu's baton-worker-emulated): the CUDA backend is
 *    compiled in, run by the CPU emulation, and registered directly; no NCCL;
 *  - neither: a CUDA stage fails with a message that says why. */
#include "worker_cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef BATON_CUDA_EMULATED
#include "cuda_backend.h"
#endif

static const char worker_cuda_not_built[] =
    "cluster.device is cuda but this baton-worker was built without the CUDA backend (no "
    "nvcc at build time, or a sanitizer build); rebuild on a machine with the CUDA toolkit "
    "or set cluster.device: cpu";

static const baton_cuda_table *worker_cuda_table;

#ifdef BATON_CUDA_MODULE
/* <directory of this executable>/../lib/baton-cuda.so, without the "..": /proc/self/exe
 * has no symbolic links left. */
static int worker_cuda_path(char *path, size_t cap, bt_diag *diag) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        bt_diag_set(diag,
                    "cluster.device is cuda: cannot find this executable's directory "
                    "(/proc/self/exe) to load the CUDA engine (%s) from",
                    BATON_CUDA_MODULE_FILE);
        return BT_EUNSUPPORTED;
    }
    exe[n] = '\0';
    for (int up = 0; up < 2; up++) { /* the executable's name, then its directory's */
        char *slash = strrchr(exe, '/');
        if (slash != NULL) *slash = '\0';
    }
    int len = snprintf(path, cap, "%s/lib/%s", exe, BATON_CUDA_MODULE_FILE);
    if (len < 0 || (size_t)len >= cap) {
        bt_diag_set(diag, "cluster.device is cuda: the CUDA engine's path under %s is too long",
                    exe);
        return BT_EUNSUPPORTED;
    }
    return 0;
}

static int worker_cuda_open(bt_diag *diag) {
    char path[PATH_MAX + 32];
    int rc = worker_cuda_path(path, sizeof path, diag);
    if (rc != 0) return rc;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        bt_diag_set(diag, "cluster.device is cuda but the CUDA engine cannot be loaded: %s",
                    dlerror());
        return BT_EUNSUPPORTED;
    }
    baton_cuda_module_fn get;
    *(void **)&get = dlsym(h, BATON_CUDA_MODULE_SYMBOL);
    const baton_cuda_table *t = get != NULL ? get() : NULL;
    if (t == NULL || t->abi != BATON_CUDA_MODULE_ABI) {
        bt_diag_set(diag,
                    "cluster.device is cuda but %s is not this baton-worker's CUDA engine "
                    "(%s); rebuild baton",
                    path, t == NULL ? "no " BATON_CUDA_MODULE_SYMBOL : "another version");
        dlclose(h);
        return BT_EUNSUPPORTED;
    }
    worker_cuda_table = t; /* never unloaded: the backend's code stays registered */
    return 0;
}
#elif defined(BATON_CUDA_EMULATED)
static int worker_cuda_open(bt_diag *diag) {
    (void)diag;
    static const baton_cuda_table emulated = {.abi = BATON_CUDA_MODULE_ABI,
                                              .backend_register = cuda_backend_register};
    worker_cuda_table = &emulated;
    return 0;
}
#else
static int worker_cuda_open(bt_diag *diag) {
    bt_diag_set(diag, "%s", worker_cuda_not_built);
    return BT_EUNSUPPORTED;
}
#endif

#ifdef BATON_CUDA_MODULE
void worker_cuda_status(char *out, size_t cap) {
    char path[PATH_MAX + 32];
    bt_diag d;
    bt_diag_init(&d);
    if (worker_cuda_path(path, sizeof path, &d) != 0)
        snprintf(out, cap, "%s", d.msg);
    else if (access(path, R_OK) == 0)
        snprintf(out, cap, "%s", path);
    else
        snprintf(out, cap, "%s, which is missing", path);
}
#elif defined(BATON_CUDA_EMULATED)
void worker_cuda_status(char *out, size_t cap) {
    snprintf(out, cap, "compiled in, run by the CPU emulation of CUDA (tests/gpu)");
}
#else
void worker_cuda_status(char *out, size_t cap) {
    snprintf(out, cap, "not built (no nvcc at build time, or a sanitizer build)");
}
#endif

int worker_cuda_load(bt_diag *diag) {
    if (worker_cuda_table != NULL) return 0;
    int rc = worker_cuda_open(diag);
    if (rc == 0) worker_cuda_table->backend_register();
    return rc;
}

static int worker_nccl_missing(bt_diag *diag) {
    if (worker_cuda_table == NULL) {
        bt_diag_set(diag, "%s", worker_cuda_not_built);
        return BT_EUNSUPPORTED;
    }
    bt_diag_set(diag, "cluster.device is cuda, but this baton-worker's CUDA engine was built "
                      "without NCCL (not found at build time), so its ranks cannot communicate "
                      "on GPUs; rebuild baton with NCCL installed, or set cluster.device: cpu");
    return BT_EUNSUPPORTED;
}

int worker_nccl_device_count(int *count, bt_diag *diag) {
    const baton_cuda_table *t = worker_cuda_table;
    if (t == NULL || t->nccl_device_count == NULL) return worker_nccl_missing(diag);
    return t->nccl_device_count(count, diag);
}

int worker_nccl_init(comm **out, const comm_bootstrap *bs, int device, bt_diag *diag) {
    const baton_cuda_table *t = worker_cuda_table;
    if (t == NULL || t->nccl_init == NULL) return worker_nccl_missing(diag);
    return t->nccl_init(out, bs, device, diag);
}
