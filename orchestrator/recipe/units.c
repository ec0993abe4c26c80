#include "units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/err.h"

/* A decimal number as written, kept exact: value = (neg ? -1 : 1) * mant * 10^exp10.
 * mant carries no trailing zeros (they move into exp10), so integrality can be decided
 * without rounding. */
typedef struct units_dec {
    uint64_t mant;
    long exp10;
    int neg;
    int overflow; /* more significant digits than a uint64 holds */
} units_dec;

/* Longest number text we hand to strtod; longer ones are rejected as malformed. */
#define UNITS_NUM_MAX 128
/* Exponents are clamped here so that a long exponent cannot overflow a long. */
#define UNITS_EXP_CLAMP 100000L

typedef struct units_suffix {
    const char *name;
    double mult;
} units_suffix;

static int units_isdigit(char c) {
    return c >= '0' && c <= '9';
}

/* Appends one digit to d, where pending counts zeros seen since the last non-zero one. */
static void dec_push_digit(units_dec *d, int digit, long *pending) {
    if (digit == 0) {
        if (d->mant != 0 || d->overflow) (*pending)++;
        return;
    }
    uint64_t m = d->mant;
    for (long i = 0; i <= *pending && !d->overflow; i++)
        d->overflow = __builtin_mul_overflow(m, 10, &m);
    if (!d->overflow) d->overflow = __builtin_add_overflow(m, (uint64_t)digit, &m);
    d->mant = m;
    *pending = 0;
}

/* Reads the exponent part "e[+-]digits" at s; returns the end, or s if there is none. */
static const char *dec_scan_exp(const char *s, long *exp) {
    const char *p = s;
    int neg = 0;
    *exp = 0;
    if (*p != 'e' && *p != 'E') return s;
    p++;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    if (!units_isdigit(*p)) return s;
    while (units_isdigit(*p)) {
        if (*exp < UNITS_EXP_CLAMP) *exp = *exp * 10 + (*p - '0');
        p++;
    }
    if (neg) *exp = -*exp;
    return p;
}

/* Scans [+-]digits[.digits][e[+-]digits] (at least one mantissa digit). Returns the end
 * of the number or NULL when s does not start with one. */
static const char *dec_scan(const char *s, units_dec *d) {
    const char *p = s;
    long pending = 0, frac = 0, exp = 0;
    int ndigits = 0;
    memset(d, 0, sizeof *d);
    if (*p == '+' || *p == '-') d->neg = *p++ == '-';
    for (; units_isdigit(*p); p++, ndigits++)
        dec_push_digit(d, *p - '0', &pending);
    if (*p == '.') {
        for (p++; units_isdigit(*p); p++, ndigits++, frac++)
            dec_push_digit(d, *p - '0', &pending);
    }
    if (ndigits == 0) return NULL;
    p = dec_scan_exp(p, &exp);
    if (frac > UNITS_EXP_CLAMP) frac = UNITS_EXP_CLAMP;
    if (pending > UNITS_EXP_CLAMP) pending = UNITS_EXP_CLAMP;
    d->exp10 = pending - frac + exp;
    return p;
}

/* Removes one factor of ten from mant * mult; returns 0 if there is none to remove. */
static int dec_divide_ten(uint64_t *mant, uint64_t *mult) {
    if (*mant % 10 == 0)
        *mant /= 10;
    else if (*mult % 10 == 0)
        *mult /= 10;
    else if (*mant % 5 == 0 && *mult % 2 == 0)
        *mant /= 5, *mult /= 2;
    else if (*mant % 2 == 0 && *mult % 5 == 0)
        *mant /= 2, *mult /= 5;
    else
        return 0;
    return 1;
}

/* |d| * mult as an exact integer: BT_EINVAL if it is not whole, BT_ERANGE if too big. */
static int dec_to_u64(const units_dec *d, uint64_t mult, uint64_t *out) {
    uint64_t mant = d->mant;
    if (d->overflow) return BT_ERANGE;
    if (mant == 0 || mult == 0) {
        *out = 0;
        return 0;
    }
    for (long e = d->exp10; e > 0; e--)
        if (__builtin_mul_overflow(mant, 10, &mant)) return BT_ERANGE;
    for (long e = d->exp10; e < 0; e++)
        if (!dec_divide_ten(&mant, &mult)) return BT_EINVAL;
    if (__builtin_mul_overflow(mant, mult, &mant)) return BT_ERANGE;
    *out = mant;
    return 0;
}

/* The binary multiplier of an integer suffix (K, M, G, T in either case), 0 if none. */
static uint64_t units_int_suffix(const char *s) {
    if (s[0] == '\0') return 1;
    if (s[1] != '\0') return 0;
    switch (s[0]) {
    case 'K':
    case 'k':
        return 1ULL << 10;
    case 'M':
    case 'm':
        return 1ULL << 20;
    case 'G':
    case 'g':
        return 1ULL << 30;
    case 'T':
    case 't':
        return 1ULL << 40;
    }
    return 0;
}

/* The magnitude of an integer with an optional suffix; *neg tells the sign. */
static int units_parse_magnitude(const char *s, uint64_t *mag, int *neg) {
    units_dec d;
    const char *end = dec_scan(s, &d);
    if (end == NULL) return BT_EINVAL;
    uint64_t mult = units_int_suffix(end);
    if (mult == 0) return BT_EINVAL;
    *neg = d.neg;
    return dec_to_u64(&d, mult, mag);
}

