/* The interleaved 1F1B schedule (pipeline_vp.h). */
#include "pipeline_vp.h"

#include <stdlib.h>
#include <string.h>

#include "pipe_order.h"

/* A pool of buffer indices: the lowest free one is taken, peak counts the most in use. */
typedef struct pool {
    unsigned char *used;
    int cap, peak;
} pool;

static int pool_take(pool *p) {
    for (int i = 0; i < p->cap; i++)
        if (!p->used[i]) {
            p->used[i] = 1;
            p->peak = i + 1 > p->peak ? i + 1 : p->peak;
            return i;
        }
    return -1;
}

static void pool_give(pool *p, int i) {
    if (i >= 0 && i < p->cap) p->used[i] = 0;
}

typedef struct gen {
    pipe_schedule *s;
    int pp, st, K, v, total;
    int *slot_of;   /* (K v) slot of (mb, chunk) at mb v + chunk, in its pool; -1: none */
    int *gbuf_of;   /* (K v) gradient buffer of (mb, chunk)'s backward; -1: none */
    int *fwd_recvd; /* (v) inputs received per chunk: the next is for this micro-batch */
    int *bwd_recvd; /* (v) gradients received per chunk */
    pool head, body, grads;
    pipe_action batch; /* the transfers being gathered */
    int err;
} gen;

static int pmod(int a, int b) {
    return ((a % b) + b) % b;
}

/* pipe_order.h's, for any k (Megatron's indices go below 0: Python's modulo) */
static int fwd_chunk(const gen *g, int k) {
    return (int)pipe_order_chunk((uint32_t)g->pp, (uint32_t)g->v, (uint32_t)pmod(k, g->pp * g->v),
                                 1);
}

static int bwd_chunk(const gen *g, int k) {
    return g->v - 1 - fwd_chunk(g, k);
}

static int mb_of(const gen *g, int k) {
    return (int)pipe_order_mb((uint32_t)g->pp, (uint32_t)g->v, (uint32_t)k);
}

static int is_head(const gen *g, int chunk) {
    return g->st == g->pp - 1 && chunk == g->v - 1;
}

static uint32_t tag(const gen *g, int mb, int chunk_of_receiver, int stage_of_receiver, int grad) {
    int w = chunk_of_receiver * g->pp + stage_of_receiver;
    return 2u * (uint32_t)(mb * g->pp * g->v + w) + (uint32_t)grad;
}

static void push(gen *g, const pipe_action *a) {
    pipe_schedule *s = g->s;
    if (g->err) return;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        pipe_action *na = realloc(s->a, (size_t)cap * sizeof *na);
        if (na == NULL) {
            g->err = BT_ENOMEM;
            return;
        }
        s->a = na, s->cap = cap;
    }
    s->a[s->n++] = *a;
}

static void add_op(gen *g, comm_p2p_kind kind, int dir, uint32_t t, pipe_buf buf, int index, int mb,
                   int chunk) {
    pipe_action *b = &g->batch;
    b->ops[b->n_ops++] = (pipe_op){
        .kind = kind, .dir = dir, .tag = t, .buf = buf, .index = index, .mb = mb, .chunk = chunk};
}

static void flush(gen *g) {
    if (g->batch.n_ops > 0) push(g, &g->batch);
    g->batch = (pipe_action){.kind = PIPE_XFER, .grad_in = -1};
}

/* A slot for (mb, chunk), in the head pool for the last stage's last chunk. */
static int take_slot(gen *g, int mb, int chunk) {
    int *at = &g->slot_of[mb * g->v + chunk];
    if (*at < 0) *at = pool_take(is_head(g, chunk) ? &g->head : &g->body);
    if (*at < 0) g->err = BT_EINVAL;
    return *at;
}

static void forward(gen *g, int k) {
    int mb = mb_of(g, k), c = fwd_chunk(g, k);
    if (g->st > 0 || c > 0) { /* its input must have been received */
        if (g->slot_of[mb * g->v + c] < 0) g->err = BT_EINVAL;
    }
    pipe_action a = {.kind = PIPE_FORWARD, .mb = mb, .chunk = c, .grad_in = -1};
    a.slot = take_slot(g, mb, c);
    push(g, &a);
}

static void backward(gen *g, int k) {
    int mb = mb_of(g, k), c = bwd_chunk(g, k), i = mb * g->v + c;
    pipe_action a = {.kind = PIPE_BACKWARD, .mb = mb, .chunk = c, .slot = g->slot_of[i]};
    a.grad_in = g->gbuf_of[i];
    if (a.slot < 0 || (a.grad_in < 0) != is_head(g, c)) g->err = BT_EINVAL;
    push(g, &a);
    pool_give(is_head(g, c) ? &g->head : &g->body, a.slot);
    pool_give(&g->grads, a.grad_in);
    g->slot_of[i] = g->gbuf_of[i] = -1;
}

