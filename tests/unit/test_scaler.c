/* fp16's dynamic loss scaler (worker/engine/train_scaler.h) at its floor: a backoff never
 * takes the scale below loss_scale.min (1 by default, as DeepSpeed's and Megatron's; at
 * least TRAIN_SCALER_MIN, 2^-126, the smallest normal float32, whose inverse is finite),
 * however small the factor; an overflow with the scale already there is reported (the
 * stage fails instead of skipping every step); a checkpoint's scale below the floor (0,
 * saved by a build without one) is lifted to it; and the ordinary rule (x backoff on
 * overflow, x growth after growth_interval clean steps) is unchanged. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "train_scaler.h"

/* min < 0: the default floor (1) */
static void scaler_make_min(train_scaler *s, double initial, double backoff, double min) {
    Baton__LossScale ls = BATON__LOSS_SCALE__INIT;
    ls.has_initial = 1, ls.initial = initial;
    if (min >= 0) ls.has_min = 1, ls.min = min;
    ls.has_backoff_factor = 1, ls.backoff_factor = backoff;
    ls.has_growth_interval = 1, ls.growth_interval = 3;
    Baton__Precision p = BATON__PRECISION__INIT;
    p.has_type = 1, p.type = BATON__PRECISION__TYPE__FP16;
    p.loss_scale = &ls;
    train_scaler_init(s, &p);
}

static void scaler_make(train_scaler *s, double initial, double backoff) {
    scaler_make_min(s, initial, backoff, FLT_MIN);
}

/* The usual rule, away from the floor: halves on overflow, doubles after 3 clean steps. */
static void test_rule(void) {
    train_scaler s;
    scaler_make(&s, 65536, 0.5);
    CHECK(train_scaler_update(&s, 1) == 0);
    CHECK(s.scale == 32768.0f);
    for (int i = 0; i < 3; i++)
        CHECK(train_scaler_update(&s, 0) == 0);
    CHECK(s.scale == 65536.0f);
    CHECK_EQ_U64(s.overflow_steps, 1);
}

/* A factor that would take the scale to 0 in one step stops at the floor; the next
 * overflow there is reported, and the scale stays a normal float with a finite inverse. */
static void test_floor(void) {
    train_scaler s;
    scaler_make(&s, 65536, 1e-30);
    CHECK(train_scaler_update(&s, 1) == 0); /* 65536 * 1e-30 = 6.6e-26: above the floor */
    CHECK(train_scaler_update(&s, 1) == 0); /* 6.6e-56 in float is 0: the floor */
    CHECK(s.scale == TRAIN_SCALER_MIN);
    CHECK(s.scale == FLT_MIN && isfinite(1.0f / s.scale));
    CHECK(train_scaler_update(&s, 1) == 1); /* nothing left to back off */
    CHECK(s.scale == TRAIN_SCALER_MIN);
    CHECK_EQ_U64(s.overflow_steps, 3);
    /* a clean step at the floor is no failure, and the scale grows back from it */
    for (int i = 0; i < 3; i++)
        CHECK(train_scaler_update(&s, 0) == 0);
    CHECK(s.scale == 2 * TRAIN_SCALER_MIN);
}

/* The default floor, 1: from 65536 (2^16), 16 halving overflows reach it, and the 17th,
 * with the scale already there, is reported. */
static void test_default_floor(void) {
    train_scaler s;
    scaler_make_min(&s, 65536, 0.5, -1);
    CHECK(s.min_scale == 1.0f);
    for (int i = 0; i < 16; i++)
        CHECK(train_scaler_update(&s, 1) == 0);
    CHECK(s.scale == 1.0f);
    CHECK(train_scaler_update(&s, 1) == 1); /* the 17th overflow, at the floor */
    CHECK(s.scale == 1.0f);
    CHECK_EQ_U64(s.overflow_steps, 17);
    /* a factor that would take it far below in one step stops at the floor too */
    scaler_make_min(&s, 65536, 1e-30, -1);
    CHECK(train_scaler_update(&s, 1) == 0 && s.scale == 1.0f);
    CHECK(train_scaler_update(&s, 1) == 1 && s.scale == 1.0f);
    /* a saved scale below it (a checkpoint of a run with a lower floor) is lifted */
    Baton__LossScalerState st = BATON__LOSS_SCALER_STATE__INIT;
    st.has_scale = 1, st.scale = 0.25;
    train_scaler_from_pb(&s, &st);
    CHECK(s.scale == 1.0f && s.lifted && s.lifted_from == 0.25f); /* for the worker to say */
    st.scale = 1;                                                 /* at the floor: not lifted */
    train_scaler_from_pb(&s, &st);
    CHECK(s.scale == 1.0f && !s.lifted);
    /* a spec no recipe check saw: initial below min starts at min, a min below
     * TRAIN_SCALER_MIN is raised to it */
    scaler_make_min(&s, 0.5, 0.5, -1);
    CHECK(s.scale == 1.0f);
    scaler_make_min(&s, 65536, 0.5, 0);
    CHECK(s.min_scale == TRAIN_SCALER_MIN);
}

/* Halving from 4 x the floor: 2 x, 1 x (reached, not yet past), then reported. */
static void test_reach(void) {
    train_scaler s;
    scaler_make(&s, 4.0 * FLT_MIN, 0.5);
    CHECK(train_scaler_update(&s, 1) == 0 && s.scale == 2 * FLT_MIN);
    CHECK(train_scaler_update(&s, 1) == 0 && s.scale == FLT_MIN);
    CHECK(train_scaler_update(&s, 1) == 1 && s.scale == FLT_MIN);
}

/* A scale of 0 saved by an older build, or an initial below the floor in a spec no recipe
 * check saw, starts at the floor: 1/S stays finite. */
static void test_lifted(void) {
    train_scaler s;
    scaler_make(&s, 65536, 0.5);
    Baton__LossScalerState st = BATON__LOSS_SCALER_STATE__INIT;
    st.has_scale = 1, st.scale = 0;
    train_scaler_from_pb(&s, &st);
    CHECK(s.scale == TRAIN_SCALER_MIN);
    st.scale = 1024;
    train_scaler_from_pb(&s, &st);
    CHECK(s.scale == 1024.0f);
    scaler_make(&s, 1e-50, 0.5);
    CHECK(s.scale == TRAIN_SCALER_MIN);
}

int main(void) {
    test_rule();
    test_floor();
    test_reach();
    test_default_floor();
    test_lifted();
    return check_status();
}
