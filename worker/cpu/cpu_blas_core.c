/* OpenBLAS's kernels for this CPU (cpu_blas_core.h). */
#define _GNU_SOURCE
#include "cpu_blas_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cblas.h>

#include "util/exec_self.h"

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

/* The variables of the first run for the second, none left for what follows. */
static void ensure_unset(void) {
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(CPU_BLAS_CORE_REPLACED_ENV);
}

void cpu_blas_core_ensure(char **argv) {
    const char *was = getenv(CPU_BLAS_CORE_REPLACED_ENV);
    if (was != NULL) { /* executed again below: OpenBLAS read the variable as it loaded */
        snprintf(replaced, sizeof replaced, "%s", was);
        bt_exec_self_restore(); /* bt_proc_start did, where it ran first */
        /* what this program starts decides for itself (another host's CPU under srun,
         * another program under `baton launch`) */
        ensure_unset();
        return;
    }
    if (env_set("OPENBLAS_CORETYPE") || argv == NULL || argv[0] == NULL) return;
    const char *core = openblas_get_corename();
    const char *better = cpu_blas_core_better(core, cpu_blas_isa_detect());
    if (better == NULL || !bt_exec_self_runnable()) return;
    if (setenv(CPU_BLAS_CORE_REPLACED_ENV, core, 1) != 0 ||
        setenv("OPENBLAS_CORETYPE", better, 1) != 0) {
        ensure_unset();
        return;
    }
    /* by the link, bound to this program's file: a rebuild since cannot swap in another */
    bt_exec_self(argv);
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
