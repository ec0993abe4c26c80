/* IEEE half rounding (precision.c) against known bit patterns written here from the
 * format's definition, and against numpy's float32 -> float16 cast (round-to-nearest-
 * even, overflow to Inf, exact subnormals) on every half value, every midpoint between
 * neighbouring halves and the float32 values one ulp either side of it (the ties and the
 * near-ties), the overflow boundary, and a million random float32 bit patterns; decoding
 * against numpy's float16 -> float32 on all 65536 patterns. Exit 77 (SKIPPED) when
 * /usr/bin/python3 cannot import numpy. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "precision.h"

#define CHECK_FP16(x, want) CHECK_EQ_U64(prec_fp16_bits(x), want)

static void test_fp16_patterns(void) {
    CHECK_FP16(0.0f, 0x0000);
    CHECK_FP16(-0.0f, 0x8000);
    CHECK_FP16(1.0f, 0x3C00);
    CHECK_FP16(-2.0f, 0xC000);
    CHECK_FP16(65504.0f, 0x7BFF);              /* the largest finite half */
    CHECK_FP16(float_of(0x477FEFFFu), 0x7BFF); /* just below 65520 */
    CHECK_FP16(65520.0f, 0x7C00);              /* the tie above the max: to even, Inf */
    CHECK_FP16(1e6f, 0x7C00);                  /* overflow is Inf, not saturation */
    CHECK_FP16(-1e30f, 0xFC00);
    CHECK_FP16(float_of(0x7F800000u), 0x7C00);      /* Inf */
    CHECK_FP16(1.0f + 0x1p-11f, 0x3C00);            /* tie, to the even 1.0 */
    CHECK_FP16(1.0f + 3 * 0x1p-11f, 0x3C02);        /* tie, to the even 1 + 2^-9 */
    CHECK_FP16(1.0f + 0x1p-11f + 0x1p-23f, 0x3C01); /* just past the tie */
    CHECK_FP16(0x1p-14f, 0x0400);                   /* the smallest normal */
    CHECK_FP16(0x1p-14f - 0x1p-25f, 0x0400);        /* tie between 0x3FF and 0x400: even */
    CHECK_FP16(0x1p-24f, 0x0001);                   /* the smallest subnormal */
    CHECK_FP16(0x1p-25f, 0x0000);                   /* tie with 0: to even, zero */
    CHECK_FP16(0x1p-25f + 0x1p-40f, 0x0001);        /* just past it */
    CHECK_FP16(3 * 0x1p-25f, 0x0002);               /* 1.5 units: to even, 2 */
    CHECK_FP16(-5 * 0x1p-25f, 0x8002);              /* 2.5 units: to even, 2 */
    CHECK_FP16(1e-8f, 0x0000);
    CHECK_FP16(float_of(0x00000001u), 0x0000);                   /* a float32 subnormal */
    CHECK_EQ_U64(prec_fp16_bits(float_of(0x7FC00000u)), 0x7E00); /* quiet NaN */
    CHECK_EQ_U64(prec_fp16_bits(float_of(0xFF800001u)), 0xFE00); /* signalling: quieted */
    CHECK(prec_fp16_from_bits(0x7BFF) == 65504.0f);
    CHECK(prec_fp16_from_bits(0x0001) == 0x1p-24f);
    CHECK(prec_fp16_from_bits(0x83FF) == -0x3FFp-24f);
    CHECK(prec_fp16_round(0.1f) == 0x666p-14f); /* 0.0999755859375 */
    float src[3] = {0.1f, 70000.0f, 0x1p-26f}, dst[3];
    prec_fp16_round_array(dst, src, 3);
    CHECK(dst[0] == prec_fp16_round(0.1f) && dst[1] > 1e38f && dst[2] == 0.0f);
}

/* Writes N float32 inputs, their N numpy float16 patterns and numpy's float32 value of
 * each of the 65536 half patterns, all little endian, to argv[1]. */
