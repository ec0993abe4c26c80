/* precision.c against known bit patterns and against references written here from the
 * format definitions alone: bf16 by comparing the two neighbouring bf16 values in
 * double, fp8 by a decode table built with ldexp and an encoder that searches all 256
 * codes for the nearest value (ties to the even code). If the installed PyTorch has the
 * float8 dtypes (2.1 and later), decode and in-range encode are also compared with it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "precision.h"

/* splitmix64: a small deterministic generator for the sweeps. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- bf16 ---- */

#define CHECK_BF16(in_bits, out_bits) CHECK_EQ_U64(prec_bf16_bits(float_of(in_bits)), out_bits)

static void test_bf16_patterns(void) {
    CHECK_BF16(0x3F800000u, 0x3F80); /* 1.0 exact */
    CHECK_BF16(0x3F808000u, 0x3F80); /* tie, kept bit even: down */
    CHECK_BF16(0x3F818000u, 0x3F82); /* tie, kept bit odd: up */
    CHECK_BF16(0x3F808001u, 0x3F81); /* just above a tie */
    CHECK_BF16(0x3F807FFFu, 0x3F80); /* just below a tie */
    CHECK_BF16(0x3F817FFFu, 0x3F81); /* just below a tie, odd */
    CHECK_BF16(0xBF808000u, 0xBF80); /* negative tie */
    CHECK_BF16(0xBF818000u, 0xBF82); /* negative tie, odd */
    CHECK_BF16(0x3FFF8000u, 0x4000); /* tie, odd, carries into the exponent */
    CHECK_BF16(0x00008000u, 0x0000); /* float32 subnormal tie: to even zero */
    CHECK_BF16(0x00018000u, 0x0002); /* subnormal tie, odd: up */
    CHECK_BF16(0x0000FFFFu, 0x0001); /* subnormal rounds up to the smallest bf16 one */
    CHECK_BF16(0x007FFFFFu, 0x0080); /* largest subnormal to the smallest normal */
    CHECK_BF16(0x80000000u, 0x8000); /* -0 */
    CHECK_BF16(0x7F7FFFFFu, 0x7F80); /* FLT_MAX is above bf16 max + half ulp: Inf */
    CHECK_BF16(0x7F7F7FFFu, 0x7F7F); /* below the halfway point: bf16 max */
    CHECK_BF16(0x7F7F8000u, 0x7F80); /* halfway, odd: Inf */
    CHECK_BF16(0xFF7FFFFFu, 0xFF80); /* -FLT_MAX: -Inf */
    CHECK_BF16(0x7F800000u, 0x7F80); /* Inf */
    CHECK_BF16(0xFF800000u, 0xFF80); /* -Inf */
    CHECK_BF16(0x7FC00000u, 0x7FC0); /* quiet NaN */
    CHECK_BF16(0x7F800001u, 0x7FC0); /* signalling NaN, payload below bit 16: quiet */
    CHECK_BF16(0xFF800001u, 0xFFC0); /* its negative */
    CHECK_BF16(0x7FFFFFFFu, 0x7FFF); /* a NaN with every bit set stays that NaN */
    CHECK(isnan(prec_bf16_round(float_of(0x7F800001u))));
    CHECK(prec_bf16_round(1.00390625f) == 1.0f);      /* 1 + 2^-8: tie to even */
    CHECK(prec_bf16_round(1.01171875f) == 1.015625f); /* 1 + 3*2^-8: tie up */
}

/* Nearest bf16 by comparing the two candidates in double; the candidate above the
 * largest finite bf16 is Inf, weighted as 2^128 (IEEE overflow rule). */
static uint16_t bf16_ref(uint32_t u) {
    if ((u & 0x7F800000u) == 0x7F800000u)
        return (u & 0x007FFFFFu) ? (uint16_t)((u >> 16) | 0x0040u) : (uint16_t)(u >> 16);
    uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
    double x = fabs((double)float_of(u));
    double vlo = fabs((double)float_of(lo));
    double vhi = ((hi & 0x7FFFFFFFu) == 0x7F800000u) ? ldexp(1.0, 128) : fabs((double)float_of(hi));
    double dlo = x - vlo, dhi = vhi - x;
    if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1u) == 0)) return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

