/* The MoE layer through the backend table (worker/engine/moe_dev.h) against moe.c, on the
 * CPU backend: y, the load figures (exactly), the aux loss, dx and every weight gradient
 * (max |dev - ref| / max |ref| <= 1e-5); bitwise determinism; two layers' caches sharing
 * one scratch in the model's order (forward 1, forward 2, backward 2, backward 1) give
 * each layer's lone results; argument checks. The CUDA backend's ops are compared with
 * the CPU backend's in tests/gpu/test_cuda_ops.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_backend.h"
#include "moe.h"
#include "moe_inputs.h"
#include "moe_dev.h"
#include "util/err.h"

#define TOL 1e-5

typedef struct test_case {
    const char *name;
    moe_config cfg;
    int N, use_bias;
} test_case;

static const test_case cases[] = {
    {"softmax_top2_shared_norm",
     {32, 24, 8, 2, 1, MOE_SCORE_SOFTMAX, 1, 0.0, 0.0, 0.0, 0, 0},
     48,
     0},
    {"sigmoid_top2_bias", {32, 24, 8, 2, 1, MOE_SCORE_SIGMOID, 1, 0.0, 0.0, 0.0, 0, 0}, 48, 1},
    {"softmax_capacity_drops", {32, 24, 8, 2, 0, MOE_SCORE_SOFTMAX, 0, 1.0, 0.0, 0.0, 0, 0}, 48, 0},
    {"softmax_aux", {32, 24, 8, 2, 1, MOE_SCORE_SOFTMAX, 1, 0.0, 0.1, 0.0, 0, 0}, 48, 0},
    {"sigmoid_all", {32, 24, 8, 2, 2, MOE_SCORE_SIGMOID, 1, 1.25, 0.1, 0.0, 0, 0}, 48, 1},
    {"top1_e5_no_shared", {16, 20, 5, 1, 0, MOE_SCORE_SOFTMAX, 0, 0.0, 0.01, 0.0, 0, 0}, 33, 0},
    {"top3_e37_capacity", {24, 16, 37, 3, 1, MOE_SCORE_SIGMOID, 1, 0.5, 0.05, 0.0, 0, 0}, 40, 1},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* One layer's inputs and both paths' outputs. */
typedef struct layer {
    moe_config cfg;
    int N;
    float *wbuf, *bias, *x, *dy;
    float *y_ref, *dx_ref, *g_ref, *y, *dx, *g;
    moe_weights w, gw_ref, gw;
    moe_stats st_ref, st;
} layer;

static float *zalloc(size_t n) {
    return calloc(n ? n : 1, sizeof(float));
}

static void layer_free(layer *l) {
    float *bufs[] = {l->wbuf,   l->bias,  l->x, l->dy, l->y_ref,
                     l->dx_ref, l->g_ref, l->y, l->dx, l->g};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

static int layer_init(layer *l, const test_case *tc, uint64_t seed) {
    memset(l, 0, sizeof *l);
    l->cfg = tc->cfg, l->N = tc->N;
    const moe_config *c = &l->cfg;
    size_t nw = moe_weights_floats(c), nx = (size_t)l->N * c->dim;
    size_t E = (size_t)c->n_experts, C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    float **bufs[] = {&l->x, &l->dy, &l->y_ref, &l->dx_ref, &l->y, &l->dx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        *bufs[i] = zalloc(nx);
    l->wbuf = zalloc(nw), l->g_ref = zalloc(nw), l->g = zalloc(nw), l->bias = zalloc(E);
    if (!l->x || !l->dy || !l->y_ref || !l->dx_ref || !l->y || !l->dx || !l->wbuf || !l->g_ref ||
        !l->g || !l->bias)
        return BT_ENOMEM;
    moe_weights_carve(c, &l->w, l->wbuf);
    moe_weights_carve(c, &l->gw_ref, l->g_ref);
    moe_weights_carve(c, &l->gw, l->g);
    rng_seed(seed);
    float a = 1.0f / sqrtf((float)C), af = 1.0f / sqrtf((float)F);
    fill(l->w.router, E * C, 2.0f * a);
    fill(l->w.w13, E * 2 * F * C, a);
    fill(l->w.w2, E * C * F, af);
    fill(l->w.shared_w13, (size_t)c->n_shared * 2 * F * C, a);
    fill(l->w.shared_w2, (size_t)c->n_shared * C * F, af);
    fill(l->x, nx, 1.0f);
    fill(l->dy, nx, 1.0f);
    if (tc->use_bias) fill(l->bias, E, 0.15f);
    return 0;
}

/* moe.c's forward and backward: the reference. */
static void run_reference(layer *l) {
    moe_cache cache;
    CHECK(moe_cache_init(&cache, &l->cfg, l->N) == 0);
    CHECK(moe_forward(&l->cfg, &l->w, l->bias, l->x, l->y_ref, l->N, &cache, &l->st_ref) == 0);
    CHECK(moe_backward(&l->cfg, &l->w, &cache, l->dy, l->dx_ref, &l->gw_ref) == 0);
    moe_cache_free(&cache);
}

static double rel_err(const float *a, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - ref[i]));
        den = fmax(den, fabs((double)ref[i]));
    }
    return den > 0.0 ? num / den : num;
}

