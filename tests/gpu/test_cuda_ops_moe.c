/* The MoE ops of the CUDA backend against the CPU backend (test_cuda_ops.c's "moe"
 * group): each op on equal inputs (the CPU's results of the op before, with logits drawn
 * so that no selection is near a tie): selections, rows, counts and permutations equal
 * exactly; scores, ssum and combine weights within 1e-5 (CUDA's expf is not libm's); the
 * combine backward's dot products within 2e-5; everything else bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "test_cuda_ops.h"
#include "util/err.h"

static int32_t *ints_back(backend *be, const int32_t *d, size_t n) {
    int32_t *h = malloc((n ? n : 1) * sizeof *h);
    be->to_host(be, h, d, n * 4);
    return h;
}

/* The n int32 of the device buffers c (cpu) and g (gpu) must be equal. */
static void compare_ints(const char *what, const int32_t *c, const int32_t *g, size_t n) {
    int32_t *hc = ints_back(&cpu, c, n), *hg = ints_back(&gpu, g, n);
    for (size_t i = 0; i < n; i++)
        if (hc[i] != hg[i]) {
            fprintf(stderr, "FAIL %s: [%zu] cpu %d gpu %d\n", what, i, (int)hc[i], (int)hg[i]);
            failures++;
            break;
        }
    free(hc);
    free(hg);
}

/* Device copies of host int32 data on each backend. */
typedef struct ipair {
    int32_t *c, *g;
    size_t n;
} ipair;

static ipair ipair_from(const int32_t *h, size_t n) {
    ipair p = {ints_on(&cpu, h, n ? n : 1), ints_on(&gpu, h, n ? n : 1), n};
    return p;
}

static void ipair_free(ipair *p) {
    cpu.free(&cpu, p->c);
    gpu.free(&gpu, p->g);
}

/* A pair whose both copies hold the cpu buffer src's n floats (the reference's result, so
 * that the next op is compared on equal inputs). */
static pair pair_from_cpu(const float *src, size_t n) {
    float *h = malloc((n ? n : 1) * 4);
    cpu.to_host(&cpu, h, src, n * 4);
    pair p = pair_from(h, n ? n : 1);
    p.n = n;
    free(h);
    return p;
}

static ipair ipair_from_cpu(const int32_t *src, size_t n) {
    int32_t *h = ints_back(&cpu, src, n);
    ipair p = ipair_from(h, n);
    free(h);
    return p;
}

/* Random logits (N, E) for which no token's selection is close to a tie: the K + 1 largest
 * s + bias (computed by the CPU backend) are at least 1e-4 apart, so an ulp of expf cannot
 * change the top K. Rows that fail are drawn again. */
static float *moe_logits(int N, int E, int K, int score, const float *bias) {
    float *l = host_rand((size_t)N * E, 4.0f), *s = malloc((size_t)N * E * 4);
    float *ss = cpu.alloc(&cpu, (size_t)N * 4), *d = cpu.alloc(&cpu, (size_t)N * E * 4);
    float *g = cpu.alloc(&cpu, (size_t)N * K * 4);
    int32_t *tk = cpu.alloc(&cpu, (size_t)N * K * 4);
    for (int attempt = 0; attempt < 20; attempt++) {
        cpu.from_host(&cpu, d, l, (size_t)N * E * 4);
        cpu.moe_route(&cpu, d, ss, tk, g, NULL, N, E, K, score, 0);
        cpu.to_host(&cpu, s, d, (size_t)N * E * 4);
        int redo = 0;
        for (int n = 0; n < N; n++) {
            float *v = s + (size_t)n * E;
            for (int e = 0; e < E; e++)
                v[e] += bias ? bias[e] : 0.0f;
            /* the K + 1 largest, by selection */
            int near = 0;
            float prev = INFINITY;
            for (int j = 0; j <= K && j < E && !near; j++) {
                int best = -1;
                for (int e = 0; e < E; e++)
                    if (v[e] < prev && (best < 0 || v[e] > v[best])) best = e;
                for (int e = 0; e < E; e++) /* equal or close to another value */
                    if (e != best && fabsf(v[e] - v[best]) < 1e-4f) near = 1;
                prev = v[best];
            }
            if (near) {
                redo = 1;
                for (int e = 0; e < E; e++)
                    l[(size_t)n * E + e] = urand() * 4.0f;
            }
        }
        if (!redo) break;
    }
    free(s);
    cpu.free(&cpu, ss), cpu.free(&cpu, d), cpu.free(&cpu, g), cpu.free(&cpu, tk);
    return l;
}

