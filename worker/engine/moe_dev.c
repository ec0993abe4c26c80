/* moe.h's layer through the backend table (moe_dev.h). Forward: copy x, router GEMM,
 * route, assign, (aux: score means), one copy of the counts to the host, gather the kept
 * pairs' rows in expert order, each expert's GEMM chain on its rows (one SwiGLU over all
 * of them), the shared experts, then the weighted un-permutation. Backward runs the same
 * pieces in reverse. */
#include "moe_dev.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static size_t gemm_floats(backend *be, const moe_config *c, int N) {
    int C = c->dim, F = c->ffn_dim, E = c->n_experts, rows = N * c->top_k;
    size_t shapes[4] = {
        be->matmul_scratch_floats(be, N, C, E, BACKEND_PREC_FP32),
        be->matmul_scratch_floats(be, rows, C, 2 * F, BACKEND_PREC_FP32),
        be->matmul_scratch_floats(be, rows, F, C, BACKEND_PREC_FP32),
        0,
    };
    size_t mx = 0;
    for (int i = 0; i < 4; i++)
        mx = shapes[i] > mx ? shapes[i] : mx;
    return mx;
}

/* Carves s's buffer from base (or, with base NULL, only counts it). */
static size_t scratch_carve(moe_dev_scratch *s, const moe_config *c, int max_tokens, float *base) {
    size_t N = (size_t)max_tokens, C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    size_t K = (size_t)c->top_k, E = (size_t)c->n_experts, o = 0;
#define TAKE(field, n) (s->field = base ? base + o : NULL, o += (n))
    TAKE(dout, N * K * C);
    TAKE(dhs, N * K * F);
    TAKE(dh13, N * K * 2 * F);
    TAKE(dxg, N * K * C);
    TAKE(tmp, N * C);
    TAKE(dl, N * E);
    TAKE(dgate, N * K);
    TAKE(gemm, gemm_floats(s->be, c, max_tokens));
#undef TAKE
    return o;
}

int moe_dev_scratch_init(moe_dev_scratch *s, backend *be, const moe_config *c, int max_tokens) {
    memset(s, 0, sizeof *s);
    if (moe_config_check(c) != 0 || max_tokens < 1 || c->n_local != 0) return BT_EINVAL;
    s->be = be;
    size_t n = scratch_carve(s, c, max_tokens, NULL);
    s->fbuf = be->alloc(be, n * sizeof(float));
    if (s->fbuf == NULL) return BT_ENOMEM;
    scratch_carve(s, c, max_tokens, s->fbuf);
    return 0;
}

void moe_dev_scratch_free(moe_dev_scratch *s) {
    if (s->fbuf) s->be->free(s->be, s->fbuf);
    memset(s, 0, sizeof *s);
}

/* Carves m's buffers (or only counts them); returns the floats, *ni the 4-byte integers. */
static size_t cache_carve(moe_dev_cache *m, const moe_config *c, size_t *ni) {
    size_t N = (size_t)m->max_tokens, C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    size_t E = (size_t)c->n_experts, K = (size_t)c->top_k, S = (size_t)c->n_shared;
    float *f = m->fbuf;
    int32_t *i = m->ibuf;
    size_t fo = 0, io = 0;
#define TAKE_F(field, n) (m->field = f ? f + fo : NULL, fo += (n))
#define TAKE_I(field, n) (m->field = i ? i + io : NULL, io += (n))
    TAKE_F(x, N * C);
    TAKE_F(scores, N * E);
    TAKE_F(ssum, N);
    TAKE_F(gate, N * K);
    TAKE_F(xg, N * K * C);
    TAKE_F(h13, N * K * 2 * F);
    TAKE_F(hs, N * K * F);
    TAKE_F(out, N * K * C);
    TAKE_F(sh13, S * N * 2 * F);
    TAKE_F(shs, S * N * F);
    TAKE_I(topk, N * K);
    TAKE_I(row, N * K);
    TAKE_I(tok, N * K);
    TAKE_I(slot, N * K);
    TAKE_I(counts, 3 * E + 1);
    m->pmean = i ? (float *)(i + io) : NULL, io += E;
#undef TAKE_F
#undef TAKE_I
    *ni = io;
    return fo;
}

int moe_dev_cache_init(moe_dev_cache *m, backend *be, const moe_config *c, int max_tokens,
                       moe_dev_scratch *s) {
    memset(m, 0, sizeof *m);
    if (moe_config_check(c) != 0 || max_tokens < 1 || c->n_local != 0 || s == NULL)
        return BT_EINVAL;
    m->be = be, m->scratch = s, m->max_tokens = max_tokens;
    size_t ni, nf = cache_carve(m, c, &ni);
    m->fbuf = be->alloc(be, nf * sizeof(float));
    m->ibuf = be->alloc(be, ni * sizeof(int32_t));
    m->host = calloc(4 * (size_t)c->n_experts + 1, sizeof(int32_t));
    if (m->fbuf == NULL || m->ibuf == NULL || m->host == NULL) {
        moe_dev_cache_free(m);
        return BT_ENOMEM;
    }
    cache_carve(m, c, &ni);
    return 0;
}