static void expect_close(const char *cs, const char *what, const float *a, const float *ref,
                         size_t n) {
    double e = rel_err(a, ref, n);
    if (!(e <= TOL)) {
        fprintf(stderr, "  %s: %s error %.3g > %.0e\n", cs, what, e, TOL);
        check_failures++;
    }
}

static void compare_layer(const char *cs, const layer *l) {
    const moe_config *c = &l->cfg;
    size_t nx = (size_t)l->N * c->dim;
    expect_close(cs, "y", l->y, l->y_ref, nx);
    expect_close(cs, "dx", l->dx, l->dx_ref, nx);
    expect_close(cs, "grads", l->g, l->g_ref, moe_weights_floats(c));
    expect_close(cs, "drouter", l->gw.router, l->gw_ref.router, (size_t)c->n_experts * c->dim);
    CHECK_EQ_U64(l->st.dropped, l->st_ref.dropped);
    CHECK_EQ_U64(l->st.capacity, l->st_ref.capacity);
    CHECK_EQ_U64(l->st.n_tokens, l->st_ref.n_tokens);
    for (int e = 0; e < c->n_experts; e++) {
        CHECK_EQ_U64(l->st.routed[e], l->st_ref.routed[e]);
        CHECK_EQ_U64(l->st.kept[e], l->st_ref.kept[e]);
    }
    CHECK_REL(l->st.aux_loss, l->st_ref.aux_loss, 1e-6);
    if (c->capacity_factor > 0.0 && strstr(cs, "capacity")) CHECK(l->st.dropped > 0);
}

/* Forward and backward through the device path, gradients accumulated into l->g. */
static void run_dev(layer *l, moe_dev_cache *m) {
    CHECK(moe_dev_forward(&l->cfg, &l->w, l->bias, l->x, l->y, l->N, m, &l->st) == 0);
    CHECK(moe_dev_backward(&l->cfg, &l->w, m, l->dy, l->dx, &l->gw) == 0);
}

/* A layer's scratch (expert GEMMs in prec) and cache on be. */
static void dev_open(backend *be, const layer *l, backend_prec prec, moe_dev_scratch *s,
                     moe_dev_cache *m) {
    CHECK(moe_dev_scratch_init(s, be, &l->cfg, l->N, 1, prec) == 0);
    CHECK(moe_dev_cache_init(m, be, &l->cfg, l->N, s, NULL) == 0);
}

static void dev_close(moe_dev_scratch *s, moe_dev_cache *m) {
    moe_dev_cache_free(m);
    moe_dev_scratch_free(s);
}

static void test_case_against_moe(backend *be, const test_case *tc) {
    int failures = check_failures;
    layer l;
    CHECK(layer_init(&l, tc, 7) == 0);
    run_reference(&l);
    moe_dev_scratch s;
    moe_dev_cache m;
    dev_open(be, &l, BACKEND_PREC_FP32, &s, &m);
    run_dev(&l, &m);
    compare_layer(tc->name, &l);
    /* Determinism: a second run from zeroed gradients gives the same bits. */
    size_t nw = moe_weights_floats(&l.cfg), nx = (size_t)l.N * l.cfg.dim;
    float *g1 = malloc(nw * sizeof(float)), *y1 = malloc(nx * sizeof(float));
    memcpy(g1, l.g, nw * sizeof(float));
    memcpy(y1, l.y, nx * sizeof(float));
    memset(l.g, 0, nw * sizeof(float));
    run_dev(&l, &m);
    CHECK(memcmp(g1, l.g, nw * sizeof(float)) == 0);
    CHECK(memcmp(y1, l.y, nx * sizeof(float)) == 0);
    free(g1);
    free(y1);
    dev_close(&s, &m);
    layer_free(&l);
    fprintf(stderr, "  %s: %s\n", tc->name, check_failures == failures ? "ok" : "FAILED");
}

