/* The pipeline bubble from a replay of the schedule (plan.h: plan_pp_bubble,
 * plan_pp_replay). Computations take their chunk's time, transfers none.
 *  - 1F1B (v = 1): each stage runs its passes in the order the workers run them
 *    (pipe_order.h), a pass starting when its stage has finished the one before and its
 *    input is there: a forward needs the same on the stage before, a backward the same
 *    on the stage after (the last stage's: its own forward, the loss). The worker's
 *    1F1B receives only what its next pass needs, so this is its timing.
 *  - Interleaved (v > 1): the workers' own action lists (pipe_schedule.h), whose batches
 *    of transfers wait for all their receives together (a stage's next forward can wait
 *    for a gradient it does not need yet); sends are posted at once and never wait.
 * So this is the bubble of the compute alone, as Megatron's (pp - 1)/(v m + pp - 1) is
 * for equal stages. The stages are swept up and down in turn until every one has run
 * (the forwards' inputs come from below, the backwards' from above). */
#include <stdlib.h>

#include "pipe_order.h"
#include "pipe_schedule.h"
#include "plan.h"

#define REPLAY_MAX_PASSES (1u << 22) /* 1F1B; beyond: the equal-stage formula, scaled */
#define REPLAY_MAX_CHUNKS (1u << 16) /* interleaved: pp K v (the action lists' memory) */

typedef struct replay {
    uint32_t pp, v, K;
    const double *fwd, *bwd;
    pipe_pass *order; /* stage s's 2 K v passes at s * 2 K v */
    double *fend;     /* [s][mb][c]: when the forward ended; < 0: not yet */
    double *bend;     /* the same for the backward */
    size_t *next;     /* each stage's next pass */
    double *free_at;  /* when each stage is free */
} replay;

static size_t at(const replay *r, uint32_t s, uint32_t mb, uint32_t c) {
    return ((size_t)s * r->K + mb) * r->v + c;
}

/* When pass p of stage s may start as far as its input goes; < 0 while it is not there. */
static double input_ready(const replay *r, uint32_t s, const pipe_pass *p) {
    if (p->forward) {
        if (s > 0) return r->fend[at(r, s - 1, p->mb, p->chunk)];
        return p->chunk > 0 ? r->fend[at(r, r->pp - 1, p->mb, p->chunk - 1)] : 0;
    }
    if (s + 1 < r->pp) return r->bend[at(r, s + 1, p->mb, p->chunk)];
    if (p->chunk + 1 < r->v) return r->bend[at(r, 0, p->mb, p->chunk + 1)];
    return r->fend[at(r, s, p->mb, p->chunk)];
}

