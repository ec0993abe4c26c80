/* Context parallelism: zigzag positions, ring attention and Ulysses (model_cp.h). */
#include "model_cp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Ring messages between one pair carry this tag (one in flight at a time per pair). */
#define CP_TAG 0x43500001u

int model_cp_position(int cp, int rank, int T, int t) {
    int half = T / 2, chunk = t < half ? rank : 2 * cp - 1 - rank;
    return chunk * half + t % half;
}

/* The rank's widths and the batch's sizes, as the passes see them. */
typedef struct cp_dims {
    int B, T, N, H, KV, hd;
    size_t qd, kvd, ld; /* H hd, KV hd, (H + 2 KV) hd */
    float scale;
} cp_dims;

static cp_dims cp_dims_of(const model *m) {
    cp_dims d = {
        .B = m->B, .T = m->T, .H = m->shard.heads, .KV = m->shard.kv_heads, .hd = m->cfg.head_dim};
    d.N = d.B * d.T;
    d.qd = (size_t)d.H * d.hd, d.kvd = (size_t)d.KV * d.hd, d.ld = d.qd + 2 * d.kvd;
    d.scale = 1.0f / sqrtf((float)d.hd);
    return d;
}

static const int32_t *pos_of(const model_cp *c, int r) {
    return c->pos + (size_t)r * c->T;
}

static float *take(float **p, size_t n) {
    float *r = *p;
    *p += n;
    return r;
}

/* Carves the buffers of the mode out of base (NULL: only counts); returns the floats. */
static size_t cp_carve(model *m, model_cp *c, float *base) {
    backend *be = m->be;
    size_t N = (size_t)m->max_B * c->T, H = (size_t)m->shard.heads, hd = (size_t)m->cfg.head_dim;
    size_t qd = H * hd, kvd = (size_t)m->shard.kv_heads * hd;
    float *p = base;
    model_cp z;
    model_cp *o = base ? c : &z;
    if (!c->ulysses) {
        o->ring[0] = take(&p, N * 4 * kvd), o->ring[1] = take(&p, N * 4 * kvd);
        o->dkv[0] = take(&p, N * 2 * kvd), o->dkv[1] = take(&p, N * 2 * kvd);
        o->out_p = take(&p, N * qd);
        o->lse_p = take(&p, (size_t)m->max_B * H * c->T);
        o->delta = take(&p, (size_t)m->max_B * H * c->T);
        o->pscratch = take(&p, be->attention_part_scratch_floats(be, c->T, c->T));
    } else {
        o->send = take(&p, N * (qd + 2 * kvd)), o->recv = take(&p, N * (qd + 2 * kvd));
        o->du = take(&p, N * (qd + 2 * kvd));
        o->duo = take(&p, N * qd);
        o->uscratch = take(&p, be->attention_scratch_floats(be, c->T * c->size));
    }
    return (size_t)(p - base);
}

/* cos/sin rows for the local rows' global positions: the rank's two chunks. */
static int cp_rope(model *m) {
    int T = m->cpw->T, cp = m->cpw->size, r = m->cpw->rank;
    int pos0[2] = {model_cp_position(cp, r, T, 0), model_cp_position(cp, r, T, T / 2)};
    int rows[2] = {T / 2, T / 2};
    return model_upload_rope(m, 2, pos0, rows);
}

static int cp_positions(model *m) {
    model_cp *c = m->cpw;
    size_t n = (size_t)c->size * c->T;
    int32_t *host = malloc(n * sizeof *host);
    c->pos_mem = m->be->alloc(m->be, n * sizeof(int32_t));
    if (host == NULL || c->pos_mem == NULL) {
        free(host);
        return BT_ENOMEM;
    }
    for (int r = 0; r < c->size; r++)
        for (int t = 0; t < c->T; t++)
            host[(size_t)r * c->T + t] = model_cp_position(c->size, r, c->T, t);
    m->be->from_host(m->be, c->pos_mem, host, n * sizeof *host);
    c->pos = c->pos_mem;
    free(host);
    return 0;
}

int model_cp_init(model *m, comm *cp_group, bt_diag *diag) {
    int cp = m->cfg.cp > 1 ? m->cfg.cp : 1;
    if (cp == 1) return 0;
    if (cp_group == NULL || comm_size(cp_group) != cp || comm_rank(cp_group) != m->cfg.cp_rank ||
        m->max_T % 2 != 0) {
        bt_diag_set(diag,
                    "model: context parallelism %d (rank %d) needs a group of that size in which "
                    "this process has that rank, and an even number of local rows (%d)",
                    cp, m->cfg.cp_rank, m->max_T);
        return BT_EINVAL;
    }
    model_cp *c = calloc(1, sizeof *c);
    if (c == NULL) return BT_ENOMEM;
    m->cpw = c, m->cp_group = cp_group;
    c->size = cp, c->rank = m->cfg.cp_rank, c->ulysses = m->cfg.cp_ulysses, c->T = m->max_T;
    size_t n = cp_carve(m, c, NULL);
    c->mem = m->be->alloc(m->be, n * sizeof(float));
    int rc = c->mem ? cp_positions(m) : BT_ENOMEM;
    rc = rc ? rc : cp_rope(m);
    if (rc != 0) {
        bt_diag_set(diag, "model: cannot allocate the context-parallel buffers (%zu floats)", n);
        model_cp_free(m);
        return rc;
    }
    cp_carve(m, c, c->mem);
    return 0;
}