/* The MoE routing and permutation ops, each on equal inputs (the CPU's results of the op
 * before): moe_route, moe_assign, moe_score_mean, gather_rows, moe_combine (with and
 * without gate), moe_combine_backward and moe_router_backward. */
static void test_moe_assign_limit(const char *what, const ipair *tk, int N, int K, int E,
                                  int capacity);

static void test_moe(int N, int E, int K, int C, int score, int norm_topk, int with_bias,
                     int capacity, double aux_coef) {
    char what[160], w2[240];
    snprintf(what, sizeof what, "moe N %d E %d K %d C %d %s norm %d bias %d cap %d aux %g", N, E, K,
             C, score ? "sigmoid" : "softmax", norm_topk, with_bias, capacity, aux_coef);
    size_t NE = (size_t)N * E, P = (size_t)N * K;
    float *hb = with_bias ? host_rand(E, 0.2f) : NULL;
    float *hl = moe_logits(N, E, K, score, hb);
    pair scores = pair_from(hl, NE), ssum = pair_rand(N, 1.0f), gate = pair_rand(P, 1.0f);
    pair bias = pair_from(hb ? hb : hl, hb ? (size_t)E : 1);
    free(hl), free(hb);
    ipair topk = {cpu.alloc(&cpu, P * 4), gpu.alloc(&gpu, P * 4), P};
    cpu.moe_route(&cpu, scores.c, ssum.c, topk.c, gate.c, with_bias ? bias.c : NULL, N, E, K, score,
                  norm_topk);
    gpu.moe_route(&gpu, scores.g, ssum.g, topk.g, gate.g, with_bias ? bias.g : NULL, N, E, K, score,
                  norm_topk);
    snprintf(w2, sizeof w2, "%s route topk", what);
    compare_ints(w2, topk.c, topk.g, P);
    snprintf(w2, sizeof w2, "%s route scores", what);
    compare_pair(w2, &scores, 1e-5);
    snprintf(w2, sizeof w2, "%s route ssum", what);
    compare_pair(w2, &ssum, 1e-5);
    snprintf(w2, sizeof w2, "%s route gate", what);
    compare_pair(w2, &gate, 1e-5);
    check_sync(what);

    /* moe_assign on the CPU's topk; tok and slot start as equal garbage, which must stay
     * at rows >= offset[E] */
    ipair tk = ipair_from_cpu(topk.c, P);
    size_t nc = 3 * (size_t)E + 1, ng = P > nc ? P : nc;
    int32_t *garbage = malloc(ng * 4);
    for (size_t i = 0; i < ng; i++)
        garbage[i] = -7 - (int32_t)i;
    ipair row = ipair_from(garbage, P), tok = ipair_from(garbage, P), slot = ipair_from(garbage, P);
    ipair counts = ipair_from(garbage, nc);
    free(garbage);
    cpu.moe_assign(&cpu, row.c, tok.c, slot.c, counts.c, tk.c, N, K, E, capacity, NULL);
    gpu.moe_assign(&gpu, row.g, tok.g, slot.g, counts.g, tk.g, N, K, E, capacity, NULL);
    snprintf(w2, sizeof w2, "%s assign row", what);
    compare_ints(w2, row.c, row.g, P);
    snprintf(w2, sizeof w2, "%s assign tok", what);
    compare_ints(w2, tok.c, tok.g, P);
    snprintf(w2, sizeof w2, "%s assign slot", what);
    compare_ints(w2, slot.c, slot.g, P);
    snprintf(w2, sizeof w2, "%s assign counts", what);
    compare_ints(w2, counts.c, counts.g, nc);
    int32_t *hcounts = ints_back(&cpu, counts.c, nc);
    int M = hcounts[3 * E];
    if (capacity > 0 && (size_t)M == P) {
        fprintf(stderr, "FAIL %s: capacity %d dropped no pair (the case is not tested)\n", what,
                capacity);
        failures++;
    }
    free(hcounts);
    check_sync(what);
    test_moe_assign_limit(what, &tk, N, K, E, capacity);

    /* moe_score_mean: the same double sum in the same order, bit for bit */
    pair s2 = pair_from_cpu(scores.c, NE), ss2 = pair_from_cpu(ssum.c, N);
    pair pmean = pair_rand(E, 1.0f);
    cpu.moe_score_mean(&cpu, pmean.c, s2.c, ss2.c, N, E);
    gpu.moe_score_mean(&gpu, pmean.g, s2.g, ss2.g, N, E);
    snprintf(w2, sizeof w2, "%s score_mean", what);
    compare_pair_bits(w2, &pmean);

    /* gather_rows by the CPU's tok, then the combine and its backward on M rows */
    ipair tk2 = ipair_from_cpu(tok.c, (size_t)M), row2 = ipair_from_cpu(row.c, P);
    ipair slot2 = ipair_from_cpu(slot.c, (size_t)M);
    size_t MC = (size_t)(M ? M : 1) * C;
    pair x = pair_rand((size_t)N * C, 1.0f), xg = pair_rand(MC, 1.0f);
    cpu.gather_rows(&cpu, xg.c, x.c, tk2.c, M, C);
    gpu.gather_rows(&gpu, xg.g, x.g, tk2.g, M, C);
    snprintf(w2, sizeof w2, "%s gather_rows (M %d)", what, M);
    compare_pair_bits(w2, &xg);
    pair g2 = pair_from_cpu(gate.c, P), out = pair_rand(MC, 1.0f);
    pair y = pair_rand((size_t)N * C, 1.0f);
    for (int gated = 1; gated >= 0; gated--) {
        cpu.moe_combine(&cpu, y.c, out.c, gated ? g2.c : NULL, row2.c, N, K, C);
        gpu.moe_combine(&gpu, y.g, out.g, gated ? g2.g : NULL, row2.g, N, K, C);
        snprintf(w2, sizeof w2, "%s combine (+=)%s", what, gated ? "" : " gate NULL");
        compare_pair_bits(w2, &y);
    }
    pair dy = pair_rand((size_t)N * C, 1.0f), dout = pair_rand(MC, 1.0f);
    pair dgate = pair_rand(P, 1.0f); /* dropped pairs' entries must stay as they are */
    cpu.moe_combine_backward(&cpu, dout.c, dgate.c, dy.c, out.c, g2.c, tk2.c, slot2.c, M, K, C);
    gpu.moe_combine_backward(&gpu, dout.g, dgate.g, dy.g, out.g, g2.g, tk2.g, slot2.g, M, K, C);
    snprintf(w2, sizeof w2, "%s combine_backward dout", what);
    compare_pair_bits(w2, &dout);
    snprintf(w2, sizeof w2, "%s combine_backward dgate", what);
    compare_pair(w2, &dgate, TOL_F32);
    float *dgate2 = gpu.alloc(&gpu, P * 4 + 4);
    gpu.copy(&gpu, dgate2, dgate.g, P);
    gpu.moe_combine_backward(&gpu, dout.g, dgate2, dy.g, out.g, g2.g, tk2.g, slot2.g, M, K, C);
    if (!gpu_bitwise_equal(dgate.g, dgate2, P)) {
        fprintf(stderr, "FAIL %s: combine_backward dgate differs run to run\n", what);
        failures++;
    }
    gpu.free(&gpu, dgate2);
    check_sync(what);

    /* the router's backward on the CPU's scores, topk, gate and counts, a random dgate */
    pair dg = pair_rand(P, 1.0f), dl = pair_rand(NE, 1.0f);
    ipair tk3 = ipair_from_cpu(topk.c, P), routed = ipair_from_cpu(counts.c, (size_t)E);
    for (int n_aux = N; n_aux <= 3 * N; n_aux += 2 * N) { /* 3N: a third of the sequence */
        cpu.moe_router_backward(&cpu, dl.c, s2.c, ss2.c, tk3.c, g2.c, dg.c, routed.c, N, n_aux, E,
                                K, score, norm_topk, aux_coef);
        gpu.moe_router_backward(&gpu, dl.g, s2.g, ss2.g, tk3.g, g2.g, dg.g, routed.g, N, n_aux, E,
                                K, score, norm_topk, aux_coef);
        snprintf(w2, sizeof w2, "%s router_backward dl (n_aux %d)", what, n_aux);
        compare_pair_bits(w2, &dl);
    }
    check_sync(what);

    pair_free(&scores), pair_free(&ssum), pair_free(&gate), pair_free(&bias), pair_free(&s2);
    pair_free(&ss2), pair_free(&pmean), pair_free(&x), pair_free(&xg), pair_free(&g2);
    pair_free(&out), pair_free(&y), pair_free(&dy), pair_free(&dout), pair_free(&dgate);
    pair_free(&dg), pair_free(&dl);
    ipair_free(&topk), ipair_free(&tk), ipair_free(&row), ipair_free(&tok), ipair_free(&slot);
    ipair_free(&counts), ipair_free(&tk2), ipair_free(&row2), ipair_free(&slot2);
    ipair_free(&tk3), ipair_free(&routed);
}