/* Transfers of virtual micro-batch k's results: its output (forward) or input gradient
 * (backward) to the neighbour that takes it, where there is one. */
static void send_output(gen *g, int k) {
    int mb = mb_of(g, k), c = fwd_chunk(g, k);
    if (is_head(g, c)) return;
    int last = g->st == g->pp - 1;
    uint32_t t = tag(g, mb, last ? c + 1 : c, last ? 0 : g->st + 1, 0);
    add_op(g, COMM_SEND, +1, t, PIPE_BUF_OUTPUT, g->slot_of[mb * g->v + c], mb, c);
}

static void send_grad(gen *g, int k) {
    int mb = mb_of(g, k), c = bwd_chunk(g, k);
    if (g->st == 0 && c == 0) return;
    int first = g->st == 0;
    uint32_t t = tag(g, mb, first ? c - 1 : c, first ? g->pp - 1 : g->st - 1, 1);
    add_op(g, COMM_SEND, -1, t, PIPE_BUF_GRAD, 0, mb, c);
}

/* The input of chunk c's next micro-batch, from the previous stage. */
static void recv_input(gen *g, int c) {
    int mb = g->fwd_recvd[c]++;
    if (mb >= g->K) {
        g->err = BT_EINVAL;
        return;
    }
    add_op(g, COMM_RECV, -1, tag(g, mb, c, g->st, 0), PIPE_BUF_INPUT, take_slot(g, mb, c), mb, c);
}

/* The gradient of chunk c's next backward's output, from the next stage. */
static void recv_grad(gen *g, int c) {
    int mb = g->bwd_recvd[c]++;
    if (mb >= g->K) {
        g->err = BT_EINVAL;
        return;
    }
    int b = pool_take(&g->grads);
    g->gbuf_of[mb * g->v + c] = b;
    if (b < 0) g->err = BT_EINVAL;
    add_op(g, COMM_RECV, +1, tag(g, mb, c, g->st, 1), PIPE_BUF_GRAD_IN, b, mb, c);
}

static void warmup(gen *g, int warm, int all_warm) {
    int first = g->st == 0, last = g->st == g->pp - 1;
    if (!first) recv_input(g, 0);
    flush(g);
    for (int k = 0; k < warm && !g->err; k++) {
        forward(g, k);
        int next = fwd_chunk(g, k + 1);
        int recv_prev = !(first && next == 0) && k != g->total - 1;
        send_output(g, k);
        if (recv_prev) recv_input(g, next);
        if (k == warm - 1 && !all_warm && !last) recv_grad(g, g->v - 1);
        flush(g);
    }
}

static void steady(gen *g, int warm) {
    int first = g->st == 0, last = g->st == g->pp - 1, rest = g->total - warm;
    for (int i = 0; i < rest && !g->err; i++) {
        int fk = i + warm;
        forward(g, fk);
        backward(g, i);
        int recv_prev = 1, nf, recv_next = 1, nb;
        if (first) {
            int c = fwd_chunk(g, fk - (g->pp - 1));
            recv_prev = c != g->v - 1, nf = c + 1;
        } else {
            nf = fwd_chunk(g, fk + 1);
        }
        if (last) {
            int c = bwd_chunk(g, i - (g->pp - 1));
            recv_next = c != 0, nb = c - 1;
        } else {
            nb = bwd_chunk(g, i + 1);
        }
        if (i == rest - 1) recv_prev = 0;
        send_output(g, fk);
        if (recv_prev) recv_input(g, nf);
        send_grad(g, i);
        if (recv_next) recv_grad(g, nb);
        flush(g);
    }
}

static void cooldown(gen *g, int warm, int all_warm) {
    int last = g->st == g->pp - 1;
    if (all_warm && !last) recv_grad(g, g->v - 1);
    flush(g);
    for (int k = g->total - warm; k < g->total && !g->err; k++) {
        backward(g, k);
        int next = bwd_chunk(g, k + 1);
        int recv_next = !(last && next == g->v - 1) && k != g->total - 1;
        send_grad(g, k);
        if (recv_next) recv_grad(g, next);
        flush(g);
    }
}