void model_cp_free(model *m) {
    model_cp *c = m->cpw;
    if (c == NULL) return;
    m->be->free(m->be, c->mem);
    m->be->free(m->be, c->pos_mem);
    free(c);
    m->cpw = NULL;
}

/* Sends to the right neighbour while receiving from the left one. */
static void cp_shift(model *m, const float *send, float *recv, size_t n) {
    if (m->comm_err != 0) return;
    model_cp *c = m->cpw;
    int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
    m->comm_err = comm_sendrecv(m->cp_group, send, right, recv, left, n, COMM_F32, CP_TAG, NULL);
}

static void cp_alltoall(model *m, const float *send, float *recv, size_t n) {
    if (m->comm_err != 0) return;
    m->comm_err = comm_alltoall(m->cp_group, send, recv, n, COMM_F32, NULL);
}

static void swap(float **a, float **b) {
    float *t = *a;
    *a = *b, *b = t;
}

/* Own block first, then each visiting block merged in. */
static void ring_forward(model *m, model_layer_acts *a) {
    backend *be = m->be;
    model_cp *c = m->cpw;
    cp_dims d = cp_dims_of(m);
    size_t w = 2 * d.kvd;
    float *cur = c->ring[0], *nxt = c->ring[1];
    be->copy2d(be, cur, w, a->qkv + d.qd, d.ld, (size_t)d.N, w);
    be->attention_part_forward(be, a->atty, a->lse, a->qkv, (int)d.ld, cur, cur + d.kvd, (int)w,
                               d.B, d.T, d.T, d.H, d.KV, d.hd, d.scale, pos_of(c, c->rank),
                               pos_of(c, c->rank), c->pscratch);
    for (int s = 1; s < c->size; s++) {
        cp_shift(m, cur, nxt, (size_t)d.N * w);
        int src = (c->rank - s + c->size) % c->size;
        be->attention_part_forward(be, c->out_p, c->lse_p, a->qkv, (int)d.ld, nxt, nxt + d.kvd,
                                   (int)w, d.B, d.T, d.T, d.H, d.KV, d.hd, d.scale,
                                   pos_of(c, c->rank), pos_of(c, src), c->pscratch);
        be->attention_merge(be, a->atty, a->lse, c->out_p, c->lse_p, d.B, d.T, d.H, d.hd);
        swap(&cur, &nxt);
    }
}

/* K|V|dK|dV travel together; the complete dK|dV of each block takes one more hop home. */
static void ring_backward(model *m, const model_layer_acts *a, const float *dout, float *dqkv) {
    backend *be = m->be;
    model_cp *c = m->cpw;
    cp_dims d = cp_dims_of(m);
    size_t w = 4 * d.kvd, N = (size_t)d.N;
    float *cur = c->ring[0], *nxt = c->ring[1];
    be->attention_delta(be, c->delta, dout, a->atty, d.B, d.T, d.H, d.hd);
    be->zero(be, dqkv, N * d.ld);
    be->zero(be, cur, N * w);
    be->copy2d(be, cur, w, a->qkv + d.qd, d.ld, N, 2 * d.kvd);
    for (int s = 0; s < c->size; s++) {
        if (s > 0) {
            cp_shift(m, cur, nxt, N * w);
            swap(&cur, &nxt);
        }
        int src = (c->rank - s + c->size) % c->size;
        be->attention_part_backward(be, dqkv, (int)d.ld, cur + 2 * d.kvd, cur + 3 * d.kvd, (int)w,
                                    dout, c->delta, a->lse, a->qkv, cur, cur + d.kvd, d.B, d.T, d.T,
                                    d.H, d.KV, d.hd, d.scale, pos_of(c, c->rank), pos_of(c, src),
                                    c->pscratch);
    }
    be->copy2d(be, c->dkv[0], 2 * d.kvd, cur + 2 * d.kvd, w, N, 2 * d.kvd);
    cp_shift(m, c->dkv[0], c->dkv[1], N * 2 * d.kvd);
    be->copy2d(be, dqkv + d.qd, d.ld, c->dkv[1], 2 * d.kvd, N, 2 * d.kvd);
}

/* Copies rank s's rows between blk (its N local rows, width w) and full (every row of
 * the sequences, stride ldf, in position order). */
static void u_rows(model *m, int s, float *blk, size_t w, float *full, size_t ldf, int to_full) {
    backend *be = m->be;
    int T = m->cpw->T, half = T / 2, TF = T * m->cpw->size;
    for (int b = 0; b < m->B; b++)
        for (int h = 0; h < 2; h++) {
            size_t pos = (size_t)model_cp_position(m->cpw->size, s, T, h * half);
            float *lrow = blk + ((size_t)b * T + (size_t)h * half) * w;
            float *frow = full + ((size_t)b * TF + pos) * ldf;
            if (to_full)
                be->copy2d(be, frow, ldf, lrow, w, (size_t)half, w);
            else
                be->copy2d(be, lrow, w, frow, ldf, (size_t)half, w);
        }
}