/* Two layers, one scratch, the model's order of calls. */
static void test_shared_scratch(backend *be) {
    layer a, b;
    CHECK(layer_init(&a, &cases[4], 11) == 0);
    CHECK(layer_init(&b, &cases[4], 12) == 0);
    run_reference(&a);
    run_reference(&b);
    moe_dev_scratch s;
    moe_dev_cache ma, mb;
    CHECK(moe_dev_scratch_init(&s, be, &a.cfg, a.N, 1, BACKEND_PREC_FP32) == 0);
    CHECK(moe_dev_cache_init(&ma, be, &a.cfg, a.N, &s, NULL) == 0);
    CHECK(moe_dev_cache_init(&mb, be, &b.cfg, b.N, &s, NULL) == 0);
    CHECK(moe_dev_forward(&a.cfg, &a.w, a.bias, a.x, a.y, a.N, &ma, &a.st) == 0);
    CHECK(moe_dev_forward(&b.cfg, &b.w, b.bias, b.x, b.y, b.N, &mb, &b.st) == 0);
    CHECK(moe_dev_backward(&b.cfg, &b.w, &mb, b.dy, b.dx, &b.gw) == 0);
    CHECK(moe_dev_backward(&a.cfg, &a.w, &ma, a.dy, a.dx, &a.gw) == 0);
    compare_layer("shared_scratch_a", &a);
    compare_layer("shared_scratch_b", &b);
    moe_dev_cache_free(&ma);
    moe_dev_cache_free(&mb);
    moe_dev_scratch_free(&s);
    layer_free(&a);
    layer_free(&b);
}

/* bf16 expert GEMMs: the routing (float32 router) and loads exactly the reference's, y and
 * the gradients near float32's but not equal to them. */
static void test_bf16_experts(backend *be) {
    layer l;
    CHECK(layer_init(&l, &cases[4], 13) == 0);
    run_reference(&l);
    moe_dev_scratch s;
    moe_dev_cache m;
    dev_open(be, &l, BACKEND_PREC_BF16, &s, &m);
    run_dev(&l, &m);
    size_t nx = (size_t)l.N * l.cfg.dim, nw = moe_weights_floats(&l.cfg);
    double ey = rel_err(l.y, l.y_ref, nx), eg = rel_err(l.g, l.g_ref, nw);
    fprintf(stderr, "  bf16 experts: y error %.3g, gradients %.3g (vs float32)\n", ey, eg);
    CHECK(ey > 0 && ey < 2e-2 && eg > 0 && eg < 5e-2);
    for (int e = 0; e < l.cfg.n_experts; e++)
        CHECK_EQ_U64(l.st.kept[e], l.st_ref.kept[e]);
    dev_close(&s, &m);
    layer_free(&l);
}