/* moe_assign with per-expert limits (context parallelism's shares of a capacity): the
 * same on both backends, and kept[e] = min(routed[e], limit[e]) whatever the capacity. */
static void test_moe_assign_limit(const char *what, const ipair *tk, int N, int K, int E,
                                  int capacity) {
    size_t P = (size_t)N * K, nc = 3 * (size_t)E + 1;
    int32_t *h = calloc(P > nc ? P : nc, sizeof *h);
    for (int e = 0; e < E; e++)
        h[e] = (e * 7) % 5 == 4 ? 1 << 30 : (e * 7) % 5 * N * K / (2 * E);
    ipair limit = ipair_from(h, (size_t)E);
    memset(h, 0, (P > nc ? P : nc) * sizeof *h);
    ipair row = ipair_from(h, P), tok = ipair_from(h, P), slot = ipair_from(h, P);
    ipair counts = ipair_from(h, nc);
    cpu.moe_assign(&cpu, row.c, tok.c, slot.c, counts.c, tk->c, N, K, E, capacity, limit.c);
    gpu.moe_assign(&gpu, row.g, tok.g, slot.g, counts.g, tk->g, N, K, E, capacity, limit.g);
    char w2[240];
    snprintf(w2, sizeof w2, "%s assign limit row", what);
    compare_ints(w2, row.c, row.g, P);
    snprintf(w2, sizeof w2, "%s assign limit tok, slot", what);
    compare_ints(w2, tok.c, tok.g, P);
    compare_ints(w2, slot.c, slot.g, P);
    snprintf(w2, sizeof w2, "%s assign limit counts", what);
    compare_ints(w2, counts.c, counts.g, nc);
    int32_t *hc = ints_back(&cpu, counts.c, nc), *hl = ints_back(&cpu, limit.c, (size_t)E);
    for (int e = 0; e < E; e++)
        if (hc[E + e] != (hc[e] < hl[e] ? hc[e] : hl[e])) {
            fprintf(stderr, "FAIL %s: expert %d kept %d of %d under limit %d\n", what, e, hc[E + e],
                    hc[e], hl[e]);
            failures++;
            break;
        }
    free(hc), free(hl), free(h);
    ipair_free(&limit), ipair_free(&row), ipair_free(&tok), ipair_free(&slot);
    ipair_free(&counts);
    check_sync(what);
}