void moe_dev_cache_free(moe_dev_cache *m) {
    if (m->fbuf) m->be->free(m->be, m->fbuf);
    if (m->ibuf) m->be->free(m->be, m->ibuf);
    free(m->host);
    memset(m, 0, sizeof *m);
}

static int capacity_of(const moe_config *c, int N) {
    if (c->capacity_factor <= 0.0) return 0;
    return (int)ceil(c->capacity_factor * (double)N * c->top_k / c->n_experts);
}

/* The load figures and aux loss from the host copy of counts and pmean; BT_EIO when the
 * counts cannot be moe_assign's (a failed device). */
static int read_stats(const moe_config *c, int N, const moe_dev_cache *m, moe_stats *st) {
    int E = c->n_experts, K = c->top_k;
    const int32_t *routed = m->host, *kept = m->host + E, *offset = m->host + 2 * E;
    float pmean[MOE_MAX_EXPERTS];
    memcpy(pmean, m->host + 3 * E + 1, (size_t)E * sizeof(float));
    memset(st, 0, sizeof *st);
    st->n_tokens = N, st->capacity = capacity_of(c, N);
    long total = 0;
    double aux = 0.0;
    if (offset[0] != 0) return BT_EIO;
    for (int e = 0; e < E; e++) {
        if (kept[e] < 0 || kept[e] > routed[e] || offset[e + 1] != offset[e] + kept[e])
            return BT_EIO;
        st->routed[e] = routed[e], st->kept[e] = kept[e];
        st->dropped += routed[e] - kept[e];
        total += routed[e];
        aux += (float)((double)routed[e] / ((double)N * K)) * (double)pmean[e];
    }
    if (total != (long)N * K) return BT_EIO;
    st->aux_loss = c->aux_loss_coef == 0.0 ? 0.0 : c->aux_loss_coef * E * aux;
    return 0;
}

/* Each routed expert's GEMM chain over its rows [offset[e], offset[e] + kept[e]). */
static void experts_forward(const moe_config *c, const moe_weights *w, moe_dev_cache *m) {
    backend *be = m->be;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    int E = c->n_experts;
    const int32_t *kept = m->host + E, *offset = m->host + 2 * E;
    float *gs = m->scratch->gemm;
    for (int e = 0; e < E; e++)
        if (kept[e] > 0)
            be->matmul_forward(be, m->h13 + offset[e] * 2 * F, m->xg + offset[e] * C,
                               w->w13 + e * 2 * F * C, kept[e], (int)C, (int)(2 * F), NULL, gs);
    if (offset[E] > 0) be->swiglu_forward(be, m->hs, m->h13, offset[E], (int)F);
    for (int e = 0; e < E; e++)
        if (kept[e] > 0)
            be->matmul_forward(be, m->out + offset[e] * C, m->hs + offset[e] * F, w->w2 + e * C * F,
                               kept[e], (int)F, (int)C, NULL, gs);
}

/* y = the shared experts' sum (0 without any), then the routed experts' weighted rows. */
static void combine_forward(const moe_config *c, const moe_weights *w, int N, moe_dev_cache *m,
                            float *y) {
    backend *be = m->be;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, n = (size_t)N;
    float *gs = m->scratch->gemm;
    if (c->n_shared == 0) be->zero(be, y, n * C);
    for (int s = 0; s < c->n_shared; s++) {
        float *h13 = m->sh13 + s * n * 2 * F, *hs = m->shs + s * n * F;
        be->matmul_forward(be, h13, m->x, w->shared_w13 + s * 2 * F * C, N, (int)C, (int)(2 * F),
                           NULL, gs);
        be->swiglu_forward(be, hs, h13, N, (int)F);
        float *o = s == 0 ? y : m->scratch->tmp;
        be->matmul_forward(be, o, hs, w->shared_w2 + s * C * F, N, (int)F, (int)C, NULL, gs);
        if (s > 0) be->add(be, y, y, o, n * C);
    }
    be->moe_combine(be, y, m->out, m->gate, m->row, N, c->top_k, (int)C);
}

