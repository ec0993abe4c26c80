/* The optimizer: AdamW over fp32 master weights, the learning-rate schedule and global
 * gradient-norm clipping.
 *
 * AdamW follows torch.optim.AdamW (decoupled weight decay), for step t = 1, 2, ...:
 *   p -= lr * wd * p                      (only for tensors with decay; not for norms)
 *   m  = b1 * m + (1 - b1) * g
 *   v  = b2 * v + (1 - b2) * g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * The per-element work is float32; scalars (bias corrections, step size) are computed
 * in double once per call.
 *
 * Schedule (Megatron-LM's convention, steps counted from 1 within the schedule, which
 * starts at the stage's first step or when Optimizer.reset says so):
 *   step <= warmup:  lr * step / warmup   (step 1 gets lr / warmup, step warmup gets lr)
 *   after warmup:    ratio = (step - warmup - 1) / (total - warmup), then
 *     cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * ratio)) / 2
 *     linear:   min_lr + (lr - min_lr) * (1 - ratio)
 *     constant: lr
 *   so the first step after warmup runs at lr and the stage's last step (step = total)
 *   one decay step short of min_lr, which step total + 1 would reach (Megatron's iteration
 *   k decays by k - 1 - warmup steps; a 1-step stage trains at lr, not 0);
 *   step > total (cosine, linear): min_lr.
 *
 * Clipping follows torch.nn.utils.clip_grad_norm_: norm = sqrt(sum of g^2 over every
 * gradient of the model); every gradient is multiplied by min(1, clip / (norm + 1e-6)).
 *
 * Sharding: every function works on a flat range of one tensor, so a ZeRO-1 rank that
 * owns elements [begin, end) of the flat parameter buffer calls optim_grad_sumsq on its
 * range, all-reduces the partial sums, takes the sqrt, scales its range, and calls
 * optim_adamw_update with param + begin, grad + begin, m + begin, v + begin. The result
 * is the same as the unsharded step: the update is elementwise and sums of squares are
 * accumulated in double. */
#ifndef BATON_OPTIM_H
#define BATON_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "recipe.pb-c.h"

typedef enum optim_schedule {
    OPTIM_SCHEDULE_COSINE = 0,
    OPTIM_SCHEDULE_LINEAR = 1,
    OPTIM_SCHEDULE_CONSTANT = 2,
} optim_schedule;

typedef struct optim_hparams {
    double lr;             /* peak rate, reached at the end of warmup */
    double min_lr;         /* the rate at the last step (cosine, linear) */
    uint64_t warmup_steps; /* 0 = no warmup */
    optim_schedule schedule;
    double weight_decay; /* decoupled, applied to tensors flagged for decay */
    double grad_clip;    /* maximum global L2 norm; 0 (or less) = no clipping */
    double beta1;
    double beta2;
    double eps;
} optim_hparams;

/* The schema's defaults (lr 3e-4, min_lr 0, no warmup, cosine, wd 0.1, clip 1.0,
 * betas 0.9/0.95, eps 1e-8). */
void optim_hparams_default(optim_hparams *hp);
/* From the recipe's Optimizer message; NULL gives the defaults. Unset fields of an
 * unpacked or BATON__OPTIMIZER__INIT message already hold the schema defaults. */
void optim_hparams_from_pb(optim_hparams *hp, const Baton__Optimizer *pb);

/* The learning rate of step `step` (1-based) in a schedule of total_steps steps: warmup
 * lr step / warmup_steps (the last warmup step at lr), then the decay from lr (the first
 * step after warmup) toward min_lr, which the step after the last would reach. */
double optim_lr_at(uint64_t step, uint64_t total_steps, const optim_hparams *hp);

/* One AdamW step on n contiguous elements. step is the 1-based count of steps taken
 * including this one (it sets the bias corrections); decay says whether weight decay
 * applies (0 for norm weights). m and v are updated in place. */
void optim_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                        const optim_hparams *hp, double lr, uint64_t step, int decay);

