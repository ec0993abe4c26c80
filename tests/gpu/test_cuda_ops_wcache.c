/* The GEMMs' weight cache (backend.h: backend_gemm.wcache) on the CUDA backend, against
 * the same products converting the weight in each call (no cache), on the GPU only: the
 * cache changes where the conversion lives, never the numbers, so everything must be equal
 * bit for bit. Per precision and shape (bf16, fp16, fp8 on the fp8 tensor cores and fp8
 * carried in bf16, with and without dinp):
 *  - forward, backward, and a second forward and backward from the cache: outputs, dinp,
 *    dweight and (fp8) the running amaxes equal the uncached calls';
 *  - the cache is really read: after the weight's memory is overwritten with other values
 *    and the cache not told, the forward still gives the old weight's output;
 *  - told (wcache_forms = 0), it converts the new values; handed another weight (pointer),
 *    it converts that one;
 *  - fp8 with C and OC multiples of 16 and a token count that is not (its rows padded to
 *    the fp8 kernels' 16): the E4M3 forms cached, as for any other fp8 product.
 * The same for an MoE layer's experts (moe_dev.h: moe_dev_kept, one record per expert
 * weight): forward and backward twice bit-equal to the layer without kept conversions,
 * the old experts' output after their weights change untold, the new one once told.
 * Fails if a conversion is skipped that should not be, or cached under the wrong form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_dev.h"
#include "test_cuda_ops.h"

/* One GEMM's buffers on the GPU. */
typedef struct wc_bufs {
    float *x, *w, *w2, *dout, *scratch, *cache, *acc_ref, *acc_c;
    float *out_ref, *out_c, *dx_ref, *dx_c, *dw_ref, *dw_c;
} wc_bufs;

static float *gpu_rand(size_t n, float amp) {
    float *h = host_rand(n, amp), *d = gpu.alloc(&gpu, n * 4 + 4);
    gpu.from_host(&gpu, d, h, n * 4);
    free(h);
    return d;
}

static float *gpu_zeros(size_t n) {
    float *d = gpu.alloc(&gpu, n * 4 + 4);
    gpu.zero(&gpu, d, n);
    return d;
}

static void wc_alloc(wc_bufs *b, backend_prec prec, int N, int C, int OC) {
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    b->x = gpu_rand(nx, 1.5f), b->w = gpu_rand(nw, 0.5f), b->w2 = gpu_rand(nw, 2.0f);
    b->dout = gpu_rand(ny, 1e-2f);
    b->scratch = gpu_zeros(gpu.matmul_scratch_floats(&gpu, N, C, OC, prec));
    b->cache = gpu_zeros(gpu.matmul_wcache_floats(&gpu, C, OC, prec));
    b->acc_ref = gpu_zeros(BACKEND_FP8_SLOTS), b->acc_c = gpu_zeros(BACKEND_FP8_SLOTS);
    b->out_ref = gpu_zeros(ny), b->out_c = gpu_zeros(ny);
    b->dx_ref = gpu_zeros(nx), b->dx_c = gpu_zeros(nx);
    b->dw_ref = gpu_zeros(nw), b->dw_c = gpu_zeros(nw);
}

