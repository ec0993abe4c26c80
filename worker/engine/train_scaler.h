/* Dynamic loss scaling for fp16 training (torch.cuda.amp.GradScaler's rule).
 *
 * Why fp16 needs it and bf16 does not: fp16 keeps 5 exponent bits, so its finite range
 * is about 6e-8 (smallest subnormal; 6.1e-5 the smallest normal) to 65504. Activation
 * gradients of a language model sit largely below 1e-5 and would flush to zero (or lose
 * most of their bits as subnormals) when a backward GEMM rounds them to fp16. Scaling the
 * loss by S moves every gradient up by S into fp16's range; the weight gradients (float32)
 * are divided by S again before clipping and AdamW. bf16 has float32's 8 exponent bits
 * (range 1e-38 .. 3e38) and needs no scaling.
 *
 * The rule, once per optimizer step:
 *  - the backward runs on loss x S (train.c passes S into model_backward's scale);
 *  - the float32 gradients are multiplied by 1/S (exact when S is a power of two);
 *  - every rank checks its gradients for Inf/NaN and the verdict is reduced (max) over
 *    every parallel group the rank is in (tp, pp, dp), so all ranks take the same
 *    decision;
 *  - overflow: the step is skipped (no parameter, moment or AdamW step-count change) and
 *    S *= backoff_factor, but never below loss_scale.min (1 by default); the clean-step
 *    count restarts;
 *  - an overflow with S already at that floor: the stage fails (train_scaler_update
 *    returns 1, train.c says it) rather than back off further or skip every step to its
 *    end. DeepSpeed stops there likewise at its min_loss_scale (1 by default: far below
 *    a scale of 1 the fp16 gradients underflow to 0, such steps count as clean and
 *    AdamW moves the weights on their momentum alone); Megatron's --min-loss-scale, also
 *    1, clamps there and keeps skipping steps instead. torch's GradScaler has no floor
 *    and backs off to 0, where it never recovers;
 *  - otherwise the step is applied; after growth_interval clean steps in a row
 *    S *= growth_factor (kept unchanged if that would overflow float32).
 * The state (S, clean-step count, skipped-step count) is saved in checkpoints
 * (manifest.proto LossScalerState) so a resumed run is bitwise the one that never
 * stopped. */
#ifndef BATON_TRAIN_SCALER_H
#define BATON_TRAIN_SCALER_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "manifest.pb-c.h"
#include "recipe.pb-c.h"
#include "util/err.h"

/* The smallest floor a spec can give: FLT_MIN (2^-126), the smallest normal float32, a
 * power of two, so that 1/S (2^126) is finite and exact. The recipe check keeps
 * loss_scale.min at least there and at most initial (validate.c). */
#define TRAIN_SCALER_MIN 0x1p-126f

typedef struct train_scaler {
    int on;      /* precision fp16; otherwise the scale is 1 and nothing is checked */
    float scale; /* S */
    float growth_factor, backoff_factor;
    float min_scale; /* loss_scale.min: S never backs off below it */
    uint32_t growth_interval;
    uint32_t good_steps;     /* clean steps since S last changed */
    uint64_t overflow_steps; /* steps skipped on Inf/NaN gradients */
    int lifted;              /* from_pb lifted a saved scale below min_scale to it */
    float lifted_from;       /* that saved scale */
} train_scaler;

/* From the stage's precision (NULL: off). Unset LossScale fields take the schema's
 * defaults (initial 65536, growth_interval 2000, growth_factor 2, backoff_factor 0.5,
 * min 1). A spec no recipe check saw: min below TRAIN_SCALER_MIN is raised to it, and
 * initial below min to min. */
void train_scaler_init(train_scaler *s, const Baton__Precision *p);

/* The factor the backward multiplies the loss by: S, or 1 when off. */
float train_scaler_loss_scale(const train_scaler *s);

/* Divides the n gradients by S and decides whether the step overflowed: *overflow is 1
 * when any rank of groups (NULL entries skipped) holds an Inf/NaN gradient. Collective
 * over the groups; does nothing (and sets *overflow 0) when off. */
int train_scaler_unscale(train_scaler *s, backend *be, float *grads, size_t n, comm *const *groups,
                         int n_groups, int *overflow, bt_diag *diag);

/* Backs off after an overflow (not below min_scale), or counts a clean step and grows S
 * after growth_interval of them. Returns 1 when the step overflowed with S already at
 * min_scale (the floor reached: the stage cannot go on), else 0. */
int train_scaler_update(train_scaler *s, int overflow);

/* To and from a checkpoint's manifest. to_pb fills out (no allocation); from_pb leaves
 * the scaler as it is when st is NULL (a checkpoint of a stage without fp16), and lifts a
 * saved scale below min_scale (0 from a build without a floor, or one saved under a lower
 * min) to it, noting that in lifted and lifted_from (the worker says so: the first
 * overflow then fails the stage, where the run backed off before). */
void train_scaler_to_pb(const train_scaler *s, Baton__LossScalerState *out);
void train_scaler_from_pb(train_scaler *s, const Baton__LossScalerState *st);

#endif
