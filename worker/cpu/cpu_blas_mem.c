/* OpenBLAS's buffers under an address-space limit (cpu_blas_mem.h). */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, sched_setaffinity */
#include "cpu_blas_mem.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cblas.h>

static const char *const cpu_blas_thread_vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                   "OMP_NUM_THREADS"};

/* The mask the process started with, while cpu_blas_threads_defer has it narrowed: state
 * of the process, as a .preinit_array function can hand nothing to main otherwise. */
static cpu_set_t cpu_blas_mask;
static int cpu_blas_narrowed;

/* Whether envp sets `name` to a non-empty value. */
static int cpu_blas_env_set(char **envp, const char *name) {
    size_t l = strlen(name);
    for (char **e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, l) == 0 && (*e)[l] == '=' && (*e)[l + 1] != '\0') return 1;
    return 0;
}

void cpu_blas_threads_defer(char **envp) {
    for (size_t i = 0; i < sizeof cpu_blas_thread_vars / sizeof *cpu_blas_thread_vars; i++)
        if (cpu_blas_env_set(envp, cpu_blas_thread_vars[i])) return;
    if (sched_getaffinity(0, sizeof cpu_blas_mask, &cpu_blas_mask) != 0 ||
        CPU_COUNT(&cpu_blas_mask) < 2)
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int k = 0; k < CPU_SETSIZE; k++)
        if (CPU_ISSET(k, &cpu_blas_mask)) {
            CPU_SET(k, &one);
            break;
        }
    cpu_blas_narrowed = sched_setaffinity(0, sizeof one, &one) == 0;
}

void cpu_blas_threads_restore(void) {
    if (cpu_blas_narrowed) sched_setaffinity(0, sizeof cpu_blas_mask, &cpu_blas_mask);
    cpu_blas_narrowed = 0;
}

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

/* A GEMM large enough to run on every thread and past OpenBLAS's small-matrix path: each
 * thread has its buffer once it returns. */
#define CPU_BLAS_WARM_N 256

int cpu_blas_buffers_reserve(int threads, bt_diag *diag) {
    if (threads < 1) threads = 1;
    size_t need = (size_t)threads * CPU_BLAS_BUFFER_BYTES;
    int err = cpu_mem_room(need);
    if (err != 0) {
        char note[96];
        cpu_mem_as_limit_note(note, sizeof note);
        bt_diag_set(diag,
                    "cannot allocate %zu MB for OpenBLAS's GEMM buffers (%d thread(s) x %zu MB): "
                    "%s%s, this process maps %llu KB already; raise the limit%s",
                    need >> 20, threads, CPU_BLAS_BUFFER_BYTES >> 20, strerror(-err), note,
                    cpu_mem_mapped_kb(), threads > 1 ? " or set OPENBLAS_NUM_THREADS lower" : "");
        return BT_ENOMEM;
    }
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