static void wc_free(wc_bufs *b) {
    float *all[] = {b->x,     b->w,       b->w2,    b->dout,   b->scratch, b->cache,  b->acc_ref,
                    b->acc_c, b->out_ref, b->out_c, b->dx_ref, b->dx_c,    b->dw_ref, b->dw_c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        gpu.free(&gpu, all[i]);
}

static void expect_equal(const char *what, const char *tensor, const float *a, const float *b,
                         size_t n) {
    if (gpu_bitwise_equal(a, b, n)) return;
    fprintf(stderr, "FAIL %s: %s differs from the uncached product's\n", what, tensor);
    failures++;
}

/* Forward and backward without (ref) and with (pc) the cache; everything equal. */
static void wc_pass(const char *what, wc_bufs *b, backend_gemm *ref, backend_gemm *pc, int N, int C,
                    int OC, int with_dinp, int cached) {
    gpu.matmul_forward(&gpu, b->out_ref, b->x, b->w, N, C, OC, ref, b->scratch);
    gpu.matmul_forward(&gpu, b->out_c, b->x, b->w, N, C, OC, pc, b->scratch);
    expect_equal(what, "forward output", b->out_ref, b->out_c, (size_t)N * OC);
    gpu.matmul_backward(&gpu, with_dinp ? b->dx_ref : NULL, b->dw_ref, b->dout, b->x, b->w, N, C,
                        OC, ref, b->scratch);
    gpu.matmul_backward(&gpu, with_dinp ? b->dx_c : NULL, b->dw_c, b->dout, b->x, b->w, N, C, OC,
                        pc, b->scratch);
    if (with_dinp) expect_equal(what, "dinp", b->dx_ref, b->dx_c, (size_t)N * C);
    expect_equal(what, "dweight (+=)", b->dw_ref, b->dw_c, (size_t)OC * C);
    if (ref->prec == BACKEND_PREC_FP8)
        expect_equal(what, "running amaxes", b->acc_ref, b->acc_c, BACKEND_FP8_SLOTS);
    if ((pc->wcache_forms != 0) != cached) {
        fprintf(stderr, "FAIL %s: the cache holds %s conversion after the products\n", what,
                cached ? "no" : "a");
        failures++;
    }
}

static void wc_case(backend_prec prec, int e5m2, int N, int C, int OC, int with_dinp, int cached) {
    static const char *const pn[] = {"fp32", "bf16", "fp8", "fp16"};
    char what[128];
    snprintf(what, sizeof what, "weight cache %s%s N %d C %d OC %d%s", pn[prec],
             e5m2 ? "/e5m2" : "", N, C, OC, with_dinp ? "" : " (no dinp)");
    wc_bufs b;
    wc_alloc(&b, prec, N, C, OC);
    backend_gemm ref = {.prec = prec, .dy_e5m2 = e5m2, .scale = {200.0f, 700.0f, 3e5f}};
    backend_gemm pc = ref;
    if (prec == BACKEND_PREC_FP8) ref.amax_acc = b.acc_ref, pc.amax_acc = b.acc_c;
    pc.wcache = b.cache;
    wc_pass(what, &b, &ref, &pc, N, C, OC, with_dinp, cached);
    wc_pass(what, &b, &ref, &pc, N, C, OC, with_dinp, cached); /* from the cache */
    /* new values behind the same pointer, the cache not told: the old weight's output
     * (nothing cached: the new one's) */
    gpu.copy2d(&gpu, b.w, C, b.w2, C, OC, C);
    if (!cached) gpu.matmul_forward(&gpu, b.out_ref, b.x, b.w, N, C, OC, &ref, b.scratch);
    gpu.matmul_forward(&gpu, b.out_c, b.x, b.w, N, C, OC, &pc, b.scratch);
    char stale[160];
    snprintf(stale, sizeof stale, "%s, weight overwritten, cache kept", what);
    expect_equal(stale, cached ? "forward output (the cache was not read)" : "forward output",
                 b.out_ref, b.out_c, (size_t)N * OC);
    pc.wcache_forms = 0; /* told: converts the new values */
    gpu.matmul_forward(&gpu, b.out_ref, b.x, b.w, N, C, OC, &ref, b.scratch);
    gpu.matmul_forward(&gpu, b.out_c, b.x, b.w, N, C, OC, &pc, b.scratch);
    snprintf(stale, sizeof stale, "%s, after wcache_forms = 0", what);
    expect_equal(stale, "forward output", b.out_ref, b.out_c, (size_t)N * OC);
    /* another weight: converted, not taken from the cache */
    gpu.scale(&gpu, b.w2, 0.5f, (size_t)OC * C);
    gpu.matmul_forward(&gpu, b.out_ref, b.x, b.w2, N, C, OC, &ref, b.scratch);
    gpu.matmul_forward(&gpu, b.out_c, b.x, b.w2, N, C, OC, &pc, b.scratch);
    snprintf(stale, sizeof stale, "%s, another weight", what);
    expect_equal(stale, "forward output", b.out_ref, b.out_c, (size_t)N * OC);
    check_sync(what);
    wc_free(&b);
}

/* An MoE layer (bf16 experts) run by moe_dev without (cref) and with (ck, kept) kept
 * conversions. */
typedef struct wc_moe {
    moe_config c;
    moe_weights w, gref, gk;
    float *wbuf, *gbuf_ref, *gbuf_k, *x, *dy, *y_ref, *y_k, *dx_ref, *dx_k;
    moe_dev_scratch s;
    moe_dev_cache cref, ck;
    moe_dev_kept kept;
    backend_gemm wg[2 * (4 + 1)]; /* the kept's records: (4 experts + 1 shared) x 2 */
    int N;
} wc_moe;

static int wc_moe_open(wc_moe *t) {
    t->c = (moe_config){
        .dim = 32, .ffn_dim = 48, .n_experts = 4, .top_k = 2, .n_shared = 1, .norm_topk = 1};
    t->N = 40;
    size_t nw = moe_weights_floats(&t->c), nx = (size_t)t->N * t->c.dim;
    t->wbuf = gpu_rand(nw, 0.3f), t->gbuf_ref = gpu_zeros(nw), t->gbuf_k = gpu_zeros(nw);
    t->x = gpu_rand(nx, 1.0f), t->dy = gpu_rand(nx, 0.1f);
    t->y_ref = gpu_zeros(nx), t->y_k = gpu_zeros(nx), t->dx_ref = gpu_zeros(nx);
    t->dx_k = gpu_zeros(nx);
    moe_weights_carve(&t->c, &t->w, t->wbuf);
    moe_weights_carve(&t->c, &t->gref, t->gbuf_ref);
    moe_weights_carve(&t->c, &t->gk, t->gbuf_k);
    int rc = moe_dev_scratch_init(&t->s, &gpu, &t->c, t->N, 1, BACKEND_PREC_BF16);
    rc = rc ? rc : moe_dev_cache_init(&t->cref, &gpu, &t->c, t->N, &t->s, NULL);
    rc = rc ? rc : moe_dev_cache_init(&t->ck, &gpu, &t->c, t->N, &t->s, NULL);
    for (int i = 0; i < 2 * (4 + 1); i++)
        t->wg[i] = (backend_gemm){.prec = BACKEND_PREC_BF16};
    rc = rc ? rc : moe_dev_kept_init(&t->kept, &gpu, &t->c, t->wg, 1);
    t->ck.kept = &t->kept;
    return rc;
}

static void wc_moe_close(wc_moe *t) {
    moe_dev_kept_free(&t->kept);
    moe_dev_cache_free(&t->ck), moe_dev_cache_free(&t->cref);
    moe_dev_scratch_free(&t->s);
    float *all[] = {t->wbuf,  t->gbuf_ref, t->gbuf_k, t->x,   t->dy,
                    t->y_ref, t->y_k,      t->dx_ref, t->dx_k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        gpu.free(&gpu, all[i]);
}

/* Forward (and with backward set, backward) of both layers; outputs compared. */
static void wc_moe_pass(wc_moe *t, const char *what, int backward) {
    moe_stats st;
    size_t nx = (size_t)t->N * t->c.dim;
    int rc = moe_dev_forward(&t->c, &t->w, NULL, t->x, t->y_ref, t->N, &t->cref, &st);
    rc = rc ? rc : moe_dev_forward(&t->c, &t->w, NULL, t->x, t->y_k, t->N, &t->ck, &st);
    if (rc == 0 && backward) {
        rc = moe_dev_backward(&t->c, &t->w, &t->cref, t->dy, t->dx_ref, &t->gref);
        rc = rc ? rc : moe_dev_backward(&t->c, &t->w, &t->ck, t->dy, t->dx_k, &t->gk);
    }
    if (rc != 0) {
        fprintf(stderr, "FAIL %s: moe_dev: %d\n", what, rc);
        failures++;
        return;
    }
    expect_equal(what, "MoE output", t->y_ref, t->y_k, nx);
    if (!backward) return;
    expect_equal(what, "MoE dx", t->dx_ref, t->dx_k, nx);
    expect_equal(what, "MoE weight gradients", t->gbuf_ref, t->gbuf_k, moe_weights_floats(&t->c));
}

static void wc_moe_case(void) {
    const char *what = "weight cache MoE bf16 experts";
    wc_moe t;
    memset(&t, 0, sizeof t);
    if (wc_moe_open(&t) != 0) {
        fprintf(stderr, "FAIL %s: setup\n", what);
        failures++;
        wc_moe_close(&t);
        return;
    }
    wc_moe_pass(&t, what, 1);
    wc_moe_pass(&t, what, 1); /* from the kept conversions */
    int held = 0;
    for (int i = 0; i < t.kept.n_wg; i++)
        held += t.kept.wg[i].wcache_forms != 0;
    if (held != 2 * (t.c.n_experts + t.c.n_shared)) {
        fprintf(stderr, "FAIL %s: %d of %d expert weights kept\n", what, held,
                2 * (t.c.n_experts + t.c.n_shared));
        failures++;
    }
    /* the experts' weights change, untold: the kept layer still gives the old output */
    size_t ne = (size_t)t.c.n_experts * 3 * t.c.ffn_dim * t.c.dim;
    float *old = gpu_zeros((size_t)t.N * t.c.dim);
    gpu.copy(&gpu, old, t.y_ref, (size_t)t.N * t.c.dim);
    gpu.scale(&gpu, t.w.w13, 0.5f, ne * 2 / 3);
    gpu.scale(&gpu, t.w.w2, 0.5f, ne / 3);
    moe_stats st;
    if (moe_dev_forward(&t.c, &t.w, NULL, t.x, t.y_k, t.N, &t.ck, &st) == 0)
        expect_equal("weight cache MoE, experts changed untold", "MoE output (kept not read)", old,
                     t.y_k, (size_t)t.N * t.c.dim);
    moe_dev_kept_clear(&t.kept);
    wc_moe_pass(&t, "weight cache MoE, after moe_dev_kept_clear", 0);
    gpu.free(&gpu, old);
    check_sync(what);
    wc_moe_close(&t);
}

void test_wcache_all(void) {
    wc_moe_case();
    wc_case(BACKEND_PREC_BF16, 0, 64, 128, 96, 1, 1);
    wc_case(BACKEND_PREC_BF16, 0, 37, 53, 71, 1, 1);
    wc_case(BACKEND_PREC_FP16, 0, 37, 53, 71, 1, 1);
    int native = getenv("BATON_CUDA_FP8") == NULL || strcmp(getenv("BATON_CUDA_FP8"), "carried");
    /* the fp8 tensor cores: W and W^T cached (carried everywhere: the 16-bit W) */
    wc_case(BACKEND_PREC_FP8, 1, 48, 32, 64, 1, 1);
    wc_case(BACKEND_PREC_FP8, 0, 32, 16, 48, 0, 1);
    wc_case(BACKEND_PREC_FP8, 1, 40, 24, 56, 1, 1); /* carried in bf16, 16-bit W cached */
    wc_case(BACKEND_PREC_FP8, 1, 40, 32, 64, 1, 1); /* rows padded: W, W^T cached */
    size_t n = 64 * 32, f8 = gpu.matmul_wcache_floats(&gpu, 32, 64, BACKEND_PREC_FP8);
    size_t b16 = gpu.matmul_wcache_floats(&gpu, 32, 64, BACKEND_PREC_BF16);
    if (native && (f8 * 4 > 2 * n + 1024 || f8 > b16)) {
        fprintf(stderr,
                "FAIL weight cache: fp8 with C, OC multiples of 16 takes %zu bytes for "
                "%zu parameters (want 2 per parameter, as bf16's %zu)\n",
                f8 * 4, n, b16 * 4);
        failures++;
    }
    if (gpu.matmul_wcache_floats(&gpu, 16, 16, BACKEND_PREC_FP32) != 0) {
        fprintf(stderr, "FAIL weight cache: float32 products have nothing to cache\n");
        failures++;
    }
}
