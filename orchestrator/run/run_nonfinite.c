/* An attempt that failed on a loss that was not finite (schema/control.proto: Fatal's
 * nonfinite_step), met again: training is deterministic (the CPU engine bitwise, the GPU
 * one near enough), so an attempt that starts from the same checkpoint as the one before
 * it and meets a non-finite loss at the same step would meet it on every restart. Such a
 * failure is retried once (a passing fault, a flipped bit or a bad node, may have caused
 * it), not max_restarts times. */
#include <inttypes.h>
#include <stdio.h>

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

void run_nonfinite_advice(const run_ctx *c, char *out, size_t cap) {
    const Baton__Precision *p = c->spec && c->spec->stage ? c->spec->stage->precision : NULL;
    int fp16 = p != NULL && p->type == BATON__PRECISION__TYPE__FP16;
    snprintf(out, cap,
             " (not retried: the attempt before met a non-finite loss at this same step "
             "%" PRIu64 ", starting from the same step %" PRIu64
             "; training is deterministic, so every restart would meet it again: lower "
             "optimizer.lr, set optimizer.grad_clip, or set restart.spike_zscore to undo "
             "spiking steps%s)",
             c->cs.fatal.nonfinite_step, c->cs.fatal.start_step,
             fp16 ? "; under fp16 a forward past 65504 overflows, where bf16, with float32's "
                    "range, does not"
                  : "");
}
