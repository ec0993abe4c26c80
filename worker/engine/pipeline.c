#include "pipeline.h"

#include <string.h>

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

static int xfer(run *r, const comm_p2p_op *ops, int n, const char *what, int mb) {
    if (n == 0) return 0;
    if (comm_p2p(r->p->group, ops, n, NULL) == 0) return 0;
    bt_diag_set(r->diag, "pipeline stage %d of %d, micro-batch %d, %s: %s", r->p->stage,
                r->p->stages, mb, what, comm_error(r->p->group));
    return BT_EIO;
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

int pipeline_run_1f1b(pipeline *p, int K, const pipeline_stage *st, bt_diag *diag) {
    run r = {.p = p, .st = st, .slots = pipeline_slots(p->stages, p->stage, K), .diag = diag};
    int warmup = p->stages - 1 - p->stage, rc = 0;
    warmup = warmup < K ? warmup : K;
    int steady = K - warmup, f = 0, b = 0;
    for (; rc == 0 && f < warmup; f++) {
        rc = recv_forward(&r, f);
        rc = rc ? rc : st->forward(st->ctx, f, f % r.slots);
        rc = rc ? rc : send_forward(&r, f);
    }
    if (rc == 0 && steady > 0) rc = recv_forward(&r, f);
    for (int i = 0; rc == 0 && i < steady; i++, f++, b++) {
        rc = st->forward(st->ctx, f, f % r.slots);
        rc = rc ? rc : send_forward_recv_backward(&r, f, b);
        rc = rc ? rc : st->backward(st->ctx, b, b % r.slots);
        if (rc == 0 && i == steady - 1)
            rc = send_backward(&r, b);
        else if (rc == 0)
            rc = send_backward_recv_forward(&r, b, f + 1);
    }
    for (; rc == 0 && b < K; b++) {
        rc = recv_backward(&r, b);
        rc = rc ? rc : st->backward(st->ctx, b, b % r.slots);
        rc = rc ? rc : send_backward(&r, b);
    }
    return rc;
}
