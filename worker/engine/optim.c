/* AdamW, learning-rate schedule and gradient clipping; semantics in optim.h.
 *
 * Rules kept here: nothing allocates except optim_adamw_init; every per-element loop is
 * a plain float32 loop the compiler can vectorize, with its scalars hoisted out. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "util/err.h"

static const double optim_pi = 3.14159265358979323846;

void optim_hparams_default(optim_hparams *hp) {
    hp->lr = 3e-4;
    hp->min_lr = 0.0;
    hp->warmup_steps = 0;
    hp->schedule = OPTIM_SCHEDULE_COSINE;
    hp->weight_decay = 0.1;
    hp->grad_clip = 1.0;
    hp->beta1 = 0.9;
    hp->beta2 = 0.95;
    hp->eps = 1e-8;
}

static optim_schedule schedule_from_pb(Baton__Optimizer__Schedule s) {
    switch (s) {
    case BATON__OPTIMIZER__SCHEDULE__LINEAR:
        return OPTIM_SCHEDULE_LINEAR;
    case BATON__OPTIMIZER__SCHEDULE__CONSTANT:
        return OPTIM_SCHEDULE_CONSTANT;
    default:
        return OPTIM_SCHEDULE_COSINE;
    }
}

void optim_hparams_from_pb(optim_hparams *hp, const Baton__Optimizer *pb) {
    optim_hparams_default(hp);
    if (pb == NULL) return;
    hp->lr = pb->lr;
    hp->min_lr = pb->min_lr;
    hp->warmup_steps = pb->warmup_steps;
    hp->schedule = schedule_from_pb(pb->schedule);
    hp->weight_decay = pb->weight_decay;
    hp->grad_clip = pb->grad_clip;
    hp->beta1 = pb->beta1;
    hp->beta2 = pb->beta2;
    hp->eps = pb->eps;
}

double optim_lr_at(uint64_t step, uint64_t total_steps, const optim_hparams *hp) {
    uint64_t warmup = hp->warmup_steps;
    if (warmup > 0 && step <= warmup) return hp->lr * (double)step / (double)warmup;
    if (hp->schedule == OPTIM_SCHEDULE_CONSTANT) return hp->lr;
    if (step > total_steps) return hp->min_lr;
    /* the first decay step at the peak, the last one decay step short of min_lr (Megatron's
     * iteration k decays by k - 1 - warmup steps): a 1-step stage trains at lr, not 0 */
    double ratio = (double)(step - warmup - 1) / (double)(total_steps - warmup);
    double coef =
        hp->schedule == OPTIM_SCHEDULE_LINEAR ? 1.0 - ratio : 0.5 * (1.0 + cos(optim_pi * ratio));
    return hp->min_lr + coef * (hp->lr - hp->min_lr);
}

void optim_adamw_args(backend_adamw *a, const optim_hparams *hp, double lr, uint64_t step,
                      float coef) {
    a->b1 = (float)hp->beta1, a->b2 = (float)hp->beta2;
    a->one_minus_b1 = (float)(1.0 - hp->beta1);
    a->one_minus_b2 = (float)(1.0 - hp->beta2);
    a->eps = (float)hp->eps;
    a->keep = (float)(1.0 - lr * hp->weight_decay);
    a->step_size = (float)(lr / (1.0 - pow(hp->beta1, (double)step)));
    a->inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(hp->beta2, (double)step)));
    a->grad_coef = coef;
}

void optim_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                        const optim_hparams *hp, double lr, uint64_t step, int decay) {
    backend_adamw a;
    optim_adamw_args(&a, hp, lr, step, 1.0f); /* coef 1: grad is only read */
    cpu_adamw_range(param, (float *)grad, m, v, n, &a, decay);
}

double optim_grad_sumsq(const float *grad, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = grad[i];
        s += g * g;
    }
    return s;
}

double optim_clip_coef(double norm, double clip) {
    if (!(clip > 0.0)) return 1.0;
    double coef = clip / (norm + 1e-6);
    return coef < 1.0 || isnan(coef) ? coef : 1.0;
}

