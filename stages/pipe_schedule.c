/* The interleaved 1F1B schedule (pipe_schedule.h). */
#include "pipe_schedule.h"

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

/* pipe_order.h's; k = K v (the virtual micro-batch after the last, whose receive is never
 * posted) wraps round */
static int fwd_chunk(const gen *g, int k) {
    return (int)pipe_order_chunk((uint32_t)g->pp, (uint32_t)g->v, (uint32_t)g->K,
                                 (uint32_t)(k % g->total), 1);
}

static int bwd_chunk(const gen *g, int k) {
    return g->v - 1 - fwd_chunk(g, k);
}

static int mb_of(const gen *g, int k) {
    return (int)pipe_order_mb((uint32_t)g->pp, (uint32_t)g->v, (uint32_t)g->K, (uint32_t)k);
}

/* After Megatron-Core's interleaved schedule: whether iteration k's transfers receive
 * the input of a coming forward (forward) or the output gradient of a coming backward, and
 * for which chunk (*chunk). The stage that leads that way (the first going forward, the
 * last going backward) receives what the other end made from virtual micro-batch
 * k - (pp - 1), for the next chunk (none for the first pp - 1, none after the last
 * chunk); any other stage the input of its virtual micro-batch k + 1. */
static int recv_for(const gen *g, int k, int forward, int *chunk) {
    int lead = forward ? g->st == 0 : g->st == g->pp - 1;
    if (!lead) {
        *chunk = forward ? fwd_chunk(g, k + 1) : bwd_chunk(g, k + 1);
        return 1;
    }
    if (k < g->pp - 1) return 0;
    int c = forward ? fwd_chunk(g, k - (g->pp - 1)) : bwd_chunk(g, k - (g->pp - 1));
    *chunk = forward ? c + 1 : c - 1;
    return forward ? c != g->v - 1 : c != 0;
}

static int is_head(const gen *g, int chunk) {
    return g->st == g->pp - 1 && chunk == g->v - 1;
}

static uint32_t tag(const gen *g, int mb, int chunk_of_receiver, int stage_of_receiver, int grad) {
    int w = chunk_of_receiver * g->pp + stage_of_receiver;
    return 2u * (uint32_t)(mb * g->pp * g->v + w) + (uint32_t)grad;
}

/* Appends a to s's list unless *err; out of memory sets it. */
static void push_to(pipe_schedule *s, int *err, const pipe_action *a) {
    if (*err) return;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        pipe_action *na = realloc(s->a, (size_t)cap * sizeof *na);
        if (na == NULL) {
            *err = BT_ENOMEM;
            return;
        }
        s->a = na, s->cap = cap;
    }
    s->a[s->n++] = *a;
}

static void push(gen *g, const pipe_action *a) {
    push_to(g->s, &g->err, a);
}

static void add_op(gen *g, pipe_op_kind kind, int dir, uint32_t t, pipe_buf buf, int index, int mb,
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
    add_op(g, PIPE_SEND, +1, t, PIPE_BUF_OUTPUT, g->slot_of[mb * g->v + c], mb, c);
}

static void send_grad(gen *g, int k) {
    int mb = mb_of(g, k), c = bwd_chunk(g, k);
    if (g->st == 0 && c == 0) return;
    int first = g->st == 0;
    uint32_t t = tag(g, mb, first ? c - 1 : c, first ? g->pp - 1 : g->st - 1, 1);
    add_op(g, PIPE_SEND, -1, t, PIPE_BUF_GRAD, 0, mb, c);
}

/* The input of chunk c's next micro-batch, from the previous stage. */
static void recv_input(gen *g, int c) {
    int mb = g->fwd_recvd[c]++;
    if (mb >= g->K) {
        g->err = BT_EINVAL;
        return;
    }
    add_op(g, PIPE_RECV, -1, tag(g, mb, c, g->st, 0), PIPE_BUF_INPUT, take_slot(g, mb, c), mb, c);
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
    add_op(g, PIPE_RECV, +1, tag(g, mb, c, g->st, 1), PIPE_BUF_GRAD_IN, b, mb, c);
}

static void warmup(gen *g, int warm, int all_warm) {
    int first = g->st == 0, last = g->st == g->pp - 1;
    if (!first) recv_input(g, 0);
    flush(g);
    for (int k = 0; k < warm && !g->err; k++) {
        forward(g, k);
        int next, recv_prev = recv_for(g, k, 1, &next) && k != g->total - 1;
        send_output(g, k);
        if (recv_prev) recv_input(g, next);
        if (k == warm - 1 && !all_warm && !last) recv_grad(g, g->v - 1);
        flush(g);
    }
}

