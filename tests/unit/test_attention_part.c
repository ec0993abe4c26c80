/* Ring attention's arithmetic in one process: the sequence is split over cp "ranks" with
 * the zigzag split (model_cp_position), each rank attends its query rows to every rank's
 * key block through the backend's attention_part_forward and merges the partial results
 * by log-sum-exp in ring order; backward accumulates every block pair's gradients. The
 * outputs, log-sum-exps and the gradients of q, k and v must equal the one-block causal
 * attention (attention_forward/backward) within 1e-5 of each tensor's largest value. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_backend.h"
#include "model_cp.h"

enum { B = 2, T = 96, H = 4, KV = 2, HD = 16 };
#define LD  ((H + 2 * KV) * HD)
#define QD  (H * HD)
#define KVD (KV * HD)

static void fill(float *x, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* max |a - b| / max |a| over n values */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)a[i]));
    }
    return m > 0 ? d / m : d;
}

typedef struct full {
    float *qkv, *out, *lse, *dout, *dqkv;
} full;

/* The one-block reference. */
static void reference(backend *be, full *f) {
    float *scratch = calloc(be->attention_scratch_floats(be, T), sizeof(float));
    float *q = f->qkv, *k = q + QD, *v = k + KVD;
    float sc = 1.0f / sqrtf((float)HD);
    be->attention_forward(be, f->out, f->lse, NULL, q, k, v, LD, B, T, H, KV, HD, sc,
                          BACKEND_PREC_FP32, scratch);
    be->attention_backward(be, f->dqkv, f->dqkv + QD, f->dqkv + QD + KVD, f->dout, f->out, NULL,
                           f->lse, q, k, v, LD, B, T, H, KV, HD, sc, BACKEND_PREC_FP32, scratch);
    free(scratch);
}

/* Rows of rank r (Tl per sequence) gathered from a full (B*T, w) tensor, or scattered. */
static void rows(int cp, int r, float *local, float *all, size_t w, int gather) {
    int Tl = T / cp;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            float *l = local + ((size_t)b * Tl + t) * w;
            float *g = all + ((size_t)b * T + model_cp_position(cp, r, Tl, t)) * w;
            if (gather)
                memcpy(l, g, w * sizeof *l);
            else
                memcpy(g, l, w * sizeof *l);
        }
}

static void positions(int cp, int r, int32_t *pos) {
    for (int t = 0; t < T / cp; t++)
        pos[t] = model_cp_position(cp, r, T / cp, t);
}

/* Per-rank buffers of the emulated ring. */
typedef struct ring_rank {
    float *qkv, *out, *lse, *dout, *dq, *delta;
    float *kvg; /* (N, 4 KV hd): K|V|dK|dV, as the ring carries them */
    int32_t pos[T];
} ring_rank;

