/* ZeRO-3's gather buffers and the hooks around each unit's passes (model_zero.h). */
#include "model_zero.h"

#include <stdlib.h>

int model_zero_init(model *m, size_t cap, const model_zero_ops *ops, bt_diag *diag) {
    int n = model_n_units(m);
    model_zero *z = calloc(1, sizeof *z);
    if (z != NULL) {
        z->unit_off = calloc((size_t)n + 1, sizeof *z->unit_off);
        z->params = m->be->alloc(m->be, cap * sizeof(float));
        z->grads = m->be->alloc(m->be, cap * sizeof(float));
    }
    m->zw = z;
    if (z == NULL || z->unit_off == NULL || z->params == NULL || z->grads == NULL) {
        model_zero_free(m);
        bt_diag_set(diag, "ZeRO-3: out of memory for two gather buffers of %zu floats", cap);
        return BT_ENOMEM;
    }
    z->ops = *ops, z->cap = cap, z->resident = -1;
    for (int u = 0; u < n; u++) {
        size_t len;
        model_unit_range(m, u, &z->unit_off[u], &len);
        z->unit_off[u + 1] = z->unit_off[u] + len;
    }
    m->be->zero(m->be, z->params, cap);
    m->be->zero(m->be, z->grads, cap);
    return 0;
}

void model_zero_free(model *m) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    m->be->free(m->be, z->params);
    m->be->free(m->be, z->grads);
    free(z->unit_off);
    free(z);
    m->zw = NULL;
}

/* The previous resident unit's views go back to NULL, u's point at the buffers. */
void model_zero_place(model *m, int u) {
    model_zero *z = m->zw;
    if (z->resident >= 0 && z->resident != u) model_point_unit(m, z->resident, NULL, NULL);
    model_point_unit(m, u, z->params, z->grads);
    z->resident = u;
}

static void zero_note(model *m, int rc) {
    if (rc != 0 && m->comm_err == 0) m->comm_err = BT_EIO;
}

void model_zero_forward(model *m, int u) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    model_zero_place(m, u);
    zero_note(m, z->ops.gather(z->ops.ctx, u, z->params));
}

void model_zero_backward(model *m, int u) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    model_zero_forward(m, u);
    m->be->zero(m->be, z->grads, z->cap);
}

void model_zero_backward_done(model *m, int u) {
    model_zero *z = m->zw;
    if (z == NULL) return;
    zero_note(m, z->ops.reduce(z->ops.ctx, u, z->grads));
}

int model_zero_fetch(model *m, int u) {
    model_zero *z = m->zw;
    model_zero_place(m, u);
    return z->ops.gather(z->ops.ctx, u, z->params);
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
    if (u < 0 || off < z->unit_off[u] || off >= z->unit_off[u + 1]) {
        *data = *grad = NULL;
        return;
    }
    *data = z->params + (off - z->unit_off[u]);
    *grad = z->grads + (off - z->unit_off[u]);
}
