#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "backend_select.h"

int pipeline_slots(int stages, int stage, int K) {
    int n = stages - stage;
    return n < K ? n : K;
}

void pipeline_init(pipeline *p, comm *group, size_t count) {
    memset(p, 0, sizeof *p);
    p->group = group;
    p->stage = group ? comm_rank(group) : 0;
    p->stages = group ? comm_size(group) : 1;
    p->count = count;
}

/* Sends are not waited for at once (pipeline_set_queue set the bookkeeping up). */
static int deferred(const pipeline *p) {
    return p->sending != NULL;
}

int pipeline_set_queue(pipeline *p, backend *be, int slots, bt_diag *diag) {
    if (p->group == NULL || p->stages < 2 || slots < 1) return 0;
    int queues = be->stream_new != NULL && comm_has_streams(p->group);
    /* BATON_PP_OVERLAP=1: the bookkeeping without a queue too */
    if (!backend_env_switch("BATON_PP_OVERLAP", queues)) return 0;
    p->sending = calloc((size_t)slots, 1);
    if (p->sending == NULL) {
        bt_diag_set(diag, "out of memory for the pipeline's %d send flags", slots);
        return BT_ENOMEM;
    }
    p->n_sending = slots;
    p->be = be;
    if (queues && (p->stream = backend_side_queue(be, "the pipeline transfers", diag)) == NULL) {
        pipeline_free(p);
        return BT_EIO;
    }
    return 0;
}

void pipeline_free(pipeline *p) {
    if (p->stream != NULL) p->be->stream_free(p->be, p->stream);
    free(p->sending);
    p->stream = NULL, p->sending = NULL, p->n_sending = 0, p->be = NULL;
}

const char *pipeline_describe(const pipeline *p) {
    if (p->stages < 2) return "";
    if (!deferred(p)) return "pipeline transfers: on the ops' queue, each waited for";
    return p->stream != NULL ? "pipeline transfers: on a communication queue, sends waited for "
                               "only before their buffers are written again"
                             : "pipeline transfers: sends waited for late (no queue: nothing "
                               "overlaps)";
}

static uint32_t tag_forward(int mb) {
    return 2u * (uint32_t)mb;
}

static uint32_t tag_backward(int mb) {
    return 2u * (uint32_t)mb + 1u;
}

/* The schedule's state: the stage, its slots and the first error. */
typedef struct run {
    pipeline *p;
    const pipeline_stage *st;
    int slots;
    bt_diag *diag;
} run;

static int first(const run *r) {
    return r->p->stage == 0;
}

static int last(const run *r) {
    return r->p->stage == r->p->stages - 1;
}

static int fail(run *r, const char *what, int mb) {
    bt_diag_set(r->diag, "pipeline stage %d of %d, micro-batch %d, %s: %s", r->p->stage,
                r->p->stages, mb, what, comm_error(r->p->group));
    return BT_EIO;
}

int pipeline_wait_all(pipeline *p) {
    if (p->sending == NULL) return 0;
    int rc = comm_wait(p->group, p->stream);
    p->grad_sending = 0;
    memset(p->sending, 0, (size_t)p->n_sending);
    return rc;
}

static int settle(run *r, int mb) {
    return pipeline_wait_all(r->p) != 0 ? fail(r, "waiting for the transfers", mb) : 0;
}

int pipeline_sends_pending(const pipeline *p, int slot) {
    if (!deferred(p)) return 0;
    int busy = p->grad_sending || (slot >= 0 && p->sending[slot]);
    for (int k = 0; slot < 0 && k < p->n_sending && !busy; k++)
        busy = p->sending[k];
    return busy;
}

/* Before a forward into slot: its output buffer (and the gradient buffer) free. */
static int settle_forward(run *r, int mb, int slot) {
    return pipeline_sends_pending(r->p, slot) ? settle(r, mb) : 0;
}

/* Before a backward: it writes the input gradient (and may touch any slot's buffers). */
static int settle_backward(run *r, int mb) {
    return pipeline_sends_pending(r->p, -1) ? settle(r, mb) : 0;
}

/* Marks the buffers ops send as under way. */
static void mark_sends(run *r, const comm_p2p_op *ops, int n) {
    pipeline *p = r->p;
    for (int i = 0; i < n; i++) {
        if (ops[i].kind != COMM_SEND) continue;
        if (ops[i].buf == r->st->grad(r->st->ctx)) {
            p->grad_sending = 1;
            continue;
        }
        for (int k = 0; k < r->slots; k++)
            if (ops[i].buf == r->st->output(r->st->ctx, k)) p->sending[k] = 1;
    }
}

static int xfer(run *r, const comm_p2p_op *ops, int n, const char *what, int mb) {
    pipeline *p = r->p;
    if (n == 0) return 0;
    if (p->stream != NULL) p->be->stream_wait(p->be, p->stream, NULL); /* behind the ops */
    if (comm_p2p(p->group, ops, n, p->stream) != 0) return fail(r, what, mb);
    if (!deferred(p)) return 0;
    mark_sends(r, ops, n);
    int receives = 0;
    for (int i = 0; i < n; i++)
        receives |= ops[i].kind == COMM_RECV;
    return receives ? settle(r, mb) : 0; /* the received data is used next */
}