/* Sum of g^2 over n elements, accumulated in double: the partial that ranks add up. */
double optim_grad_sumsq(const float *grad, size_t n);
/* min(1, clip / (norm + 1e-6)); 1 when clip <= 0. A NaN norm gives NaN, as in torch. */
double optim_clip_coef(double norm, double clip);
/* grad[i] *= coef. */
void optim_grad_scale(float *grad, size_t n, float coef);

/* A tensor inside the flat parameter (and gradient) buffer: offset (first element), n
 * (element count), decay (1: weight decay applies; 0: norms and anything else exempt).
 * The backend's type, so segment lists go to backend.h's fused AdamW as they are. */
typedef backend_seg optim_segment;

/* The scalars of one AdamW step at rate lr and 1-based step count `step`, with clipping
 * coefficient coef (1: none), as backend.h's adamw op takes them. */
void optim_adamw_args(backend_adamw *a, const optim_hparams *hp, double lr, uint64_t step,
                      float coef);

/* Optimizer state for a flat buffer of n parameters, allocated once at init. With a
 * backend the moments are its device memory and every step runs through its ops (sumsq,
 * adamw): params and grads are then that backend's memory too. */
typedef struct optim_adamw {
    float *m;      /* (n) first moments */
    float *v;      /* (n) second moments */
    size_t n;      /* parameters covered */
    uint64_t step; /* steps taken since init or the last reset */
    backend *be;   /* NULL: host memory and host loops */
} optim_adamw;

/* Allocates zeroed moments in host memory; returns 0 or BT_ENOMEM / BT_EINVAL (n == 0). */
int optim_adamw_init(optim_adamw *o, size_t n);
/* The same in be's memory (be NULL: host). */
int optim_adamw_init_on(optim_adamw *o, backend *be, size_t n);
void optim_adamw_free(optim_adamw *o);
/* Zero moments and step count (Optimizer.reset at a stage boundary). */
void optim_adamw_reset(optim_adamw *o);

/* Sum of squares of the gradients in the segments (double accumulation): a rank's part
 * of the global grad norm, to be all-reduced before the square root. */
double optim_segments_sumsq(const float *grads, const optim_segment *segs, size_t nseg);
/* The same over be's memory through its sumsq op (be NULL: the host loop). Equal to the
 * host sum on the CPU backend. */
double optim_segments_sumsq_on(backend *be, const float *grads, const optim_segment *segs,
                               size_t nseg);

/* The update of one step given the global gradient norm (over every rank's shard):
 * clipping (grads scaled in place), then AdamW at rate lr over the segments. m and v are
 * indexed like params, so a ZeRO-1 rank passes params, grads, m and v of its shard with
 * shard-relative segments. A non-finite norm skips the update and leaves the step count
 * unchanged; returns 1 when the update ran, else 0. */
int optim_adamw_step_norm(optim_adamw *o, float *params, float *grads, const optim_segment *segs,
                          size_t nseg, const optim_hparams *hp, double lr, double norm);

/* An update whose parameters are not laid out like the moments (ZeRO-2/3, ZeRO-1 under
 * expert parallelism), with a backend: optim_adamw_begin counts the step and sets a's
 * scalars (0, nothing to do, when norm is not finite: the weights are left alone), then
 * optim_adamw_seg_at updates one segment whose parameters are at param, its gradients at
 * grad and its moments at o's seg->offset. */
int optim_adamw_begin(optim_adamw *o, backend_adamw *a, const optim_hparams *hp, double lr,
                      double norm);
void optim_adamw_seg_at(optim_adamw *o, const backend_adamw *a, float *param, float *grad,
                        const optim_segment *seg);
/* A whole one-rank step over the segments of params/grads (each within [0, o->n)):
 * global norm, clipping (grads are scaled in place), then the update at rate lr.
 * Returns the norm before clipping. A non-finite norm skips the update and leaves the
 * step count unchanged, so one bad batch cannot poison the master weights; the caller
 * decides whether to go on. */
double optim_adamw_step(optim_adamw *o, float *params, float *grads, const optim_segment *segs,
                        size_t nseg, const optim_hparams *hp, double lr);

#endif
