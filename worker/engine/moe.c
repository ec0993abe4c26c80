/* The MoE layer's CPU reference; definitions in moe.h. The engines run moe_dev.c (through
 * the backend's ops, which share this file's routing code on the CPU: cpu_moe.c).
 *
 * Layout of a forward: route (scores, selection, combine weights), assign (capacity,
 * grouped rows per expert in token order), the routed experts one GEMM chain each over
 * their gathered rows, the shared experts over all rows, then the combine. Backward runs
 * the same pieces in reverse; every sum has a fixed order, so results are bitwise
 * reproducible. Weight gradients accumulate (+=), dx is written (=). */
#include "moe.h"

#include "cpu_ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* out (M, OC) = inp (M, IC) @ w (OC, IC)^T, or += with beta 1. */
static void gemm_nt(float *out, const float *inp, const float *w, int M, int IC, int OC,
                    float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, OC, IC, 1.0f, inp, IC, w, IC, beta, out,
                OC);
}

/* dinp (M, IC) = dout (M, OC) @ w (OC, IC), or += with beta 1. */
static void gemm_nn(float *dinp, const float *dout, const float *w, int M, int IC, int OC,
                    float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, IC, OC, 1.0f, dout, OC, w, IC, beta,
                dinp, IC);
}

/* dw (OC, IC) += dout (M, OC)^T @ inp (M, IC) */
static void gemm_tn_acc(float *dw, const float *dout, const float *inp, int M, int IC, int OC) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, M, 1.0f, dout, OC, inp, IC, 1.0f,
                dw, IC);
}

static float sigmoid(float v) {
    return 1.0f / (1.0f + expf(-v));
}

/* The dense MLP's SwiGLU (cpu_swiglu_forward): h (M, 2F) = [gate | up]. */
static void swiglu_forward(float *out, const float *h, int M, int F) {
    for (int n = 0; n < M; n++) {
        const float *gate = h + (size_t)n * 2 * F, *up = gate + F;
        for (int i = 0; i < F; i++)
            out[(size_t)n * F + i] = gate[i] * sigmoid(gate[i]) * up[i];
    }
}

static void swiglu_backward(float *dh, const float *dout, const float *h, int M, int F) {
    for (int n = 0; n < M; n++) {
        const float *gate = h + (size_t)n * 2 * F, *up = gate + F;
        const float *d = dout + (size_t)n * F;
        float *dgate = dh + (size_t)n * 2 * F, *dup = dgate + F;
        for (int i = 0; i < F; i++) {
            float s = sigmoid(gate[i]);
            dup[i] = d[i] * gate[i] * s;
            dgate[i] = d[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
        }
    }
}

int moe_config_check(const moe_config *c) {
    if (c == NULL || c->dim < 1 || c->ffn_dim < 1 || c->n_experts < 1 ||
        c->n_experts > MOE_MAX_EXPERTS || c->top_k < 1 || c->top_k > c->n_experts ||
        c->n_shared < 0)
        return BT_EINVAL;
    if (c->score != MOE_SCORE_SOFTMAX && c->score != MOE_SCORE_SIGMOID) return BT_EINVAL;
    if (!(c->capacity_factor >= 0.0) || !(c->aux_loss_coef >= 0.0) || !(c->bias_rate >= 0.0))
        return BT_EINVAL;
    if (c->n_local < 0 || c->expert0 < 0 || c->n_local > c->n_experts ||
        c->expert0 + c->n_local > c->n_experts || (c->n_local == 0 && c->expert0 != 0))
        return BT_EINVAL;
    return 0;
}

int moe_local_experts(const moe_config *c) {
    return c->n_local ? c->n_local : c->n_experts;
}

size_t moe_weights_floats(const moe_config *c) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    size_t expert = 3 * F * C;
    return (size_t)c->n_experts * C + ((size_t)moe_local_experts(c) + (size_t)c->n_shared) * expert;
}

void moe_weights_carve(const moe_config *c, moe_weights *w, float *base) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, E = (size_t)c->n_experts;
    size_t S = (size_t)c->n_shared, El = (size_t)moe_local_experts(c);
    w->router = base;
    w->w13 = w->router + E * C;
    w->w2 = w->w13 + El * 2 * F * C;
    w->shared_w13 = w->w2 + El * C * F;
    w->shared_w2 = w->shared_w13 + S * 2 * F * C;
}