static comm_p2p_op op(comm_p2p_kind kind, int peer, float *buf, size_t count, uint32_t tag) {
    return (comm_p2p_op){
        .kind = kind, .peer = peer, .buf = buf, .count = count, .dtype = COMM_F32, .tag = tag};
}

static int recv_forward(run *r, int mb) {
    if (first(r)) return 0;
    comm_p2p_op o = op(COMM_RECV, r->p->stage - 1, r->st->input(r->st->ctx, mb % r->slots),
                       r->p->count, tag_forward(mb));
    return xfer(r, &o, 1, "receiving the activation", mb);
}

static int send_forward(run *r, int mb) {
    if (last(r)) return 0;
    comm_p2p_op o = op(COMM_SEND, r->p->stage + 1, r->st->output(r->st->ctx, mb % r->slots),
                       r->p->count, tag_forward(mb));
    return xfer(r, &o, 1, "sending the activation", mb);
}

static int recv_backward(run *r, int mb) {
    if (last(r)) return 0;
    comm_p2p_op o =
        op(COMM_RECV, r->p->stage + 1, r->st->grad(r->st->ctx), r->p->count, tag_backward(mb));
    return xfer(r, &o, 1, "receiving the gradient", mb);
}

static int send_backward(run *r, int mb) {
    if (first(r)) return 0;
    comm_p2p_op o =
        op(COMM_SEND, r->p->stage - 1, r->st->grad(r->st->ctx), r->p->count, tag_backward(mb));
    return xfer(r, &o, 1, "sending the gradient", mb);
}

/* Output of micro-batch f forward while receiving the gradient for micro-batch b. */
static int send_forward_recv_backward(run *r, int f, int b) {
    if (last(r)) return 0;
    int next = r->p->stage + 1;
    comm_p2p_op o[2] = {
        op(COMM_SEND, next, r->st->output(r->st->ctx, f % r->slots), r->p->count, tag_forward(f)),
        op(COMM_RECV, next, r->st->grad(r->st->ctx), r->p->count, tag_backward(b)),
    };
    return xfer(r, o, 2, "sending the activation / receiving the gradient", f);
}

/* Gradient of micro-batch b backward while receiving the input of micro-batch f. */
static int send_backward_recv_forward(run *r, int b, int f) {
    if (first(r)) return 0;
    int prev = r->p->stage - 1;
    comm_p2p_op o[2] = {
        op(COMM_SEND, prev, r->st->grad(r->st->ctx), r->p->count, tag_backward(b)),
        op(COMM_RECV, prev, r->st->input(r->st->ctx, f % r->slots), r->p->count, tag_forward(f)),
    };
    return xfer(r, o, 2, "sending the gradient / receiving the activation", b);
}

static int forward(run *r, int f) {
    int slot = f % r->slots, rc = settle_forward(r, f, slot);
    return rc ? rc : r->st->forward(r->st->ctx, f, 0, slot);
}

static int backward(run *r, int b) {
    int rc = settle_backward(r, b);
    return rc ? rc : r->st->backward(r->st->ctx, b, 0, b % r->slots);
}

int pipeline_run_1f1b(pipeline *p, int K, const pipeline_stage *st, bt_diag *diag) {
    run r = {.p = p, .st = st, .slots = pipeline_slots(p->stages, p->stage, K), .diag = diag};
    if (deferred(p) && r.slots > p->n_sending) {
        bt_diag_set(diag, "pipeline stage %d: %d activation slots, the queue was set up for %d",
                    p->stage, r.slots, p->n_sending);
        return BT_EINVAL;
    }
    int warmup = p->stages - 1 - p->stage, rc = 0;
    warmup = warmup < K ? warmup : K;
    int steady = K - warmup, f = 0, b = 0;
    for (; rc == 0 && f < warmup; f++) {
        rc = recv_forward(&r, f);
        rc = rc ? rc : forward(&r, f);
        rc = rc ? rc : send_forward(&r, f);
    }
    if (rc == 0 && steady > 0) rc = recv_forward(&r, f);
    for (int i = 0; rc == 0 && i < steady; i++, f++, b++) {
        rc = forward(&r, f);
        rc = rc ? rc : send_forward_recv_backward(&r, f, b);
        rc = rc ? rc : backward(&r, b);
        if (rc == 0 && i == steady - 1)
            rc = send_backward(&r, b);
        else if (rc == 0)
            rc = send_backward_recv_forward(&r, b, f + 1);
    }
    for (; rc == 0 && b < K; b++) {
        rc = recv_backward(&r, b);
        rc = rc ? rc : backward(&r, b);
        rc = rc ? rc : send_backward(&r, b);
    }
    /* The step's sends complete before anything else touches the buffers; after a failure
     * what is under way is waited for all the same (the first error is the one reported). */
    if (rc != 0) {
        (void)pipeline_wait_all(p);
        return rc;
    }
    return settle(&r, K);
}
