/* The interleaved 1F1B schedule (pipe_schedule.h), every stage's action list checked
 * together for pp 2, 3, 4 and 8, 2 to 4 chunks per stage and every K from pp to 4 pp + 1
 * micro-batches:
 *  - run under batched point-to-point semantics (a batch posts all its transfers and
 *    completes when every one has met its peer's), every stage reaches the end: no
 *    deadlock;
 *  - on every ordered pair of stages the sends and the receives come in the same order
 *    (NCCL matches by order, not by tag);
 *  - every chunk of every micro-batch runs forward once and backward once after it, in
 *    the same slot; each forward's input, and each backward's output gradient, was
 *    received (into that slot, that buffer) before it, from the stage that computed it;
 *    an activation is sent from its forward's slot, a gradient right after its backward;
 *    no slot or gradient buffer is taken twice at once;
 *  - the computations come in pipe_order.h's order (which the planner replays);
 *  - when pp divides K the slots needed are Megatron's: min(K v, 2 (pp - s - 1) +
 *    (v - 1) pp + 1), K v when K = pp (all forwards first); the last stage keeps one slot
 *    with the head's activations apart from the others, one more than Megatron's count (it
 *    would otherwise need the head's logits in every slot), except when K = pp; otherwise
 *    (the last group G > pp micro-batches) no more than that count with G for pp, plus G. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pipe_order.h"
#include "pipeline_vp.h"

#define MAXPP 8

typedef struct sim_stage {
    pipe_schedule s;
    int pc;     /* next action */
    int posted; /* the batch at pc is posted */
    int matched[4];
} sim_stage;

static int peer_of(int st, int pp, const pipe_op *o) {
    return (st + o->dir + pp) % pp;
}

/* The peer's posted, unmatched op that meets o (sent by / to stage st). */
static int *meet(sim_stage *S, int pp, int st, const pipe_op *o, const pipe_op **out) {
    int q = peer_of(st, pp, o);
    sim_stage *P = &S[q];
    if (!P->posted) return NULL;
    const pipe_action *a = &P->s.a[P->pc];
    for (int j = 0; j < a->n_ops; j++) {
        const pipe_op *x = &a->ops[j];
        if (P->matched[j] || x->kind == o->kind || x->tag != o->tag) continue;
        if (peer_of(q, pp, x) != st) continue;
        *out = x;
        return &P->matched[j];
    }
    return NULL;
}

/* Batched semantics: returns the number of stages that finished. */
static int simulate(sim_stage *S, int pp) {
    for (int progress = 1; progress;) {
        progress = 0;
        for (int st = 0; st < pp; st++) {
            sim_stage *X = &S[st];
            if (X->pc >= X->s.n) continue;
            const pipe_action *a = &X->s.a[X->pc];
            if (a->kind != PIPE_XFER) {
                X->pc++, progress = 1;
                continue;
            }
            if (!X->posted) X->posted = 1, memset(X->matched, 0, sizeof X->matched), progress = 1;
            int all = 1;
            for (int j = 0; j < a->n_ops; j++) {
                const pipe_op *o = &a->ops[j], *x = NULL;
                int *m = X->matched[j] ? NULL : meet(S, pp, st, o, &x);
                if (m != NULL) *m = 1, X->matched[j] = 1, progress = 1;
                all = all && X->matched[j];
            }
            if (all) X->pc++, X->posted = 0, progress = 1;
        }
    }
    int done = 0;
    for (int st = 0; st < pp; st++)
        done += S[st].pc >= S[st].s.n;
    return done;
}

