/* bench_engine: the training-step throughput of the CPU engine, one thread.
 *
 * A step is what train_step (worker/engine/train.c) does for one micro-batch: zero the
 * gradients, forward with targets, backward, then AdamW with global-norm clipping over
 * the model's tensors (no decay on norms). Tokens are uniform random in [0, V), targets
 * the next token, so no data files are needed. After --warmup steps, --steps steps are
 * timed one by one; the median is the figure reported (the minimum and mean too).
 *
 * Output: one JSON line on stdout. With --profile every backend op is timed through a
 * wrapping backend table, GEMMs labelled by the weight they multiply, and the JSON
 * carries "profile": milliseconds per step for each op, the optimizer and the rest.
 * The wrapper adds two clock reads per op (tens of nanoseconds against milliseconds).
 *
 * Exit status: 0 done, 1 the engine failed, 2 bad command line. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_backend.h"
#include "cpu_blas_core.h"
#include "model.h"
#include "optim.h"

typedef struct bench_args {
    model_config cfg;
    int batch, seq, warmup, steps, threads, profile;
    unsigned long long seed;
} bench_args;

static double bench_clock(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double bench_now(void) {
    return bench_clock(CLOCK_MONOTONIC);
}

/* ---- The profiling backend: every op timed, then forwarded to the CPU backend. ---- */

enum {
    P_ZERO,
    P_ADD,
    P_EMBED_FWD,
    P_EMBED_BWD,
    P_RMSNORM_FWD,
    P_RMSNORM_BWD,
    P_ROPE_FWD,
    P_ROPE_BWD,
    P_ATT_FWD,
    P_ATT_BWD,
    P_SWIGLU_FWD,
    P_SWIGLU_BWD,
    P_CE_FWD,
    P_CE_BWD,
    P_OTHER_OPS, /* scale, sumsq: the model does not call them in a step */
    P_GEMM0,     /* then 2 slots (forward, backward) per GEMM kind below */
};
enum { G_QKV, G_O, G_GATE_UP, G_DOWN, G_LM_HEAD, G_UNKNOWN, G_KINDS };
#define P_SLOTS (P_GEMM0 + 2 * G_KINDS)

static const char *const prof_op_names[P_GEMM0] = {
    "zero_grad",   "residual_add", "embedding_fwd", "embedding_bwd", "rmsnorm_fwd",
    "rmsnorm_bwd", "rope_fwd",     "rope_bwd",      "attention_fwd", "attention_bwd",
    "swiglu_fwd",  "swiglu_bwd",   "xent_fwd",      "xent_bwd",      "other_ops",
};
static const char *const prof_gemm_names[G_KINDS] = {"qkv",  "o",       "gate_up",
                                                     "down", "lm_head", "other"};

typedef struct prof {
    backend inner;
    const model *m; /* set once the model exists; labels the GEMMs */
    double sec[P_SLOTS];
    long calls[P_SLOTS];
} prof;

#define PROF_CALL(be, slot, call)                                                                  \
    do {                                                                                           \
        prof *p_ = (be)->ctx;                                                                      \
        backend *in_ = &p_->inner;                                                                 \
        double t0_ = bench_now();                                                                  \
        call;                                                                                      \
        p_->sec[slot] += bench_now() - t0_;                                                        \
        p_->calls[slot]++;                                                                         \
    } while (0)

/* Which weight a GEMM multiplies, found by its address among the model's parameters
 * (shapes alone can collide: at dim 768, gate_up and lm_head are both (4096, 768)). */
static int prof_gemm_kind(const prof *p, const float *w) {
    const model *m = p->m;
    if (m == NULL || m->params.layers == NULL) return G_UNKNOWN;
    if (w == m->params.lm_head) return G_LM_HEAD;
    for (int l = 0; l < m->n_layers; l++) {
        const model_layer_weights *lw = &m->params.layers[l];
        if (w == lw->wqkv) return G_QKV;
        if (w == lw->wo) return G_O;
        if (w == lw->w13) return G_GATE_UP;
        if (w == lw->w2) return G_DOWN;
    }
    return G_UNKNOWN;
}