/* moe_score_mean over one chunk (N <= MOE_MEAN_CHUNK_MIN), two, and more tokens than
 * MOE_MEAN_CHUNKS chunks of the minimum (longer chunks, the last one short), E beyond a
 * warp's 32 experts: bit for bit the CPU's, and within 1e-6 of the plain mean (the order
 * of a double sum moves it by far less). */
static void test_moe_score_mean_chunks(void) {
    static const int Ns[] = {1, 256, 257, MOE_MEAN_CHUNKS * MOE_MEAN_CHUNK_MIN + 4099};
    enum { E = 40 };
    for (size_t k = 0; k < sizeof Ns / sizeof Ns[0]; k++) {
        const int N = Ns[k];
        float *s = host_rand((size_t)N * E, 1.0f), *ss = host_rand((size_t)N, 1.0f);
        for (int n = 0; n < N; n++)
            ss[n] = 1.5f + ss[n]; /* in [0.5, 2.5) */
        pair sc = pair_from(s, (size_t)N * E), sum = pair_from(ss, (size_t)N);
        pair pmean = pair_rand(E, 1.0f);
        cpu.moe_score_mean(&cpu, pmean.c, sc.c, sum.c, N, E);
        gpu.moe_score_mean(&gpu, pmean.g, sc.g, sum.g, N, E);
        char what[64];
        snprintf(what, sizeof what, "moe_score_mean N %d E %d", N, E);
        compare_pair_bits(what, &pmean);
        float got[E];
        cpu.to_host(&cpu, got, pmean.c, sizeof got);
        for (int e = 0; e < E; e++) {
            double P = 0.0;
            for (int n = 0; n < N; n++)
                P += (double)(s[(size_t)n * E + e] / ss[n]);
            if (fabs(got[e] - P / N) > 1e-6) {
                fprintf(stderr, "FAIL %s: expert %d: %.9g, the plain mean %.9g\n", what, e,
                        (double)got[e], P / N);
                failures++;
                break;
            }
        }
        check_sync(what);
        free(s), free(ss);
        pair_free(&sc), pair_free(&sum), pair_free(&pmean);
    }
}