/* The same order of tags on both ends of every ordered pair. */
static int same_order(sim_stage *S, int pp) {
    for (int a = 0; a < pp; a++)
        for (int b = 0; b < pp; b++) {
            if (a == b) continue;
            int ns = 0, nr = 0, ok = 1;
            uint32_t *sent = malloc(sizeof(uint32_t) * 100000);
            for (int i = 0; i < S[a].s.n; i++)
                for (int j = 0; j < S[a].s.a[i].n_ops; j++) {
                    const pipe_op *o = &S[a].s.a[i].ops[j];
                    if (o->kind == PIPE_SEND && peer_of(a, pp, o) == b) sent[ns++] = o->tag;
                }
            for (int i = 0; i < S[b].s.n; i++)
                for (int j = 0; j < S[b].s.a[i].n_ops; j++) {
                    const pipe_op *o = &S[b].s.a[i].ops[j];
                    if (o->kind != PIPE_RECV || peer_of(b, pp, o) != a) continue;
                    ok = ok && nr < ns && sent[nr] == o->tag;
                    nr++;
                }
            free(sent);
            if (!ok || nr != ns) return 0;
        }
    return 1;
}

/* The list's forwards and backwards in pipe_order's order. */
static int order_ok(const pipe_schedule *s, int pp, int v, int K) {
    pipe_pass *want = malloc(sizeof *want * (size_t)(2 * K * v));
    pipe_order((uint32_t)pp, (uint32_t)v, (uint32_t)K, (uint32_t)s->stage, want);
    int n = 0, ok = 1;
    for (int i = 0; i < s->n && ok; i++) {
        const pipe_action *a = &s->a[i];
        if (a->kind == PIPE_XFER) continue;
        ok = n < 2 * K * v && want[n].forward == (a->kind == PIPE_FORWARD) &&
             want[n].mb == (uint32_t)a->mb && want[n].chunk == (uint32_t)a->chunk;
        n++;
    }
    free(want);
    return ok && n == 2 * K * v;
}

/* One stage's list on its own: completeness, data before use, buffers. */
static int stage_ok(const pipe_schedule *s, int pp, int v, int K) {
    int n = K * v, ok = 1, last_bwd = -1, *fslot = malloc(sizeof(int) * (size_t)n);
    int *got_in = malloc(sizeof(int) * (size_t)n), *got_grad = malloc(sizeof(int) * (size_t)n);
    int *busy = calloc((size_t)s->slots + 1, sizeof(int)), *gbusy = calloc((size_t)n, sizeof(int));
    int fwds = 0, bwds = 0, first = s->stage == 0, last = s->stage == pp - 1;
    for (int i = 0; i < n; i++)
        fslot[i] = got_in[i] = got_grad[i] = -1;
    for (int i = 0; i < s->n && ok; i++) {
        const pipe_action *a = &s->a[i];
        int id = a->mb * v + a->chunk, head = last && a->chunk == v - 1;
        if (a->kind == PIPE_FORWARD) {
            int received = !(first && a->chunk == 0);
            ok = ok && fslot[id] == -1 && a->slot >= 0 && a->slot < s->slots;
            ok = ok && (received ? got_in[id] == a->slot : !busy[a->slot]);
            ok = ok && (head ? a->slot < s->head_slots : a->slot >= s->head_slots);
            if (!ok) break;
            busy[a->slot] = 1, fslot[id] = a->slot, fwds++, last_bwd = -1;
        } else if (a->kind == PIPE_BACKWARD) {
            ok = ok && fslot[id] == a->slot && a->slot >= 0;
            ok = ok && (head ? a->grad_in == -1 : a->grad_in >= 0 && got_grad[id] == a->grad_in);
            if (!ok) break;
            busy[a->slot] = 0, fslot[id] = -2, bwds++, last_bwd = id;
            if (a->grad_in >= 0) gbusy[a->grad_in] = 0;
        } else {
            for (int j = 0; j < a->n_ops && ok; j++) {
                const pipe_op *o = &a->ops[j];
                int oid = o->mb * v + o->chunk;
                if (o->buf == PIPE_BUF_INPUT) {
                    ok = o->index < s->slots && !busy[o->index] && got_in[oid] == -1;
                    busy[o->index] = 1, got_in[oid] = o->index;
                } else if (o->buf == PIPE_BUF_GRAD_IN) {
                    ok = o->index < s->grad_bufs && !gbusy[o->index] && got_grad[oid] == -1;
                    gbusy[o->index] = 1, got_grad[oid] = o->index;
                } else if (o->buf == PIPE_BUF_OUTPUT) {
                    ok = fslot[oid] == o->index && !(last && o->chunk == v - 1);
                } else {
                    ok = last_bwd == oid && !(first && o->chunk == 0);
                }
            }
        }
    }
    ok = ok && fwds == n && bwds == n;
    free(fslot), free(got_in), free(got_grad), free(busy), free(gbusy);
    return ok;
}