static void test_bf16_sweep(void) {
    uint64_t s = 1;
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rng_next(&s);
        if (i % 4 == 1) u = (u & 0xFFFF0000u) | 0x8000u; /* exact ties */
        if (prec_bf16_bits(float_of(u)) != bf16_ref(u) && bad++ < 5)
            fprintf(stderr, "bf16 %08x: got %04x want %04x\n", u, prec_bf16_bits(float_of(u)),
                    bf16_ref(u));
    }
    CHECK(bad == 0);

    float src[5] = {1.00390625f, 1.01171875f, -3.0f, 1e-3f, 65504.0f}, dst[5];
    prec_bf16_round_array(dst, src, 5);
    for (int i = 0; i < 5; i++)
        CHECK(dst[i] == prec_bf16_round(src[i]));
}

/* The array tests' inputs: every stride-th float32 pattern, NaNs and Infs included, in
 * chunks of up to PATTERN_CHUNK from *u on (0 when all are done). */
enum { PATTERN_CHUNK = 4096 };
static size_t next_patterns(float *src, uint64_t *u, uint32_t stride) {
    size_t n = 0;
    for (; n < PATTERN_CHUNK && *u <= 0xFFFFFFFFull; n++, *u += stride)
        src[n] = float_of((uint32_t)*u);
    return n;
}

/* prec_bf16_round_array and prec_bf16_bits_array (branch-free, vectorized) against the
 * reference over every stride-th float32 pattern. */
static void test_bf16_array_patterns(uint32_t stride) {
    static float src[PATTERN_CHUNK], dst[PATTERN_CHUNK];
    static uint16_t bits[PATTERN_CHUNK];
    uint64_t bad = 0, u = 0;
    for (size_t n; (n = next_patterns(src, &u, stride)) > 0;) {
        prec_bf16_round_array(dst, src, n);
        prec_bf16_bits_array(bits, src, n);
        for (size_t i = 0; i < n; i++) {
            uint16_t want = bf16_ref(bits_of(src[i]));
            if ((bits_of(dst[i]) != (uint32_t)want << 16 || bits[i] != want) && bad++ < 5)
                fprintf(stderr, "bf16 array %08x: got %08x and %04x, want %04x\n", bits_of(src[i]),
                        bits_of(dst[i]), bits[i], want);
        }
    }
    CHECK(bad == 0);
}

/* prec_fp16_round_array (branch-free, vectorized) against prec_fp16_round (the
 * definition, checked against numpy by unit.test_fp16), bit for bit, over every stride-th
 * float32 pattern. */
static void test_fp16_array_patterns(uint32_t stride) {
    static float src[PATTERN_CHUNK], dst[PATTERN_CHUNK];
    uint64_t bad = 0, u = 0;
    for (size_t n; (n = next_patterns(src, &u, stride)) > 0;) {
        prec_fp16_round_array(dst, src, n);
        for (size_t i = 0; i < n; i++)
            if (bits_of(dst[i]) != bits_of(prec_fp16_round(src[i])) && bad++ < 5)
                fprintf(stderr, "fp16 array %08x: got %08x, want %08x\n", bits_of(src[i]),
                        bits_of(dst[i]), bits_of(prec_fp16_round(src[i])));
    }
    CHECK(bad == 0);
}

/* ---- fp8 reference from the definition ---- */

typedef struct fp8_ref {
    int ebits, mbits, bias;
    int ieee; /* E5M2: all-ones exponent is Inf/NaN; E4M3: only S.1111.111 is NaN */
    double val[256];
    double max; /* largest finite value */
    int nan[256], inf[256];
} fp8_ref;

static void fp8_ref_build(fp8_ref *r, int ebits, int mbits, int ieee) {
    r->ebits = ebits;
    r->mbits = mbits;
    r->bias = (1 << (ebits - 1)) - 1;
    r->ieee = ieee;
    r->max = 0.0;
    int emax = (1 << ebits) - 1, mmax = (1 << mbits) - 1;
    for (int c = 0; c < 256; c++) {
        int s = c >> 7, e = (c >> mbits) & emax, m = c & mmax;
        double mag = e == 0 ? ldexp((double)m, 1 - r->bias - mbits)
                            : ldexp(1.0 + (double)m / (double)(1 << mbits), e - r->bias);
        r->nan[c] = ieee ? (e == emax && m != 0) : (e == emax && m == mmax);
        r->inf[c] = ieee && e == emax && m == 0;
        if (r->inf[c]) mag = INFINITY;
        r->val[c] = s ? -mag : mag;
        if (!r->nan[c] && !r->inf[c] && mag > r->max) r->max = mag;
    }
}