int units_parse_uint(const char *s, uint64_t max, uint64_t *out) {
    uint64_t mag;
    int neg, rc = units_parse_magnitude(s, &mag, &neg);
    if (rc < 0) return rc;
    if (neg || mag > max) return BT_ERANGE;
    *out = mag;
    return 0;
}

int units_parse_int(const char *s, int64_t min, int64_t max, int64_t *out) {
    uint64_t mag;
    int neg, rc = units_parse_magnitude(s, &mag, &neg);
    if (rc < 0) return rc;
    if (mag == 0) {
        *out = 0;
        return min <= 0 && max >= 0 ? 0 : BT_ERANGE;
    }
    if (!neg) {
        if (max < 0 || mag > (uint64_t)max) return BT_ERANGE;
        *out = (int64_t)mag;
        return 0;
    }
    /* -(min + 1) + 1 is |min| without overflowing at INT64_MIN. */
    if (min >= 0 || mag - 1 > (uint64_t)(-(min + 1))) return BT_ERANGE;
    *out = -(int64_t)(mag - 1) - 1;
    return 0;
}

/* Scans the number at the start of s and converts it with strtod. Returns the end of
 * the number, or NULL (malformed). Hex, inf and nan never match. */
static const char *units_scan_double(const char *s, double *v, int *rc) {
    units_dec d;
    char buf[UNITS_NUM_MAX + 1];
    const char *end = dec_scan(s, &d);
    *rc = BT_EINVAL;
    if (end == NULL || (size_t)(end - s) > UNITS_NUM_MAX) return NULL;
    memcpy(buf, s, (size_t)(end - s));
    buf[end - s] = '\0';
    *v = strtod(buf, NULL);
    *rc = isfinite(*v) ? 0 : BT_ERANGE;
    return end;
}

int units_parse_double(const char *s, double *out) {
    double v;
    int rc;
    const char *end = units_scan_double(s, &v, &rc);
    if (end == NULL || *end != '\0') return BT_EINVAL;
    if (rc < 0) return rc;
    *out = v;
    return 0;
}

int units_parse_bool(const char *s, int *out) {
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return BT_EINVAL;
}

/* The multiplier of unit text u in table t (the empty unit is 1), or 0 if unknown. */
static double units_lookup(const units_suffix *t, size_t n, const char *u) {
    if (*u == '\0') return 1;
    while (*u == ' ')
        u++;
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, u) == 0) return t[i].mult;
    return 0;
}

static const units_suffix units_byte_table[] = {
    {"B", 1},
    {"KB", 1e3},
    {"kB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"PB", 1e15},
    {"KiB", 1024.0},
    {"MiB", 1048576.0},
    {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0},
    {"PiB", 1125899906842624.0},
};
#define UNITS_NBYTE (sizeof units_byte_table / sizeof units_byte_table[0])

int units_parse_bytes(const char *s, uint64_t *out) {
    units_dec d;
    const char *end = dec_scan(s, &d);
    if (end == NULL) return BT_EINVAL;
    double mult = units_lookup(units_byte_table, UNITS_NBYTE, end);
    if (mult == 0) return BT_EINVAL;
    if (d.neg && d.mant != 0) return BT_ERANGE;
    return dec_to_u64(&d, (uint64_t)mult, out);
}

/* A non-negative number followed by a unit from table t. */
static int units_parse_scaled(const char *s, const units_suffix *t, size_t n, double *out) {
    double v;
    int rc;
    const char *end = units_scan_double(s, &v, &rc);
    if (end == NULL) return BT_EINVAL;
    double mult = units_lookup(t, n, end);
    if (mult == 0) return BT_EINVAL;
    if (rc < 0) return rc;
    if (v < 0) return BT_ERANGE;
    v *= mult;
    if (!isfinite(v)) return BT_ERANGE;
    *out = v + 0.0; /* turns -0 into +0 */
    return 0;
}

int units_parse_bandwidth(const char *s, double *out) {
    static const units_suffix bits[] = {
        {"b/s", 1.0 / 8},  {"Kb/s", 1e3 / 8}, {"kb/s", 1e3 / 8},
        {"Mb/s", 1e6 / 8}, {"Gb/s", 1e9 / 8}, {"Tb/s", 1e12 / 8},
    };
    units_suffix t[UNITS_NBYTE + sizeof bits / sizeof bits[0]];
    char names[UNITS_NBYTE][8];
    size_t n = 0;
    for (size_t i = 0; i < UNITS_NBYTE; i++, n++) {
        strcpy(names[i], units_byte_table[i].name);
        strcat(names[i], "/s");
        t[n].name = names[i];
        t[n].mult = units_byte_table[i].mult;
    }
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        t[n++] = bits[i];
    return units_parse_scaled(s, t, n, out);
}

int units_parse_duration(const char *s, double *out) {
    static const units_suffix t[] = {
        {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"min", 60}, {"h", 3600}, {"d", 86400},
    };
    return units_parse_scaled(s, t, sizeof t / sizeof t[0], out);
}
