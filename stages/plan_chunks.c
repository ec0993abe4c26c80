/* The interleaved pipeline's chunk lengths that even its stages' compute (plan.h:
 * plan_pp_best_chunks), and those for the shortest step (plan_pp_best_chunks_step: from
 * them, a local search on the replayed schedule, plan_pp_replayer, one layer across a
 * boundary at a time). Stage s holds the model's chunks s, s + pp, s + 2 pp, ..., so a
 * stage's compute is a sum over chunks that are not contiguous, and the exact search of
 * plan_pp_best_split does not apply. This is a local search instead: from the recipe's
 * lengths and from the even ones, move the boundary of two neighbouring chunks (different
 * stages) by 1, 2, 4, ... layers, the best such move at a time, while that lowers the
 * slowest stage, or keeps it and lowers the sum of the squares of the stages' compute
 * (which opens the way for a later move lowering it); the better of the two ends wins. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct chunk_search {
    size_t L, K, pp;   /* layers, chunks (pp v), stages */
    const double *pre; /* pre[i]: compute of layers [0, i) */
    double head;       /* on the last chunk */
    double *stage;     /* each stage's compute under the current lengths */
} chunk_search;

typedef struct chunk_cost {
    double most, squares;
} chunk_cost;

static chunk_cost cost_of_stages(const chunk_search *c) {
    chunk_cost r = {0, 0};
    for (size_t s = 0; s < c->pp; s++) {
        r.most = c->stage[s] > r.most ? c->stage[s] : r.most;
        r.squares += c->stage[s] * c->stage[s];
    }
    return r;
}

static chunk_cost cost_of(const chunk_search *c, const uint32_t *len) {
    memset(c->stage, 0, c->pp * sizeof *c->stage);
    size_t at = 0;
    for (size_t k = 0; k < c->K; k++) {
        c->stage[k % c->pp] += c->pre[at + len[k]] - c->pre[at];
        at += len[k];
    }
    c->stage[c->pp - 1] += c->head;
    return cost_of_stages(c);
}

/* a lower than b by more than rounding: the slowest stage first, then the squares */
static int lower(chunk_cost a, chunk_cost b) {
    double eps = 1e-12 * b.most;
    if (a.most < b.most - eps) return 1;
    return a.most <= b.most + eps && a.squares < b.squares * (1 - 1e-12);
}

typedef struct chunk_move {
    size_t k;   /* the boundary between chunks k and k + 1 */
    long shift; /* layers it moves: > 0 from k to k + 1, < 0 back */
} chunk_move;

/* The cost once the boundary after chunk k (at layer `at`) moves by shift; the stages'
 * compute is put back. */
static chunk_cost try_move(const chunk_search *c, size_t k, size_t at, long shift) {
    size_t a = k % c->pp, b = (k + 1) % c->pp;
    double w = shift > 0 ? c->pre[at] - c->pre[at - (size_t)shift]
                         : c->pre[at + (size_t)-shift] - c->pre[at];
    double sa = c->stage[a], sb = c->stage[b];
    c->stage[a] += shift > 0 ? -w : w, c->stage[b] += shift > 0 ? w : -w;
    chunk_cost got = cost_of_stages(c);
    c->stage[a] = sa, c->stage[b] = sb;
    return got;
}

/* The best move of a boundary by 1 layer, or (wide) by 1, 2, 4, ... (each chunk keeping one
 * or more), applied; 0 when none lowers the cost. */
static int best_move(const chunk_search *c, uint32_t *len, chunk_cost *cur, int wide) {
    chunk_move best_m = {0, 0};
    chunk_cost best = *cur;
    size_t at = 0;
    for (size_t k = 0; k + 1 < c->K; k++) {
        at += len[k];
        for (long t = 1; t < (long)len[k] && (wide || t == 1); t *= 2) {
            chunk_cost got = try_move(c, k, at, t);
            if (lower(got, best)) best = got, best_m = (chunk_move){k, t};
        }
        for (long t = 1; t < (long)len[k + 1] && (wide || t == 1); t *= 2) {
            chunk_cost got = try_move(c, k, at, -t);
            if (lower(got, best)) best = got, best_m = (chunk_move){k, -t};
        }
    }
    if (best_m.shift == 0) return 0;
    len[best_m.k] -= (uint32_t)best_m.shift, len[best_m.k + 1] += (uint32_t)best_m.shift;
    *cur = cost_of(c, len);
    return 1;
}

static chunk_cost descend(const chunk_search *c, uint32_t *len, int wide) {
    chunk_cost cur = cost_of(c, len);
    for (size_t i = 0; i < 8 * c->L && best_move(c, len, &cur, wide); i++) {
    }
    return cur;
}

/* From start (K lengths): the better of the narrow and the wide descents, into split. */
static chunk_cost descend_both(const chunk_search *c, const uint32_t *start, uint32_t *split,
                               uint32_t *tmp) {
    memcpy(split, start, c->K * sizeof *split);
    memcpy(tmp, start, c->K * sizeof *tmp);
    chunk_cost a = descend(c, split, 0), b = descend(c, tmp, 1);
    if (lower(b, a)) memcpy(split, tmp, c->K * sizeof *split), a = b;
    return a;
}

