/* bench_gpu: baton's CUDA engine on one GPU (bench/README.md). Not a test.
 *
 *   bench_gpu model [--seq T] [--batch B] [--steps N] [--warmup N] [--prec fp32|bf16|fp8]
 *                   [--peak-tflops F] [--layers L]
 *     A LLaMA-style ~1.1B model (TinyLlama's shape: dim 2048, 22 layers, 32 heads, 4 kv
 *     heads, ffn 5632, vocab 32000) through model.h on the CUDA backend, selective
 *     recompute (no stored attention probabilities). A step is a whole training step, as
 *     train.c runs it on one rank: zero the gradients, forward with targets, backward,
 *     the global gradient norm (the sumsq_segs op over every parameter tensor), clipping at
 *     1.0 and AdamW (the fused adamw op; lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay
 *     0.1, none on norm weights; moments in device memory). Under fp8 every GEMM slot's
 *     scale is fixed at 1.0 (no delayed-scaling history, which the trainer keeps; enough
 *     for a throughput figure, not for training numerics), and the LM head runs bf16 as
 *     model.h decides. Reports tokens/s and MFU = achieved FLOP/s / peak, with FLOPs per
 *     token = 6 * (matrix parameters, LM head included, embedding excluded) + 6 * L * T * C
 *     (causal attention, forward and backward). The GEMMs keep their converted weights
 *     from the forward to the backward as the trainer does (model.h: weight_cache);
 *     BATON_WEIGHT_CACHE=0 in the environment converts them in each product instead.
 *   bench_gpu attention [--seq T] [--heads H] [--head-dim hd] [--reps N]
 *     The attention kernel's forward and backward TFLOP/s (causal forward 2 B H T^2 hd
 *     FLOPs, backward 2.5 times that), against a cuBLAS float32 GEMM + softmax forward
 *     (bench_attention_ref.cu), both on the backend's stream and timed by CUDA events on it.
 *   bench_gpu                 both, at seq 4096 and 8192.
 *
 * Output: one JSON line per measurement on stdout. Without a CUDA device it prints
 * "SKIPPED: <reason>" and exits 77. Exit status: 0 done, 1 failed, 2 bad usage, 77 skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gpu.h"
#include "cuda_backend.h"
#include "model.h"
#include "optim.h"

enum { EXIT_SKIP = 77 };

typedef struct bench_opts {
    int seq, batch, steps, warmup, layers, heads, head_dim, reps;
    backend_prec prec;
    double peak_tflops;
} bench_opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *prec_name(backend_prec p) {
    return p == BACKEND_PREC_BF16 ? "bf16" : p == BACKEND_PREC_FP8 ? "fp8" : "fp32";
}

/* The optimizer's half of a step: global norm over the segments (be->sumsq_segs, one
 * synchronization, as the trainer does), clipping folded into AdamW's grad_coef, then the
 * fused update. A non-finite norm skips the update, as optim.h does. Returns the norm
 * before clipping. */
static double bench_optim_step(backend *be, model *m, float *mom, float *vel,
                               const backend_seg *segs, size_t nseg, const optim_hparams *hp,
                               uint64_t step) {
    double norm = sqrt(be->sumsq_segs(be, m->grads_mem, segs, nseg));
    if (!isfinite(norm)) return norm;
    backend_adamw a;
    optim_adamw_args(&a, hp, hp->lr, step, (float)optim_clip_coef(norm, hp->grad_clip));
    be->adamw(be, m->params_mem, m->grads_mem, mom, vel, segs, nseg, &a);
    return norm;
}

