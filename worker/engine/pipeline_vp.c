/* Running the interleaved 1F1B schedule (pipeline_vp.h). */
#include "pipeline_vp.h"

static float *op_buffer(const pipeline_stage *st, const pipe_op *o) {
    switch (o->buf) {
    case PIPE_BUF_OUTPUT:
        return st->output(st->ctx, o->index);
    case PIPE_BUF_INPUT:
        return st->input(st->ctx, o->index);
    case PIPE_BUF_GRAD:
        return st->grad(st->ctx);
    default:
        return st->grad_in(st->ctx, o->index);
    }
}

/* The communication queue (pipeline.h), as pipeline_run_1f1b keeps it: p->sending NULL
 * means transfers complete on return. */
static int queued(const pipeline *p) {
    return p->sending != NULL;
}

static int settle(pipeline *p, const pipe_action *a, bt_diag *diag) {
    if (pipeline_wait_all(p) == 0) return 0;
    bt_diag_set(diag,
                "interleaved pipeline stage %d of %d, before micro-batch %d's chunk %d: "
                "waiting for the transfers: %s",
                p->stage, p->stages, a->mb, a->chunk, comm_error(p->group));
    return BT_EIO;
}

/* Before a forward into a slot: its output (and the gradient buffer) no longer being sent;
 * before a backward (which writes the gradient, after take_grad): nothing being sent. */
static int settle_before(pipeline *p, const pipe_action *a, bt_diag *diag) {
    int slot = a->kind == PIPE_FORWARD ? a->slot : -1;
    return pipeline_sends_pending(p, slot) ? settle(p, a, diag) : 0;
}

/* After a batch went out on the queue: its sends marked under way; a batch that receives
 * is waited for (what it receives is used by a later action). */
static int after_xfer(pipeline *p, const pipe_action *a, bt_diag *diag) {
    if (!queued(p)) return 0;
    int receives = 0;
    for (int j = 0; j < a->n_ops; j++) {
        const pipe_op *o = &a->ops[j];
        if (o->buf == PIPE_BUF_OUTPUT) p->sending[o->index] = 1;
        if (o->buf == PIPE_BUF_GRAD) p->grad_sending = 1;
        receives |= o->kind == PIPE_RECV;
    }
    return receives ? settle(p, a, diag) : 0;
}

static int run_xfer(pipeline *p, const pipe_action *a, const pipeline_stage *st, bt_diag *diag) {
    comm_p2p_op ops[4];
    for (int j = 0; j < a->n_ops; j++) {
        const pipe_op *o = &a->ops[j];
        ops[j] = (comm_p2p_op){.kind = o->kind == PIPE_SEND ? COMM_SEND : COMM_RECV,
                               .peer = (p->stage + o->dir + p->stages) % p->stages,
                               .buf = op_buffer(st, o),
                               .count = p->count,
                               .dtype = COMM_F32,
                               .tag = o->tag};
    }
    if (p->stream != NULL) p->be->stream_wait(p->be, p->stream, NULL); /* behind the ops */
    if (comm_p2p(p->group, ops, a->n_ops, p->stream) == 0) return after_xfer(p, a, diag);
    const pipe_op *o = &a->ops[0];
    bt_diag_set(diag, "interleaved pipeline stage %d of %d, %s micro-batch %d's %s of chunk %d: %s",
                p->stage, p->stages, o->kind == PIPE_SEND ? "sending" : "receiving", o->mb,
                o->buf == PIPE_BUF_GRAD || o->buf == PIPE_BUF_GRAD_IN ? "gradient" : "activation",
                o->chunk, comm_error(p->group));
    return BT_EIO;
}

int pipeline_vp_run(pipeline *p, const pipe_schedule *s, const pipeline_stage *st, bt_diag *diag) {
    if (p->group == NULL || s->stages != p->stages || s->stage != p->stage ||
        (queued(p) && s->slots > p->n_sending)) {
        bt_diag_set(diag,
                    "interleaved pipeline: the schedule is for stage %d of %d with %d slots; "
                    "this is %d of %d, its queue set up for %d",
                    s->stage, s->stages, s->slots, p->stage, p->stages, p->n_sending);
        return BT_EINVAL;
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < s->n; i++) {
        const pipe_action *a = &s->a[i];
        if (a->kind == PIPE_XFER) {
            rc = run_xfer(p, a, st, diag);
            continue;
        }
        rc = settle_before(p, a, diag);
        if (rc == 0 && a->kind == PIPE_FORWARD) {
            rc = st->forward(st->ctx, a->mb, a->chunk, a->slot);
        } else if (rc == 0) {
            if (a->grad_in >= 0) st->take_grad(st->ctx, a->grad_in);
            rc = st->backward(st->ctx, a->mb, a->chunk, a->slot);
        }
    }
    /* the step's sends complete before anything else touches the buffers (after a failure
     * too; the first error is the one reported) */
    int wrc = pipeline_wait_all(p);
    if (rc == 0 && wrc != 0) {
        bt_diag_set(diag, "interleaved pipeline stage %d of %d: waiting for the last sends: %s",
                    p->stage, p->stages, comm_error(p->group));
        rc = BT_EIO;
    }
    return rc;
}