double plan_pp_best_chunks(const plan_stage *ps, uint32_t *split) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    size_t L = sh->n_layers, pp = sh->pp, K = (size_t)pp * sh->virtual_stages;
    if (pp < 2 || sh->virtual_stages < 2 || K > L || K > PLAN_MAX_SPLIT) return 0;
    double *pre = calloc(L + 1, sizeof *pre), *stage = calloc(pp, sizeof *stage);
    uint32_t *even = calloc(3 * K, sizeof *even), *alt = even + K, *tmp = even + 2 * K;
    double result = 0;
    if (pre != NULL && stage != NULL && even != NULL) {
        for (size_t l = 0; l < L; l++)
            pre[l + 1] = pre[l] + plan_pp_layer_flops(ps, (uint32_t)l);
        chunk_search c = {L, K, pp, pre, plan_pp_head_flops(ps), stage};
        for (size_t k = 0; k < K; k++)
            even[k] = (uint32_t)(L / K + (k < L % K));
        int listed = p->stage_layers != NULL && p->n_stage_layers == K;
        chunk_cost a = descend_both(&c, listed ? p->stage_layers : even, split, tmp);
        chunk_cost b = descend_both(&c, even, alt, tmp);
        if (lower(b, a)) memcpy(split, alt, K * sizeof *split), a = b;
        result = a.most * (double)pp / (pre[L] + c.head);
    }
    free(pre);
    free(stage);
    free(even);
    return result;
}

/* The step's search -------------------------------------------------------------------- */

#define STEP_MAX_CELLS (1u << 13)
#define STEP_MAX_MOVES 64

typedef struct step_search {
    size_t L, K, pp, v;
    const double *pre, *pre_f; /* prefix sums of the layers' compute and forward */
    double head;
    plan_pp_replayer *x;
    double *fwd, *bwd; /* (pp v) chunk times, stage s's chunk c at s v + c */
} step_search;

static double step_idle(const step_search *c, const uint32_t *len) {
    size_t at = 0;
    for (size_t k = 0; k < c->K; k++) {
        size_t i = (k % c->pp) * c->v + k / c->pp;
        double all = c->pre[at + len[k]] - c->pre[at], f = c->pre_f[at + len[k]] - c->pre_f[at];
        if (k + 1 == c->K) all += c->head, f += c->head / 3;
        c->fwd[i] = f, c->bwd[i] = all - f;
        at += len[k];
    }
    return plan_pp_replayer_run(c->x, c->fwd, c->bwd);
}

/* Single-layer moves while the replayed idle share drops (by more than rounding). */
static double step_descend(const step_search *c, uint32_t *len) {
    double cur = step_idle(c, len);
    for (int i = 0; i < STEP_MAX_MOVES && cur >= 0; i++) {
        size_t best_k = 0;
        int best_d = 0;
        double best = cur;
        for (size_t k = 0; k + 1 < c->K; k++)
            for (int d = -1; d <= 1; d += 2) { /* -1: chunk k gives a layer to k + 1 */
                uint32_t *from = d < 0 ? &len[k] : &len[k + 1], *to = d < 0 ? &len[k + 1] : &len[k];
                if (*from < 2) continue;
                (*from)--, (*to)++;
                double got = step_idle(c, len);
                (*from)++, (*to)--;
                if (got >= 0 && got < best - 1e-12) best = got, best_k = k, best_d = d;
            }
        if (best_d == 0) break;
        len[best_d < 0 ? best_k : best_k + 1]--, len[best_d < 0 ? best_k + 1 : best_k]++;
        cur = best;
    }
    return cur;
}

/* The replay's search from the three starts into split; the best idle share, -1: none. */
static double step_from_starts(const plan_stage *ps, step_search *c, uint32_t *split) {
    const plan_params *p = &ps->params;
    uint32_t *cand = calloc(c->K, sizeof *cand);
    double best = -1;
    for (int start = 0; cand != NULL && start < 3; start++) {
        if (start == 0) memcpy(cand, split, c->K * sizeof *cand);
        if (start == 1)
            for (size_t k = 0; k < c->K; k++)
                cand[k] = (uint32_t)(c->L / c->K + (k < c->L % c->K));
        if (start == 2 && (p->stage_layers == NULL || p->n_stage_layers != c->K)) continue;
        if (start == 2) memcpy(cand, p->stage_layers, c->K * sizeof *cand);
        double got = step_descend(c, cand);
        if (got >= 0 && (best < 0 || got < best - 1e-12))
            best = got, memcpy(split, cand, c->K * sizeof *split);
    }
    free(cand);
    return best;
}

double plan_pp_best_chunks_step(const plan_stage *ps, uint32_t *split, double *bubble) {
    const plan_shape *sh = &ps->shape;
    double ratio = plan_pp_best_chunks(ps, split);
    size_t L = sh->n_layers, pp = sh->pp, v = sh->virtual_stages, K = pp * v;
    *bubble = -1;
    if (ratio <= 0 || (double)pp * (double)ps->microbatches * (double)v > STEP_MAX_CELLS)
        return ratio;
    step_search c = {L, K, pp, v, NULL, NULL, plan_pp_head_flops(ps), NULL, NULL, NULL};
    double *pre = calloc(2 * (L + 1), sizeof *pre), *times = calloc(2 * K, sizeof *times);
    c.x = plan_pp_replayer_new((uint32_t)pp, (uint32_t)v, (uint32_t)ps->microbatches);
    if (pre != NULL && times != NULL && c.x != NULL) {
        double *pre_f = pre + L + 1;
        for (size_t l = 0; l < L; l++) {
            double f;
            pre[l + 1] = pre[l] + plan_pp_layer_flops_fwd(ps, (uint32_t)l, &f);
            pre_f[l + 1] = pre_f[l] + f;
        }
        c.pre = pre, c.pre_f = pre_f, c.fwd = times, c.bwd = times + K;
        *bubble = step_from_starts(ps, &c, split);
        double *stage = calloc(pp, sizeof *stage);
        chunk_search totals = {L, K, pp, pre, c.head, stage};
        if (stage != NULL) ratio = cost_of(&totals, split).most * (double)pp / (pre[L] + c.head);
        free(stage);
    }
    plan_pp_replayer_free(c.x);
    free(pre);
    free(times);
    return ratio;
}