static const char numpy_script[] =
    "import sys\n"
    "try:\n"
    "    import numpy as np\n"
    "except ImportError:\n"
    "    sys.exit(77)\n"
    "h = np.arange(65536, dtype=np.uint32).astype(np.uint16)\n"
    "hv = h.view(np.float16).astype(np.float32)\n"
    "pos = np.arange(0x7C00, dtype=np.uint32).astype(np.uint16).view(np.float16)\n"
    "lo = pos.astype(np.float64)\n"
    "hi = np.append(lo[1:], 65536.0)\n"
    "mid = ((lo + hi) / 2).astype(np.float32)\n"
    "inf = np.float32(np.inf)\n"
    "near = np.concatenate([mid, np.nextafter(mid, -inf), np.nextafter(mid, inf)])\n"
    "rnd = np.random.default_rng(11).integers(0, 2**32, 1 << 20, dtype=np.uint64)\n"
    "rnd = rnd.astype(np.uint32).view(np.float32)\n"
    "x = np.concatenate([hv[np.isfinite(hv)], near, -near, rnd]).astype(np.float32)\n"
    "with np.errstate(all='ignore'):\n"
    "    e = x.astype(np.float16).view(np.uint16)\n"
    "with open(sys.argv[1], 'wb') as f:\n"
    "    f.write(np.uint64(x.size).astype('<u8').tobytes())\n"
    "    f.write(x.astype('<f4').tobytes())\n"
    "    f.write(e.astype('<u2').tobytes())\n"
    "    f.write(hv.astype('<f4').tobytes())\n";

/* Runs the script; 0, 77 (no numpy) or -1. */
static int numpy_generate(const char *dir, const char *out) {
    char script[256], cmd[1024];
    snprintf(script, sizeof script, "%s/fp16.py", dir);
    FILE *f = fopen(script, "w");
    if (f == NULL || fputs(numpy_script, f) < 0 || fclose(f) != 0) return -1;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, out);
    int st = system(cmd);
    unlink(script);
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 77) return 77;
    return st == 0 ? 0 : -1;
}

static int is_nan16(uint16_t h) {
    return (h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0;
}

/* Every input's pattern; a NaN needs only be a NaN of the same sign. */
static void compare_encode(const float *x, const uint16_t *want, uint64_t n) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t got = prec_fp16_bits(x[i]);
        int ok = is_nan16(want[i]) ? is_nan16(got) && (got & 0x8000u) == (want[i] & 0x8000u)
                                   : got == want[i];
        if (!ok && bad++ < 10)
            fprintf(stderr, "fp16 of %a (0x%08x): 0x%04x, numpy 0x%04x\n", (double)x[i],
                    bits_of(x[i]), got, want[i]);
    }
    printf("fp16 encode: %llu inputs, %llu differ from numpy\n", (unsigned long long)n,
           (unsigned long long)bad);
    CHECK_EQ_U64(bad, 0);
}

static void compare_decode(const float *hv) {
    uint64_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if (bits_of(prec_fp16_from_bits((uint16_t)h)) != bits_of(hv[h]) && bad++ < 10)
            fprintf(stderr, "half 0x%04x: %a, numpy %a\n", h,
                    (double)prec_fp16_from_bits((uint16_t)h), (double)hv[h]);
    printf("fp16 decode: 65536 patterns, %llu differ from numpy\n", (unsigned long long)bad);
    CHECK_EQ_U64(bad, 0);
}

/* Reads what the script wrote and compares. */
static void numpy_compare(const char *path) {
    FILE *f = fopen(path, "rb");
    uint64_t n = 0;
    CHECK(f != NULL && fread(&n, sizeof n, 1, f) == 1 && n > 0 && n < (1u << 24));
    if (f == NULL || n == 0 || n >= (1u << 24)) goto out;
    float *x = malloc(n * sizeof *x), *hv = malloc(65536 * sizeof *hv);
    uint16_t *want = malloc(n * sizeof *want);
    int ok = x && hv && want && fread(x, sizeof *x, n, f) == n &&
             fread(want, sizeof *want, n, f) == n && fread(hv, sizeof *hv, 65536, f) == 65536;
    CHECK(ok);
    if (ok) compare_encode(x, want, n), compare_decode(hv);
    free(x), free(hv), free(want);
out:
    if (f) fclose(f);
}

int main(void) {
    test_fp16_patterns();
    char dir[] = "/tmp/baton-fp16-XXXXXX", out[64];
    if (mkdtemp(dir) == NULL) return 1;
    snprintf(out, sizeof out, "%s/vectors.bin", dir);
    int rc = numpy_generate(dir, out);
    if (rc == 0) numpy_compare(out);
    unlink(out);
    rmdir(dir);
    if (rc == 77) {
        printf("SKIPPED: /usr/bin/python3 cannot import numpy (the fixed patterns passed: %s)\n",
               check_failures ? "no" : "yes");
        return check_failures ? 1 : 77;
    }
    CHECK(rc == 0);
    return check_status();
}
