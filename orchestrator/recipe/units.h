/* Parsing the numbers recipes write: integers with binary multipliers ("8K"), sizes
 * ("80GB", "80GiB"), transfer rates ("450GB/s", "400Gb/s"), durations ("300s", "5m"),
 * plain doubles ("1e-5") and booleans.
 *
 * Every function reads the whole NUL-terminated string: leading or trailing garbage,
 * an empty string, "inf" and "nan" are rejected. Returns 0 and stores the value, or
 * BT_EINVAL when s is not of the form (the UNITS_*_FORMS strings say what is), or
 * BT_ERANGE when it is but the value does not fit (or is negative where it must not
 * be). Integer results are exact: "1.5K" is 1536, "1e3" is 1000, "1.5" is rejected. */
#ifndef BATON_UNITS_H
#define BATON_UNITS_H

#include <stdint.h>

#define UNITS_INT_FORMS    "an integer such as 8, 8K (8192), 128K or 1M (K/M/G/T are powers of two)"
#define UNITS_DOUBLE_FORMS "a finite number such as 3, 0.1 or 1e-5"
#define UNITS_BOOL_FORMS   "true or false (also yes/no, on/off)"
#define UNITS_BYTES_FORMS                                                                          \
    "a size such as 80GB or 80GiB (units B, KB, MB, GB, TB, PB in powers of 10, "                  \
    "KiB, MiB, GiB, TiB, PiB in powers of 2; a plain number is bytes)"
#define UNITS_BANDWIDTH_FORMS                                                                      \
    "a rate such as 450GB/s, 50GiB/s or 400Gb/s (a size unit followed by /s, or bits: b/s, "       \
    "Kb/s, Mb/s, Gb/s, Tb/s; a plain number is bytes per second)"
#define UNITS_DURATION_FORMS                                                                       \
    "a duration such as 250ms, 300s, 5m, 1h or 2d (a plain number is seconds)"

/* An integer in [min, max]; K/M/G/T (either case) multiply by 2^10, 2^20, 2^30, 2^40. */
int units_parse_int(const char *s, int64_t min, int64_t max, int64_t *out);

/* The same for a non-negative integer in [0, max]; a '-' sign is BT_ERANGE. */
int units_parse_uint(const char *s, uint64_t max, uint64_t *out);

/* A finite double as strtod reads it (no leading space, no hex, no inf/nan). */
int units_parse_double(const char *s, double *out);

/* true/false/yes/no/on/off, any case; *out is 1 or 0. */
int units_parse_bool(const char *s, int *out);

/* A whole number of bytes; "1.5KiB" is 1536, "0.5B" is BT_EINVAL. */
int units_parse_bytes(const char *s, uint64_t *out);

/* Bytes per second, >= 0. */
int units_parse_bandwidth(const char *s, double *out);

/* The longest duration a recipe may give (restart.backoff, restart.heartbeat_timeout):
 * the bound of the command line's durations too (launch --timeout, ckpt push --max-time). */
#define UNITS_MAX_DURATION_S    1e7
#define UNITS_MAX_DURATION_TEXT "10000000s"

/* Seconds, >= 0. */
int units_parse_duration(const char *s, double *out);

#endif
