/* test_cuda_ops.h's shared helpers. */
#include "test_cuda_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

int failures;
backend cpu, gpu;
static uint64_t rng = 88172645463325252ull;

float urand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

float *host_rand(size_t n, float amp) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = urand() * amp;
    return h;
}

pair pair_from(const float *h, size_t n) {
    pair p = {cpu.alloc(&cpu, n * 4), gpu.alloc(&gpu, n * 4), n};
    cpu.from_host(&cpu, p.c, h, n * 4);
    gpu.from_host(&gpu, p.g, h, n * 4);
    return p;
}

pair pair_rand(size_t n, float amp) {
    float *h = host_rand(n, amp);
    pair p = pair_from(h, n);
    free(h);
    return p;
}

void pair_free(pair *p) {
    cpu.free(&cpu, p->c);
    gpu.free(&gpu, p->g);
}

int32_t *ints_on(backend *be, const int32_t *h, size_t n) {
    int32_t *d = be->alloc(be, n * 4);
    be->from_host(be, d, h, n * 4);
    return d;
}

/* max |g - c| <= tol * max |c| over n values (c is the reference). */
void compare(const char *what, const float *c, const float *g, size_t n, double tol) {
    double cmax = 0.0, err = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)c[i]);
        if (a > cmax && isfinite(a)) cmax = a;
    }
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - (double)c[i]);
        if ((isinf(c[i]) && c[i] == g[i]) || (isnan(c[i]) && isnan(g[i]))) e = 0.0;
        if (!(e <= err)) {
            err = isnan(e) ? INFINITY : e;
            worst = i;
        }
    }
    if (err > tol * (cmax > 0 ? cmax : 1e-30)) {
        fprintf(stderr,
                "FAIL %s: max error %.3g at [%zu] (cpu %.9g, gpu %.9g), max |cpu| %.3g, tol %.1g\n",
                what, err, worst, c[worst], g[worst], cmax, tol);
        failures++;
    }
}

/* Compares the n values of a pair. */
void compare_pair(const char *what, const pair *p, double tol) {
    float *hc = malloc(p->n * 4 + 4), *hg = malloc(p->n * 4 + 4);
    cpu.to_host(&cpu, hc, p->c, p->n * 4);
    gpu.to_host(&gpu, hg, p->g, p->n * 4);
    compare(what, hc, hg, p->n, tol);
    free(hc);
    free(hg);
}

void check_sync(const char *what) {
    int rc = gpu.sync(&gpu);
    if (rc) {
        fprintf(stderr, "FAIL %s: sync %d: %s\n", what, rc, cuda_backend_error(&gpu));
        failures++;
    }
}

/* 1 if the gpu buffers a and b (n floats) are bitwise equal. */
int gpu_bitwise_equal(const float *a, const float *b, size_t n) {
    float *ha = malloc(n * 4 + 4), *hb = malloc(n * 4 + 4);
    gpu.to_host(&gpu, ha, a, n * 4);
    gpu.to_host(&gpu, hb, b, n * 4);
    int eq = memcmp(ha, hb, n * 4) == 0;
    free(ha);
    free(hb);
    return eq;
}

/* 1 if the pair's two copies are bitwise equal; else a failure naming the first difference. */
int compare_pair_bits(const char *what, const pair *p) {
    float *hc = malloc(p->n * 4 + 4), *hg = malloc(p->n * 4 + 4);
    cpu.to_host(&cpu, hc, p->c, p->n * 4);
    gpu.to_host(&gpu, hg, p->g, p->n * 4);
    int eq = memcmp(hc, hg, p->n * 4) == 0;
    if (!eq) {
        size_t i = 0;
        while (memcmp(hc + i, hg + i, 4) == 0)
            i++;
        fprintf(stderr, "FAIL %s: not bitwise equal, first at [%zu] (cpu %.9g, gpu %.9g)\n", what,
                i, hc[i], hg[i]);
        failures++;
    }
    free(hc);
    free(hg);
    return eq;
}
