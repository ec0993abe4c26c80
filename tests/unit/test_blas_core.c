/* cpu_blas_core: OpenBLAS's kernels replaced where it fell back to a pre-AVX2 core on a
 * CPU with AVX2 + FMA, by executing the program again with OPENBLAS_CORETYPE.
 *
 * test_blas_core                  after cpu_blas_core_ensure, the kernels fit the CPU
 *                                 (unless the caller set OPENBLAS_CORETYPE itself)
 * test_blas_core --forced NAME    run with OPENBLAS_CORETYPE=NAME: that is left alone */
#include <stdlib.h>
#include <strings.h>

#include <cblas.h>

#include "check.h"
#include "cpu_blas_core.h"
#include "util/exec_self.h"

static void test_decision(void) {
    CHECK_STR_CONTAINS(cpu_blas_core_better("Prescott", CPU_BLAS_ISA_AVX512), "SkylakeX");
    CHECK_STR_CONTAINS(cpu_blas_core_better("Prescott", CPU_BLAS_ISA_AVX2), "Haswell");
    CHECK_STR_CONTAINS(cpu_blas_core_better("PRESCOTT", CPU_BLAS_ISA_AVX2), "Haswell");
    CHECK_STR_CONTAINS(cpu_blas_core_better("Sandybridge", CPU_BLAS_ISA_AVX2), "Haswell");
    CHECK_STR_CONTAINS(cpu_blas_core_better("Nehalem", CPU_BLAS_ISA_AVX512), "SkylakeX");
    CHECK_STR_CONTAINS(cpu_blas_core_better("unknown", CPU_BLAS_ISA_AVX2), "Haswell");
    /* a CPU without AVX2 + FMA keeps whatever OpenBLAS chose */
    CHECK(cpu_blas_core_better("Prescott", CPU_BLAS_ISA_OLD) == NULL);
    /* AVX2 kernels or newer, and names this list does not know, are left alone */
    const char *fine[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen5"};
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
        CHECK(cpu_blas_core_better(fine[i], CPU_BLAS_ISA_AVX512) == NULL);
        CHECK(cpu_blas_core_better(fine[i], CPU_BLAS_ISA_AVX2) == NULL);
    }
    CHECK(cpu_blas_core_better(NULL, CPU_BLAS_ISA_AVX512) == NULL);
}

/* OPENBLAS_CORETYPE changes anything only in an OpenBLAS built with DYNAMIC_ARCH. */
static int coretype_honoured(void) {
#if defined(__x86_64__)
    const char *config = openblas_get_config();
    return config != NULL && strstr(config, "DYNAMIC_ARCH") != NULL;
#else
    return 0;
#endif
}

/* The process's name (comm) is its program's, as the kernel cuts it (15 bytes). */
static int comm_is(const char *argv0) {
    char comm[64] = "", want[16];
    FILE *f = fopen("/proc/self/comm", "r");
    if (f == NULL) return 0;
    if (fgets(comm, sizeof comm, f) == NULL) comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    const char *base = strrchr(argv0, '/') ? strrchr(argv0, '/') + 1 : argv0;
    snprintf(want, sizeof want, "%s", base);
    printf("comm after executing again: %s (program %s)\n", comm, base);
    return strcmp(comm, want) == 0;
}

/* What runs after cpu_blas_core_ensure. */
static void test_live(const char *forced, const char *argv0) {
    const char *core = cpu_blas_core_name(), *was = cpu_blas_core_replaced();
    const char *env = getenv("OPENBLAS_CORETYPE");
    cpu_blas_isa isa = cpu_blas_isa_detect();
    printf("OpenBLAS kernels: %s; CPU: %s; replaced: %s; OPENBLAS_CORETYPE=%s\n", core,
           isa == CPU_BLAS_ISA_AVX512 ? "AVX-512"
           : isa == CPU_BLAS_ISA_AVX2 ? "AVX2"
                                      : "older",
           was ? was : "no", env ? env : "<unset>");
    /* the second run leaves nothing for what it starts, which decides for itself */
    CHECK(getenv(CPU_BLAS_CORE_REPLACED_ENV) == NULL);
    CHECK(getenv(BT_EXEC_SELF_COMM_ENV) == NULL);
    if (forced != NULL) { /* the caller's choice stands, and nothing claims otherwise */
        CHECK(strcasecmp(core, forced) == 0);
        CHECK(was == NULL);
        CHECK(env != NULL && strcmp(env, forced) == 0);
        return;
    }
    if (was != NULL) {         /* replaced here, from a pre-AVX2 core */
        CHECK(env == NULL);    /* ... and the variable removed again */
        CHECK(comm_is(argv0)); /* its name set back: not "exe", nor a link's target's */
        CHECK(cpu_blas_core_better(was, isa) != NULL);
    } else if (env != NULL && *env != '\0')
        return; /* set by whoever runs the test */
    CHECK(cpu_blas_core_better(core, isa) == NULL);
}

int main(int argc, char **argv) {
    cpu_blas_core_ensure(argv);
    const char *forced = argc == 3 && strcmp(argv[1], "--forced") == 0 ? argv[2] : NULL;
    if (forced != NULL && !coretype_honoured()) {
        printf("SKIPPED: this OpenBLAS (%s) ignores OPENBLAS_CORETYPE\n", openblas_get_config());
        return 77;
    }
    test_decision();
    test_live(forced, argv[0]);
    return check_status();
}