static int bench_model(backend *be, const bench_opts *o) {
    model_config cfg = {
        .vocab = 32000,
        .dim = 2048,
        .n_layers = o->layers,
        .n_heads = 32,
        .n_kv_heads = 4,
        .head_dim = 64,
        .ffn_dim = 5632,
        .norm_eps = 1e-5f,
        .recompute = MODEL_RECOMPUTE_SELECTIVE,
        .prec = o->prec,
    };
    const char *wc = getenv("BATON_WEIGHT_CACHE");
    cfg.weight_cache = !(wc != NULL && strcmp(wc, "0") == 0);
    rope_config_default(&cfg.rope);
    int B = o->batch, T = o->seq, N = B * T;
    model m;
    memset(&m, 0, sizeof m);
    bt_diag d;
    bt_diag_init(&d);
    int rc = model_init(&m, &cfg, be, B, T, &d);
    if (rc) {
        fprintf(stderr, "bench_gpu: model_init: %s (%s)\n", d.msg, bt_strerror(rc));
        return 1;
    }
    /* Fixed fp8 scales (see the header): setup_gemms starts them at 1.0; said again here
     * because the figure depends on it. */
    for (int g = 0; g < m.n_gemm; g++)
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
            m.gemm[g].scale[k] = 1.0f;
    /* AdamW's segments (one per tensor, no decay on norms) and moments. */
    optim_hparams hp;
    optim_hparams_default(&hp);
    size_t np = m.sizes.param_floats, nseg = (size_t)model_n_tensors(&m);
    backend_seg *segs = malloc(nseg * sizeof *segs);
    float *mom = be->alloc(be, np * sizeof(float)), *vel = be->alloc(be, np * sizeof(float));
    if (segs == NULL || mom == NULL || vel == NULL) {
        fprintf(stderr, "bench_gpu: optimizer state (%zu parameters): out of memory\n", np);
        free(segs);
        be->free(be, mom), be->free(be, vel);
        model_free(&m);
        return 1;
    }
    for (size_t i = 0; i < nseg; i++) {
        model_tensor t;
        model_tensor_info(&m, (int)i, &t);
        segs[i] = (backend_seg){.offset = t.offset, .n = t.count, .decay = !t.no_decay};
    }
    int32_t *tokens = malloc((size_t)N * sizeof *tokens);
    int32_t *targets = malloc((size_t)N * sizeof *targets);
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t)((s >> 33) % (uint64_t)cfg.vocab);
    }
    for (int i = 0; i < N; i++)
        targets[i] = (i + 1) % T == 0 ? MODEL_IGNORE_INDEX : tokens[i + 1];
    rc = model_init_weights(&m, 1);
    double t0 = 0.0, norm = 0.0;
    float loss = 0.0f;
    int skipped = 0; /* steps whose non-finite norm skipped the update */
    for (int step = 0; rc == 0 && step < o->warmup + o->steps; step++) {
        if (step == o->warmup) {
            rc = be->sync(be);
            t0 = now_s();
        }
        model_zero_grad(&m);
        model_weights_changed(&m); /* the last update changed them */
        rc = rc ? rc : model_forward(&m, tokens, targets, B, T, &loss);
        rc = rc ? rc : model_backward(&m, 1.0f);
        if (rc == 0) {
            norm = bench_optim_step(be, &m, mom, vel, segs, nseg, &hp, (uint64_t)step + 1);
            skipped += !isfinite(norm);
        }
    }
    rc = rc ? rc : be->sync(be);
    double dt = (now_s() - t0) / o->steps;
    if (rc) {
        fprintf(stderr, "bench_gpu: model step failed: %s: %s\n", bt_strerror(rc),
                cuda_backend_error(be));
    } else {
        int L = cfg.n_layers, C = cfg.dim, F = cfg.ffn_dim;
        double qkv = (double)C * (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim;
        double matrix_params = L * (qkv + (double)cfg.n_heads * cfg.head_dim * C + 3.0 * C * F) +
                               (double)C * cfg.vocab;
        double flops_tok = 6.0 * matrix_params + 6.0 * L * (double)T * C;
        double tps = N / dt;
        double mfu = flops_tok * tps / (o->peak_tflops * 1e12);
        char fp8[96] = "";
        if (o->prec == BACKEND_PREC_FP8) { /* which way the fp8 products ran (cuda_matmul.cu) */
            long native, carried;
            cuda_fp8_gemm_counts(be, &native, &carried);
            snprintf(fp8, sizeof fp8,
                     "\"fp8_scales\":\"fixed 1.0\",\"fp8_gemms_native\":%ld,"
                     "\"fp8_gemms_carried\":%ld,",
                     native, carried);
        }
        int att_tc = cuda_attention_tensor_cores(be, o->prec, cfg.head_dim);
        printf("{\"bench\":\"model\",\"prec\":\"%s\",\"attention\":\"%s\",%s"
               "\"weight_cache_bytes\":%zu,\"layers\":%d,"
               "\"batch\":%d,"
               "\"seq\":%d,\"step\":\"forward+backward+clip+adamw\",\"step_s\":%.4f,"
               "\"tokens_per_s\":%.1f,\"tflops\":%.2f,\"mfu\":%.4f,\"peak_tflops\":%.0f,"
               "\"loss\":%.4f,\"grad_norm\":%.4g,\"skipped_updates\":%d,"
               "\"memory_bytes\":%zu,\"weights_grads_moments_bytes\":%zu}\n",
               prec_name(o->prec), att_tc ? "bf16 tensor cores" : "float32", fp8,
               m.wcache_floats * sizeof(float), L, B, T, dt, tps, flops_tok * tps * 1e-12, mfu,
               o->peak_tflops, loss, norm, skipped,
               m.act_bytes + m.work_bytes + m.wcache_floats * sizeof(float),
               4 * np * sizeof(float));
        fflush(stdout);
    }
    free(tokens);
    free(targets);
    free(segs);
    be->free(be, mom), be->free(be, vel);
    model_free(&m);
    return rc ? 1 : 0;
}

