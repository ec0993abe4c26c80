/* The pipeline bubble from a replay of the workers' schedule (plan.h: plan_pp_bubble,
 * plan_pp_replay): each stage runs the list of computations and batches of transfers its
 * worker runs (pipe_schedule.h: the interleaved lists, and 1F1B's as pipeline_run_1f1b
 * makes them), a computation taking its chunk's time, a transfer none. A batch is posted
 * when the stage gets to it and completes when every one of its transfers has met its
 * other end, a send its receive as much as a receive its send (Gloo's batches complete
 * whole; on a CUDA queue a batch with a receive waits for the sends under way too), so a
 * stage's next forward can wait for a gradient it does not need yet, or for a neighbour
 * to take its output. So this is the bubble of the compute alone, as Megatron's
 * (pp - 1)/(v m + pp - 1) is for equal stages. The stages are swept up and down in turn
 * until every one has run (the forwards' inputs come from below, the backwards' from
 * above). */
#include <stdlib.h>

#include "pipe_schedule.h"
#include "plan.h"

/* beyond pp m v: the equal-stage formula at the slowest stage's pace (the lists' memory) */
#define REPLAY_MAX_CELLS (1u << 17)

typedef struct replay {
    uint32_t pp, v, K;
    const double *fwd, *bwd;
    pipe_schedule *sched; /* each stage's */
    double *sent, *recvd; /* [tag]: when the send, the receive was posted; < 0: not yet */
    size_t *next;         /* each stage's next action */
    double *free_at;      /* when each stage is free */
} replay;

/* A batch of transfers: posted when the stage gets to it, done when every op has met its
 * other end; 0 while one has not. */
static int xfer(replay *r, uint32_t s, const pipe_action *a) {
    double t = r->free_at[s], end = t;
    for (int j = 0; j < a->n_ops; j++) {
        double *mine = a->ops[j].kind == PIPE_SEND ? r->sent : r->recvd;
        if (mine[a->ops[j].tag] < 0) mine[a->ops[j].tag] = t;
    }
    for (int j = 0; j < a->n_ops; j++) {
        double other = (a->ops[j].kind == PIPE_SEND ? r->recvd : r->sent)[a->ops[j].tag];
        if (other < 0) return 0;
        end = other > end ? other : end;
    }
    r->free_at[s] = end;
    return 1;
}

/* Runs stage s as far as its transfers allow; the actions it ran. */
static size_t advance(replay *r, uint32_t s) {
    const pipe_schedule *sc = &r->sched[s];
    size_t ran = 0;
    while (r->next[s] < (size_t)sc->n) {
        const pipe_action *a = &sc->a[r->next[s]];
        if (a->kind == PIPE_XFER) {
            if (!xfer(r, s, a)) break;
        } else {
            const double *d = a->kind == PIPE_FORWARD ? r->fwd : r->bwd;
            r->free_at[s] += d[s * r->v + (uint32_t)a->chunk];
        }
        r->next[s]++, ran++;
    }
    return ran;
}

/* Every stage run to its end by sweeps up and down in turn; 0, or -1 when a sweep does
 * nothing (a schedule that deadlocks: a bug in its lists). */
static int sweep(replay *r, size_t work) {
    for (size_t done = 0, k = 0; done < work; k++) {
        size_t ran = 0;
        for (uint32_t i = 0; i < r->pp; i++)
            ran += advance(r, k % 2 ? r->pp - 1 - i : i);
        if (ran == 0) return -1;
        done += ran;
    }
    return 0;
}

/* The idle share once every stage has run: 1 - busy / (pp x the last end). */
static double idle_share(const replay *r) {
    double end = 0, busy = 0;
    for (uint32_t s = 0; s < r->pp; s++) {
        end = r->free_at[s] > end ? r->free_at[s] : end;
        for (uint32_t c = 0; c < r->v; c++)
            busy += (double)r->K * (r->fwd[s * r->v + c] + r->bwd[s * r->v + c]);
    }
    return end > 0 ? 1 - busy / (r->pp * end) : 0;
}

struct plan_pp_replayer {
    replay r;
    size_t work, tags;
};