/* Carves the cache's buffers (or, with fbuf/ibuf NULL, only counts them). */
static void cache_carve(moe_cache *m, const moe_config *c, size_t *nf, size_t *ni) {
    size_t N = (size_t)m->max_tokens, C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    size_t E = (size_t)c->n_experts, K = (size_t)c->top_k, S = (size_t)c->n_shared;
    float *f = m->fbuf;
    int *i = m->ibuf;
    size_t fo = 0, io = 0;
#define TAKE_F(field, n) (m->field = f ? f + fo : NULL, fo += (n))
#define TAKE_I(field, n) (m->field = i ? i + io : NULL, io += (n))
    TAKE_F(x, N * C);
    TAKE_F(scores, N * E);
    TAKE_F(ssum, N);
    TAKE_F(frac, E);
    TAKE_F(gate, N * K);
    TAKE_F(xg, N * K * C);
    TAKE_F(h13, N * K * 2 * F);
    TAKE_F(hs, N * K * F);
    TAKE_F(out, N * K * C);
    TAKE_F(sh13, S * N * 2 * F);
    TAKE_F(shs, S * N * F);
    TAKE_F(dout, N * C);
    TAKE_F(dhs, N * F);
    TAKE_F(dh13, N * 2 * F);
    TAKE_F(dxe, N * C);
    TAKE_F(dgate, N * K);
    TAKE_F(dl, N * E);
    TAKE_I(topk, N * K);
    TAKE_I(row, N * K);
    TAKE_I(counts, 3 * E + 1);
    m->offset = i ? m->counts + 2 * E : NULL;
    TAKE_I(tok, N * K);
    TAKE_I(slot, N * K);
#undef TAKE_F
#undef TAKE_I
    *nf = fo;
    *ni = io;
}

int moe_cache_init(moe_cache *cache, const moe_config *c, int max_tokens) {
    memset(cache, 0, sizeof *cache);
    if (moe_config_check(c) != 0 || c->n_local != 0 || max_tokens < 1) return BT_EINVAL;
    cache->max_tokens = max_tokens;
    size_t nf, ni;
    cache_carve(cache, c, &nf, &ni);
    cache->fbuf = calloc(nf, sizeof(float));
    cache->ibuf = calloc(ni, sizeof(int));
    if (cache->fbuf == NULL || cache->ibuf == NULL) {
        moe_cache_free(cache);
        return BT_ENOMEM;
    }
    cache_carve(cache, c, &nf, &ni);
    return 0;
}

void moe_cache_free(moe_cache *cache) {
    free(cache->fbuf);
    free(cache->ibuf);
    memset(cache, 0, sizeof *cache);
}

/* Router logits, then the backend op's routing (cpu_moe.c): scores, top-k, weights. */
static void route(const moe_config *c, const moe_weights *w, const float *bias, int N,
                  moe_cache *m) {
    gemm_nt(m->scores, m->x, w->router, N, c->dim, c->n_experts, 0.0f);
    cpu_moe_route(NULL, m->scores, m->ssum, m->topk, m->gate, bias, N, c->n_experts, c->top_k,
                  c->score, c->norm_topk);
}

/* Capacity and grouped rows (cpu_moe_assign): expert e's kept pairs occupy rows
 * [offset[e], offset[e+1]) in token order. Fills the load figures of st. */
static void assign(const moe_config *c, int N, moe_cache *m, moe_stats *st) {
    int E = c->n_experts, K = c->top_k;
    memset(st, 0, sizeof *st);
    st->n_tokens = N;
    if (c->capacity_factor > 0.0) st->capacity = (int)ceil(c->capacity_factor * (double)N * K / E);
    cpu_moe_assign(NULL, m->row, m->tok, m->slot, m->counts, m->topk, N, K, E, st->capacity, NULL);
    for (int e = 0; e < E; e++) {
        st->routed[e] = m->counts[e], st->kept[e] = m->counts[E + e];
        st->dropped += st->routed[e] - st->kept[e];
        m->frac[e] = (float)((double)st->routed[e] / ((double)N * K));
    }
}