static void *prof_alloc(backend *be, size_t bytes) {
    prof *p = be->ctx;
    return p->inner.alloc(&p->inner, bytes);
}
static void prof_free(backend *be, void *ptr) {
    prof *p = be->ctx;
    p->inner.free(&p->inner, ptr);
}
static void prof_to_host(backend *be, void *dst, const void *src, size_t bytes) {
    prof *p = be->ctx;
    p->inner.to_host(&p->inner, dst, src, bytes);
}
static void prof_from_host(backend *be, void *dst, const void *src, size_t bytes) {
    prof *p = be->ctx;
    p->inner.from_host(&p->inner, dst, src, bytes);
}
static int prof_sync(backend *be) {
    prof *p = be->ctx;
    return p->inner.sync(&p->inner);
}
static size_t prof_matmul_scratch(backend *be, int N, int C, int OC, backend_prec prec) {
    prof *p = be->ctx;
    return p->inner.matmul_scratch_floats(&p->inner, N, C, OC, prec);
}
static size_t prof_attention_scratch(backend *be, int T) {
    prof *p = be->ctx;
    return p->inner.attention_scratch_floats(&p->inner, T);
}
static void prof_zero(backend *be, float *x, size_t n) {
    PROF_CALL(be, P_ZERO, in_->zero(in_, x, n));
}
static void prof_add(backend *be, float *out, const float *a, const float *b, size_t n) {
    PROF_CALL(be, P_ADD, in_->add(in_, out, a, b, n));
}
static void prof_scale(backend *be, float *x, float s, size_t n) {
    PROF_CALL(be, P_OTHER_OPS, in_->scale(in_, x, s, n));
}
static double prof_sumsq(backend *be, const float *x, size_t n) {
    double r = 0;
    PROF_CALL(be, P_OTHER_OPS, r = in_->sumsq(in_, x, n));
    return r;
}
static void prof_embed_fwd(backend *be, float *out, const int32_t *tok, const float *wte, int N,
                           int C) {
    PROF_CALL(be, P_EMBED_FWD, in_->embedding_forward(in_, out, tok, wte, N, C));
}
static void prof_embed_bwd(backend *be, float *dwte, const float *dout, const int32_t *tok, int N,
                           int C) {
    PROF_CALL(be, P_EMBED_BWD, in_->embedding_backward(in_, dwte, dout, tok, N, C));
}
static void prof_rmsnorm_fwd(backend *be, float *out, float *rstd, const float *inp, const float *w,
                             int N, int C, float eps) {
    PROF_CALL(be, P_RMSNORM_FWD, in_->rmsnorm_forward(in_, out, rstd, inp, w, N, C, eps));
}
static void prof_rmsnorm_bwd(backend *be, float *dinp, float *dw, const float *dout,
                             const float *inp, const float *w, const float *rstd, int N, int C) {
    PROF_CALL(be, P_RMSNORM_BWD, in_->rmsnorm_backward(in_, dinp, dw, dout, inp, w, rstd, N, C));
}
static void prof_matmul_fwd(backend *be, float *out, const float *inp, const float *w, int N, int C,
                            int OC, backend_gemm *g, float *scratch) {
    prof *p = be->ctx;
    int slot = P_GEMM0 + 2 * prof_gemm_kind(p, w);
    PROF_CALL(be, slot, in_->matmul_forward(in_, out, inp, w, N, C, OC, g, scratch));
}
static void prof_matmul_bwd(backend *be, float *dinp, float *dw, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC, backend_gemm *g,
                            float *scratch) {
    prof *p = be->ctx;
    int slot = P_GEMM0 + 2 * prof_gemm_kind(p, w) + 1;
    PROF_CALL(be, slot, in_->matmul_backward(in_, dinp, dw, dout, inp, w, N, C, OC, g, scratch));
}
static void prof_rope_fwd(backend *be, float *out, const float *inp, const float *cs,
                          const float *sn, int B, int T, int nh, int hd, int ld) {
    PROF_CALL(be, P_ROPE_FWD, in_->rope_forward(in_, out, inp, cs, sn, B, T, nh, hd, ld));
}
static void prof_rope_bwd(backend *be, float *dinp, const float *dout, const float *cs,
                          const float *sn, int B, int T, int nh, int hd, int ld) {
    PROF_CALL(be, P_ROPE_BWD, in_->rope_backward(in_, dinp, dout, cs, sn, B, T, nh, hd, ld));
}
static void prof_att_fwd(backend *be, float *out, float *lse, float *att, const float *q,
                         const float *k, const float *v, int ld, int B, int T, int H, int KV,
                         int hd, float scale, backend_prec prec, float *scratch) {
    PROF_CALL(be, P_ATT_FWD,
              in_->attention_forward(in_, out, lse, att, q, k, v, ld, B, T, H, KV, hd, scale, prec,
                                     scratch));
}
static void prof_att_bwd(backend *be, float *dq, float *dk, float *dv, const float *dout,
                         const float *out, const float *att, const float *lse, const float *q,
                         const float *k, const float *v, int ld, int B, int T, int H, int KV,
                         int hd, float scale, backend_prec prec, float *scratch) {
    PROF_CALL(be, P_ATT_BWD,
              in_->attention_backward(in_, dq, dk, dv, dout, out, att, lse, q, k, v, ld, B, T, H,
                                      KV, hd, scale, prec, scratch));
}
static void prof_swiglu_fwd(backend *be, float *out, const float *inp, int N, int F) {
    PROF_CALL(be, P_SWIGLU_FWD, in_->swiglu_forward(in_, out, inp, N, F));
}
static void prof_swiglu_bwd(backend *be, float *dinp, const float *dout, const float *inp, int N,
                            int F) {
    PROF_CALL(be, P_SWIGLU_BWD, in_->swiglu_backward(in_, dinp, dout, inp, N, F));
}
static void prof_ce_fwd(backend *be, float *losses, float *lse, const float *logits,
                        const int32_t *targets, int N, int V) {
    PROF_CALL(be, P_CE_FWD, in_->crossentropy_forward(in_, losses, lse, logits, targets, N, V));
}
static void prof_ce_bwd(backend *be, float *dlogits, const float *logits, const float *lse,
                        const int32_t *targets, float dloss, int N, int V) {
    PROF_CALL(be, P_CE_BWD,
              in_->crossentropy_backward(in_, dlogits, logits, lse, targets, dloss, N, V));
}