plan_pp_replayer *plan_pp_replayer_new(uint32_t pp, uint32_t v, uint32_t K) {
    v = v > 1 ? v : 1;
    size_t cells = (size_t)pp * K * v;
    if (pp < 2 || K < 1 || (v > 1 && K < pp) || cells > REPLAY_MAX_CELLS) return NULL;
    plan_pp_replayer *x = calloc(1, sizeof *x);
    if (x == NULL) return NULL;
    replay *r = &x->r;
    *r = (replay){.pp = pp, .v = v, .K = K};
    x->tags = 2 * cells + 2;
    r->sched = calloc(pp, sizeof *r->sched);
    r->sent = malloc(x->tags * sizeof *r->sent);
    r->recvd = malloc(x->tags * sizeof *r->recvd);
    r->next = calloc(pp, sizeof *r->next);
    r->free_at = calloc(pp, sizeof *r->free_at);
    int ok = r->sched && r->sent && r->recvd && r->next && r->free_at;
    bt_diag d;
    bt_diag_init(&d);
    for (uint32_t s = 0; ok && s < pp; s++) {
        int rc = v > 1 ? pipe_schedule_make((int)pp, (int)s, (int)K, (int)v, &r->sched[s], &d)
                       : pipe_schedule_make_1f1b((int)pp, (int)s, (int)K, &r->sched[s], &d);
        ok = rc == 0;
        x->work += ok ? (size_t)r->sched[s].n : 0;
    }
    if (!ok) plan_pp_replayer_free(x), x = NULL;
    return x;
}

void plan_pp_replayer_free(plan_pp_replayer *x) {
    if (x == NULL) return;
    replay *r = &x->r;
    for (uint32_t s = 0; r->sched != NULL && s < r->pp; s++)
        pipe_schedule_free(&r->sched[s]);
    free(r->sched);
    free(r->sent);
    free(r->recvd);
    free(r->next);
    free(r->free_at);
    free(x);
}

double plan_pp_replayer_run(plan_pp_replayer *x, const double *fwd, const double *bwd) {
    replay *r = &x->r;
    r->fwd = fwd, r->bwd = bwd;
    for (size_t i = 0; i < x->tags; i++)
        r->sent[i] = r->recvd[i] = -1;
    for (uint32_t s = 0; s < r->pp; s++)
        r->next[s] = 0, r->free_at[s] = 0;
    return sweep(r, x->work) == 0 ? idle_share(r) : -1;
}

double plan_pp_replay(uint32_t pp, uint32_t v, uint32_t K, const double *fwd, const double *bwd) {
    plan_pp_replayer *x = plan_pp_replayer_new(pp, v, K);
    double idle = x != NULL ? plan_pp_replayer_run(x, fwd, bwd) : -1;
    plan_pp_replayer_free(x);
    return idle;
}

double plan_pp_bubble_equal(const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    double m = ps->microbatches ? (double)ps->microbatches : 1, v = sh->virtual_stages;
    return sh->pp > 1 ? (sh->pp - 1.0) / ((v > 1 ? v : 1) * m + sh->pp - 1.0) : 0;
}

/* Not replayed: the equal-stage bubble, the slowest stage setting the pace of every pass
 * (balance: its compute over the mean). */
static double estimate(const plan_stage *ps) {
    double balance;
    uint32_t slowest;
    plan_pp_balance(ps, &balance, &slowest);
    return 1 - (1 - plan_pp_bubble_equal(ps)) / balance;
}

double plan_pp_bubble(const plan_stage *ps, int *replayed) {
    const plan_shape *sh = &ps->shape;
    uint32_t pp = sh->pp, v = sh->virtual_stages > 1 ? sh->virtual_stages : 1;
    double m = ps->microbatches ? (double)ps->microbatches : 1;
    *replayed = 0;
    if (pp < 2) return 0;
    if (m * pp * v > REPLAY_MAX_CELLS || (v > 1 && m < pp)) return estimate(ps);
    double *fwd = malloc((size_t)pp * v * sizeof *fwd), *bwd = malloc((size_t)pp * v * sizeof *bwd);
    double idle = -1;
    if (fwd != NULL && bwd != NULL) {
        for (uint32_t s = 0; s < pp; s++)
            for (uint32_t c = 0; c < v; c++)
                plan_pp_chunk_flops(ps, s, c, &fwd[s * v + c], &bwd[s * v + c]);
        idle = plan_pp_replay(pp, v, (uint32_t)m, fwd, bwd);
    }
    free(fwd);
    free(bwd);
    *replayed = idle >= 0;
    return idle >= 0 ? idle : estimate(ps);
}