/* aux = coef * E * sum_e f_e * P_e. This reference keeps P_e the plain double sum in n
 * order; the backends' moe_score_mean sums in chunks (backend.h), so the two differ in
 * the last bits for N > MOE_MEAN_CHUNK_MIN (within 1e-6: test_cuda_ops). */
static double aux_loss(const moe_config *c, int N, const moe_cache *m) {
    if (c->aux_loss_coef == 0.0) return 0.0;
    int E = c->n_experts;
    double sum = 0.0;
    for (int e = 0; e < E; e++) {
        double P = 0.0;
        for (int n = 0; n < N; n++)
            P += m->scores[(size_t)n * E + e] / m->ssum[n];
        sum += m->frac[e] * (P / N);
    }
    return c->aux_loss_coef * E * sum;
}

/* One SwiGLU expert over M rows: h13, hs saved, out written (beta 0) or added (beta 1). */
static void moe_expert_forward(const moe_config *c, const float *w13, const float *w2,
                               const float *xin, int M, float *h13, float *hs, float *out,
                               float beta) {
    int C = c->dim, F = c->ffn_dim;
    gemm_nt(h13, xin, w13, M, C, 2 * F, 0.0f);
    swiglu_forward(hs, h13, M, F);
    gemm_nt(out, hs, w2, M, F, C, beta);
}

static void routed_forward(const moe_config *c, const moe_weights *w, moe_cache *m) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    for (int e = 0; e < c->n_experts; e++) {
        int r0 = m->offset[e], M = m->offset[e + 1] - r0;
        if (M == 0) continue;
        moe_expert_forward(c, w->w13 + e * 2 * F * C, w->w2 + e * C * F, m->xg + r0 * C, M,
                           m->h13 + r0 * 2 * F, m->hs + r0 * F, m->out + r0 * C, 0.0f);
    }
}

static void combine(const moe_config *c, const moe_weights *w, int N, moe_cache *m, float *y) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, K = (size_t)c->top_k;
    memset(y, 0, (size_t)N * C * sizeof(float));
    for (int s = 0; s < c->n_shared; s++)
        moe_expert_forward(c, w->shared_w13 + s * 2 * F * C, w->shared_w2 + s * C * F, m->x, N,
                           m->sh13 + s * N * 2 * F, m->shs + s * N * F, y, 1.0f);
    cpu_moe_combine(NULL, y, m->out, m->gate, m->row, N, (int)K, (int)C);
}

int moe_forward(const moe_config *c, const moe_weights *w, const float *bias, const float *x,
                float *y, int N, moe_cache *cache, moe_stats *stats) {
    if (moe_config_check(c) != 0 || w == NULL || x == NULL || y == NULL || cache == NULL ||
        cache->fbuf == NULL || N < 1 || N > cache->max_tokens)
        return BT_EINVAL;
    moe_stats local;
    moe_stats *st = stats ? stats : &local;
    cache->n = N;
    memcpy(cache->x, x, (size_t)N * c->dim * sizeof(float));
    route(c, w, bias, N, cache);
    assign(c, N, cache, st);
    cpu_gather_rows(NULL, cache->xg, cache->x, cache->tok, cache->offset[c->n_experts], c->dim);
    routed_forward(c, w, cache);
    combine(c, w, N, cache, y);
    st->aux_loss = aux_loss(c, N, cache);
    return 0;
}

/* Backward of one expert over M rows from dout (M, C): accumulates dw13, dw2 and writes
 * dxin (M, C), or adds into it with beta 1. */
static void moe_expert_backward(const moe_config *c, const float *w13, const float *w2, float *dw13,
                                float *dw2, const float *xin, const float *h13, const float *hs,
                                const float *dout, int M, float *dhs, float *dh13, float *dxin,
                                float beta) {
    int C = c->dim, F = c->ffn_dim;
    gemm_tn_acc(dw2, dout, hs, M, F, C);
    gemm_nn(dhs, dout, w2, M, F, C, 0.0f);
    swiglu_backward(dh13, dhs, h13, M, F);
    gemm_tn_acc(dw13, dh13, xin, M, C, 2 * F);
    gemm_nn(dxin, dh13, w13, M, C, 2 * F, beta);
}