int moe_dev_forward(const moe_config *c, const moe_weights *w, const float *bias, const float *x,
                    float *y, int N, moe_dev_cache *m, moe_stats *stats) {
    if (moe_config_check(c) != 0 || c->n_local != 0 || w == NULL || x == NULL || y == NULL ||
        m == NULL || m->fbuf == NULL || N < 1 || N > m->max_tokens)
        return BT_EINVAL;
    backend *be = m->be;
    int C = c->dim, E = c->n_experts, K = c->top_k;
    moe_stats local;
    m->n = N;
    be->copy(be, m->x, x, (size_t)N * C);
    be->matmul_forward(be, m->scores, m->x, w->router, N, C, E, NULL, m->scratch->gemm);
    be->moe_route(be, m->scores, m->ssum, m->topk, m->gate, bias, N, E, K, c->score, c->norm_topk);
    be->moe_assign(be, m->row, m->tok, m->slot, m->counts, m->topk, N, K, E, capacity_of(c, N));
    if (c->aux_loss_coef != 0.0)
        be->moe_score_mean(be, m->pmean, m->scores, m->ssum, N, E);
    else
        be->zero(be, m->pmean, (size_t)E);
    be->to_host(be, m->host, m->counts, (4 * (size_t)E + 1) * sizeof(int32_t));
    int rc = read_stats(c, N, m, stats ? stats : &local);
    if (rc != 0) return rc;
    be->gather_rows(be, m->xg, m->x, m->tok, m->host[3 * E], C);
    experts_forward(c, w, m);
    combine_forward(c, w, N, m, y);
    return 0;
}

/* The routed experts' backward over their grouped rows: dxg (rows, C) written. */
static void experts_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m,
                             moe_weights *g) {
    backend *be = m->be;
    moe_dev_scratch *s = m->scratch;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    int E = c->n_experts;
    const int32_t *kept = m->host + E, *offset = m->host + 2 * E;
    for (int e = 0; e < E; e++)
        if (kept[e] > 0)
            be->matmul_backward(be, s->dhs + offset[e] * F, g->w2 + e * C * F,
                                s->dout + offset[e] * C, m->hs + offset[e] * F, w->w2 + e * C * F,
                                kept[e], (int)F, (int)C, NULL, s->gemm);
    if (offset[E] > 0) be->swiglu_backward(be, s->dh13, s->dhs, m->h13, offset[E], (int)F);
    for (int e = 0; e < E; e++)
        if (kept[e] > 0)
            be->matmul_backward(be, s->dxg + offset[e] * C, g->w13 + e * 2 * F * C,
                                s->dh13 + offset[e] * 2 * F, m->xg + offset[e] * C,
                                w->w13 + e * 2 * F * C, kept[e], (int)C, (int)(2 * F), NULL,
                                s->gemm);
}

/* dx += every shared expert's input gradient. */
static void shared_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m,
                            const float *dy, float *dx, moe_weights *g) {
    backend *be = m->be;
    moe_dev_scratch *s = m->scratch;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, n = (size_t)m->n;
    for (int k = 0; k < c->n_shared; k++) {
        be->matmul_backward(be, s->dhs, g->shared_w2 + k * C * F, dy, m->shs + k * n * F,
                            w->shared_w2 + k * C * F, m->n, (int)F, (int)C, NULL, s->gemm);
        be->swiglu_backward(be, s->dh13, s->dhs, m->sh13 + k * n * 2 * F, m->n, (int)F);
        be->matmul_backward(be, s->tmp, g->shared_w13 + k * 2 * F * C, s->dh13, m->x,
                            w->shared_w13 + k * 2 * F * C, m->n, (int)C, (int)(2 * F), NULL,
                            s->gemm);
        be->add(be, dx, dx, s->tmp, n * C);
    }
}

int moe_dev_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m, const float *dy,
                     float *dx, moe_weights *grads) {
    if (moe_config_check(c) != 0 || c->n_local != 0 || w == NULL || m == NULL || m->n < 1 ||
        dy == NULL || dx == NULL || grads == NULL)
        return BT_EINVAL;
    backend *be = m->be;
    moe_dev_scratch *s = m->scratch;
    int N = m->n, C = c->dim, E = c->n_experts, K = c->top_k, rows = m->host[3 * E];
    be->zero(be, s->dgate, (size_t)N * K);
    be->moe_combine_backward(be, s->dout, s->dgate, dy, m->out, m->gate, m->tok, m->slot, rows, K,
                             C);
    experts_backward(c, w, m, grads);
    be->zero(be, dx, (size_t)N * C);
    be->moe_combine(be, dx, s->dxg, NULL, m->row, N, K, C);
    shared_backward(c, w, m, dy, dx, grads);
    be->moe_router_backward(be, s->dl, m->scores, m->ssum, m->topk, m->gate, s->dgate, m->counts, N,
                            E, K, c->score, c->norm_topk, c->aux_loss_coef);
    be->matmul_backward(be, s->tmp, grads->router, s->dl, m->x, w->router, N, C, E, NULL, s->gemm);
    be->add(be, dx, dx, s->tmp, (size_t)N * C);
    return 0;
}