/* Rank d's heads of the rows' q, k, v: block d of (N, (H + 2 KV) hd / cp), or back. */
static void u_heads(model *m, float *qkv, float *blocks, int to_blocks) {
    backend *be = m->be;
    cp_dims d = cp_dims_of(m);
    int cp = m->cpw->size;
    size_t N = (size_t)d.N, hq = d.qd / cp, hk = d.kvd / cp, ldu = hq + 2 * hk;
    for (int r = 0; r < cp; r++) {
        float *blk = blocks + (size_t)r * N * ldu;
        float *src[3] = {qkv + r * hq, qkv + d.qd + r * hk, qkv + d.qd + d.kvd + r * hk};
        size_t off[3] = {0, hq, hq + hk}, width[3] = {hq, hk, hk};
        for (int i = 0; i < 3; i++) {
            if (to_blocks)
                be->copy2d(be, blk + off[i], ldu, src[i], d.ld, N, width[i]);
            else
                be->copy2d(be, src[i], d.ld, blk + off[i], ldu, N, width[i]);
        }
    }
}

static void ulysses_forward(model *m, model_layer_acts *a) {
    backend *be = m->be;
    model_cp *c = m->cpw;
    cp_dims d = cp_dims_of(m);
    int cp = c->size, Hu = d.H / cp, KVu = d.KV / cp;
    size_t N = (size_t)d.N, hq = d.qd / cp, ldu = hq + 2 * d.kvd / cp;
    u_heads(m, a->qkv, c->send, 1);
    cp_alltoall(m, c->send, c->recv, N * ldu);
    for (int s = 0; s < cp; s++)
        u_rows(m, s, c->recv + (size_t)s * N * ldu, ldu, a->uqkv, ldu, 1);
    float *uq = a->uqkv, *uk = uq + hq, *uv = uk + (size_t)KVu * d.hd;
    be->attention_forward(be, a->uout, a->ulse, NULL, uq, uk, uv, (int)ldu, d.B, d.T * cp, Hu, KVu,
                          d.hd, d.scale, m->cfg.prec, c->uscratch);
    for (int s = 0; s < cp; s++)
        u_rows(m, s, c->send + (size_t)s * N * hq, hq, a->uout, hq, 0);
    cp_alltoall(m, c->send, c->recv, N * hq);
    for (int r = 0; r < cp; r++)
        be->copy2d(be, a->atty + r * hq, d.qd, c->recv + (size_t)r * N * hq, hq, N, hq);
}

static void ulysses_backward(model *m, const model_layer_acts *a, const float *dout, float *dqkv) {
    backend *be = m->be;
    model_cp *c = m->cpw;
    cp_dims d = cp_dims_of(m);
    int cp = c->size, Hu = d.H / cp, KVu = d.KV / cp;
    size_t N = (size_t)d.N, hq = d.qd / cp, ldu = hq + 2 * d.kvd / cp;
    for (int r = 0; r < cp; r++)
        be->copy2d(be, c->send + (size_t)r * N * hq, hq, dout + r * hq, d.qd, N, hq);
    cp_alltoall(m, c->send, c->recv, N * hq);
    for (int s = 0; s < cp; s++)
        u_rows(m, s, c->recv + (size_t)s * N * hq, hq, c->duo, hq, 1);
    const float *uq = a->uqkv, *uk = uq + hq, *uv = uk + (size_t)KVu * d.hd;
    float *dq = c->du, *dk = dq + hq, *dv = dk + (size_t)KVu * d.hd;
    be->attention_backward(be, dq, dk, dv, c->duo, a->uout, NULL, a->ulse, uq, uk, uv, (int)ldu,
                           d.B, d.T * cp, Hu, KVu, d.hd, d.scale, m->cfg.prec, c->uscratch);
    for (int s = 0; s < cp; s++)
        u_rows(m, s, c->send + (size_t)s * N * ldu, ldu, c->du, ldu, 0);
    cp_alltoall(m, c->send, c->recv, N * ldu);
    u_heads(m, dqkv, c->recv, 0);
}

void model_cp_attention_forward(model *m, model_layer_acts *a) {
    if (m->cpw->ulysses)
        ulysses_forward(m, a);
    else
        ring_forward(m, a);
}

void model_cp_attention_backward(model *m, const model_layer_acts *a, const float *dout,
                                 float *dqkv) {
    if (m->cpw->ulysses)
        ulysses_backward(m, a, dout, dqkv);
    else
        ring_backward(m, a, dout, dqkv);
}

void model_cp_sum_int(model *m, int *x) {
    double v = *x;
    model_cp_sum_double(m, &v);
    *x = (int)v;
}

void model_cp_sum_double(model *m, double *x) {
    if (m->cp_group == NULL || m->comm_err != 0) return;
    m->comm_err = comm_allreduce(m->cp_group, x, x, 1, COMM_F64, COMM_SUM, NULL);
}
