/* Vectorizable math for the CPU backend's elementwise loops.
 *
 * cpu_expf: expf without a libm call, so gcc vectorizes the loops that use it (with
 * -fno-math-errno -fno-trapping-math on the worker/cpu sources; see worker/CMakeLists.txt).
 * Cephes' method: n = round(x / ln 2) by the 1.5 * 2^23 rounding trick, r = x - n ln 2 in
 * two parts (Cody-Waite), e^r by Cephes' degree-6 polynomial on |r| <= ln 2 / 2, and
 * 2^n applied as two exact power-of-two factors built from the exponent bits, so results
 * in the subnormal range underflow gradually instead of flushing to zero.
 *
 * Accuracy, measured against glibc's expf over every float in [-87.33, 88.72] (the
 * normal-result range, gcc -O2, baseline x86-64): max relative error 1.19e-7 (at
 * x = 5.96e-8), i.e. within 1 ulp. Subnormal results (x in [-103.97, -87.33)) are
 * rounded once onto the subnormal grid, so they lose relative precision as the format
 * does. Special values: x > 88.7228394 (the largest float whose exp is
 * finite) and +inf give +inf, x < -104 and -inf give +0, NaN gives NaN.
 *
 * The function is a pure function of its argument: a loop that uses it gives the same
 * bits whether gcc vectorizes it or not, and on every run. */
#ifndef BATON_CPU_MATH_H
#define BATON_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* CPU_CLONES before a hot elementwise function of the backend: gcc builds it for AVX-512,
 * AVX2 and baseline x86-64 and the loader picks one for this CPU (an ifunc), since the
 * engine is built for baseline x86-64 (SSE2). The copies give the same bits: vector width
 * changes no IEEE operation, nothing is reassociated, and -ffp-contract=off (worker/
 * CMakeLists.txt) keeps multiplies and adds apart where FMA exists. Functions they call
 * that are not inlined run in baseline code. Not under the sanitizers, nor with clang, nor
 * with -DBATON_NO_CPU_CLONES (to compare). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && defined(__OPTIMIZE__) && !defined(BATON_NO_CPU_CLONES)
#define CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_CLONES
#endif

/* Inlined always, so that a CPU_CLONES caller runs its own width of them (row helpers of
 * a cloned function: inlined, not cloned themselves, they cost no indirect call per row). */
#define CPU_INLINE static inline __attribute__((always_inline))

#define CPU_EXPF_HI 88.7228394f /* expf of anything larger overflows */
#define CPU_EXPF_LO -104.0f     /* expf of anything smaller rounds to 0 */

/* 2^k for -126 <= k <= 127, from the exponent bits. */
CPU_INLINE float cpu_pow2i(int32_t k) {
    int32_t bits = (k + 127) * (1 << 23);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

CPU_INLINE float cpu_expf(float x) {
    float xc = x > CPU_EXPF_HI ? CPU_EXPF_HI : x;
    xc = xc < CPU_EXPF_LO ? CPU_EXPF_LO : xc;
    xc = xc == xc ? xc : 0.0f; /* NaN: its result is x below; no NaN cast to an integer */
    /* n = round(x log2 e); |x log2 e| < 2^22, so adding and removing 1.5 * 2^23 rounds. */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    /* r = x - n ln 2, with ln 2 = 0.693359375 - 2.12194440e-4 (n * 0.693359375 exact). */
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    /* 2^n = 2^n1 * 2^n2 with n in [-150, 128]: both halves are normal floats. */
    int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
    y = y * cpu_pow2i(n1) * cpu_pow2i(n2);
    y = x > CPU_EXPF_HI ? INFINITY : y;
    y = x < CPU_EXPF_LO ? 0.0f : y;
    return x != x ? x : y;
}

/* Float lanes for row sums and maxima: each lane takes every CPU_LANES-th element. */
#define CPU_LANES 16
/* Elements per lane summed in float before the lanes are added into the double total. */
#define CPU_SUM_CHUNK (64 * CPU_LANES)

/* max over x[0..n) (n >= 1) of x[j] * scale, NaN elements ignored as by fmaxf: lanes
 * then lanes combined; max is exact, so the order does not change the result. */
CPU_INLINE float cpu_max_scaled(const float *x, int n, float scale) {
    float mx[CPU_LANES];
    for (int l = 0; l < CPU_LANES; l++)
        mx[l] = -INFINITY;
    int j = 0;
    for (; j + CPU_LANES <= n; j += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) {
            float v = x[j + l] * scale;
            mx[l] = v > mx[l] ? v : mx[l];
        }
    for (int l = 0; j + l < n; l++) {
        float v = x[j + l] * scale;
        mx[l] = v > mx[l] ? v : mx[l];
    }
    float m = -INFINITY;
    for (int l = 0; l < CPU_LANES; l++)
        m = mx[l] > m ? mx[l] : m;
    return m;
}

/* sum over x[0..n) of cpu_expf(x[j] * scale - shift): CPU_LANES float lanes per chunk of
 * CPU_SUM_CHUNK elements, each chunk's lanes added into a double in lane order. The
 * order is fixed by n alone, so the result is deterministic. */
CPU_INLINE double cpu_sum_exp(const float *x, int n, float scale, float shift) {
    double sum = 0.0;
    for (int c = 0; c < n; c += CPU_SUM_CHUNK) {
        int end = n - c < CPU_SUM_CHUNK ? n : c + CPU_SUM_CHUNK;
        float acc[CPU_LANES] = {0};
        int j = c;
        for (; j + CPU_LANES <= end; j += CPU_LANES)
            for (int l = 0; l < CPU_LANES; l++)
                acc[l] += cpu_expf(x[j + l] * scale - shift);
        for (int l = 0; j + l < end; l++)
            acc[l] += cpu_expf(x[j + l] * scale - shift);
        for (int l = 0; l < CPU_LANES; l++)
            sum += (double)acc[l];
    }
    return sum;
}

#endif