/* be becomes a table that times each op and forwards it to the CPU backend in p. */
static void prof_backend_init(backend *be, prof *p) {
    memset(p, 0, sizeof *p);
    cpu_backend_init(&p->inner);
    *be = (backend){
        .name = "cpu+profile",
        .ctx = p,
        .alloc = prof_alloc,
        .free = prof_free,
        .to_host = prof_to_host,
        .from_host = prof_from_host,
        .sync = prof_sync,
        .matmul_scratch_floats = prof_matmul_scratch,
        .attention_scratch_floats = prof_attention_scratch,
        .zero = prof_zero,
        .add = prof_add,
        .scale = prof_scale,
        .sumsq = prof_sumsq,
        .embedding_forward = prof_embed_fwd,
        .embedding_backward = prof_embed_bwd,
        .rmsnorm_forward = prof_rmsnorm_fwd,
        .rmsnorm_backward = prof_rmsnorm_bwd,
        .matmul_forward = prof_matmul_fwd,
        .matmul_backward = prof_matmul_bwd,
        .rope_forward = prof_rope_fwd,
        .rope_backward = prof_rope_bwd,
        .attention_forward = prof_att_fwd,
        .attention_backward = prof_att_bwd,
        .swiglu_forward = prof_swiglu_fwd,
        .swiglu_backward = prof_swiglu_bwd,
        .crossentropy_forward = prof_ce_fwd,
        .crossentropy_backward = prof_ce_bwd,
    };
}

static void prof_reset(prof *p) {
    memset(p->sec, 0, sizeof p->sec);
    memset(p->calls, 0, sizeof p->calls);
}

/* ---- Command line. ---- */