/* Ends a timing that bench_timer_start began on the backend's stream (started: its
 * return, or the failure before it): the seconds per rep, the first failure into *rc
 * (the backend's recorded error through sync, else -3 for the timer's own). */
static double timed_end(backend *be, bench_timer *tm, int started, int reps, int *rc) {
    double s = started == 0 ? bench_timer_stop(tm) : -1.0;
    int src = be->sync(be);
    if (*rc == 0) *rc = src ? src : s < 0.0 ? -3 : 0;
    return s / reps;
}

/* baton's attention kernels and the cuBLAS reference on the same stream (the backend's),
 * each timed by events on it. */
static int bench_attention(backend *be, const bench_opts *o) {
    int B = 1, T = o->seq, H = o->heads, hd = o->head_dim, ld = H * hd;
    size_t rows = (size_t)B * T, nst = (size_t)B * H * T;
    float scale = 1.0f / sqrtf((float)hd);
    float *q = be->alloc(be, rows * ld * 4), *k = be->alloc(be, rows * ld * 4);
    float *v = be->alloc(be, rows * ld * 4), *out = be->alloc(be, rows * ld * 4);
    float *dout = be->alloc(be, rows * ld * 4), *lse = be->alloc(be, nst * 4);
    float *dq = be->alloc(be, rows * ld * 4), *dk = be->alloc(be, rows * ld * 4);
    float *dv = be->alloc(be, rows * ld * 4);
    float *S = be->alloc(be, (size_t)H * T * T * 4);
    void *stream = cuda_backend_stream(be); /* baton's kernels' and the reference's */
    int rc = 1;
    if (!q || !k || !v || !out || !dout || !lse || !dq || !dk || !dv || !S) {
        fprintf(stderr, "bench_gpu: attention buffers: out of device memory\n");
        goto done;
    }
    float *host = malloc(rows * ld * 4);
    uint64_t s = 99;
    float *bufs[4] = {q, k, v, dout};
    for (int b = 0; b < 4; b++) {
        for (size_t i = 0; i < rows * ld; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            host[i] = (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
        }
        be->from_host(be, bufs[b], host, rows * ld * 4);
    }
    free(host);
    double fwd_flops = 2.0 * B * H * (double)T * T * hd; /* causal: half of 4 B H T^2 hd */
    /* [0]: the float32 kernels (prec fp32); [1]: the bf16 tensor-core kernels (prec bf16,
     * cuda_attention_tc.cu; hd a multiple of 16 up to 128, else the float32 ones again) */
    double tf[2] = {0, 0}, tb[2] = {0, 0};
    backend_prec precs[2] = {BACKEND_PREC_FP32, BACKEND_PREC_BF16};
    rc = 0;
    for (int p = 0; p < 2 && rc == 0; p++) {
        backend_prec pr = precs[p];
        be->attention_forward(be, out, lse, NULL, q, k, v, ld, B, T, H, H, hd, scale, pr, NULL);
        be->attention_backward(be, dq, dk, dv, dout, out, NULL, lse, q, k, v, ld, B, T, H, H, hd,
                               scale, pr, NULL);
        rc = be->sync(be);
        bench_timer tm = {NULL, NULL, NULL};
        int started = rc ? rc : bench_timer_start(&tm, stream);
        for (int r = 0; started == 0 && r < o->reps; r++)
            be->attention_forward(be, out, lse, NULL, q, k, v, ld, B, T, H, H, hd, scale, pr, NULL);
        tf[p] = timed_end(be, &tm, started, o->reps, &rc);
        started = rc ? rc : bench_timer_start(&tm, stream);
        for (int r = 0; started == 0 && r < o->reps; r++)
            be->attention_backward(be, dq, dk, dv, dout, out, NULL, lse, q, k, v, ld, B, T, H, H,
                                   hd, scale, pr, NULL);
        tb[p] = timed_end(be, &tm, started, o->reps, &rc);
    }
    double tref = 0.0;
    int rrc =
        rc ? rc : bench_ref_attention(q, k, v, out, S, B, T, H, hd, scale, o->reps, stream, &tref);
    if (rc || rrc) {
        fprintf(stderr, "bench_gpu: attention failed: %d/%d %s\n", rc, rrc, cuda_backend_error(be));
        rc = 1;
        goto done;
    }
    /* backward: 2.5 times the forward's products (dS, dP, dq, dk, dv against S, O) */
    printf("{\"bench\":\"attention\",\"batch\":%d,\"seq\":%d,\"heads\":%d,\"head_dim\":%d,"
           "\"fwd_ms\":%.3f,\"fwd_tflops\":%.2f,\"bwd_ms\":%.3f,\"bwd_tflops\":%.2f,"
           "\"bf16_tc_fwd_ms\":%.3f,\"bf16_tc_fwd_tflops\":%.2f,\"bf16_tc_bwd_ms\":%.3f,"
           "\"bf16_tc_bwd_tflops\":%.2f,"
           "\"cublas_softmax_fwd_ms\":%.3f,\"cublas_softmax_fwd_tflops\":%.2f}\n",
           B, T, H, hd, tf[0] * 1e3, fwd_flops / tf[0] * 1e-12, tb[0] * 1e3,
           2.5 * fwd_flops / tb[0] * 1e-12, tf[1] * 1e3, fwd_flops / tf[1] * 1e-12, tb[1] * 1e3,
           2.5 * fwd_flops / tb[1] * 1e-12, tref * 1e3, fwd_flops / tref * 1e-12);
    fflush(stdout);
done:
    be->free(be, q), be->free(be, k), be->free(be, v), be->free(be, out), be->free(be, dout);
    be->free(be, lse), be->free(be, dq), be->free(be, dk), be->free(be, dv), be->free(be, S);
    return rc ? 1 : 0;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_gpu [model|attention] [--seq T] [--batch B] [--steps N] "
                    "[--warmup N] [--layers L] [--prec fp32|bf16|fp8] [--peak-tflops F] "
                    "[--heads H] [--head-dim hd] [--reps N]\n");
    return 2;
}