/* Nearest finite code to x with the sign of x, ties to the even code (the code's low
 * bit is the mantissa's); anything at or beyond the largest finite value saturates to
 * it (decided before the search: |x| - max in double loses max when |x| is ~2^100).
 * NaN gives -1. */
static int fp8_ref_encode(const fp8_ref *r, float x) {
    if (isnan(x)) return -1;
    int sign = signbit(x) ? 0x80 : 0;
    double a = fabs((double)x);
    int best = -1;
    double bestd = 0.0;
    for (int c = 0; c < 128; c++) {
        if (r->nan[c] || r->inf[c]) continue;
        if (a >= r->max) {
            best = c; /* the largest finite code wins */
            continue;
        }
        double d = fabs(a - r->val[c]);
        if (best < 0 || d < bestd || (d == bestd && (c & 1) == 0)) {
            best = c;
            bestd = d;
        }
    }
    return sign | best;
}

static void test_fp8_decode_table(const fp8_ref *r, prec_fp8_format fmt) {
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        float got = prec_fp8_decode((uint8_t)c, fmt);
        int ok = r->nan[c] ? isnan(got) : ((double)got == r->val[c] && !isnan(got));
        if (ok && got == 0.0f) ok = !!signbit(got) == !!(c & 0x80);
        if (!ok && bad++ < 5)
            fprintf(stderr, "fmt %d decode %02x: got %a want %a\n", fmt, c, (double)got, r->val[c]);
        /* Round trip: every non-NaN code is its own encoding. */
        if (!r->nan[c] && !r->inf[c] && prec_fp8_encode(got, fmt) != c && bad++ < 5)
            fprintf(stderr, "fmt %d roundtrip %02x -> %02x\n", fmt, c, prec_fp8_encode(got, fmt));
    }
    CHECK(bad == 0);
}

/* A float near the fp8 range: a random exponent around [emin - mbits - 2, emax + 1],
 * random mantissa and sign, or (one in four) an exact midpoint of two adjacent codes,
 * or (one in sixteen) an arbitrary 32-bit pattern. */
static float fp8_sweep_value(const fp8_ref *r, uint64_t *s) {
    uint64_t z = rng_next(s);
    uint32_t sign = (uint32_t)(z >> 63) << 31;
    int sel = (int)(z & 15);
    if (sel == 0) return float_of((uint32_t)(z >> 16));
    if (sel < 5) {
        int c = (int)((z >> 8) % 126);
        while (r->nan[c + 1] || r->inf[c + 1])
            c--;
        float mid = (float)((r->val[c] + r->val[c + 1]) / 2.0); /* exact: few bits */
        return float_of(bits_of(mid) | sign);
    }
    int lo = 1 - r->bias - r->mbits - 2, hi = (1 << r->ebits) - 1 - r->bias + 1;
    int e = lo + (int)((z >> 8) % (uint64_t)(hi - lo + 1));
    uint32_t man = (uint32_t)(z >> 20) & 0x7FFFFFu;
    return float_of(sign | ((uint32_t)(e + 127) << 23) | man);
}

static void test_fp8_sweep(const fp8_ref *r, prec_fp8_format fmt, uint64_t seed) {
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        float x = fp8_sweep_value(r, &seed);
        int want = fp8_ref_encode(r, x);
        int got = prec_fp8_encode(x, fmt);
        int ok = want < 0 ? r->nan[got] : got == want;
        if (!ok && bad++ < 5)
            fprintf(stderr, "fmt %d encode %a (%08x): got %02x want %02x\n", fmt, (double)x,
                    bits_of(x), got, want);
    }
    CHECK(bad == 0);
}

/* ---- fp8 known values ---- */

