/* bf16, IEEE fp16 and OCP FP8 rounding on float32 bit patterns.
 *
 * Every conversion works on the integer pattern of the float32 input so the result does
 * not depend on the FPU rounding mode or on compiler flags: a float32 value is an
 * integer significand (24 bits with the hidden one) times a power of two, and rounding
 * to a narrower format is a right shift of that significand with round-to-nearest-even
 * on the bits shifted out. A carry out of the significand moves into the exponent field
 * because exponent and mantissa are adjacent in the code. */
#include "precision.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu_math.h" /* CPU_CLONES */

/* The geometry of an 8-bit format: mantissa bits, exponent bias, largest finite code
 * (magnitude) and the canonical NaN code (magnitude). */
typedef struct fp8_desc {
    int man_bits;
    int bias;
    uint8_t max_code;
    uint8_t nan_code;
    float max;
} fp8_desc;

static const fp8_desc fp8_descs[2] = {
    [PREC_E4M3] = {3, 7, 0x7E, 0x7F, PREC_E4M3_MAX},
    [PREC_E5M2] = {2, 15, 0x7B, 0x7E, PREC_E5M2_MAX},
};

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static int f32_bits_isnan(uint32_t u) {
    return (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0;
}

/* sig >> shift, rounded to nearest, ties to the even result. */
static uint32_t rne_shift(uint32_t sig, int shift) {
    if (shift <= 0) return sig;
    if (shift > 31) return 0; /* sig < 2^24, far below half of the smallest step */
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

/* ---- bf16 ---- */

/* Without branches, so that gcc vectorizes the loops around it: both cases computed, one
 * selected. */
static inline uint32_t bf16_round_bits(uint32_t u) {
    /* A NaN whose payload lives only in the low 16 bits would truncate to Inf; setting
     * the quiet bit keeps it a NaN. */
    uint32_t nan = (u | 0x00400000u) & 0xFFFF0000u;
    /* Adding 0x7FFF plus the lowest kept bit rounds half to even; a carry may ripple
     * into the exponent, which is the correct next binade (or Inf past the max). */
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? nan : r;
}

float prec_bf16_round(float x) {
    return f32_from_bits(bf16_round_bits(f32_bits(x)));
}

uint16_t prec_bf16_bits(float x) {
    return (uint16_t)(bf16_round_bits(f32_bits(x)) >> 16);
}

CPU_CLONES void prec_bf16_round_array(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_from_bits(bf16_round_bits(f32_bits(src[i])));
}

CPU_CLONES void prec_bf16_bits_array(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)(bf16_round_bits(f32_bits(src[i])) >> 16);
}

/* ---- fp16 ---- */

/* Magnitude of the binary16 code of |x| (float32 pattern a, not NaN). */
static uint32_t fp16_encode_mag(uint32_t a) {
    if (a >= 0x7F800000u) return 0x7C00u; /* Inf */
    int fexp = (int)(a >> 23);
    if (fexp == 0) return 0; /* float32 subnormals are below 2^-126, far under 2^-25 */
    uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u; /* value = sig * 2^(e - 23) */
    int e = fexp - 127;
    if (e < -14) /* subnormal: units of 2^-24; 1024 is the smallest normal's code */
        return rne_shift(sig, 13 + (-14 - e));
    if (e > 15) return 0x7C00u; /* past the largest binade: Inf */
    /* A carry out of the 11-bit significand moves into the exponent; past the max that
     * gives exponent 31 with mantissa 0, which is Inf. */
    return ((uint32_t)(e + 15) << 10) + (rne_shift(sig, 13) - 0x400u);
}

uint16_t prec_fp16_bits(float x) {
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    if (f32_bits_isnan(u)) /* quiet, payload's top bits kept */
        return (uint16_t)(sign | 0x7E00u | ((u & 0x007FFFFFu) >> 13));
    return (uint16_t)(sign | fp16_encode_mag(u & 0x7FFFFFFFu));
}

float prec_fp16_from_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in float32 */
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    if (exp == 31) return f32_from_bits(sign | 0x7F800000u | (man << 13));
    return f32_from_bits(sign | ((exp - 15u + 127u) << 23) | (man << 13));
}

float prec_fp16_round(float x) {
    return prec_fp16_from_bits(prec_fp16_bits(x));
}

