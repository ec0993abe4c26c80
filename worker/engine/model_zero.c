/* ZeRO-2/3's unit buffers and the hooks around each unit's passes (model_zero.h). */
#include "model_zero.h"

#include <stdlib.h>

int model_zero_init(model *m, size_t cap, const model_zero_ops *ops, bt_diag *diag) {
    int n = model_n_units(m), ok = 1;
    int whole = m->params_mem != NULL; /* ZeRO-2: gradient buffers only */
    model_zero *z = calloc(1, sizeof *z);
    if (z != NULL) {
        z->whole = whole;
        z->unit_off = calloc((size_t)n + 1, sizeof *z->unit_off);
        for (int i = 0; i < 2; i++) {
            if (!whole) z->buf[i].params = m->be->alloc(m->be, cap * sizeof(float));
            z->buf[i].grads = m->be->alloc(m->be, cap * sizeof(float));
            ok &= (whole || z->buf[i].params != NULL) && z->buf[i].grads != NULL;
        }
    }
    m->zw = z;
    if (z == NULL || z->unit_off == NULL || !ok) {
        model_zero_free(m);
        bt_diag_set(diag, "ZeRO-%d: out of memory for %d unit buffers of %zu floats", whole ? 2 : 3,
                    whole ? 2 : 4, cap);
        return BT_ENOMEM;
    }
    z->ops = *ops, z->cap = cap, z->resident = -1;
    for (int u = 0; u < n; u++) {
        size_t len;
        model_unit_range(m, u, &z->unit_off[u], &len);
        z->unit_off[u + 1] = z->unit_off[u] + len;
    }
    for (int i = 0; i < 2; i++) {
        z->buf[i].unit = z->buf[i].pending = -1;
        if (!whole) m->be->zero(m->be, z->buf[i].params, cap);
        m->be->zero(m->be, z->buf[i].grads, cap);
    }
    return 0;
}

void model_zero_free(model *m) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    for (int i = 0; i < 2; i++) {
        if (z->buf[i].params != NULL) m->be->free(m->be, z->buf[i].params);
        if (z->buf[i].grads != NULL) m->be->free(m->be, z->buf[i].grads);
    }
    free(z->unit_off);
    free(z);
    m->zw = NULL;
}

static void zero_note(model *m, int rc) {
    if (rc != 0 && m->comm_err == 0) m->comm_err = BT_EIO;
}

/* Before a collective on side queue q: q waits for the ops' queue and the other side
 * queues (model_zero.h). Nothing without side queues. */
static void *zero_issue(model *m, int q) {
    model_zero *z = m->zw;
    void *s = z->ops.queue[q];
    if (s == NULL) return NULL;
    m->be->stream_wait(m->be, s, NULL);
    for (int k = 0; k < MODEL_ZERO_QUEUES; k++)
        if (k != q) m->be->stream_wait(m->be, s, z->ops.queue[k]);
    z->ahead[q] = 1;
    return s;
}

/* The ops' queue waits for side queue q (where it has work ahead): first the host, under
 * the comm's timeout, so that the ops' queue never waits on an event a hung collective
 * would never reach (a host sync on it would then hang without a deadline); the gather
 * issued one unit earlier still ran beside that unit's compute. */
static void zero_catch_up(model *m, int q) {
    model_zero *z = m->zw;
    if (!z->ahead[q]) return;
    zero_note(m, z->ops.wait(z->ops.ctx, z->ops.queue[q]));
    m->be->stream_wait(m->be, NULL, z->ops.queue[q]);
    z->ahead[q] = 0;
}

/* Buffer i gets unit u's parameters. */
static void zero_gather_into(model *m, int i, int u) {
    model_zero *z = m->zw;
    z->buf[i].unit = u;
    void *s = zero_issue(m, MODEL_ZERO_GATHER_Q);
    zero_note(m, z->ops.gather(z->ops.ctx, u, z->buf[i].params, s));
}

static int zero_holding(const model_zero *z, int u) {
    for (int i = 0; i < 2; i++)
        if (z->buf[i].unit == u) return i;
    return -1;
}

/* Unit u's parameters: in buffer i, or (ZeRO-2) where they always are. */
static float *zero_params(model *m, int u, int i) {
    model_zero *z = m->zw;
    return z->whole ? m->params_mem + z->unit_off[u] : i >= 0 ? z->buf[i].params : NULL;
}