static void test_e4m3_patterns(void) {
    const prec_fp8_format f = PREC_E4M3;
    CHECK_EQ_U64(prec_fp8_encode(448.0f, f), 0x7E);
    CHECK_EQ_U64(prec_fp8_encode(-448.0f, f), 0xFE);
    CHECK_EQ_U64(prec_fp8_encode(464.0f, f), 0x7E); /* halfway to a 480 that isn't there */
    CHECK_EQ_U64(prec_fp8_encode(500.0f, f), 0x7E);
    CHECK_EQ_U64(prec_fp8_encode(1e30f, f), 0x7E);
    CHECK_EQ_U64(prec_fp8_encode(INFINITY, f), 0x7E);
    CHECK_EQ_U64(prec_fp8_encode(-INFINITY, f), 0xFE);
    CHECK_EQ_U64(prec_fp8_encode(NAN, f), 0x7F);
    CHECK_EQ_U64(prec_fp8_encode(-NAN, f), 0xFF);
    CHECK_EQ_U64(prec_fp8_encode(1.0f, f), 0x38);
    CHECK_EQ_U64(prec_fp8_encode(0.0f, f), 0x00);
    CHECK_EQ_U64(prec_fp8_encode(-0.0f, f), 0x80);
    CHECK_EQ_U64(prec_fp8_encode(0.001953125f, f), 0x01);       /* 2^-9 */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(1.0f, -10), f), 0x00);  /* tie to even 0 */
    CHECK_EQ_U64(prec_fp8_encode(-ldexpf(1.0f, -10), f), 0x80); /* ... keeping sign */
    CHECK_EQ_U64(prec_fp8_encode(nextafterf(ldexpf(1.0f, -10), 1.0f), f), 0x01);
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(3.0f, -10), f), 0x02);     /* 1.5 units: to 2 */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(5.0f, -10), f), 0x02);     /* 2.5 units: to 2 */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(5.2f, -10), f), 0x03);     /* between: nearest */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(7.0f, -9), f), 0x07);      /* largest subnormal */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(15.0f, -10), f), 0x08);    /* tie to min normal */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(1.0f, -6), f), 0x08);      /* min normal */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(1.0f, -30), f), 0x00);     /* underflow */
    CHECK_EQ_U64(prec_fp8_encode(float_of(0x00000001u), f), 0x00); /* float32 subnormal */
    CHECK_EQ_U64(prec_fp8_encode(1.0625f, f), 0x38);               /* tie, even: down */
    CHECK_EQ_U64(prec_fp8_encode(1.1875f, f), 0x3A);               /* tie, odd: up */
    CHECK_EQ_U64(prec_fp8_encode(15.5f, f), 0x58);                 /* tie, 15 odd: 16 */
    CHECK(prec_fp8_decode(0x7E, f) == 448.0f);
    CHECK(prec_fp8_decode(0x01, f) == 0.001953125f);
    CHECK(prec_fp8_decode(0x08, f) == 0.015625f);
    CHECK(prec_fp8_decode(0x80, f) == 0.0f && signbit(prec_fp8_decode(0x80, f)));
    CHECK(isnan(prec_fp8_decode(0x7F, f)) && isnan(prec_fp8_decode(0xFF, f)));
    CHECK(prec_fp8_decode(0x78, f) == 256.0f); /* S.1111.000 is a number in E4M3 */
    CHECK(prec_fp8_max(f) == 448.0f);
}

