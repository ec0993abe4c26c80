/* train_spike_to_pb / train_spike_from_pb: the loss-spike guard's window as checkpoints
 * keep it (manifest spike_guard). A wrapped ring is saved oldest first and comes back
 * judging as before; a longer saved window keeps its newest values; a state that is not
 * the guard's (lists of other lengths, a non-finite value) and a guard turned off leave
 * the window empty (it warms up again); the run of spikes in progress comes back, unless
 * it is as long as a rollback's (no worker saves one: a damaged or crafted count, which
 * would otherwise wrap and never ask for a rollback). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "train_spike.h"

static void guard(train_spike *s, double z) {
    memset(s, 0, sizeof *s);
    s->z = z;
}

/* 27 steps: the ring has wrapped, the window holds steps 8..27, the next slot not 0. */
static void check_roundtrip(void) {
    train_spike a, b;
    guard(&a, 6);
    for (int i = 1; i <= 27; i++)
        train_spike_push(&a, 2.0 + 0.01 * i, 1.0 + 0.001 * i);
    double loss[TRAIN_SPIKE_WINDOW], norm[TRAIN_SPIKE_WINDOW];
    Baton__SpikeGuardState st;
    CHECK(train_spike_to_pb(&a, &st, loss, norm) == 1);
    CHECK(st.n_loss == TRAIN_SPIKE_WINDOW && st.n_grad_norm == TRAIN_SPIKE_WINDOW);
    CHECK(st.loss[0] == 2.0 + 0.01 * 8 && st.loss[TRAIN_SPIKE_WINDOW - 1] == 2.0 + 0.01 * 27);
    CHECK(st.grad_norm[0] == 1.0 + 0.001 * 8);
    CHECK(st.spikes_in_a_row == 0 && !st.has_first_spike_step);
    guard(&b, 6);
    train_spike_from_pb(&b, &st);
    CHECK(b.n == TRAIN_SPIKE_WINDOW && train_spike_armed(&b));
    double za, zb;
    int sa = train_spike_check(&a, 2.3, 50.0, &za), sb = train_spike_check(&b, 2.3, 50.0, &zb);
    CHECK(sa == 1 && sb == 1 && fabs(za - zb) < 1e-9 * fabs(za));
    sa = train_spike_check(&a, 2.2, 1.02, &za), sb = train_spike_check(&b, 2.2, 1.02, &zb);
    CHECK(sa == 0 && sb == 0 && fabs(za - zb) < 1e-9 * fabs(za));
    /* both go on alike: the next push replaces the same oldest value */
    train_spike_push(&a, 2.5, 1.5);
    train_spike_push(&b, 2.5, 1.5);
    CHECK(train_spike_to_pb(&b, &st, loss, norm) == 1 && st.loss[0] == 2.0 + 0.01 * 9);
}

static void check_partial_and_run(void) {
    train_spike a, b;
    guard(&a, 6);
    for (int i = 1; i <= 4; i++)
        train_spike_push(&a, i, i);
    CHECK(train_spike_note(&a, 5, 32, 40) == 1 && train_spike_note(&a, 6, 40, 48) == 2);
    double loss[TRAIN_SPIKE_WINDOW], norm[TRAIN_SPIKE_WINDOW];
    Baton__SpikeGuardState st;
    CHECK(train_spike_to_pb(&a, &st, loss, norm) == 1 && st.n_loss == 4 && st.loss[3] == 4);
    CHECK(st.spikes_in_a_row == 2 && st.first_spike_step == 5 && st.first_spike_sample == 32);
    guard(&b, 6);
    train_spike_from_pb(&b, &st);
    CHECK(b.n == 4 && !train_spike_armed(&b));
    /* the third in a row counts from the saved first step and sample */
    CHECK(train_spike_note(&b, 7, 48, 56) == 3);
    CHECK(b.run_first_step == 5 && b.run_first_sample == 32 && b.run_end_sample == 56);
    /* a count no worker saves (TRAIN_SPIKE_ROLLBACK_AFTER or more): the window without it */
    uint32_t bad[] = {TRAIN_SPIKE_ROLLBACK_AFTER, UINT32_MAX};
    for (int i = 0; i < 2; i++) {
        st.spikes_in_a_row = bad[i];
        train_spike_from_pb(&b, &st);
        CHECK(b.n == 4 && b.run == 0 && b.run_first_step == 0);
        CHECK(train_spike_note(&b, 7, 48, 56) == 1 && b.run_first_step == 7);
    }
}

static void check_refused(void) {
    double l[25], n[25];
    for (int i = 0; i < 25; i++)
        l[i] = 3.0 + i, n[i] = 1.0 + i;
    Baton__SpikeGuardState st;
    baton__spike_guard_state__init(&st);
    st.loss = l, st.grad_norm = n, st.n_loss = st.n_grad_norm = 25;
    train_spike s;
    guard(&s, 6);
    train_spike_from_pb(&s, &st); /* a longer window (another version's): the newest 20 */
    double out_l[TRAIN_SPIKE_WINDOW], out_n[TRAIN_SPIKE_WINDOW];
    Baton__SpikeGuardState back;
    CHECK(s.n == TRAIN_SPIKE_WINDOW && train_spike_to_pb(&s, &back, out_l, out_n) == 1);
    CHECK(back.loss[0] == 3.0 + 5 && back.loss[TRAIN_SPIKE_WINDOW - 1] == 3.0 + 24);
    st.n_grad_norm = 24; /* lists of other lengths */
    train_spike_from_pb(&s, &st);
    CHECK(s.n == 0 && train_spike_to_pb(&s, &back, out_l, out_n) == 0);
    st.n_grad_norm = 25, n[7] = NAN;
    train_spike_from_pb(&s, &st);
    CHECK(s.n == 0);
    n[7] = 8.0;
    train_spike_from_pb(&s, &st); /* a full window and a spike in progress, */
    CHECK(s.n == TRAIN_SPIKE_WINDOW && train_spike_note(&s, 30, 80, 88) == 1);
    train_spike_from_pb(&s, NULL); /* then none saved: empty, as after init */
    CHECK(s.n == 0 && s.run == 0);
    guard(&s, 0); /* the guard off: nothing taken, nothing saved */
    train_spike_from_pb(&s, &st);
    CHECK(s.n == 0);
    train_spike_push(&s, 1, 1);
    CHECK(train_spike_to_pb(&s, &back, out_l, out_n) == 0);
}

int main(void) {
    check_roundtrip();
    check_partial_and_run();
    check_refused();
    return check_status();
}