static float max_abs(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* fp8 experts: each expert weight's product takes its own record (moe_dev_kept): the
 * running amaxes of routed expert e's w13 product are those of the rows routed to e and
 * of its weight, a shared expert's those of every row; y stays near float32's; a scale
 * of expert 0's input alone changes only the rows it saw. */
static void test_fp8_experts(backend *be) {
    layer l;
    CHECK(layer_init(&l, &cases[0], 14) == 0); /* no capacity: every selection kept */
    run_reference(&l);
    const moe_config *c = &l.cfg;
    int E = c->n_experts, S = c->n_shared, n = 2 * (E + S), K = c->top_k;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, nx = (size_t)l.N * C;
    backend_gemm *wg = calloc((size_t)n, sizeof *wg);
    float *acc = calloc((size_t)n * BACKEND_FP8_SLOTS, sizeof *acc);
    for (int i = 0; i < n; i++) {
        wg[i] = (backend_gemm){.prec = BACKEND_PREC_FP8, .amax_acc = acc + i * BACKEND_FP8_SLOTS};
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
            wg[i].scale[k] = 1.0f;
    }
    moe_dev_kept kept;
    CHECK(moe_dev_kept_init(&kept, be, c, wg, 1) == 0);
    moe_dev_scratch s;
    moe_dev_cache m;
    dev_open(be, &l, BACKEND_PREC_FP8, &s, &m);
    m.kept = &kept;
    run_dev(&l, &m);
    double ey = rel_err(l.y, l.y_ref, nx);
    fprintf(stderr, "  fp8 experts: y error %.3g (vs float32)\n", ey);
    CHECK(ey > 0 && ey < 0.1);
    for (int e = 0; e < E; e++) {
        float want = 0;
        for (int t = 0; t < l.N; t++)
            for (int k = 0; k < K; k++)
                if (m.topk[t * K + k] == e) {
                    float a = max_abs(l.x + (size_t)t * C, C);
                    want = a > want ? a : want;
                }
        CHECK(want > 0);
        CHECK(acc[(2 * e) * BACKEND_FP8_SLOTS + BACKEND_FP8_X] == want);
        CHECK(acc[(2 * e) * BACKEND_FP8_SLOTS + BACKEND_FP8_W] ==
              max_abs(l.w.w13 + (size_t)e * 2 * F * C, 2 * F * C));
        CHECK(acc[(2 * e + 1) * BACKEND_FP8_SLOTS + BACKEND_FP8_W] ==
              max_abs(l.w.w2 + (size_t)e * C * F, C * F));
        CHECK(acc[(2 * e) * BACKEND_FP8_SLOTS + BACKEND_FP8_DY] > 0); /* the backward's */
    }
    for (int k = 0; k < S; k++)
        CHECK(acc[(2 * (E + k)) * BACKEND_FP8_SLOTS + BACKEND_FP8_X] == max_abs(l.x, nx));
    /* expert 0's input scaled 2^-6: its rows' outputs move, the others' stay */
    float *y1 = malloc(nx * sizeof *y1);
    memcpy(y1, l.y, nx * sizeof *y1);
    wg[0].scale[BACKEND_FP8_X] = 1.0f / 64;
    CHECK(moe_dev_forward(c, &l.w, l.bias, l.x, l.y, l.N, &m, &l.st) == 0);
    int moved = 0, stayed = 1;
    for (int t = 0; t < l.N; t++) {
        int saw = 0;
        for (int k = 0; k < K; k++)
            saw |= m.topk[t * K + k] == 0;
        int same = memcmp(y1 + t * C, l.y + t * C, C * sizeof *y1) == 0;
        moved += saw && !same, stayed &= saw || same;
    }
    CHECK(moved > 0 && stayed);
    free(y1);
    dev_close(&s, &m);
    moe_dev_kept_free(&kept);
    free(wg);
    free(acc);
    layer_free(&l);
}

static void test_arguments(backend *be) {
    moe_config c = cases[0].cfg;
    moe_dev_scratch s;
    moe_dev_cache m;
    CHECK(moe_dev_scratch_init(&s, be, &c, 8, 1, BACKEND_PREC_FP32) == 0);
    CHECK(moe_dev_cache_init(&m, be, &c, 8, &s, NULL) == 0);
    moe_config ep = c;
    ep.expert0 = 0, ep.n_local = 4; /* an expert-parallel share without a group */
    moe_dev_scratch s2;
    moe_dev_cache m2;
    CHECK(moe_dev_scratch_init(&s2, be, &c, 8, 0, BACKEND_PREC_FP32) == BT_EINVAL);
    CHECK(moe_dev_cache_init(&m2, be, &ep, 8, &s, NULL) == BT_EINVAL);
    CHECK(moe_dev_cache_init(&m2, be, &c, 0, &s, NULL) == BT_EINVAL);
    float *buf = zalloc(moe_weights_floats(&c)), *x = zalloc(16 * 32), *y = zalloc(16 * 32);
    moe_weights w;
    moe_weights_carve(&c, &w, buf);
    CHECK(moe_dev_forward(&c, &w, NULL, x, y, 9, &m, NULL) == BT_EINVAL); /* over max_tokens */
    CHECK(moe_dev_forward(&c, &w, NULL, x, y, 0, &m, NULL) == BT_EINVAL);
    CHECK(moe_dev_backward(&c, &w, &m, x, y, &w) == BT_EINVAL); /* no forward yet */
    free(buf);
    free(x);
    free(y);
    moe_dev_cache_free(&m);
    moe_dev_scratch_free(&s);
}

int main(void) {
    backend be;
    cpu_backend_init(&be);
    for (int i = 0; i < N_CASES; i++)
        test_case_against_moe(&be, &cases[i]);
    test_shared_scratch(&be);
    test_bf16_experts(&be);
    test_fp8_experts(&be);
    test_arguments(&be);
    return check_status();
}