void optim_grad_scale(float *grad, size_t n, float coef) {
    for (size_t i = 0; i < n; i++)
        grad[i] *= coef;
}

int optim_adamw_init(optim_adamw *o, size_t n) {
    return optim_adamw_init_on(o, NULL, n);
}

static float *optim_alloc(backend *be, size_t n) {
    return be ? be->alloc(be, n * sizeof(float)) : calloc(n, sizeof(float));
}

int optim_adamw_init_on(optim_adamw *o, backend *be, size_t n) {
    memset(o, 0, sizeof *o);
    if (n == 0) return BT_EINVAL;
    o->be = be;
    o->m = optim_alloc(be, n);
    o->v = optim_alloc(be, n);
    if (o->m == NULL || o->v == NULL) {
        optim_adamw_free(o);
        return BT_ENOMEM;
    }
    o->n = n;
    return 0;
}

void optim_adamw_free(optim_adamw *o) {
    if (o->be != NULL) {
        if (o->m) o->be->free(o->be, o->m);
        if (o->v) o->be->free(o->be, o->v);
    } else {
        free(o->m);
        free(o->v);
    }
    memset(o, 0, sizeof *o);
}

void optim_adamw_reset(optim_adamw *o) {
    if (o->be != NULL) {
        o->be->zero(o->be, o->m, o->n);
        o->be->zero(o->be, o->v, o->n);
    } else {
        memset(o->m, 0, o->n * sizeof *o->m);
        memset(o->v, 0, o->n * sizeof *o->v);
    }
    o->step = 0;
}

double optim_segments_sumsq(const float *grads, const optim_segment *segs, size_t nseg) {
    double sumsq = 0.0;
    for (size_t s = 0; s < nseg; s++)
        sumsq += optim_grad_sumsq(grads + segs[s].offset, segs[s].n);
    return sumsq;
}

double optim_segments_sumsq_on(backend *be, const float *grads, const optim_segment *segs,
                               size_t nseg) {
    if (be == NULL) return optim_segments_sumsq(grads, segs, nseg);
    return be->sumsq_segs(be, grads, segs, nseg);
}

int optim_adamw_step_norm(optim_adamw *o, float *params, float *grads, const optim_segment *segs,
                          size_t nseg, const optim_hparams *hp, double lr, double norm) {
    if (!isfinite(norm)) return 0;
    float coef = (float)optim_clip_coef(norm, hp->grad_clip);
    o->step++;
    backend_adamw a;
    optim_adamw_args(&a, hp, lr, o->step, coef);
    if (o->be != NULL) {
        o->be->adamw(o->be, params, grads, o->m, o->v, segs, nseg, &a);
        return 1;
    }
    for (size_t s = 0; s < nseg; s++) {
        size_t off = segs[s].offset;
        cpu_adamw_range(params + off, grads + off, o->m + off, o->v + off, segs[s].n, &a,
                        segs[s].decay);
    }
    return 1;
}

int optim_adamw_begin(optim_adamw *o, backend_adamw *a, const optim_hparams *hp, double lr,
                      double norm) {
    if (!isfinite(norm)) return 0;
    o->step++;
    optim_adamw_args(a, hp, lr, o->step, (float)optim_clip_coef(norm, hp->grad_clip));
    return 1;
}

void optim_adamw_seg_at(optim_adamw *o, const backend_adamw *a, float *param, float *grad,
                        const optim_segment *seg) {
    size_t off = seg->offset;
    backend_seg one = {.offset = 0, .n = seg->n, .decay = seg->decay};
    o->be->adamw(o->be, param, grad, o->m + off, o->v + off, &one, 1, a);
}

double optim_adamw_step(optim_adamw *o, float *params, float *grads, const optim_segment *segs,
                        size_t nseg, const optim_hparams *hp, double lr) {
    double norm = sqrt(optim_segments_sumsq_on(o->be, grads, segs, nseg));
    optim_adamw_step_norm(o, params, grads, segs, nseg, hp, lr, norm);
    return norm;
}
