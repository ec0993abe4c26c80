/* ZeRO-3's gathers in a step, from a replay of a pipeline stage's passes through the
 * model's two gather buffers (plan.h: plan_zero3_gathered). */
#include "pipe_order.h"
#include "plan.h"

/* ZeRO-3's two gather buffers as worker/engine/model_zero.c uses them. */
typedef struct zero_sim {
    int buf[2], cur, resident;
    const plan_zero_unit *unit;
    double gathered; /* parameters a rank sends in the step's all-gathers */
} zero_sim;

double plan_zero_unit_volume(const plan_zero_unit *u) {
    return (double)(u->group - 1) * (double)u->chunk;
}

static int zero_sim_holding(const zero_sim *z, int u) {
    return z->buf[0] == u ? 0 : z->buf[1] == u ? 1 : -1;
}

/* Unit u in use (gathered unless a buffer holds it), then next prefetched. */
static void zero_sim_use(zero_sim *z, int u, int next) {
    int i = zero_sim_holding(z, u);
    if (i < 0) {
        i = z->resident >= 0 ? 1 - z->cur : z->cur;
        z->buf[i] = u, z->gathered += plan_zero_unit_volume(&z->unit[u]);
    }
    z->cur = i, z->resident = u;
    if (next >= 0 && next != u && zero_sim_holding(z, next) < 0)
        z->buf[1 - i] = next, z->gathered += plan_zero_unit_volume(&z->unit[next]);
}

/* One pass of chunk c on stage `stage` of n layers (worker/engine/model_pass.c): its
 * units [lo, hi], forward in order, backward in reverse (each layer used twice under full
 * recomputation: the recomputed forward, then the backward), each prefetching the next in
 * the pass. */
static void zero_sim_pass(zero_sim *z, const plan_stage *ps, uint32_t stage, uint32_t n, uint32_t c,
                          int forward) {
    const plan_shape *sh = &ps->shape;
    uint32_t v = sh->virtual_stages > 1 ? sh->virtual_stages : 1, c0, len;
    plan_pp_chunk_span(&ps->params, sh->pp, v, stage, c, &c0, &len);
    int embed = stage == 0, head = stage + 1 == sh->pp;
    int lo = embed && c == 0 ? 0 : embed + (int)c0;
    int hi = head && c == v - 1 ? embed + (int)n : embed + (int)(c0 + len) - 1;
    int full = sh->recompute == BATON__STAGE__RECOMPUTE__FULL;
    for (int k = 0; k <= hi - lo; k++) {
        int u = forward ? lo + k : hi - k, next = forward ? u + 1 : u - 1;
        next = next >= lo && next <= hi ? next : -1;
        int layer = u >= embed && u < embed + (int)n;
        if (!forward && full && layer) zero_sim_use(z, u, next);
        zero_sim_use(z, u, next);
    }
}

/* The gathers of a step of K micro-batches, every pass replayed (no list: pipe_order_at);
 * the step starts with nothing resident. */
static double zero3_replay(const plan_stage *ps, uint32_t stage, const plan_zero_unit *unit,
                           uint32_t v, uint32_t K) {
    const plan_shape *sh = &ps->shape;
    uint32_t first, n, n_moe;
    plan_pp_stage_layers(&ps->params, sh->pp, v, stage, &first, &n, &n_moe);
    zero_sim z = {.buf = {-1, -1}, .cur = 0, .resident = -1, .unit = unit};
    for (uint64_t i = 0, passes = 2 * (uint64_t)K * v; i < passes; i++) {
        pipe_pass p = pipe_order_at(sh->pp, v, K, stage, i);
        zero_sim_pass(&z, ps, stage, n, p.chunk, p.forward);
    }
    return z.gathered;
}

double plan_zero3_gathered(const plan_stage *ps, uint32_t stage, const plan_zero_unit *unit,
                           uint64_t max_chunks) {
    const plan_shape *sh = &ps->shape;
    uint32_t v = sh->pp > 1 && sh->virtual_stages > 1 ? sh->virtual_stages : 1;
    uint64_t K = ps->microbatches, pp = sh->pp > 1 ? sh->pp : 1;
    if (K * v <= max_chunks || K <= 8 * pp) return zero3_replay(ps, stage, unit, v, (uint32_t)K);
    /* Past the warmup the order repeats every pp micro-batches (a group), and so do the
     * buffers' states: a step of K1 = K - j pp (6 pp to 7 pp - 1, the same last group)
     * and one of K1 + pp tell the gathers one more group adds. */
    uint64_t K1 = 6 * pp + K % pp;
    double g1 = zero3_replay(ps, stage, unit, v, (uint32_t)K1);
    double g2 = zero3_replay(ps, stage, unit, v, (uint32_t)(K1 + pp));
    return g1 + (double)((K - K1) / pp) * (g2 - g1);
}
