/* optim.c: the schedule and clipping against hand arithmetic, one AdamW step by hand,
 * sharded against unsharded updates, and 20 steps of AdamW + clipping + schedule against
 * torch.optim.AdamW / clip_grad_norm_ / LambdaLR in float64 (tests/oracle/adamw_ref.py).
 * Without an importable torch the oracle part is skipped out loud (exit 77). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "optim.h"

/* ---- hand arithmetic ---- */

static void test_schedule(void) {
    optim_hparams hp;
    optim_hparams_default(&hp);
    hp.lr = 1e-3;
    hp.min_lr = 1e-4;
    hp.warmup_steps = 10;
    hp.schedule = OPTIM_SCHEDULE_COSINE;
    const uint64_t total = 110;
    CHECK_REL(optim_lr_at(1, total, &hp), 1e-4, 1e-15);    /* lr * 1 / 10 */
    CHECK_REL(optim_lr_at(5, total, &hp), 5e-4, 1e-15);    /* lr * 5 / 10 */
    CHECK_REL(optim_lr_at(10, total, &hp), 1e-3, 1e-15);   /* end of warmup: peak */
    CHECK_REL(optim_lr_at(11, total, &hp), 1e-3, 1e-15);   /* first decay step: peak */
    CHECK_REL(optim_lr_at(61, total, &hp), 5.5e-4, 1e-14); /* cosine midpoint, 50 of 100 */
    /* ratio 1/4: min + (lr - min) * (1 + cos(pi/4)) / 2 = 1e-4 + 9e-4 * 0.853553390593 */
    CHECK_REL(optim_lr_at(36, total, &hp), 8.68198051533946e-4, 1e-13);
    /* last step, 99 of 100: min + 9e-4 * (1 + cos(0.99 pi)) / 2, short of min_lr */
    CHECK_REL(optim_lr_at(110, total, &hp), 1e-4 + 9e-4 * 0.5 * (1 + cos(0.99 * acos(-1.0))),
              1e-13);
    CHECK_REL(optim_lr_at(111, total, &hp), 1e-4, 1e-15); /* past the schedule: min_lr */
    CHECK_REL(optim_lr_at(500, total, &hp), 1e-4, 1e-15);
    CHECK(optim_lr_at(0, total, &hp) == 0.0);

    hp.schedule = OPTIM_SCHEDULE_LINEAR;
    CHECK_REL(optim_lr_at(10, total, &hp), 1e-3, 1e-15);
    CHECK_REL(optim_lr_at(36, total, &hp), 7.75e-4, 1e-14); /* 1e-4 + 9e-4 * 3/4 */
    CHECK_REL(optim_lr_at(61, total, &hp), 5.5e-4, 1e-14);
    CHECK_REL(optim_lr_at(110, total, &hp), 1e-4 + 9e-4 * 0.01, 1e-13);

    hp.schedule = OPTIM_SCHEDULE_CONSTANT;
    CHECK_REL(optim_lr_at(3, total, &hp), 3e-4, 1e-15); /* warmup still applies */
    CHECK_REL(optim_lr_at(60, total, &hp), 1e-3, 1e-15);
    CHECK_REL(optim_lr_at(110, total, &hp), 1e-3, 1e-15);

    hp.schedule = OPTIM_SCHEDULE_COSINE; /* no warmup: step 1 at the peak */
    hp.warmup_steps = 0;
    CHECK_REL(optim_lr_at(1, 100, &hp), 1e-3, 1e-15);
    CHECK_REL(optim_lr_at(51, 100, &hp), 5.5e-4, 1e-14);
    CHECK_REL(optim_lr_at(101, 100, &hp), 1e-4, 1e-15);
    CHECK_REL(optim_lr_at(1, 1, &hp), 1e-3, 1e-15); /* a one-step stage trains at lr, not 0 */
}

