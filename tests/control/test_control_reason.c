/* test_control reason RUN_DIR: a Fatal's kind is its reason field (schema/control.proto),
 * never its message's words. A Fatal whose reason is LOSS_SCALE_FLOOR, its message saying
 * anything, gets baton run's advice to lower precision.loss_scale.min and is said as an
 * fp16 overflow at the loss scale's floor (orchestrator/run/run_give_ups.c, built into
 * this test); one that only says train.c's words for it, without the reason (a worker of
 * an older build), does not: a non-finite loss. */
#include <stdlib.h>
#include <string.h>

#include "control_client.h"
#include "control_server.h"
#include "run_ctx.h"
#include "test_control.h"
#include "util/err.h"

#define FLOOR_ADVICE "lower precision.loss_scale.min (now 1) to keep backing off"

/* run_give_ups.c's run_give_up_numbers calls it; this test never does. */
void run_give_up(run_ctx *c, uint32_t stage, int say, const char *fmt, ...) {
    (void)c, (void)stage, (void)say, (void)fmt;
}

static int got_fatal(const control_server *cs) {
    return cs->fatal.key.seen;
}

/* One attempt whose only rank fails on a non-finite step 7 (from step 4) with reason and
 * message; returns the server's reason and leaves baton run's advice for a second such
 * failure in advice. */
static int reason_case(control_server *cs, uint32_t attempt, Baton__Fatal__Reason reason,
                       const char *message, char *advice, size_t cap) {
    bt_diag d;
    bt_diag_init(&d);
    advice[0] = '\0';
    CHECK(control_server_begin_attempt(cs, 0, "pretrain", attempt, 1, 0) == 0, "begin");
    control_client c;
    CHECK(control_client_open(&c, cs->address, "s3cret", 0, 1, attempt, NULL, &d) == 0, "%s",
          d.msg);
    c.nonfinite_step = 7, c.start_step = 4, c.reason = reason;
    control_client_fatal(&c, 1, 0, 0, message);
    CHECK(pump_until(cs, got_fatal) && strcmp(cs->fatal.message, message) == 0,
          "attempt %u: the Fatal did not arrive", attempt);
    control_client_close(&c);
    CHECK(cs->fatal.nonfinite && cs->fatal.nonfinite_step == 7 && cs->fatal.start_step == 4,
          "attempt %u: the Fatal's non-finite step is not 7 from 4", attempt);
    run_ctx *rc = calloc(1, sizeof *rc);
    if (rc == NULL) return -1;
    rc->cs_open = 1, rc->cs.fatal = cs->fatal;
    run_give_up_advice(rc, 1, 0, advice, cap);
    free(rc);
    return cs->fatal.reason;
}

int fatal_reason(const char *run_dir) {
    control_server cs;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(&cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s", d.msg);
    char advice[2048];
    /* the reason alone, the message saying something else */
    CHECK(reason_case(&cs, 1, BATON__FATAL__REASON__LOSS_SCALE_FLOOR, "step 7: it went wrong",
                      advice, sizeof advice) == BATON__FATAL__REASON__LOSS_SCALE_FLOOR,
          "the reason LOSS_SCALE_FLOOR was not kept");
    CHECK(strstr(advice, ": " FLOOR_ADVICE ", lower optimizer.lr") != NULL,
          "a Fatal whose reason is LOSS_SCALE_FLOOR was not advised a lower floor: '%s'", advice);
    CHECK(strstr(advice,
                 "(not retried: the attempt before met an fp16 overflow at the loss "
                 "scale's floor at this same step 7, starting from the same step 4:") != NULL,
          "the overflow at the floor is not said as such: '%s'", advice);
    /* train.c's words without the reason: no kind read from them */
    const char *words = "step 7: the fp16 gradients hold Inf/NaN even at the loss scale's "
                        "floor (precision.loss_scale.min, 1), after 3 overflowed steps in "
                        "this stage";
    CHECK(reason_case(&cs, 2, BATON__FATAL__REASON__REASON_UNSPECIFIED, words, advice,
                      sizeof advice) == BATON__FATAL__REASON__REASON_UNSPECIFIED,
          "a Fatal without a reason was given one");
    CHECK(strstr(advice, "loss_scale.min") == NULL,
          "a Fatal saying the floor's words without the reason was advised a lower floor: '%s'",
          advice);
    CHECK(strstr(advice, "lower optimizer.lr") != NULL, "no advice for a non-finite loss: '%s'",
          advice);
    CHECK(strstr(advice, "(not retried: the attempt before met a non-finite loss at this same "
                         "step 7, starting from the same step 4:") != NULL,
          "a Fatal without a reason is not said as a non-finite loss: '%s'", advice);
    /* a non-finite loss is no overflow at the floor, whatever it says */
    CHECK(reason_case(&cs, 3, BATON__FATAL__REASON__NONFINITE_LOSS, words, advice, sizeof advice) ==
              BATON__FATAL__REASON__NONFINITE_LOSS,
          "the reason NONFINITE_LOSS was not kept");
    CHECK(strstr(advice, "loss_scale.min") == NULL,
          "a Fatal whose reason is NONFINITE_LOSS was advised a lower floor: '%s'", advice);
    CHECK(strstr(advice, "met a non-finite loss at this same step 7") != NULL,
          "a Fatal whose reason is NONFINITE_LOSS is not said as a non-finite loss: '%s'", advice);
    control_server_close(&cs);
    printf("control reason: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