/* prec_fp16_round without branches, so that the array loop vectorizes: round the
 * float32 significand to 10 bits to nearest even (a carry moves into the exponent; at
 * 65520 and above that reaches 2^16: Inf); below 2^-14 (fp16 subnormals) the sum with
 * 0.5, whose unit in the last place is 2^-24, rounds to a multiple of 2^-24 as fp16
 * does; a NaN is quieted with its payload's top 10 bits. Every float32 pattern gives
 * prec_fp16_round's bits (test_precision). */
CPU_INLINE float fp16_round_lane(float x) {
    uint32_t u = f32_bits(x), sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
    uint32_t r = (a + 0xFFFu + ((a >> 13) & 1u)) & ~0x1FFFu;
    r = r >= 0x47800000u ? 0x7F800000u : r;
    float sub = (f32_from_bits(a) + 0.5f) - 0.5f;
    r = a < 0x38800000u ? f32_bits(sub) : r;
    r = a > 0x7F800000u ? (a & 0xFFFFE000u) | 0x00400000u : r;
    return f32_from_bits(sign | r);
}

CPU_CLONES void prec_fp16_round_array(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = fp16_round_lane(src[i]);
}

/* ---- fp8 ---- */

float prec_fp8_max(prec_fp8_format fmt) {
    return fp8_descs[fmt].max;
}

/* Magnitude code of |x| for a finite |x| < max (the caller has saturated larger ones). */
static uint8_t fp8_encode_mag(uint32_t a, const fp8_desc *d) {
    int fexp = (int)(a >> 23); /* biased float32 exponent */
    if (fexp == 0) return 0;   /* float32 subnormals are below 2^-126, far under half of 2^-16 */
    uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u; /* value = sig * 2^(e - 23) */
    int e = fexp - 127;
    int emin = 1 - d->bias; /* exponent of the smallest normal */
    int shift = 23 - d->man_bits;
    if (e < emin) {
        /* Subnormal: the code is the value in units of 2^(emin - man_bits); a result
         * of 2^man_bits is the smallest normal, whose code is that same integer. */
        return (uint8_t)rne_shift(sig, shift + (emin - e));
    }
    uint32_t q = rne_shift(sig, shift); /* in [2^m, 2^(m+1)] */
    uint32_t code = ((uint32_t)(e + d->bias) << d->man_bits) + (q - (1u << d->man_bits));
    return code > d->max_code ? d->max_code : (uint8_t)code;
}

uint8_t prec_fp8_encode(float x, prec_fp8_format fmt) {
    const fp8_desc *d = &fp8_descs[fmt];
    uint32_t u = f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (f32_bits_isnan(u)) return sign | d->nan_code;
    if (f32_from_bits(a) >= d->max) /* saturating, Inf included */
        return sign | d->max_code;
    return sign | fp8_encode_mag(a, d);
}

float prec_fp8_decode(uint8_t bits, prec_fp8_format fmt) {
    const fp8_desc *d = &fp8_descs[fmt];
    uint32_t sign = (uint32_t)(bits & 0x80u) << 24;
    uint32_t mag = bits & 0x7Fu;
    uint32_t man = mag & ((1u << d->man_bits) - 1u);
    uint32_t exp = mag >> d->man_bits;
    uint32_t exp_all_ones = 0x7Fu >> d->man_bits;
    if (fmt == PREC_E4M3 && mag == 0x7Fu) return f32_from_bits(sign | 0x7FC00000u);
    if (fmt == PREC_E5M2 && exp == exp_all_ones)
        return f32_from_bits(sign | (man ? 0x7FC00000u : 0x7F800000u));
    if (exp == 0) {
        /* Subnormal: man * 2^(1 - bias - man_bits), exact in float32. */
        float v = ldexpf((float)man, 1 - d->bias - d->man_bits);
        return sign ? -v : v;
    }
    uint32_t fexp = exp - (uint32_t)d->bias + 127u;
    return f32_from_bits(sign | (fexp << 23) | (man << (23 - d->man_bits)));
}

/* max |x[i]|, NaN ignored: in 16 lanes, which gcc vectorizes; max is exact, so the order
 * does not change the result. */