static void check_case(int pp, int v, int K) {
    sim_stage S[MAXPP];
    memset(S, 0, sizeof S);
    bt_diag d;
    bt_diag_init(&d);
    int ok = 1;
    for (int st = 0; st < pp; st++)
        CHECK(pipe_schedule_make(pp, st, K, v, &S[st].s, &d) == 0);
    for (int st = 0; st < pp; st++) {
        const pipe_schedule *s = &S[st].s;
        int G = (int)pipe_order_last_group((uint32_t)pp, (uint32_t)K);
        int warm = 2 * (pp - st - 1) + (v - 1) * G + 1,
            want = K == pp || warm > K * v ? K * v : warm;
        if (st == pp - 1 && K > pp) want++; /* the head's slot is its own */
        if (!stage_ok(s, pp, v, K)) fprintf(stderr, "stage %d: list inconsistent\n", st), ok = 0;
        if (!order_ok(s, pp, v, K)) fprintf(stderr, "stage %d: not pipe_order's\n", st), ok = 0;
        if (K % pp == 0 && s->slots != want)
            fprintf(stderr, "stage %d: %d slots, want %d\n", st, s->slots, want), ok = 0;
        if (K % pp == 0 && st == pp - 1 && K > pp && s->head_slots != 1)
            fprintf(stderr, "last stage: %d head slots\n", s->head_slots), ok = 0;
        /* the larger last group: inputs arrive up to G - pp steps early, at most G more */
        int most = want + G < K * v ? want + G : K * v;
        /* the steady state repeats: from two groups on the buffers are 2 pp + K mod pp's
         * (what the planner makes to count them, stages/plan_memory.c) */
        pipe_schedule r;
        if (K >= 3 * pp && pipe_schedule_make(pp, st, 2 * pp + K % pp, v, &r, &d) == 0) {
            if (r.slots != s->slots || r.head_slots != s->head_slots || r.grad_bufs != s->grad_bufs)
                fprintf(stderr, "stage %d: buffers not those of %d micro-batches\n", st,
                        2 * pp + K % pp),
                    ok = 0;
            pipe_schedule_free(&r);
        }
        if (K % pp != 0 && (s->slots > most || s->head_slots > G))
            fprintf(stderr, "stage %d: %d slots (head %d), above %d (%d)\n", st, s->slots,
                    s->head_slots, most, G),
                ok = 0;
    }
    int order = same_order(S, pp), done = simulate(S, pp);
    printf("pp %d, v %d, K %2d: slots", pp, v, K);
    for (int st = 0; st < pp; st++)
        printf(" %d", S[st].s.slots);
    printf(" (head %d), gradient buffers", S[pp - 1].s.head_slots);
    for (int st = 0; st < pp; st++)
        printf(" %d", S[st].s.grad_bufs);
    printf("; %d of %d stages finish, order %s\n", done, pp, order ? "matches" : "DIFFERS");
    CHECK(ok);
    CHECK(order);
    CHECK(done == pp);
    for (int st = 0; st < pp; st++)
        pipe_schedule_free(&S[st].s);
}

static void check_refused(void) {
    pipe_schedule s;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(pipe_schedule_make(4, 0, 3, 2, &s, &d) == BT_EINVAL); /* K below pp */
    CHECK(strstr(d.msg, "fewer than the 4 stages") != NULL);
    CHECK(pipe_schedule_make(1, 0, 4, 2, &s, &d) == BT_EINVAL);
    CHECK(pipe_schedule_make(2, 0, 4, 1, &s, &d) == BT_EINVAL);
}

int main(void) {
    int pps[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof pps / sizeof *pps; i++)
        for (int v = 2; v <= 4; v++)
            for (int K = pps[i]; K <= 4 * pps[i] + 1; K++)
                check_case(pps[i], v, K);
    check_refused();
    return check_status();
}
