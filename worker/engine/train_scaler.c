#include "train_scaler.h"

#include <float.h>
#include <math.h>
#include <string.h>

void train_scaler_init(train_scaler *s, const Baton__Precision *p) {
    static const Baton__LossScale defaults = BATON__LOSS_SCALE__INIT;
    memset(s, 0, sizeof *s);
    s->scale = 1.0f;
    if (p == NULL || p->type != BATON__PRECISION__TYPE__FP16) return;
    const Baton__LossScale *ls = p->loss_scale ? p->loss_scale : &defaults;
    s->on = 1;
    s->min_scale = (float)ls->min;
    if (!(s->min_scale >= TRAIN_SCALER_MIN)) s->min_scale = TRAIN_SCALER_MIN; /* not checked */
    s->scale = (float)ls->initial;
    if (!(s->scale >= s->min_scale)) s->scale = s->min_scale;
    s->growth_interval = ls->growth_interval;
    s->growth_factor = (float)ls->growth_factor;
    s->backoff_factor = (float)ls->backoff_factor;
}

float train_scaler_loss_scale(const train_scaler *s) {
    return s->on ? s->scale : 1.0f;
}

/* 1 when any rank of the groups flagged (max over each group in turn: the groups are
 * orthogonal and together span the ranks, so after the last one every rank holds the
 * maximum over all of them). */
static int scaler_agree(float *flag, comm *const *groups, int n_groups, bt_diag *diag) {
    for (int i = 0; i < n_groups; i++) {
        comm *g = groups[i];
        if (g == NULL) continue;
        if (comm_allreduce(g, flag, flag, 1, COMM_F32, COMM_MAX, NULL) != 0) {
            bt_diag_set(diag, "loss-scaler overflow vote over %s: %s", comm_name(g), comm_error(g));
            return BT_EIO;
        }
    }
    return 0;
}

int train_scaler_unscale(train_scaler *s, backend *be, float *grads, size_t n, comm *const *groups,
                         int n_groups, int *overflow, bt_diag *diag) {
    *overflow = 0;
    if (!s->on) return 0;
    be->scale(be, grads, 1.0f / s->scale, n);
    /* A sum of squares in double is finite exactly when every gradient is (float32's
     * largest square, 1.2e77, is far from double's range). */
    float flag = isfinite(be->sumsq(be, grads, n)) ? 0.0f : 1.0f;
    int rc = scaler_agree(&flag, groups, n_groups, diag);
    if (rc != 0) return rc;
    *overflow = flag > 0.0f;
    return 0;
}

int train_scaler_update(train_scaler *s, int overflow) {
    if (!s->on) return 0;
    if (overflow) {
        int floor = s->scale <= s->min_scale;
        float backed = s->scale * s->backoff_factor;
        s->scale = backed > s->min_scale ? backed : s->min_scale;
        s->good_steps = 0;
        s->overflow_steps++;
        return floor;
    }
    if (++s->good_steps < s->growth_interval) return 0;
    s->good_steps = 0;
    float grown = s->scale * s->growth_factor;
    if (isfinite(grown)) s->scale = grown;
    return 0;
}

void train_scaler_to_pb(const train_scaler *s, Baton__LossScalerState *out) {
    baton__loss_scaler_state__init(out);
    out->has_scale = 1, out->scale = s->scale;
    out->has_good_steps = 1, out->good_steps = s->good_steps;
    out->has_overflow_steps = 1, out->overflow_steps = s->overflow_steps;
}

void train_scaler_from_pb(train_scaler *s, const Baton__LossScalerState *st) {
    if (st == NULL || !s->on || !st->has_scale) return;
    s->lifted = !(st->scale >= s->min_scale);
    s->lifted_from = (float)st->scale;
    s->scale = s->lifted ? s->min_scale : (float)st->scale;
    s->good_steps = st->good_steps;
    s->overflow_steps = st->overflow_steps;
}