static void ring(backend *be, int cp, full *f, full *got) {
    int Tl = T / cp, N = B * Tl;
    float sc = 1.0f / sqrtf((float)HD);
    ring_rank *rk = calloc((size_t)cp, sizeof *rk);
    float *out_p = calloc((size_t)N * QD, sizeof(float)), *lse_p = calloc((size_t)B * H * Tl, 4);
    float *scratch = calloc(be->attention_part_scratch_floats(be, Tl, Tl), sizeof(float));
    for (int r = 0; r < cp; r++) {
        ring_rank *x = &rk[r];
        x->qkv = calloc((size_t)N * LD, 4), x->out = calloc((size_t)N * QD, 4);
        x->lse = calloc((size_t)B * H * Tl, 4), x->dout = calloc((size_t)N * QD, 4);
        x->dq = calloc((size_t)N * LD, 4), x->kvg = calloc((size_t)N * 4 * KVD, 4);
        x->delta = calloc((size_t)B * H * Tl, 4);
        rows(cp, r, x->qkv, f->qkv, LD, 1);
        rows(cp, r, x->dout, f->dout, QD, 1);
        positions(cp, r, x->pos);
        for (int n = 0; n < N; n++)
            memcpy(x->kvg + (size_t)n * 4 * KVD, x->qkv + (size_t)n * LD + QD, 2 * KVD * 4);
    }
    for (int r = 0; r < cp; r++) /* forward: own block, then r-1, r-2, ... */
        for (int s = 0; s < cp; s++) {
            ring_rank *x = &rk[r], *src = &rk[(r - s + cp) % cp];
            float *o = s ? out_p : x->out, *l = s ? lse_p : x->lse;
            be->attention_part_forward(be, o, l, x->qkv, LD, src->qkv + QD, src->qkv + QD + KVD, LD,
                                       B, Tl, Tl, H, KV, HD, sc, x->pos, src->pos, scratch);
            if (s) be->attention_merge(be, x->out, x->lse, out_p, lse_p, B, Tl, H, HD);
        }
    for (int r = 0; r < cp; r++) {
        ring_rank *x = &rk[r];
        be->attention_delta(be, x->delta, x->dout, x->out, B, Tl, H, HD);
        for (int s = 0; s < cp; s++) {
            ring_rank *src = &rk[(r - s + cp) % cp];
            be->attention_part_backward(be, x->dq, LD, src->kvg + 2 * KVD, src->kvg + 3 * KVD,
                                        4 * KVD, x->dout, x->delta, x->lse, x->qkv, src->kvg,
                                        src->kvg + KVD, B, Tl, Tl, H, KV, HD, sc, x->pos, src->pos,
                                        scratch);
        }
    }
    for (int r = 0; r < cp; r++) {
        ring_rank *x = &rk[r];
        rows(cp, r, x->out, got->out, QD, 0);
        for (int n = 0; n < N; n++) /* dk|dv beside dq, in the layout of qkv */
            memcpy(x->dq + (size_t)n * LD + QD, x->kvg + (size_t)n * 4 * KVD + 2 * KVD,
                   2 * KVD * 4);
        rows(cp, r, x->dq, got->dqkv, LD, 0);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < Tl; t++)
                    got->lse[((size_t)b * H + h) * T + x->pos[t]] =
                        x->lse[((size_t)b * H + h) * Tl + t];
        free(x->qkv), free(x->out), free(x->lse), free(x->dout), free(x->dq), free(x->kvg);
        free(x->delta);
    }
    free(rk), free(out_p), free(lse_p), free(scratch);
}

static void alloc_full(full *f) {
    f->qkv = calloc((size_t)B * T * LD, 4), f->out = calloc((size_t)B * T * QD, 4);
    f->lse = calloc((size_t)B * H * T, 4), f->dout = calloc((size_t)B * T * QD, 4);
    f->dqkv = calloc((size_t)B * T * LD, 4);
}

static void free_full(full *f) {
    free(f->qkv), free(f->out), free(f->lse), free(f->dout), free(f->dqkv);
}

int main(void) {
    backend be;
    cpu_backend_init(&be);
    full ref, got;
    alloc_full(&ref);
    alloc_full(&got);
    uint64_t seed = 42;
    fill(ref.qkv, (size_t)B * T * LD, &seed);
    for (size_t i = 0; i < (size_t)B * T * LD; i++)
        ref.qkv[i] *= 3.0f; /* sharper softmaxes than unit scores */
    fill(ref.dout, (size_t)B * T * QD, &seed);
    reference(&be, &ref);
    int cps[] = {1, 2, 3, 4};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        int cp = cps[i];
        memcpy(got.qkv, ref.qkv, (size_t)B * T * LD * 4);
        memcpy(got.dout, ref.dout, (size_t)B * T * QD * 4);
        ring(&be, cp, &ref, &got);
        double e_out = rel_diff(ref.out, got.out, (size_t)B * T * QD);
        double e_lse = rel_diff(ref.lse, got.lse, (size_t)B * H * T);
        double e_d = rel_diff(ref.dqkv, got.dqkv, (size_t)B * T * LD);
        printf("cp %d: out %.3g, lse %.3g, dq|dk|dv %.3g (max relative difference)\n", cp, e_out,
               e_lse, e_d);
        CHECK(e_out <= 1e-5 && e_lse <= 1e-5 && e_d <= 1e-5);
    }
    free_full(&ref);
    free_full(&got);
    return check_status();
}