/* Slot indices: the head pool's first, the others after them. */
static void number_slots(gen *g) {
    pipe_schedule *s = g->s;
    s->head_slots = g->head.peak, s->slots = g->head.peak + g->body.peak;
    s->grad_bufs = g->grads.peak;
    for (int i = 0; i < s->n; i++) {
        pipe_action *a = &s->a[i];
        if (a->kind != PIPE_XFER) {
            if (!is_head(g, a->chunk)) a->slot += g->head.peak;
            continue;
        }
        for (int j = 0; j < a->n_ops; j++) {
            pipe_op *o = &a->ops[j];
            if ((o->buf == PIPE_BUF_INPUT || o->buf == PIPE_BUF_OUTPUT) && !is_head(g, o->chunk))
                o->index += g->head.peak;
        }
    }
}

static int gen_alloc(gen *g) {
    int n = g->total;
    g->slot_of = malloc((size_t)n * sizeof *g->slot_of);
    g->gbuf_of = malloc((size_t)n * sizeof *g->gbuf_of);
    g->fwd_recvd = calloc((size_t)g->v, sizeof *g->fwd_recvd);
    g->bwd_recvd = calloc((size_t)g->v, sizeof *g->bwd_recvd);
    g->head.used = calloc((size_t)n, 1);
    g->body.used = calloc((size_t)n, 1);
    g->grads.used = calloc((size_t)n, 1);
    if (!g->slot_of || !g->gbuf_of || !g->fwd_recvd || !g->bwd_recvd || !g->head.used ||
        !g->body.used || !g->grads.used)
        return BT_ENOMEM;
    g->head.cap = g->body.cap = g->grads.cap = n;
    for (int i = 0; i < n; i++)
        g->slot_of[i] = g->gbuf_of[i] = -1;
    return 0;
}

static void gen_free(gen *g) {
    free(g->slot_of);
    free(g->gbuf_of);
    free(g->fwd_recvd);
    free(g->bwd_recvd);
    free(g->head.used);
    free(g->body.used);
    free(g->grads.used);
}

int pipeline_vp_schedule(int stages, int stage, int K, int v, pipe_schedule *s, bt_diag *diag) {
    memset(s, 0, sizeof *s);
    if (stages < 2 || v < 2 || stage < 0 || stage >= stages) {
        bt_diag_set(diag,
                    "interleaved pipeline: stage %d of %d with %d chunks (needs 2 or more "
                    "stages and chunks)",
                    stage, stages, v);
        return BT_EINVAL;
    }
    if (K < stages || K % stages != 0) {
        bt_diag_set(diag,
                    "interleaved pipeline: %d micro-batches must be a positive multiple of the "
                    "%d stages (virtual_stages %d)",
                    K, stages, v);
        return BT_EINVAL;
    }
    if ((long long)K * stages * v > (1 << 28)) { /* the tags (pipeline_vp.h) */
        bt_diag_set(diag,
                    "interleaved pipeline: %d micro-batches x %d stages x %d chunks is "
                    "above 2^28",
                    K, stages, v);
        return BT_EINVAL;
    }
    s->stages = stages, s->stage = stage, s->K = K, s->v = v;
    gen g = {.s = s, .pp = stages, .st = stage, .K = K, .v = v, .total = K * v};
    g.batch = (pipe_action){.kind = PIPE_XFER, .grad_in = -1};
    int all_warm = K == stages;
    int warm = (int)pipe_order_warmup((uint32_t)stages, (uint32_t)v, (uint32_t)K, (uint32_t)stage);
    int rc = gen_alloc(&g);
    if (rc == 0) {
        warmup(&g, warm, all_warm);
        steady(&g, warm);
        cooldown(&g, warm, all_warm);
        rc = g.err;
    }
    if (rc == 0) number_slots(&g);
    gen_free(&g);
    if (rc != 0) {
        bt_diag_set(diag, "interleaved pipeline: stage %d of %d, %d micro-batches, %d chunks: %s",
                    stage, stages, K, v,
                    rc == BT_ENOMEM ? "out of memory" : "inconsistent schedule (a bug)");
        pipeline_vp_schedule_free(s);
    }
    return rc;
}

void pipeline_vp_schedule_free(pipe_schedule *s) {
    free(s->a);
    memset(s, 0, sizeof *s);
}

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
        receives |= o->kind == COMM_RECV;
    }
    return receives ? settle(p, a, diag) : 0;
}

static int run_xfer(pipeline *p, const pipe_action *a, const pipeline_stage *st, bt_diag *diag) {
    comm_p2p_op ops[4];
    for (int j = 0; j < a->n_ops; j++) {
        const pipe_op *o = &a->ops[j];
        ops[j] = (comm_p2p_op){.kind = o->kind,
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
                p->stage, p->stages, o->kind == COMM_SEND ? "sending" : "receiving", o->mb,
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
