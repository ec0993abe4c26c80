/* OpenBLAS's kernels for this CPU (cpu_blas_core.h). */
#define _GNU_SOURCE
#include "cpu_blas_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cblas.h>

cpu_blas_isa cpu_blas_isa_detect(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* libgcc's checks include the OS's support of the AVX and AVX-512 registers (XCR0) */
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return CPU_BLAS_ISA_OLD;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return CPU_BLAS_ISA_AVX512;
    return CPU_BLAS_ISA_AVX2;
#else
    return CPU_BLAS_ISA_OLD;
#endif
}

/* OpenBLAS's x86 cores whose kernels predate AVX2 + FMA, and its name for "none". */
static const char *const old_cores[] = {
    "unknown",   "Katmai",     "Coppermine",  "Northwood",     "Prescott", "Banias",
    "Atom",      "Core2",      "Penryn",      "Dunnington",    "Nehalem",  "Athlon",
    "Opteron",   "Nano",       "Barcelona",   "Opteron(SSE3)", "Bobcat",   "Sandybridge",
    "Bulldozer", "Piledriver", "Steamroller", "Excavator"};

const char *cpu_blas_core_better(const char *core, cpu_blas_isa isa) {
    if (core == NULL || isa == CPU_BLAS_ISA_OLD) return NULL;
    for (size_t i = 0; i < sizeof old_cores / sizeof *old_cores; i++)
        if (strcasecmp(core, old_cores[i]) == 0)
            return isa == CPU_BLAS_ISA_AVX512 ? "SkylakeX" : "Haswell";
    return NULL;
}

static int env_set(const char *name) {
    const char *v = getenv(name);
    return v != NULL && *v != '\0';
}

/* The core OpenBLAS had chosen, where this process replaced it ("" otherwise). */
static char replaced[32];

/* Whether executing /proc/self/exe runs this program again: not where it is the dynamic
 * loader (the program was started as `ld-linux-x86-64.so.2 PROGRAM`: executing it again
 * would lose the program), nor where the link cannot be read. */
static int self_runnable(void) {
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    return strncmp(base, "ld-", 3) != 0 && strncmp(base, "ld.so", 5) != 0;
}

/* The second run: the process's name (comm: what ps, pgrep, top and killall show) back to
 * the first run's, which the kernel had taken from the path it executed ("exe" now). */
static void comm_restore(void) {
    const char *name = getenv(CPU_BLAS_COMM_ENV);
    if (name != NULL && name[0] != '\0') prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
    unsetenv(CPU_BLAS_COMM_ENV);
}

/* The variables of the first run for the second, none left for what follows. */
static void ensure_unset(void) {
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(CPU_BLAS_CORE_REPLACED_ENV);
    unsetenv(CPU_BLAS_COMM_ENV);
}

void cpu_blas_core_ensure(char **argv) {
    const char *was = getenv(CPU_BLAS_CORE_REPLACED_ENV);
    if (was != NULL) { /* executed again below: OpenBLAS read the variable as it loaded */
        snprintf(replaced, sizeof replaced, "%s", was);
        comm_restore();
        /* what this program starts decides for itself (another host's CPU under srun,
         * another program under `baton launch`) */
        ensure_unset();
        return;
    }
    if (env_set("OPENBLAS_CORETYPE") || argv == NULL || argv[0] == NULL) return;
    const char *core = openblas_get_corename();
    const char *better = cpu_blas_core_better(core, cpu_blas_isa_detect());
    if (better == NULL || !self_runnable()) return;
    char comm[17] = ""; /* PR_GET_NAME writes up to 16 bytes, the NUL included */
    if (prctl(PR_GET_NAME, (unsigned long)comm, 0, 0, 0) != 0) comm[0] = '\0';
    if (setenv(CPU_BLAS_CORE_REPLACED_ENV, core, 1) != 0 ||
        setenv(CPU_BLAS_COMM_ENV, comm, 1) != 0 || setenv("OPENBLAS_CORETYPE", better, 1) != 0) {
        ensure_unset();
        return;
    }
    /* by the link, bound to this program's file: a rebuild since cannot swap in another */
    execv("/proc/self/exe", argv);
    ensure_unset(); /* not replaced after all: say nothing about it */
}

const char *cpu_blas_core_name(void) {
    const char *core = openblas_get_corename();
    return core != NULL ? core : "unknown";
}

const char *cpu_blas_core_replaced(void) {
    if (replaced[0] == '\0') return NULL;
    /* an OpenBLAS built for one CPU (no DYNAMIC_ARCH) ignores OPENBLAS_CORETYPE */
    return strcasecmp(replaced, cpu_blas_core_name()) != 0 ? replaced : NULL;
}