static void test_hparams_from_pb(void) {
    optim_hparams hp;
    Baton__Optimizer pb = BATON__OPTIMIZER__INIT;
    optim_hparams_from_pb(&hp, &pb);
    CHECK(hp.lr == 3e-4 && hp.min_lr == 0.0 && hp.warmup_steps == 0);
    CHECK(hp.schedule == OPTIM_SCHEDULE_COSINE);
    CHECK(hp.weight_decay == 0.1 && hp.grad_clip == 1.0);
    CHECK(hp.beta1 == 0.9 && hp.beta2 == 0.95 && hp.eps == 1e-8);
    pb.lr = 6e-4;
    pb.warmup_steps = 100;
    pb.schedule = BATON__OPTIMIZER__SCHEDULE__LINEAR;
    optim_hparams_from_pb(&hp, &pb);
    CHECK(hp.lr == 6e-4 && hp.warmup_steps == 100 && hp.schedule == OPTIM_SCHEDULE_LINEAR);
    pb.schedule = BATON__OPTIMIZER__SCHEDULE__CONSTANT;
    optim_hparams_from_pb(&hp, &pb);
    CHECK(hp.schedule == OPTIM_SCHEDULE_CONSTANT);
    optim_hparams_from_pb(&hp, NULL);
    CHECK(hp.lr == 3e-4 && hp.beta2 == 0.95);
}

static void test_clip(void) {
    float g[2] = {3.0f, 4.0f};
    CHECK(optim_grad_sumsq(g, 2) == 25.0);
    CHECK_REL(optim_clip_coef(5.0, 1.0), 1.0 / 5.000001, 1e-15);
    CHECK(optim_clip_coef(0.5, 1.0) == 1.0);
    CHECK(optim_clip_coef(5.0, 0.0) == 1.0); /* clipping off */
    CHECK(optim_clip_coef(INFINITY, 1.0) == 0.0);
    CHECK(isnan(optim_clip_coef(NAN, 1.0)));
    optim_grad_scale(g, 2, 0.5f);
    CHECK(g[0] == 1.5f && g[1] == 2.0f);
    /* Partial sums over shards add up to the whole (exact here: small integers). */
    float h[7] = {1, -2, 3, -4, 5, -6, 7};
    CHECK(optim_grad_sumsq(h, 3) + optim_grad_sumsq(h + 3, 4) == 140.0);
}

/* Step 1 from zero moments: mhat = g, vhat = g^2, so p -= lr * g / (|g| + eps). */
static void test_adamw_first_step(void) {
    optim_hparams hp;
    optim_hparams_default(&hp);
    hp.weight_decay = 0.1;
    float p[2] = {1.0f, 1.0f}, g[2] = {0.5f, -0.25f}, m[2] = {0}, v[2] = {0};
    optim_adamw_update(p, g, m, v, 2, &hp, 0.1, 1, 1);
    CHECK_REL(p[0], 1.0 * (1 - 0.01) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-7);   /* 0.89 */
    CHECK_REL(p[1], 1.0 * (1 - 0.01) + 0.1 * 0.25 / (0.25 + 1e-8), 1e-7); /* 1.09 */
    CHECK_REL(m[0], 0.05, 1e-7);
    CHECK_REL(v[0], 0.05 * 0.25, 1e-6);
    float q[1] = {1.0f}, mq[1] = {0}, vq[1] = {0};
    optim_adamw_update(q, g, mq, vq, 1, &hp, 0.1, 1, 0); /* no decay: 1 - 0.1 */
    CHECK_REL(q[0], 0.9, 1e-7);
}

/* ---- the workload shared by the sharding test and the oracle ---- */

#define NT     3
#define NSTEPS 20
#define TOTAL  20

static const optim_segment test_segs[NT] = {
    {0, 24, 1},  /* a (6, 4) weight */
    {24, 8, 0},  /* a norm weight: no decay */
    {32, 12, 1}, /* a (12) bias-like tensor with decay */
};
#define NPARAM 44

static void workload_hparams(optim_hparams *hp) {
    optim_hparams_default(hp);
    hp->lr = 1e-2;
    hp->min_lr = 1e-3;
    hp->warmup_steps = 5;
    hp->schedule = OPTIM_SCHEDULE_COSINE;
    hp->weight_decay = 0.1;
    hp->grad_clip = 1.0;
    hp->beta1 = 0.9;
    hp->beta2 = 0.95;
    hp->eps = 1e-8;
}

/* Away from zero so per-element relative comparisons are meaningful. */
static void workload_init(float *p) {
    for (int i = 0; i < NPARAM; i++)
        p[i] = (i % 3 ? 1.0f : -1.0f) * (0.5f + (float)((i * 37) % 23) / 23.0f);
}