static void steady(gen *g, int warm) {
    int rest = g->total - warm;
    for (int i = 0; i < rest && !g->err; i++) {
        int fk = i + warm;
        forward(g, fk);
        backward(g, i);
        int nf, recv_prev = recv_for(g, fk, 1, &nf), nb, recv_next = recv_for(g, i, 0, &nb);
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
        int next, recv_next = recv_for(g, k, 0, &next) && k != g->total - 1;
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

int pipe_schedule_make(int stages, int stage, int K, int v, pipe_schedule *s, bt_diag *diag) {
    memset(s, 0, sizeof *s);
    if (stages < 2 || v < 2 || stage < 0 || stage >= stages) {
        bt_diag_set(diag,
                    "interleaved pipeline: stage %d of %d with %d chunks (needs 2 or more "
                    "stages and chunks)",
                    stage, stages, v);
        return BT_EINVAL;
    }
    if (K < stages) {
        bt_diag_set(diag,
                    "interleaved pipeline: %d micro-batches, fewer than the %d stages "
                    "(virtual_stages %d)",
                    K, stages, v);
        return BT_EINVAL;
    }
    if ((long long)K * stages * v > (1 << 28)) { /* the tags (above) */
        bt_diag_set(diag,
                    "interleaved pipeline: %d micro-batches x %d stages x %d chunks is "
                    "above 2^28",
                    K, stages, v);
        return BT_EINVAL;
    }
    s->stages = stages, s->stage = stage, s->K = K, s->v = v;
    gen g = {.s = s, .pp = stages, .st = stage, .K = K, .v = v, .total = K * v};
    g.batch = (pipe_action){.kind = PIPE_XFER, .grad_in = -1};
    int warm = (int)pipe_order_warmup((uint32_t)stages, (uint32_t)v, (uint32_t)K, (uint32_t)stage);
    int all_warm = warm == K * v;
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
        pipe_schedule_free(s);
    }
    return rc;
}

void pipe_schedule_free(pipe_schedule *s) {
    free(s->a);
    memset(s, 0, sizeof *s);
}

/* 1F1B's list (pipe_schedule.h) ------------------------------------------------------ */

typedef struct gen1 {
    pipe_schedule *s;
    int pp, st;
    pipe_action batch;
    int err;
} gen1;

static void compute1(gen1 *g, pipe_kind kind, int mb) {
    pipe_action a = {.kind = kind, .mb = mb, .chunk = 0, .slot = -1, .grad_in = -1};
    push_to(g->s, &g->err, &a);
}

/* Adds to the batch: the activation of mb to or from the next stage (grad 0), or the
 * gradient to or from the previous one, where there is that stage. */
static void op1(gen1 *g, pipe_op_kind kind, int mb, int grad) {
    int to = kind == PIPE_SEND ? (grad ? g->st - 1 : g->st + 1) : g->st;
    int from = kind == PIPE_SEND ? g->st : (grad ? g->st + 1 : g->st - 1);
    if (to < 0 || to >= g->pp || from < 0 || from >= g->pp) return;
    uint32_t t = 2u * (uint32_t)(mb * g->pp + to) + (uint32_t)grad;
    g->batch.ops[g->batch.n_ops++] = (pipe_op){.kind = kind,
                                               .dir = (kind == PIPE_SEND) == !grad ? +1 : -1,
                                               .tag = t,
                                               .index = -1,
                                               .mb = mb,
                                               .chunk = 0};
}

static void flush1(gen1 *g) {
    if (g->batch.n_ops > 0) push_to(g->s, &g->err, &g->batch);
    g->batch = (pipe_action){.kind = PIPE_XFER, .slot = -1, .grad_in = -1};
}

int pipe_schedule_make_1f1b(int stages, int stage, int K, pipe_schedule *s, bt_diag *diag) {
    memset(s, 0, sizeof *s);
    if (stages < 2 || stage < 0 || stage >= stages || K < 1 || (long long)K * stages > (1 << 28)) {
        bt_diag_set(diag, "1F1B pipeline: stage %d of %d with %d micro-batches", stage, stages, K);
        return BT_EINVAL;
    }
    s->stages = stages, s->stage = stage, s->K = K, s->v = 1;
    gen1 g = {.s = s, .pp = stages, .st = stage};
    flush1(&g);
    int warm = stages - 1 - stage < K ? stages - 1 - stage : K, f = 0, b = 0;
    for (; f < warm; f++) {
        op1(&g, PIPE_RECV, f, 0), flush1(&g);
        compute1(&g, PIPE_FORWARD, f);
        op1(&g, PIPE_SEND, f, 0), flush1(&g);
    }
    if (K > warm) op1(&g, PIPE_RECV, f, 0), flush1(&g);
    for (int i = 0; i < K - warm; i++, f++, b++) {
        compute1(&g, PIPE_FORWARD, f);
        op1(&g, PIPE_SEND, f, 0), op1(&g, PIPE_RECV, b, 1), flush1(&g);
        compute1(&g, PIPE_BACKWARD, b);
        op1(&g, PIPE_SEND, b, 1);
        if (i < K - warm - 1) op1(&g, PIPE_RECV, f + 1, 0);
        flush1(&g);
    }
    for (; b < K; b++) {
        op1(&g, PIPE_RECV, b, 1), flush1(&g);
        compute1(&g, PIPE_BACKWARD, b);
        op1(&g, PIPE_SEND, b, 1), flush1(&g);
    }
    if (g.err != 0) {
        bt_diag_set(diag, "1F1B pipeline: out of memory for stage %d's list", stage);
        pipe_schedule_free(s);
    }
    return g.err;
}