static void test_e5m2_patterns(void) {
    const prec_fp8_format f = PREC_E5M2;
    CHECK_EQ_U64(prec_fp8_encode(57344.0f, f), 0x7B);
    CHECK_EQ_U64(prec_fp8_encode(61440.0f, f), 0x7B); /* halfway to Inf: saturates */
    CHECK_EQ_U64(prec_fp8_encode(1e30f, f), 0x7B);
    CHECK_EQ_U64(prec_fp8_encode(INFINITY, f), 0x7B);
    CHECK_EQ_U64(prec_fp8_encode(-INFINITY, f), 0xFB);
    CHECK_EQ_U64(prec_fp8_encode(NAN, f), 0x7E); /* quiet NaN, as fp16's 0x7E00 */
    CHECK_EQ_U64(prec_fp8_encode(-NAN, f), 0xFE);
    CHECK_EQ_U64(prec_fp8_encode(1.0f, f), 0x3C);
    CHECK_EQ_U64(prec_fp8_encode(-0.0f, f), 0x80);
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(1.0f, -16), f), 0x01); /* smallest subnormal */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(1.0f, -17), f), 0x00); /* tie to even 0 */
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(3.0f, -17), f), 0x02);
    CHECK_EQ_U64(prec_fp8_encode(ldexpf(1.0f, -14), f), 0x04); /* min normal */
    CHECK_EQ_U64(prec_fp8_encode(1.125f, f), 0x3C);            /* tie, even: down */
    CHECK_EQ_U64(prec_fp8_encode(1.375f, f), 0x3E);            /* tie, odd: up */
    CHECK(prec_fp8_decode(0x7B, f) == 57344.0f);
    CHECK(prec_fp8_decode(0x01, f) == ldexpf(1.0f, -16));
    CHECK(isinf(prec_fp8_decode(0x7C, f)) && prec_fp8_decode(0x7C, f) > 0);
    CHECK(isinf(prec_fp8_decode(0xFC, f)) && prec_fp8_decode(0xFC, f) < 0);
    CHECK(isnan(prec_fp8_decode(0x7D, f)) && isnan(prec_fp8_decode(0x7E, f)) &&
          isnan(prec_fp8_decode(0xFF, f)));
    CHECK(prec_fp8_max(f) == 57344.0f);
}

/* ---- qdq and delayed scaling ---- */

static void test_qdq(void) {
    float src[6] = {1.0f, -3.3f, 500.0f, NAN, 0.01f, -1000.0f}, dst[6];
    float amax = prec_fp8_qdq_array(dst, src, 6, 0.5f, PREC_E4M3);
    CHECK(amax == 1000.0f); /* NaN ignored */
    CHECK(dst[0] == 1.0f);
    CHECK(dst[1] == -3.25f); /* -1.65 -> -1.625 (0.125 steps), / 0.5 */
    CHECK(dst[2] == 512.0f); /* 250 -> 256 (steps of 16 in [128, 256)), / 0.5 */
    CHECK(isnan(dst[3]));
    CHECK(dst[4] == 0.01171875f); /* 0.005 = 2.56 * 2^-9 -> subnormal 3 * 2^-9, / 0.5 */
    CHECK(dst[5] == -896.0f);     /* -500 saturates to -448, / 0.5 */
    /* In place. */
    float buf[2] = {3.3f, 57344.0f * 4.0f};
    CHECK(prec_fp8_qdq_array(buf, buf, 2, 1.0f, PREC_E5M2) == 229376.0f);
    CHECK(buf[0] == 3.5f && buf[1] == 57344.0f);
}

/* prec_fp8_qdq_array (branch-free, vectorized) against decode(encode(x * scale)) / scale,
 * bit for bit, over every stride-th float32 pattern (stride 1: all 2^32, about a minute;
 * `test_precision --exhaustive`). */
static void test_qdq_patterns(prec_fp8_format fmt, uint32_t stride, float scale) {
    static float src[PATTERN_CHUNK], dst[PATTERN_CHUNK];
    uint64_t bad = 0, u = 0;
    for (size_t n; (n = next_patterns(src, &u, stride)) > 0;) {
        float amax = prec_fp8_qdq_array(dst, src, n, scale, fmt), want_amax = 0.0f;
        for (size_t i = 0; i < n; i++) /* in index order, NaN ignored */
            want_amax = fabsf(src[i]) > want_amax ? fabsf(src[i]) : want_amax;
        if (bits_of(amax) != bits_of(want_amax) && bad++ < 5)
            fprintf(stderr, "fmt %d amax of %zu from %08x: got %g want %g\n", fmt, n,
                    bits_of(src[0]), (double)amax, (double)want_amax);
        for (size_t i = 0; i < n; i++) {
            float want = prec_fp8_decode(prec_fp8_encode(src[i] * scale, fmt), fmt) / scale;
            if (bits_of(dst[i]) != bits_of(want) && bad++ < 5)
                fprintf(stderr, "fmt %d qdq %08x * %g: got %08x want %08x\n", fmt, bits_of(src[i]),
                        (double)scale, bits_of(dst[i]), bits_of(want));
        }
    }
    CHECK(bad == 0);
}