int main(int argc, char **argv) {
    bench_opts o = {.seq = 0,
                    .batch = 1,
                    .steps = 5,
                    .warmup = 2,
                    .layers = 22,
                    .heads = 32,
                    .head_dim = 64,
                    .reps = 5,
                    .prec = BACKEND_PREC_BF16,
                    .peak_tflops = 989.0};
    const char *what = "all";
    int i = 1;
    if (i < argc && argv[i][0] != '-') what = argv[i++];
    for (; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (val == NULL) return usage();
        if (!strcmp(a, "--seq"))
            o.seq = atoi(val);
        else if (!strcmp(a, "--batch"))
            o.batch = atoi(val);
        else if (!strcmp(a, "--steps"))
            o.steps = atoi(val);
        else if (!strcmp(a, "--warmup"))
            o.warmup = atoi(val);
        else if (!strcmp(a, "--layers"))
            o.layers = atoi(val);
        else if (!strcmp(a, "--heads"))
            o.heads = atoi(val);
        else if (!strcmp(a, "--head-dim"))
            o.head_dim = atoi(val);
        else if (!strcmp(a, "--reps"))
            o.reps = atoi(val);
        else if (!strcmp(a, "--peak-tflops"))
            o.peak_tflops = atof(val);
        else if (!strcmp(a, "--prec")) {
            if (!strcmp(val, "bf16"))
                o.prec = BACKEND_PREC_BF16;
            else if (!strcmp(val, "fp32"))
                o.prec = BACKEND_PREC_FP32;
            else if (!strcmp(val, "fp8"))
                o.prec = BACKEND_PREC_FP8;
            else
                return usage();
        } else
            return usage();
        i++;
    }
    if (strcmp(what, "all") && strcmp(what, "model") && strcmp(what, "attention")) return usage();
    if (o.steps < 1 || o.reps < 1 || o.batch < 1 || o.layers < 1 || o.seq < 0) return usage();
    bt_diag d;
    bt_diag_init(&d);
    int ndev = cuda_device_count(&d);
    if (ndev == BT_EUNSUPPORTED) {
        printf("SKIPPED: %s\n", d.msg);
        return EXIT_SKIP;
    }
    if (ndev < 0) {
        fprintf(stderr, "bench_gpu: %s\n", d.msg);
        return 1;
    }
    backend be;
    int rc = cuda_backend_init(&be, 0, &d);
    if (rc) {
        fprintf(stderr, "bench_gpu: %s\n", d.msg);
        return 1;
    }
    int seqs[2] = {4096, 8192}, nseq = 2;
    if (o.seq > 0) seqs[0] = o.seq, nseq = 1;
    int fail = 0;
    for (int k = 0; k < nseq; k++) {
        o.seq = seqs[k];
        if (strcmp(what, "attention")) fail |= bench_model(&be, &o);
        if (strcmp(what, "model")) fail |= bench_attention(&be, &o);
    }
    cuda_backend_free(&be);
    return fail ? 1 : 0;
}
