/* Failures no restart would cure, judged from the training's numbers, and what the user
 * is told to change.
 *
 * A non-finite loss met again (schema/control.proto: Fatal's nonfinite_step; or an fp16
 * overflow at the loss scale's floor, its reason LOSS_SCALE_FLOOR, said as such): training is
 * deterministic (the CPU engine bitwise, the GPU one near enough), so an attempt that
 * starts from the same checkpoint as the one before it and meets a non-finite loss at the
 * same step most likely meets it on every restart. Such a failure is retried once (a
 * passing fault, a flipped bit, may have caused it), not max_restarts times. A GPU that
 * corrupts data the same way every time does so too, so the words say "most likely" and
 * name that cause as well. The state is this process's: a `baton resume` retries once more.
 *
 * Loss spikes after the stage's RUN_MAX_ROLLBACKS rollbacks: the spikes keep coming
 * wherever the data is skipped to. */
#include <inttypes.h>
#include <stdio.h>

#include "control.pb-c.h"
#include "run_ctx.h"

int run_nonfinite_again(run_ctx *c) {
    const control_fatal *f = &c->cs.fatal;
    int now = c->cs_open && f->key.seen && f->nonfinite;
    int again = now && c->nonfinite_prev.have && c->nonfinite_prev.step == f->nonfinite_step &&
                c->nonfinite_prev.start == f->start_step;
    c->nonfinite_prev.have = now;
    c->nonfinite_prev.step = f->nonfinite_step, c->nonfinite_prev.start = f->start_step;
    return again;
}

/* Whether the Fatal is train.c's overflow at the fp16 loss scale's floor: by its reason
 * (schema/control.proto), whatever its message's words. */
static int run_fatal_at_floor(const run_ctx *c) {
    return c->cs_open && c->cs.fatal.key.seen &&
           c->cs.fatal.reason == BATON__FATAL__REASON__LOSS_SCALE_FLOOR;
}

/* What the attempt met (its Fatal's reason): an overflow at the fp16 loss scale's floor,
 * whose loss may be finite, or a non-finite loss. */
static const char *run_nonfinite_what(const run_ctx *c) {
    return run_fatal_at_floor(c) ? "an fp16 overflow at the loss scale's floor"
                                 : "a non-finite loss";
}

/* "lower optimizer.lr, set optimizer.grad_clip or ...": the settings that help against
 * this failure (spent: spikes; else a non-finite loss, or an overflow at the fp16 loss
 * scale's floor, where a lower floor comes first), those the stage already has left out:
 * clipping when grad_clip > 0; the spike guard, which only undoes finite spikes leading
 * up to a non-finite loss, when spike_zscore > 0. */
static void run_settings_advice(const run_ctx *c, int spent, char *out, size_t cap) {
    const Baton__Stage *s = c->spec ? c->spec->stage : NULL;
    const Baton__Optimizer *o = s ? s->optimizer : NULL;
    const Baton__RestartPolicy *r = s ? s->restart : NULL;
    const Baton__Precision *p = s ? s->precision : NULL;
    double zscore = r ? r->spike_zscore : 0;
    char guard[160], lower[160];
    snprintf(guard, sizeof guard, "raise restart.spike_zscore (now %g) to accept such steps",
             zscore);
    snprintf(lower, sizeof lower, "lower precision.loss_scale.min (now %g) to keep backing off",
             p && p->loss_scale ? p->loss_scale->min : 1.0);
    const char *item[5];
    size_t n = 0;
    if (!spent && run_fatal_at_floor(c)) item[n++] = lower;
    item[n++] = "lower optimizer.lr";
    if (o != NULL && !(o->grad_clip > 0)) item[n++] = "set optimizer.grad_clip";
    if (spent) item[n++] = guard;
    if (!spent && !(zscore > 0))
        item[n++] = "set restart.spike_zscore to undo the finite loss spikes that lead up to it";
    if (!spent && p != NULL && p->type == BATON__PRECISION__TYPE__FP16)
        item[n++] = "use bf16 (under fp16 a forward past 65504 overflows; bf16 has float32's "
                    "range)";
    size_t l = 0;
    out[0] = '\0';
    for (size_t k = 0; k < n && l < cap; k++)
        l += (size_t)snprintf(out + l, cap - l, "%s%s",
                              k == 0      ? ""
                              : k + 1 < n ? ", "
                                          : " or ",
                              item[k]);
}

void run_give_up_advice(const run_ctx *c, int again, int spent, char *out, size_t cap) {
    char settings[400];
    out[0] = '\0';
    if (!again && !spent) return;
    run_settings_advice(c, spent, settings, sizeof settings);
    if (spent)
        snprintf(out, cap,
                 " (not retried: giving up after %u rollbacks, the most a stage takes: the "
                 "spikes keep coming; %s before a resume, which gets no further rollback in "
                 "this stage: the count is kept)",
                 RUN_MAX_ROLLBACKS, settings);
    else
        snprintf(out, cap,
                 " (not retried: the attempt before met %s at this same step %" PRIu64
                 ", starting from the same step %" PRIu64
                 ": most likely the training itself, which a restart would meet again: %s. A "
                 "faulty GPU can do this too: if this recipe has trained past this step "
                 "before, resume on other nodes ('baton resume' retries it once more))",
                 run_nonfinite_what(c), c->cs.fatal.nonfinite_step, c->cs.fatal.start_step,
                 settings);
}

void run_give_up_numbers(run_ctx *c, uint32_t stage, int again, int spent) {
    if (spent) run_give_up(c, stage, 0, "giving up after %u rollbacks", RUN_MAX_ROLLBACKS);
    if (again)
        run_give_up(c, stage, 0, "%s at step %llu again, from the same start: not retried",
                    run_nonfinite_what(c), (unsigned long long)c->cs.fatal.nonfinite_step);
}