/* Odd steps have a global norm near 4 (clipped), even steps near 0.2 (not clipped). */
static void workload_grads(float *g, int step) {
    float amp = step % 2 ? 1.0f : 0.05f;
    for (int i = 0; i < NPARAM; i++)
        g[i] = amp * sinf(0.37f * (float)i + 1.3f * (float)step + 0.01f * (float)(i * step));
}

static void test_sharded_matches_whole(void) {
    optim_hparams hp;
    workload_hparams(&hp);
    optim_adamw whole;
    float p[NPARAM], g[NPARAM], ps[NPARAM], gs[NPARAM], ms[NPARAM] = {0}, vs[NPARAM] = {0};
    CHECK(optim_adamw_init(&whole, NPARAM) == 0);
    workload_init(p);
    workload_init(ps);
    /* Two "ranks" own [0, 30) and [30, 44): boundaries cut the second and third tensor. */
    const size_t cut = 30;
    for (int t = 1; t <= NSTEPS; t++) {
        double lr = optim_lr_at((uint64_t)t, TOTAL, &hp);
        workload_grads(g, t);
        workload_grads(gs, t);
        optim_adamw_step(&whole, p, g, test_segs, NT, &hp, lr);
        double norm = sqrt(optim_grad_sumsq(gs, cut) + optim_grad_sumsq(gs + cut, NPARAM - cut));
        float coef = (float)optim_clip_coef(norm, hp.grad_clip);
        for (int s = 0; s < NT; s++) {
            size_t b = test_segs[s].offset, e = b + test_segs[s].n;
            size_t pieces[3] = {b, cut > b && cut < e ? cut : e, e};
            for (int k = 0; k < 2; k++) {
                size_t lo = pieces[k], n = pieces[k + 1] - pieces[k];
                if (coef != 1.0f) optim_grad_scale(gs + lo, n, coef);
                optim_adamw_update(ps + lo, gs + lo, ms + lo, vs + lo, n, &hp, lr, (uint64_t)t,
                                   test_segs[s].decay);
            }
        }
    }
    CHECK_EQ_U64(whole.step, NSTEPS);
    for (int i = 0; i < NPARAM; i++) {
        CHECK_REL(ps[i], p[i], 1e-6);
        CHECK_REL(ms[i], whole.m[i], 1e-6);
    }
    /* A non-finite norm skips the step. */
    float keep = p[0];
    g[0] = NAN;
    CHECK(isnan(optim_adamw_step(&whole, p, g, test_segs, NT, &hp, 1e-3)));
    CHECK(p[0] == keep && whole.step == NSTEPS);
    optim_adamw_reset(&whole);
    CHECK(whole.step == 0 && whole.m[5] == 0.0f && whole.v[40] == 0.0f);
    optim_adamw_free(&whole);
    CHECK(whole.m == NULL);
}

/* ---- the torch oracle ---- */

typedef struct oracle_run {
    float p[NPARAM];
    optim_adamw opt;
    double lr[NSTEPS + 1], norm[NSTEPS + 1];
} oracle_run;

static const char *schedule_name(optim_schedule s) {
    return s == OPTIM_SCHEDULE_LINEAR     ? "linear"
           : s == OPTIM_SCHEDULE_CONSTANT ? "constant"
                                          : "cosine";
}

