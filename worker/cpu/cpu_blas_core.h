/* OpenBLAS's choice of kernels for this CPU.
 *
 * OpenBLAS as Debian builds it (DYNAMIC_ARCH) picks its kernels when it loads, from the
 * CPU's family and model numbers. A CPU newer than the library gets its generic
 * fallback: Debian 12's OpenBLAS 0.3.21 takes an Emerald Rapids Xeon (family 6, model 207)
 * for a Prescott and multiplies with SSE3 kernels, without FMA. The tiny recipe's
 * pretrain then runs at 7 GFLOP/s per rank instead of 19 with the AVX-512 kernels.
 *
 * The choice can only be changed before the library loads, through OPENBLAS_CORETYPE. So
 * a program that finds OpenBLAS on a kernel older than AVX2 while the CPU has AVX2 and
 * FMA sets OPENBLAS_CORETYPE (SkylakeX with AVX-512, Haswell without) and executes itself
 * again, first thing in main: same pid, same arguments, nothing opened yet (only
 * OpenBLAS's own threads, started as it loaded). The second run removes the variable
 * again, so that what it starts decides for itself: a worker under `baton run` does the
 * same (about 10 ms), one on another host under srun looks at that host's CPU. A set
 * OPENBLAS_CORETYPE is left as it is (OPENBLAS_CORETYPE=Prescott keeps the fallback; any
 * value keeps the program from executing itself, e.g. under valgrind). */
#ifndef BATON_CPU_BLAS_CORE_H
#define BATON_CPU_BLAS_CORE_H

/* Carries the core OpenBLAS had chosen from the first run to the second (and no further). */
#define CPU_BLAS_CORE_REPLACED_ENV "BATON_BLAS_CORE_REPLACED"

/* The CPU's vector units, as far as the kernels are concerned. */
typedef enum cpu_blas_isa {
    CPU_BLAS_ISA_OLD = 0, /* no AVX2 + FMA (or not x86-64) */
    CPU_BLAS_ISA_AVX2 = 1,
    CPU_BLAS_ISA_AVX512 = 2 /* AVX-512 F, BW, DQ, VL usable */
} cpu_blas_isa;

/* What this CPU has (the OS's support of the registers included). */
cpu_blas_isa cpu_blas_isa_detect(void);

/* The OPENBLAS_CORETYPE that replaces `core` (openblas_get_corename()) on a CPU with
 * `isa`, or NULL when core is fine: an AVX2 or newer kernel, a name this list does not
 * know, or a CPU without AVX2 + FMA. */
const char *cpu_blas_core_better(const char *core, cpu_blas_isa isa);

/* Call first in main, before any file or connection is opened. Returns at once where
 * OPENBLAS_CORETYPE is set or OpenBLAS's kernels are fine (or the program was started
 * through the dynamic loader); otherwise sets OPENBLAS_CORETYPE and
 * CPU_BLAS_CORE_REPLACED_ENV and executes /proc/self/exe (this program's own file, even
 * if its path was replaced since) with argv again, through bt_exec_self (exec_self.h: it
 * carries the process's name along; it returns only when that fails, the variables then
 * unset again). The second run sets the process's name back (comm: the kernel names it
 * "exe") and removes the variables. */
void cpu_blas_core_ensure(char **argv);

/* OpenBLAS's kernels now ("SkylakeX"), and the core it had chosen itself where baton
 * replaced it (NULL otherwise, and where the replacement changed nothing: an OpenBLAS
 * built for one CPU ignores OPENBLAS_CORETYPE). */
const char *cpu_blas_core_name(void);
const char *cpu_blas_core_replaced(void);

#endif