/* Points u's views at parameter buffer i and gradient buffer gcur. */
static void zero_point(model *m, int u, int i) {
    model_zero *z = m->zw;
    if (z->resident >= 0 && z->resident != u)
        model_point_unit(m, z->resident, zero_params(m, z->resident, -1), NULL);
    model_point_unit(m, u, zero_params(m, u, i), z->buf[z->gcur].grads);
    z->cur = i, z->resident = u;
}

/* u resident (gathered unless a buffer holds it), then next prefetched. ZeRO-2: only its
 * gradient views. */
static void zero_use(model *m, int u, int next) {
    model_zero *z = m->zw;
    if (z->whole) {
        zero_point(m, u, 0);
        return;
    }
    int i = zero_holding(z, u);
    if (i < 0) zero_gather_into(m, i = z->resident >= 0 ? 1 - z->cur : z->cur, u);
    zero_catch_up(m, MODEL_ZERO_GATHER_Q); /* u's gather (now or a prefetch) first */
    zero_point(m, u, i);
    if (next >= 0 && next != u && zero_holding(z, next) < 0) zero_gather_into(m, 1 - i, next);
}

void model_zero_forward(model *m, int u, int next) {
    if (m->zw != NULL && !m->zw->whole) zero_use(m, u, next);
}

/* Gradient buffer i's pending reduction added into the shard, after its queue's. */
static void zero_accumulate(model *m, int i) {
    model_zero *z = m->zw;
    model_zero_buf *b = &z->buf[i];
    if (b->pending < 0) return;
    zero_catch_up(m, MODEL_ZERO_GATHER_Q + 1 + i);
    z->ops.accumulate(z->ops.ctx, b->pending, b->grads);
    b->pending = -1;
}

void model_zero_backward(model *m, int u, int next) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    zero_accumulate(m, z->gcur); /* the reduction two units back */
    m->be->zero(m->be, z->buf[z->gcur].grads, z->cap);
    zero_use(m, u, next);
}

void model_zero_backward_done(model *m, int u) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    model_zero_buf *b = &z->buf[z->gcur];
    void *s = zero_issue(m, MODEL_ZERO_GATHER_Q + 1 + z->gcur);
    zero_note(m, z->ops.reduce(z->ops.ctx, u, b->grads, s));
    b->pending = u;
    z->gcur = 1 - z->gcur;
}

/* The host waits for every side queue (under the comm's timeout). */
static void zero_wait_all(model *m) {
    model_zero *z = m->zw;
    for (int q = 0; q < MODEL_ZERO_QUEUES; q++)
        if (z->ops.queue[q] != NULL && z->ahead[q])
            zero_note(m, z->ops.wait(z->ops.ctx, z->ops.queue[q]));
}

void model_zero_flush(model *m) {
    if (m->zw == NULL) return;
    zero_wait_all(m);
    zero_accumulate(m, 0);
    zero_accumulate(m, 1);
}

void model_zero_invalidate(model *m) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    z->buf[0].unit = z->buf[1].unit = -1;
}

float *model_zero_place(model *m, int u) {
    model_zero *z = m->zw;
    if (z->whole) return m->params_mem + z->unit_off[u];
    int i = z->resident >= 0 ? z->cur : 0;
    zero_catch_up(m, MODEL_ZERO_GATHER_Q); /* no gather may still write the buffer */
    z->buf[i].unit = u;
    zero_point(m, u, i);
    return z->buf[i].params;
}

int model_zero_fetch(model *m, int u) {
    if (m->zw->whole) return 0; /* ZeRO-2: the parameters are whole */
    model_zero_invalidate(m);   /* gathered anew: the weights may have changed since */
    zero_use(m, u, -1);
    zero_wait_all(m);
    return m->comm_err;
}

int model_zero_unit_at(const model *m, size_t off) {
    const model_zero *z = m->zw;
    int n = model_n_units(m), u = 0;
    while (u + 1 < n && off >= z->unit_off[u + 1])
        u++;
    return u;
}

void model_zero_views(const model *m, size_t off, float **data, float **grad) {
    const model_zero *z = m->zw;
    int u = z->resident;
    int in = u >= 0 && off >= z->unit_off[u] && off < z->unit_off[u + 1];
    *data = z->whole ? m->params_mem + off
            : in     ? z->buf[z->cur].params + (off - z->unit_off[u])
                     : NULL;
    *grad = in ? z->buf[z->gcur].grads + (off - z->unit_off[u]) : NULL;
}

float *model_zero_spare(model *m) {
    model_zero *z = m->zw;
    return z->buf[0].pending < 0 && z->buf[1].pending < 0 ? z->buf[0].grads : NULL;
}