static void usage(FILE *f) {
    fprintf(f, "usage: bench_engine [--dim C] [--layers L] [--heads H] [--kv-heads KV] [--ffn F]\n"
               "                    [--vocab V] [--seq T] [--batch B] [--warmup N] [--steps N]\n"
               "                    [--threads N] [--seed S] [--profile]\n"
               "       bench_engine --blas-core   (prints OpenBLAS's kernels as the engine runs)\n"
               "Times full training steps (zero grad, forward, backward, AdamW) of the CPU\n"
               "engine and prints one JSON line. Defaults: dim 256, layers 4, heads dim/64,\n"
               "kv-heads heads/2, ffn 8/3 dim rounded up to 64, vocab 4096, seq 256, batch 4,\n"
               "warmup 2, steps 10, threads 1, seed 1234.\n"
               "Exit status: 0 done, 1 the engine failed, 2 bad command line.\n");
}

/* A positive int option value, or -1 with a message naming the option. */
static int parse_pos_int(const char *opt, const char *s) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v <= 0 || v > (1L << 24)) {
        fprintf(stderr, "bench_engine: %s: \"%s\" is not an integer in [1, 16777216]\n", opt, s);
        return -1;
    }
    return (int)v;
}

/* 0: run; 1: help was printed; -1: bad command line (message printed). */
static int parse_args(int argc, char **argv, bench_args *a) {
    int dim = 256, layers = 4, heads = 0, kv = 0, ffn = 0, vocab = 4096;
    memset(a, 0, sizeof *a);
    a->batch = 4, a->seq = 256, a->warmup = 2, a->steps = 10, a->threads = 1, a->seed = 1234;
    struct {
        const char *name;
        int *dst;
    } ints[] = {{"--dim", &dim},           {"--layers", &layers},  {"--heads", &heads},
                {"--kv-heads", &kv},       {"--ffn", &ffn},        {"--vocab", &vocab},
                {"--seq", &a->seq},        {"--batch", &a->batch}, {"--steps", &a->steps},
                {"--threads", &a->threads}};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(o, "--blas-core") == 0) {
            printf("%s\n", cpu_blas_core_name());
            return 1;
        }
        if (strcmp(o, "--profile") == 0) {
            a->profile = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_engine: %s needs a value (see --help)\n", o);
            return -1;
        }
        const char *v = argv[++i];
        int found = 0;
        if (strcmp(o, "--warmup") == 0) {
            char *end = NULL;
            long w = strtol(v, &end, 10);
            if (end == v || *end != '\0' || w < 0 || w > 1000000) {
                fprintf(stderr, "bench_engine: --warmup: \"%s\" is not an integer >= 0\n", v);
                return -1;
            }
            a->warmup = (int)w;
            continue;
        }
        if (strcmp(o, "--seed") == 0) {
            char *end = NULL;
            a->seed = strtoull(v, &end, 10);
            if (end == v || *end != '\0') {
                fprintf(stderr, "bench_engine: --seed: \"%s\" is not an unsigned integer\n", v);
                return -1;
            }
            continue;
        }
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (strcmp(o, ints[k].name) == 0) {
                if ((*ints[k].dst = parse_pos_int(o, v)) < 0) return -1;
                found = 1;
            }
        if (!found) {
            fprintf(stderr, "bench_engine: unknown option \"%s\" (see --help)\n", o);
            return -1;
        }
    }
    if (heads == 0) heads = dim / 64 > 0 ? dim / 64 : 1;
    if (kv == 0) kv = heads / 2 > 0 ? heads / 2 : 1;
    /* LLaMA's rule: 2/3 of 4 dim, rounded up to a multiple of 64. */
    if (ffn == 0) ffn = (8 * dim / 3 + 63) / 64 * 64;
    a->cfg = (model_config){
        .vocab = vocab,
        .dim = dim,
        .n_layers = layers,
        .n_heads = heads,
        .n_kv_heads = kv,
        .head_dim = dim / heads,
        .ffn_dim = ffn,
        .norm_eps = 1e-5f,
        .recompute = MODEL_RECOMPUTE_NONE,
        .prec = BACKEND_PREC_FP32,
    };
    rope_config_default(&a->cfg.rope);
    return 0;
}

/* ---- The benchmark. ---- */