/* moe_score_mean with no rows: N 0 (0 / 0, NaN on both) and N -1 (a caller's bug: -0 on
 * both, and nothing read; a negative N taken as a size would run the CPU's loop far past
 * the scores). */
static void test_moe_score_mean_empty(void) {
    enum { E = 5 };
    pair sc = pair_rand(E, 1.0f), sum = pair_rand(1, 1.0f);
    for (int N = 0; N >= -1; N--) {
        pair pmean = pair_rand(E, 1.0f);
        cpu.moe_score_mean(&cpu, pmean.c, sc.c, sum.c, N, E);
        gpu.moe_score_mean(&gpu, pmean.g, sc.g, sum.g, N, E);
        float c[E], g[E];
        cpu.to_host(&cpu, c, pmean.c, sizeof c);
        gpu.to_host(&gpu, g, pmean.g, sizeof g);
        for (int e = 0; e < E; e++)
            if (N == 0 ? !(isnan(c[e]) && isnan(g[e]))
                       : !(c[e] == 0.0f && signbit(c[e]) && g[e] == 0.0f && signbit(g[e]))) {
                fprintf(stderr, "FAIL moe_score_mean N %d: expert %d: cpu %g, gpu %g\n", N, e,
                        (double)c[e], (double)g[e]);
                failures++;
                break;
            }
        pair_free(&pmean);
    }
    check_sync("moe_score_mean empty");
    pair_free(&sc), pair_free(&sum);
}

void test_moe_all(void) {
    test_moe_score_mean_chunks();
    test_moe_score_mean_empty();
    /* N, E, K, C, score, norm_topk, bias, capacity, aux_coef */
    test_moe(300, 37, 4, 67, MOE_SCORE_SOFTMAX, 0, 0, 0, 0.0);
    test_moe(257, 5, 1, 33, MOE_SCORE_SIGMOID, 1, 1, 30, 0.01);
    test_moe(130, 64, 8, 300, MOE_SCORE_SOFTMAX, 1, 1, 9, 0.02);
    test_moe(77, 37, 37, 19, MOE_SCORE_SIGMOID, 0, 0, 0, 0.01);
    test_moe(61, 37, 3, 40, MOE_SCORE_SIGMOID, 1, 0, 4, 0.0);
    test_moe(45, 512, 6, 24, MOE_SCORE_SOFTMAX, 0, 1, 0, 0.05);
    test_moe(50, 1, 1, 8, MOE_SCORE_SIGMOID, 1, 0, 0, 0.03);
    /* E beyond MOE_MAX_EXPERTS: nothing runs, sync reports BT_EINVAL */
    gpu.moe_route(&gpu, NULL, NULL, NULL, NULL, NULL, 4, MOE_MAX_EXPERTS + 1, 2, 0, 0);
    int rc = gpu.sync(&gpu);
    if (rc != BT_EINVAL) {
        fprintf(stderr, "FAIL moe_route with E %d: sync %d, want BT_EINVAL\n", MOE_MAX_EXPERTS + 1,
                rc);
        failures++;
    }
}