static void test_meta(void) {
    float hist[3];
    prec_fp8_meta m;
    prec_fp8_meta_init(&m, hist, 3, PREC_E4M3, 1);
    CHECK(m.scale == 1.0f && m.pos == 0);
    prec_fp8_meta_update(&m, 0.0f); /* amax 0: unchanged */
    CHECK(m.scale == 1.0f);
    prec_fp8_meta_update(&m, 7.0f); /* 448 / 7 / 2 = 32 */
    CHECK(m.scale == 32.0f);
    prec_fp8_meta_update(&m, 2.0f); /* history max still 7 */
    CHECK(m.scale == 32.0f);
    CHECK(m.pos == 0);
    prec_fp8_meta_update(&m, 1.0f); /* overwrites the 0: history {1, 7, 2} */
    CHECK(m.scale == 32.0f);
    prec_fp8_meta_update(&m, 3.5f); /* the 7 rolls out: {1, 3.5, 2}: 448 / 3.5 / 2 = 64 */
    CHECK(m.scale == 64.0f);
    prec_fp8_meta_update(&m, INFINITY); /* non-finite: unchanged while it is in history */
    CHECK(m.scale == 64.0f);
    prec_fp8_meta_update(&m, NAN);
    CHECK(m.scale == 64.0f);
    prec_fp8_meta_update(&m, 1.0f);
    prec_fp8_meta_update(&m, 1.0f);
    CHECK(m.scale == 64.0f);          /* {NAN, 1, 1}... NaN still present */
    prec_fp8_meta_update(&m, 0.875f); /* {0.875, 1, 1} -> 448 / 1 / 2 */
    CHECK(m.scale == 224.0f);

    prec_fp8_meta_init(&m, hist, 3, PREC_E5M2, 0);
    prec_fp8_meta_update(&m, 3.0f); /* 57344 / 3, correctly rounded to float32 */
    CHECK(m.scale == 57344.0f / 3.0f);
    prec_fp8_meta_update(&m, 1e-40f); /* history max is still 3 */
    CHECK(m.scale == 57344.0f / 3.0f);
    prec_fp8_meta_init(&m, hist, 1, PREC_E4M3, 0);
    prec_fp8_meta_update(&m, 1e-40f); /* 448 / 1e-40 overflows float32: FLT_MAX */
    CHECK(m.scale == 3.40282347e38f);
    /* a tensor 4 times smaller than its history says (a format-1 checkpoint's gradients
     * under dp4): the history and the scale follow, and the next update agrees */
    float h2[2];
    prec_fp8_meta_init(&m, h2, 2, PREC_E5M2, 0);
    prec_fp8_meta_update(&m, 8.0f); /* 57344 / 8 = 7168 */
    CHECK(m.scale == 7168.0f);
    prec_fp8_meta_rescale(&m, 4.0f);
    CHECK(h2[0] == 2.0f && h2[1] == 0.0f && m.scale == 28672.0f && m.pos == 1);
    prec_fp8_meta_update(&m, 1.0f); /* {2, 1}: 57344 / 2 */
    CHECK(m.scale == 28672.0f);
    m.scale = 1e38f;
    prec_fp8_meta_rescale(&m, 16.0f);
    CHECK(m.scale == 3.40282347e38f);
}

/* ---- optional cross-check with torch's float8 dtypes ---- */

static const char torch_script[] =
    "import sys, struct, torch\n"
    "xs = [struct.unpack('<f', struct.pack('<I', int(t, 16)))[0]"
    " for t in open(sys.argv[1]).read().split()]\n"
    "codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)\n"
    "x = torch.tensor(xs, dtype=torch.float32)\n"
    "for dt in (torch.float8_e4m3fn, torch.float8_e5m2):\n"
    "    for v in codes.view(dt).to(torch.float32).tolist():\n"
    "        print('%08x' % struct.unpack('<I', struct.pack('<f', v))[0])\n"
    "    for c in x.to(dt).view(torch.uint8).tolist():\n"
    "        print('%x' % c)\n";

#define TORCH_N 20000

static int torch_has_fp8(void) {
    return system("/usr/bin/python3 -c 'import torch; torch.float8_e4m3fn' >/dev/null 2>&1") == 0;
}