/* Runs stage s as far as its inputs allow; the passes it ran. */
static size_t advance(replay *r, uint32_t s) {
    size_t total = 2 * (size_t)r->K * r->v, ran = 0;
    while (r->next[s] < total) {
        const pipe_pass *p = &r->order[s * total + r->next[s]];
        double ready = input_ready(r, s, p);
        if (ready < 0) break;
        double start = ready > r->free_at[s] ? ready : r->free_at[s];
        double d = p->forward ? r->fwd[s * r->v + p->chunk] : r->bwd[s * r->v + p->chunk];
        r->free_at[s] = start + d;
        (p->forward ? r->fend : r->bend)[at(r, s, p->mb, p->chunk)] = start + d;
        r->next[s]++, ran++;
    }
    return ran;
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

/* Sweeps the stages up and down in turn (advance_fn: a stage as far as it goes; the work
 * it did) until `work` is done; 0, or -1 when a sweep does nothing (a deadlock). */
static int sweep(void *r, uint32_t pp, size_t work, size_t (*advance_fn)(void *, uint32_t)) {
    for (size_t done = 0, k = 0; done < work; k++) {
        size_t ran = 0;
        for (uint32_t i = 0; i < pp; i++)
            ran += advance_fn(r, k % 2 ? pp - 1 - i : i);
        if (ran == 0) return -1;
        done += ran;
    }
    return 0;
}

static size_t advance_any(void *r, uint32_t s) {
    return advance(r, s);
}

static double run(replay *r) {
    size_t total = 2 * (size_t)r->K * r->v, cells = (size_t)r->pp * r->K * r->v;
    for (uint32_t s = 0; s < r->pp; s++)
        pipe_order(r->pp, r->v, r->K, s, &r->order[s * total]);
    for (size_t i = 0; i < cells; i++)
        r->fend[i] = r->bend[i] = -1;
    if (sweep(r, r->pp, r->pp * total, advance_any) != 0) return -1; /* pipe_order is wrong */
    return idle_share(r);
}

/* Interleaved: the workers' action lists ---------------------------------------------- */

typedef struct xreplay {
    uint32_t pp, v, K;
    const double *fwd, *bwd;
    pipe_schedule *sched; /* each stage's */
    double *posted;       /* [tag]: when its send was posted; < 0: not yet */
    size_t *next;         /* each stage's next action */
    double *free_at;      /* when each stage is free */
} xreplay;

/* A batch of transfers: its sends posted when the stage gets to it, then done when every
 * receive's send was posted; 0 while one was not. */
static int xfer(xreplay *r, uint32_t s, const pipe_action *a) {
    double end = r->free_at[s];
    for (int j = 0; j < a->n_ops; j++)
        if (a->ops[j].kind == PIPE_SEND) r->posted[a->ops[j].tag] = r->free_at[s];
    for (int j = 0; j < a->n_ops; j++) {
        if (a->ops[j].kind != PIPE_RECV) continue;
        double p = r->posted[a->ops[j].tag];
        if (p < 0) return 0;
        end = p > end ? p : end;
    }
    r->free_at[s] = end;
    return 1;
}

static size_t xadvance(void *ctx, uint32_t s) {
    xreplay *r = ctx;
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

static double xrun(xreplay *r) {
    size_t work = 0, tags = 2 * (size_t)r->K * r->pp * r->v + 2;
    bt_diag d;
    bt_diag_init(&d);
    for (uint32_t s = 0; s < r->pp; s++) {
        if (pipe_schedule_make((int)r->pp, (int)s, (int)r->K, (int)r->v, &r->sched[s], &d) != 0)
            return -1;
        work += (size_t)r->sched[s].n;
    }
    for (size_t i = 0; i < tags; i++)
        r->posted[i] = -1;
    if (sweep(r, r->pp, work, xadvance) != 0) return -1;
    replay idle = {
        .pp = r->pp, .v = r->v, .K = r->K, .fwd = r->fwd, .bwd = r->bwd, .free_at = r->free_at};
    return idle_share(&idle);
}

static double replay_interleaved(uint32_t pp, uint32_t v, uint32_t K, const double *fwd,
                                 const double *bwd) {
    size_t tags = 2 * (size_t)K * pp * v + 2;
    xreplay r = {.pp = pp, .v = v, .K = K, .fwd = fwd, .bwd = bwd};
    r.sched = calloc(pp, sizeof *r.sched);
    r.posted = malloc(tags * sizeof *r.posted);
    r.next = calloc(pp, sizeof *r.next);
    r.free_at = calloc(pp, sizeof *r.free_at);
    double idle = -1;
    if (r.sched && r.posted && r.next && r.free_at) idle = xrun(&r);
    for (uint32_t s = 0; r.sched != NULL && s < pp; s++)
        pipe_schedule_free(&r.sched[s]);
    free(r.sched);
    free(r.posted);
    free(r.next);
    free(r.free_at);
    return idle;
}

double plan_pp_replay(uint32_t pp, uint32_t v, uint32_t K, const double *fwd, const double *bwd) {
    v = v > 1 ? v : 1;
    if (pp < 1 || K < 1 || (v > 1 && K < pp)) return -1;
    size_t cells = (size_t)pp * K * v;
    if (v > 1)
        return pp < 2 || cells > REPLAY_MAX_CHUNKS ? -1 : replay_interleaved(pp, v, K, fwd, bwd);
    replay r = {.pp = pp, .v = v, .K = K, .fwd = fwd, .bwd = bwd};
    r.order = malloc(2 * cells * sizeof *r.order);
    r.fend = malloc(cells * sizeof *r.fend);
    r.bend = malloc(cells * sizeof *r.bend);
    r.next = calloc(pp, sizeof *r.next);
    r.free_at = calloc(pp, sizeof *r.free_at);
    double idle = -1;
    if (r.order && r.fend && r.bend && r.next && r.free_at) idle = run(&r);
    free(r.order);
    free(r.fend);
    free(r.bend);
    free(r.next);
    free(r.free_at);
    return idle;
}

/* Too many passes to replay (or no memory): the equal-stage bubble, the slowest stage
 * setting the pace of every pass (balance: its compute over the mean). */
static double estimate(const plan_stage *ps, double m) {
    const plan_shape *sh = &ps->shape;
    double equal = (sh->pp - 1.0) / (sh->virtual_stages * m + sh->pp - 1.0), balance, mean = 0;
    double most = 0;
    for (uint32_t s = 0; s < sh->pp; s++) {
        double w = 0, f, b;
        for (uint32_t c = 0; c < sh->virtual_stages; c++)
            plan_pp_chunk_flops(ps, s, c, &f, &b), w += f + b;
        mean += w / sh->pp, most = w > most ? w : most;
    }
    balance = mean > 0 ? most / mean : 1;
    return 1 - (1 - equal) / balance;
}

double plan_pp_bubble(const plan_stage *ps, int *replayed) {
    const plan_shape *sh = &ps->shape;
    uint32_t pp = sh->pp, v = sh->virtual_stages > 1 ? sh->virtual_stages : 1;
    double m = ps->microbatches ? (double)ps->microbatches : 1;
    *replayed = 0;
    if (pp < 2) return 0;
    if (m * pp * v > REPLAY_MAX_PASSES || (v > 1 && m < pp)) return estimate(ps, m);
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
    return idle >= 0 ? idle : estimate(ps, m);
}