/* Writes the inputs adamw_ref.py documents: hyperparameters, tensors, every gradient. */
static int oracle_write(const char *path, const optim_hparams *hp) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return -1;
    float p[NPARAM], g[NPARAM];
    fprintf(f, "%a %a %llu %s %a %a %a %a %a %d %d %d\n", hp->lr, hp->min_lr,
            (unsigned long long)hp->warmup_steps, schedule_name(hp->schedule), hp->weight_decay,
            hp->grad_clip, hp->beta1, hp->beta2, hp->eps, TOTAL, NSTEPS, NT);
    workload_init(p);
    for (int s = 0; s < NT; s++) {
        fprintf(f, "%zu %d\n", test_segs[s].n, test_segs[s].decay);
        for (size_t i = 0; i < test_segs[s].n; i++)
            fprintf(f, "%a\n", (double)p[test_segs[s].offset + i]);
    }
    for (int t = 1; t <= NSTEPS; t++) {
        workload_grads(g, t);
        for (int i = 0; i < NPARAM; i++) /* tensors are contiguous and in order */
            fprintf(f, "%a\n", (double)g[i]);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static void oracle_run_c(oracle_run *r, const optim_hparams *hp) {
    float g[NPARAM];
    workload_init(r->p);
    for (int t = 1; t <= NSTEPS; t++) {
        workload_grads(g, t);
        r->lr[t] = optim_lr_at((uint64_t)t, TOTAL, hp);
        r->norm[t] = optim_adamw_step(&r->opt, r->p, g, test_segs, NT, hp, r->lr[t]);
    }
}

/* Compares one tensor of n values, returning the worst relative difference.
 * floor_frac (of the tensor's largest magnitude) sets the smallest denominator: the
 * first moments are sums of gradients of both signs, and an element that cancels to
 * near zero keeps float32's absolute error (~1e-7 of the terms), not its relative one,
 * so m is compared relative to the tensor's largest moment (floor_frac 1). */
static double oracle_compare(FILE *f, const float *mine, size_t n, double floor_frac) {
    double ref[NPARAM], big = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (fscanf(f, "%lf", &ref[i]) != 1) return INFINITY;
        big = fmax(big, fabs(ref[i]));
    }
    for (size_t i = 0; i < n; i++) {
        double scale = fmax(fmax(fabs(ref[i]), fabs((double)mine[i])), floor_frac * big);
        worst = fmax(worst, fabs((double)mine[i] - ref[i]) / scale);
    }
    return worst;
}

static void oracle_check(const char *path, oracle_run *r) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f == NULL) return;
    for (int t = 1; t <= NSTEPS; t++) {
        double lr = 0, norm = 0;
        CHECK(fscanf(f, "%lf %lf", &lr, &norm) == 2);
        CHECK_REL(r->lr[t], lr, 1e-12);
        CHECK_REL(r->norm[t], norm, 1e-6);
    }
    double wp = 0, wm = 0, wv = 0;
    for (int s = 0; s < NT; s++) {
        size_t off = test_segs[s].offset, n = test_segs[s].n;
        wp = fmax(wp, oracle_compare(f, r->p + off, n, 0.0));
        wm = fmax(wm, oracle_compare(f, r->opt.m + off, n, 1.0));
        wv = fmax(wv, oracle_compare(f, r->opt.v + off, n, 0.0));
    }
    fclose(f);
    printf("oracle: worst relative difference params %.3g, m %.3g, v %.3g\n", wp, wm, wv);
    CHECK(wp <= 1e-6);
    CHECK(wm <= 1e-6);
    CHECK(wv <= 1e-6);
}

static int torch_available(void) {
    return system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

static void test_vs_torch(const optim_hparams *hp) {
    char dir[] = "/tmp/baton-optim-XXXXXX", in[64], out[64], cmd[512];
    static oracle_run r;
    CHECK(mkdtemp(dir) != NULL);
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/oracle/adamw_ref.py %s %s",
             BATON_SOURCE_DIR, in, out);
    int ok = oracle_write(in, hp) == 0;
    CHECK(ok);
    if (ok) {
        ok = system(cmd) == 0;
        CHECK(ok);
    }
    if (ok) {
        memset(&r, 0, sizeof r);
        ok = optim_adamw_init(&r.opt, NPARAM) == 0;
        CHECK(ok);
    }
    if (ok) {
        oracle_run_c(&r, hp);
        oracle_check(out, &r);
        optim_adamw_free(&r.opt);
    }
    unlink(in);
    unlink(out);
    rmdir(dir);
}

int main(void) {
    test_schedule();
    test_hparams_from_pb();
    test_clip();
    test_adamw_first_step();
    test_sharded_matches_whole();
    if (!torch_available()) {
        if (check_failures) return check_status();
        printf("SKIPPED: torch is not importable by /usr/bin/python3 (the oracle part)\n");
        return 77;
    }
    optim_hparams hp;
    workload_hparams(&hp); /* cosine after warmup, clipping on odd steps */
    test_vs_torch(&hp);
    /* Linear, no warmup, no clipping, and an eps large enough to matter (the gradients
     * of even steps are ~0.05, so sqrt(vhat) is a few 1e-2). */
    hp.schedule = OPTIM_SCHEDULE_LINEAR;
    hp.warmup_steps = 0;
    hp.grad_clip = 0.0;
    hp.eps = 1e-3;
    hp.beta2 = 0.999;
    hp.weight_decay = 0.5;
    test_vs_torch(&hp);
    return check_status();
}