/* Reads 256 decoded patterns and TORCH_N codes for one format; compares. */
static int torch_compare_fmt(FILE *p, prec_fp8_format fmt, const float *xs) {
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        unsigned u = 0;
        if (fscanf(p, "%x", &u) != 1) return -1;
        float mine = prec_fp8_decode((uint8_t)c, fmt), theirs = float_of(u);
        if (isnan(mine) ? !isnan(theirs) : bits_of(mine) != u) bad++;
    }
    for (int i = 0; i < TORCH_N; i++) {
        unsigned code = 0;
        if (fscanf(p, "%x", &code) != 1) return -1;
        if (prec_fp8_encode(xs[i], fmt) != code) bad++;
    }
    return bad;
}

/* The inputs: |x| in [2^-16, 448], finite, where torch's (non-saturating) casts agree
 * with the saturating ones by definition. */
static int torch_write_inputs(const char *path, float *xs) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    uint64_t s = 7;
    for (int i = 0; i < TORCH_N; i++) {
        uint32_t r = (uint32_t)rng_next(&s);
        float x = float_of((r & 0x80000000u) | 0x3F800000u | (r & 0x7FFFFFu)); /* [1, 2) */
        xs[i] = ldexpf(x, (int)(rng_next(&s) % 24) - 16);
        if (fabsf(xs[i]) > 448.0f) xs[i] = 1.0f;
        fprintf(f, "%08x\n", bits_of(xs[i]));
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int torch_write_script(const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    fputs(torch_script, f);
    return fclose(f) == 0 ? 0 : -1;
}

static void torch_run(const char *script, const char *in, const float *xs) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, in);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (p == NULL) return;
    int bad4 = torch_compare_fmt(p, PREC_E4M3, xs);
    int bad5 = torch_compare_fmt(p, PREC_E5M2, xs);
    CHECK(pclose(p) == 0);
    CHECK(bad4 == 0);
    CHECK(bad5 == 0);
}

static void test_torch_crosscheck(void) {
    if (!torch_has_fp8()) return; /* torch < 2.1 has no float8 dtypes: nothing to compare with */
    static float xs[TORCH_N];
    char dir[] = "/tmp/baton-prec-XXXXXX", in[64], script[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(in, sizeof in, "%s/x.txt", dir);
    snprintf(script, sizeof script, "%s/fp8.py", dir);
    int ok = torch_write_inputs(in, xs) == 0 && torch_write_script(script) == 0;
    CHECK(ok);
    if (ok) torch_run(script, in, xs);
    unlink(in);
    unlink(script);
    rmdir(dir);
}

int main(int argc, char **argv) {
#ifdef BATON_TEST_NEEDS_AVX2 /* the AVX2 build (tests/CMakeLists.txt) */
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("SKIPPED: this CPU has no AVX2 + FMA\n");
        return 77;
    }
#endif
    uint32_t stride = argc > 1 && strcmp(argv[1], "--exhaustive") == 0 ? 1 : 127;
    static fp8_ref e4m3, e5m2;
    fp8_ref_build(&e4m3, 4, 3, 0);
    fp8_ref_build(&e5m2, 5, 2, 1);
    CHECK(e4m3.val[0x7E] == 448.0 && e5m2.val[0x7B] == 57344.0); /* the reference itself */

    test_bf16_patterns();
    test_bf16_sweep();
    test_bf16_array_patterns(stride);
    test_fp16_array_patterns(stride);
    test_e4m3_patterns();
    test_e5m2_patterns();
    test_fp8_decode_table(&e4m3, PREC_E4M3);
    test_fp8_decode_table(&e5m2, PREC_E5M2);
    test_fp8_sweep(&e4m3, PREC_E4M3, 11);
    test_fp8_sweep(&e5m2, PREC_E5M2, 12);
    test_qdq();
    for (int f = 0; f < 2; f++) {
        test_qdq_patterns((prec_fp8_format)f, stride, 1.0f);
        test_qdq_patterns((prec_fp8_format)f, stride * 8 + 1, 0.75f);
        test_qdq_patterns((prec_fp8_format)f, stride * 8 + 1, 96.0f);
    }
    test_meta();
    test_torch_crosscheck();
    return check_status();
}