static uint64_t bench_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts x (n > 0) and returns its median. */
static double median_sort(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

typedef struct bench_state {
    backend be;
    prof pr;
    model m;
    optim_adamw opt;
    optim_hparams hp;
    optim_segment *segs;
    size_t n_segs;
    int32_t *tokens, *targets;
    double optim_sec; /* AdamW time summed over the measured steps */
} bench_state;

/* One training step, as train_step runs it for a single micro-batch. */
static int bench_step(bench_state *s, const bench_args *a, float *loss) {
    model_zero_grad(&s->m);
    int rc = model_forward(&s->m, s->tokens, s->targets, a->batch, a->seq, loss);
    rc = rc ? rc : model_backward(&s->m, 1.0f);
    if (rc) return rc;
    double t0 = bench_now();
    optim_adamw_step(&s->opt, s->m.params_mem, s->m.grads_mem, s->segs, s->n_segs, &s->hp,
                     s->hp.lr);
    s->optim_sec += bench_now() - t0;
    return 0;
}

static int bench_setup(bench_state *s, const bench_args *a, bt_diag *diag) {
    if (a->profile)
        prof_backend_init(&s->be, &s->pr);
    else
        cpu_backend_init(&s->be);
    int rc = model_init(&s->m, &a->cfg, &s->be, a->batch, a->seq, diag);
    s->pr.m = &s->m;
    rc = rc ? rc : model_init_weights(&s->m, a->seed);
    rc = rc ? rc : optim_adamw_init(&s->opt, s->m.sizes.param_floats);
    if (rc) return rc;
    optim_hparams_default(&s->hp);
    s->n_segs = (size_t)model_n_tensors(&s->m);
    s->segs = calloc(s->n_segs, sizeof *s->segs);
    size_t n = (size_t)a->batch * a->seq;
    s->tokens = malloc((n + 1) * sizeof *s->tokens);
    s->targets = malloc(n * sizeof *s->targets);
    if (!s->segs || !s->tokens || !s->targets) return BT_ENOMEM;
    for (size_t i = 0; i < s->n_segs; i++) {
        model_tensor t;
        model_tensor_info(&s->m, (int)i, &t);
        s->segs[i] = (optim_segment){.offset = t.offset, .n = t.count, .decay = !t.no_decay};
    }
    /* One stream of random tokens; each target is the token after its input. */
    uint64_t r = a->seed;
    for (size_t i = 0; i <= n; i++)
        s->tokens[i] = (int32_t)(bench_rng(&r) % (uint64_t)a->cfg.vocab);
    for (size_t i = 0; i < n; i++)
        s->targets[i] = s->tokens[i + 1];
    return 0;
}

static void bench_free(bench_state *s) {
    if (s->m.be != NULL) model_free(&s->m);
    optim_adamw_free(&s->opt);
    free(s->segs);
    free(s->tokens);
    free(s->targets);
}

/* Model FLOPs of one step, train.c's convention: 6 per parameter per token (embedding
 * excluded) plus causal attention's 6 L C T per token. */
static double bench_flops(const model *m, int B, int T) {
    const model_config *c = &m->cfg;
    double tokens = (double)B * T;
    double n = (double)m->sizes.param_floats - (double)c->vocab * c->dim;
    return 6.0 * n * tokens + 6.0 * c->n_layers * (double)c->dim * T * tokens;
}

static void print_profile(const bench_state *s, int steps, double step_ms_mean) {
    const prof *p = &s->pr;
    double total = 0;
    printf(",\"profile_ms_per_step\":{");
    int first = 1;
    for (int k = 0; k < P_SLOTS; k++) {
        if (p->calls[k] == 0) continue;
        char name[32];
        if (k < P_GEMM0)
            snprintf(name, sizeof name, "%s", prof_op_names[k]);
        else
            snprintf(name, sizeof name, "gemm_%s_%s", prof_gemm_names[(k - P_GEMM0) / 2],
                     (k - P_GEMM0) % 2 ? "bwd" : "fwd");
        double ms = p->sec[k] * 1e3 / steps;
        total += ms;
        printf("%s\"%s\":%.3f", first ? "" : ",", name, ms);
        first = 0;
    }
    double opt_ms = s->optim_sec * 1e3 / steps;
    printf(",\"adamw\":%.3f,\"untimed_rest\":%.3f}", opt_ms, step_ms_mean - total - opt_ms);
}

int main(int argc, char **argv) {
    cpu_blas_core_ensure(argv); /* the kernels for this CPU (cpu_blas_core.h) */
    bench_args a;
    int pa = parse_args(argc, argv, &a);
    if (pa != 0) return pa > 0 ? 0 : 2;
    openblas_set_num_threads(a.threads);
    bench_state s;
    memset(&s, 0, sizeof s);
    bt_diag diag;
    bt_diag_init(&diag);
    int rc = bench_setup(&s, &a, &diag);
    if (rc) {
        fprintf(stderr, "bench_engine: setup failed: %s%s%s\n", bt_strerror(rc),
                bt_diag_isset(&diag) ? ": " : "", bt_diag_isset(&diag) ? diag.msg : "");
        bench_free(&s);
        return 1;
    }
    /* Wall time is the figure; process CPU time is kept beside it because on a shared
     * machine a step can wait for a core, which wall time counts and CPU time does not. */
    double *ms = calloc(2 * (size_t)a.steps, sizeof *ms);
    if (ms == NULL) {
        fprintf(stderr, "bench_engine: %s\n", bt_strerror(BT_ENOMEM));
        bench_free(&s);
        return 1;
    }
    double *cpu_ms = ms + a.steps;
    float loss_first = 0, loss_last = 0;
    for (int i = 0; rc == 0 && i < a.warmup + a.steps; i++) {
        if (i == a.warmup) {
            prof_reset(&s.pr);
            s.optim_sec = 0;
        }
        double t0 = bench_now(), c0 = bench_clock(CLOCK_PROCESS_CPUTIME_ID);
        float loss = 0;
        rc = bench_step(&s, &a, &loss);
        if (i == 0) loss_first = loss;
        loss_last = loss;
        if (i >= a.warmup) {
            ms[i - a.warmup] = (bench_now() - t0) * 1e3;
            cpu_ms[i - a.warmup] = (bench_clock(CLOCK_PROCESS_CPUTIME_ID) - c0) * 1e3;
        }
    }
    if (rc) {
        fprintf(stderr, "bench_engine: training step failed: %s\n", bt_strerror(rc));
        free(ms);
        bench_free(&s);
        return 1;
    }
    double mean = 0;
    for (int i = 0; i < a.steps; i++)
        mean += ms[i] / a.steps;
    double median = median_sort(ms, a.steps), cpu_median = median_sort(cpu_ms, a.steps);
    double tokens = (double)a.batch * a.seq;
    const model_config *c = &a.cfg;
    printf("{\"impl\":\"baton\",\"dim\":%d,\"layers\":%d,\"heads\":%d,\"kv_heads\":%d,"
           "\"ffn\":%d,\"vocab\":%d,\"seq\":%d,\"batch\":%d,\"params\":%zu,\"threads\":%d,"
           "\"blas\":\"%s\",\"blas_core\":\"%s\",\"warmup\":%d,\"steps\":%d,"
           "\"step_ms_median\":%.3f,\"step_ms_min\":%.3f,\"step_ms_mean\":%.3f,"
           "\"step_cpu_ms_median\":%.3f,"
           "\"tokens_per_s\":%.1f,\"gflops_per_s\":%.2f,\"loss_first\":%.5f,\"loss_last\":%.5f",
           c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn_dim, c->vocab, a.seq, a.batch,
           s.m.sizes.param_floats, openblas_get_num_threads(), openblas_get_config(),
           openblas_get_corename(), a.warmup, a.steps, median, ms[0], mean, cpu_median,
           tokens / (median * 1e-3), bench_flops(&s.m, a.batch, a.seq) / (median * 1e-3) * 1e-9,
           loss_first, loss_last);
    if (a.profile) print_profile(&s, a.steps, mean);
    printf("}\n");
    free(ms);
    bench_free(&s);
    return 0;
}