/* Routed experts: dgate of each kept pair = dy_n . expert_e(x_n); the expert sees
 * dout = g dy_n; its input gradient is scattered back into dx. */
static void routed_backward(const moe_config *c, const moe_weights *w, moe_cache *m,
                            const float *dy, float *dx, moe_weights *gr) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, K = (size_t)c->top_k;
    for (int e = 0; e < c->n_experts; e++) {
        int r0 = m->offset[e], M = m->offset[e + 1] - r0;
        if (M == 0) continue;
        cpu_moe_combine_backward(NULL, m->dout, m->dgate, dy, m->out + r0 * C, m->gate, m->tok + r0,
                                 m->slot + r0, M, (int)K, (int)C);
        moe_expert_backward(c, w->w13 + e * 2 * F * C, w->w2 + e * C * F, gr->w13 + e * 2 * F * C,
                            gr->w2 + e * C * F, m->xg + r0 * C, m->h13 + r0 * 2 * F, m->hs + r0 * F,
                            m->dout, M, m->dhs, m->dh13, m->dxe, 0.0f);
        for (int i = 0; i < M; i++) {
            float *dxn = dx + (size_t)m->tok[r0 + i] * C;
            for (size_t j = 0; j < C; j++)
                dxn[j] += m->dxe[i * C + j];
        }
    }
}

static void shared_backward(const moe_config *c, const moe_weights *w, moe_cache *m,
                            const float *dy, float *dx, moe_weights *gr) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, N = (size_t)m->n;
    for (int s = 0; s < c->n_shared; s++)
        moe_expert_backward(c, w->shared_w13 + s * 2 * F * C, w->shared_w2 + s * C * F,
                            gr->shared_w13 + s * 2 * F * C, gr->shared_w2 + s * C * F, m->x,
                            m->sh13 + s * N * 2 * F, m->shs + s * N * F, dy, (int)N, m->dhs,
                            m->dh13, dx, 1.0f);
}

/* The router's logit gradients (cpu_moe_router_backward: through the combine weights and
 * the aux loss), then its GEMMs. */
static void router_backward(const moe_config *c, const moe_weights *w, moe_cache *m, float *dx,
                            moe_weights *gr) {
    int N = m->n, E = c->n_experts;
    cpu_moe_router_backward(NULL, m->dl, m->scores, m->ssum, m->topk, m->gate, m->dgate, m->counts,
                            N, N, E, c->top_k, c->score, c->norm_topk, c->aux_loss_coef);
    gemm_tn_acc(gr->router, m->dl, m->x, N, c->dim, E);
    gemm_nn(dx, m->dl, w->router, N, c->dim, E, 1.0f);
}

int moe_backward(const moe_config *c, const moe_weights *w, moe_cache *cache, const float *dy,
                 float *dx, moe_weights *grads) {
    if (moe_config_check(c) != 0 || w == NULL || cache == NULL || cache->n < 1 || dy == NULL ||
        dx == NULL || grads == NULL)
        return BT_EINVAL;
    int N = cache->n;
    memset(dx, 0, (size_t)N * c->dim * sizeof(float));
    memset(cache->dgate, 0, (size_t)N * c->top_k * sizeof(float));
    routed_backward(c, w, cache, dy, dx, grads);
    shared_backward(c, w, cache, dy, dx, grads);
    router_backward(c, w, cache, dx, grads);
    return 0;
}

void moe_bias_update(const moe_config *c, float *bias, const moe_stats *stats) {
    if (c->bias_rate == 0.0 || bias == NULL || stats == NULL) return;
    double mean = (double)stats->n_tokens * c->top_k / c->n_experts;
    for (int e = 0; e < c->n_experts; e++) {
        double diff = mean - (double)stats->routed[e];
        float sign = diff > 0.0 ? 1.0f : (diff < 0.0 ? -1.0f : 0.0f);
        bias[e] += (float)c->bias_rate * sign;
    }
}
