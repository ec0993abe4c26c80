/* Expert parallelism's dispatch and combine (moe_ep.h). */
#include "moe_ep.h"

#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "util/err.h"

static size_t ep_carve(moe_ep *ep, const moe_config *c, int max_tokens) {
    size_t R = (size_t)ep->max_rows, C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    size_t NK = (size_t)max_tokens * c->top_k, off = 0;
    float *b = ep->fbuf;
#define TAKE(field, n) (ep->field = b ? b + off : NULL, off += (n))
    TAKE(xr, R * C);
    TAKE(outr, R * C);
    TAKE(h13r, R * 2 * F);
    TAKE(hsr, R * F);
    TAKE(dr, R * C);
    TAKE(dxr, R * C);
    TAKE(dhs, R * F);
    TAKE(dh13, R * 2 * F);
    TAKE(dg, NK * C);
    TAKE(dxg, NK * C);
#undef TAKE
    return off;
}

int moe_ep_init(moe_cache *cache, const moe_config *c, comm *group) {
    int size = comm_size(group), El = moe_local_experts(c);
    if (c->n_experts % size != 0 || El * size != c->n_experts ||
        c->expert0 != comm_rank(group) * El)
        return BT_EINVAL;
    moe_ep *ep = calloc(1, sizeof *ep);
    if (ep == NULL) return BT_ENOMEM;
    cache->ep = ep;
    ep->group = group, ep->size = size, ep->rank = comm_rank(group);
    ep->max_rows = size * cache->max_tokens * c->top_k;
    ep->cnt_send = calloc((size_t)c->n_experts, sizeof(int));
    ep->cnt_recv = calloc((size_t)c->n_experts, sizeof(int));
    ep->scount = calloc((size_t)size, sizeof(size_t));
    ep->rcount = calloc((size_t)size, sizeof(size_t));
    ep->fbuf = calloc(ep_carve(ep, c, cache->max_tokens), sizeof(float));
    if (!ep->cnt_send || !ep->cnt_recv || !ep->scount || !ep->rcount || !ep->fbuf) return BT_ENOMEM;
    ep_carve(ep, c, cache->max_tokens);
    return 0;
}

void moe_ep_free(moe_ep *ep) {
    if (ep == NULL) return;
    free(ep->cnt_send);
    free(ep->cnt_recv);
    free(ep->scount);
    free(ep->rcount);
    free(ep->fbuf);
    free(ep);
}

static int ep_fail(void) {
    return BT_EIO;
}

/* The per-expert counts go to the owners; the float counts of the row exchanges follow. */
static int ep_counts(const moe_config *c, moe_cache *m) {
    moe_ep *ep = m->ep;
    int El = moe_local_experts(c);
    for (int e = 0; e < c->n_experts; e++)
        ep->cnt_send[e] = m->offset[e + 1] - m->offset[e];
    if (comm_alltoall(ep->group, ep->cnt_send, ep->cnt_recv, (size_t)El * sizeof(int), COMM_BYTE,
                      NULL) != 0)
        return ep_fail();
    size_t C = (size_t)c->dim, total = 0;
    for (int r = 0; r < ep->size; r++) {
        ep->scount[r] = (size_t)(m->offset[(r + 1) * El] - m->offset[r * El]) * C;
        size_t rows = 0;
        for (int e = 0; e < El; e++)
            rows += (size_t)ep->cnt_recv[r * El + e];
        ep->rcount[r] = rows * C;
        total += rows;
    }
    return total <= (size_t)ep->max_rows ? 0 : BT_ERANGE;
}

int moe_ep_forward(const moe_config *c, const moe_weights *w, moe_cache *m) {
    moe_ep *ep = m->ep;
    int El = moe_local_experts(c), rc = ep_counts(c, m);
    if (rc != 0) return rc;
    if (comm_alltoallv(ep->group, m->xg, ep->scount, ep->xr, ep->rcount, COMM_F32, NULL) != 0)
        return ep_fail();
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, row = 0;
    for (int s = 0; s < ep->size; s++)
        for (int e = 0; e < El; e++) {
            int M = ep->cnt_recv[s * El + e];
            if (M > 0)
                moe_expert_forward(c, w->w13 + e * 2 * F * C, w->w2 + e * C * F, ep->xr + row * C,
                                   M, ep->h13r + row * 2 * F, ep->hsr + row * F, ep->outr + row * C,
                                   0.0f);
            row += (size_t)M;
        }
    if (comm_alltoallv(ep->group, ep->outr, ep->rcount, m->out, ep->scount, COMM_F32, NULL) != 0)
        return ep_fail();
    return 0;
}

int moe_ep_backward(const moe_config *c, const moe_weights *w, moe_cache *m, const float *dy,
                    float *dx, moe_weights *gr) {
    moe_ep *ep = m->ep;
    int El = moe_local_experts(c);
    /* dy of each kept row times its combine weight, and dgate = dy . the expert's output */
    cpu_moe_combine_backward(NULL, ep->dg, m->dgate, dy, m->out, m->gate, m->tok, m->slot,
                             m->offset[c->n_experts], c->top_k, c->dim);
    if (comm_alltoallv(ep->group, ep->dg, ep->scount, ep->dr, ep->rcount, COMM_F32, NULL) != 0)
        return ep_fail();
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, row = 0;
    for (int s = 0; s < ep->size; s++)
        for (int e = 0; e < El; e++) {
            int M = ep->cnt_recv[s * El + e];
            if (M > 0)
                moe_expert_backward(c, w->w13 + e * 2 * F * C, w->w2 + e * C * F,
                                    gr->w13 + e * 2 * F * C, gr->w2 + e * C * F, ep->xr + row * C,
                                    ep->h13r + row * 2 * F, ep->hsr + row * F, ep->dr + row * C, M,
                                    ep->dhs, ep->dh13, ep->dxr + row * C, 0.0f);
            row += (size_t)M;
        }
    if (comm_alltoallv(ep->group, ep->dxr, ep->rcount, ep->dxg, ep->scount, COMM_F32, NULL) != 0)
        return ep_fail();
    for (int r = 0; r < m->offset[c->n_experts]; r++) {
        float *dxn = dx + (size_t)m->tok[r] * C;
        const float *g = ep->dxg + r * C;
        for (size_t j = 0; j < C; j++)
            dxn[j] += g[j];
    }
    return 0;
}