CPU_INLINE float amax_of(const float *x, size_t n) {
    float lane[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) {
            float a = fabsf(x[i + (size_t)l]);
            lane[l] = a > lane[l] ? a : lane[l]; /* false for NaN */
        }
    float m = 0.0f;
    for (; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    for (int l = 0; l < 16; l++)
        m = lane[l] > m ? lane[l] : m;
    return m;
}

/* What prec_fp8_decode(prec_fp8_encode(.)) makes of the float32 pattern u, without
 * branches so that gcc vectorizes the loop around it: each case computed, one selected.
 * unit: the format's smallest subnormal, 2^(1 - bias - man_bits). */
static inline uint32_t fp8_qdq_bits(uint32_t u, const fp8_desc *d, float unit) {
    const int sh = 23 - d->man_bits, emin = 1 - d->bias;
    uint32_t sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
    /* normal: the mantissa rounded to man_bits, half to even; a carry is the next binade */
    uint32_t nrm = (a + ((1u << (sh - 1)) - 1u) + ((a >> sh) & 1u)) & ~((1u << sh) - 1u);
    /* subnormal: in units of 2^(emin - man_bits), as fp8_encode_mag's rne_shift (a shift
     * of 31 gives 0, like any longer one; 1 where a is normal and this is not used) */
    int32_t s = sh + emin + 127 - (int32_t)(a >> 23);
    s = s < 1 ? 1 : s > 31 ? 31 : s;
    uint32_t sig = (a & 0x007FFFFFu) | 0x00800000u;
    uint32_t q = sig >> s, rem = sig & ((1u << s) - 1u), half = 1u << (s - 1);
    q += (uint32_t)(rem > half || (rem == half && (q & 1u)));
    uint32_t sub = f32_bits((float)q * unit); /* exact: q <= 2^man_bits */
    uint32_t r = a < ((uint32_t)(emin + 127) << 23) ? sub : nrm;
    r = a >= f32_bits(d->max) ? f32_bits(d->max) : r; /* saturating, Inf included */
    r = a > 0x7F800000u ? 0x7FC00000u : r;            /* NaN: the canonical quiet one */
    return sign | r;
}

CPU_CLONES float prec_fp8_qdq_array(float *dst, const float *src, size_t n, float scale,
                                    prec_fp8_format fmt) {
    const fp8_desc *d = &fp8_descs[fmt];
    const float unit = ldexpf(1.0f, 1 - d->bias - d->man_bits);
    float amax = amax_of(src, n); /* first: dst may be src */
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_from_bits(fp8_qdq_bits(f32_bits(src[i] * scale), d, unit)) / scale;
    return amax;
}

/* ---- delayed scaling ---- */

void prec_fp8_meta_init(prec_fp8_meta *m, float *history, uint32_t len, prec_fp8_format fmt,
                        uint32_t margin) {
    m->scale = 1.0f;
    m->history = history;
    m->len = len;
    m->pos = 0;
    m->fmt = fmt;
    m->margin = margin;
    for (uint32_t i = 0; i < len; i++)
        history[i] = 0.0f;
}

/* max over the history; NaN or Inf anywhere makes the result non-finite. */
static float meta_history_amax(const prec_fp8_meta *m) {
    float amax = 0.0f;
    for (uint32_t i = 0; i < m->len; i++) {
        float h = m->history[i];
        if (!isfinite(h)) return h;
        if (h > amax) amax = h;
    }
    return amax;
}

void prec_fp8_meta_update(prec_fp8_meta *m, float amax) {
    if (m->len > 0) {
        m->history[m->pos] = amax;
        m->pos = (m->pos + 1) % m->len;
        amax = meta_history_amax(m);
    }
    if (!(amax > 0.0f) || !isfinite(amax)) return;
    /* Computed in double and rounded once: the same correctly rounded quotient a
     * float32 division gives, and the power of two of the margin is exact. A scale
     * past float32's range would turn every product into Inf; Transformer Engine
     * clamps it to FLT_MAX, so amax then maps below fmt_max rather than to it. */
    double s = ldexp((double)fp8_descs[m->fmt].max / (double)amax, -(int)m->margin);
    m->scale = s > (double)FLT_MAX ? FLT_MAX : (float)s;
}

void prec_fp8_meta_rescale(prec_fp8_meta *m, float k) {
    for (uint32_t i = 0; i < m->len; i++)
        m->history[i] /= k;
    double s = (double)m->scale * k;
    m->scale = s > (double)FLT_MAX ? FLT_MAX : (float)s;
}
