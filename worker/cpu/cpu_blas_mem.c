/* OpenBLAS's threads and buffers under an address-space limit (cpu_blas_mem.h). */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, pthread_getattr_default_np */
#include "cpu_blas_mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cblas.h>

int cpu_mem_as_limit_note(char *out, size_t cap) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        if (cap > 0) out[0] = '\0';
        return 0;
    }
    snprintf(out, cap, " (the address-space limit, ulimit -v, is %llu KB)",
             (unsigned long long)(rl.rlim_cur / 1024));
    return 1;
}

/* The address space this process maps now, in KB (0 where /proc does not say). */
static unsigned long long cpu_mem_mapped_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f == NULL) return 0;
    if (fscanf(f, "%llu", &pages) != 1) pages = 0;
    fclose(f);
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE) / 1024;
}

/* Whether `bytes` of address space can be mapped now (mapped and released again). */
static int cpu_mem_room(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -errno;
    munmap(p, bytes);
    return 0;
}

/* The address space a new thread takes besides its buffer: its stack (glibc's default,
 * which OpenBLAS's pool uses) and a guard page. OpenBLAS maps a buffer directly; only
 * where that fails does it fall back to malloc, whose new arena for the thread would
 * take 64 MB more, which the check keeps from happening. */
static size_t cpu_blas_thread_bytes(void) {
    size_t stack = (size_t)8 << 20;
    pthread_attr_t attr;
    if (pthread_getattr_default_np(&attr) == 0) {
        size_t s = 0;
        if (pthread_attr_getstacksize(&attr, &s) == 0 && s > 0) stack = s;
        pthread_attr_destroy(&attr);
    }
    return stack + (size_t)sysconf(_SC_PAGESIZE);
}

/* A GEMM large enough to run on every thread and past OpenBLAS's small-matrix path: each
 * thread has its buffer once it returns. */
#define CPU_BLAS_WARM_N 256

static int cpu_blas_warm(bt_diag *diag) {
    size_t n = CPU_BLAS_WARM_N;
    float *m = calloc(3 * n * n, sizeof *m);
    if (m == NULL) {
        bt_diag_set(diag, "cannot allocate %zu KB for a first GEMM", 3 * n * n * sizeof *m >> 10);
        return BT_ENOMEM;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, m, (int)n,
                m + n * n, (int)n, 0.0f, m + 2 * n * n, (int)n);
    free(m);
    return 0;
}

int cpu_blas_threads_start(int threads, bt_diag *diag) {
    if (threads < 1) threads = 1;
    /* the threads running now (none but the caller, the pool being deferred) have taken
     * their buffers or take them as they start: only the caller's and the new ones count */
    int have = openblas_get_num_threads();
    int fresh = threads > have ? threads - have : 0;
    size_t extra = cpu_blas_thread_bytes();
    size_t need =
        (size_t)(fresh + 1) * CPU_BLAS_BUFFER_BYTES + (size_t)fresh * extra + CPU_BLAS_SLACK_BYTES;
    int err = cpu_mem_room(need);
    if (err != 0) {
        char note[96], also[96] = "";
        cpu_mem_as_limit_note(note, sizeof note);
        if (fresh > 0)
            snprintf(also, sizeof also, ", and %zu MB of stack per thread started", extra >> 20);
        bt_diag_set(diag,
                    "cannot allocate %zu MB for OpenBLAS's %d thread(s) (a %zu MB GEMM buffer "
                    "each%s): %s%s, this process maps %llu KB already; raise the limit%s",
                    need >> 20, threads, CPU_BLAS_BUFFER_BYTES >> 20, also, strerror(-err), note,
                    cpu_mem_mapped_kb(), threads > 1 ? " or set OPENBLAS_NUM_THREADS lower" : "");
        return BT_ENOMEM;
    }
    openblas_set_num_threads(threads);
    return cpu_blas_warm(diag);
}
