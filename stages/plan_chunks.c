/* The interleaved pipeline's chunk lengths that even its stages' compute (plan.h:
 * plan_pp_best_chunks). Stage s holds the model's chunks s, s + pp, s + 2 pp, ..., so a
 * stage's compute is a sum over chunks that are not contiguous, and the exact search of
 * plan_pp_best_split does not apply. This is a local search instead: from the recipe's
 * lengths and from the even ones, move one layer across the boundary of two neighbouring
 * chunks (different stages) while that lowers the slowest stage, or keeps it and lowers
 * the sum of the squares of the stages' compute (which opens the way for a later move
 * lowering it); the better of the two ends wins. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct chunk_search {
    size_t L, K, pp;   /* layers, chunks (pp v), stages */
    const double *pre; /* pre[i]: compute of layers [0, i) */
    double head;       /* on the last chunk */
    double *stage;     /* scratch: each stage's compute */
} chunk_search;

typedef struct chunk_cost {
    double most, squares;
} chunk_cost;

static chunk_cost cost_of(const chunk_search *c, const uint32_t *len) {
    memset(c->stage, 0, c->pp * sizeof *c->stage);
    size_t at = 0;
    for (size_t k = 0; k < c->K; k++) {
        c->stage[k % c->pp] += c->pre[at + len[k]] - c->pre[at];
        at += len[k];
    }
    c->stage[c->pp - 1] += c->head;
    chunk_cost r = {0, 0};
    for (size_t s = 0; s < c->pp; s++) {
        r.most = c->stage[s] > r.most ? c->stage[s] : r.most;
        r.squares += c->stage[s] * c->stage[s];
    }
    return r;
}

/* a lower than b by more than rounding: the slowest stage first, then the squares */
static int lower(chunk_cost a, chunk_cost b) {
    double eps = 1e-12 * b.most;
    if (a.most < b.most - eps) return 1;
    return a.most <= b.most + eps && a.squares < b.squares * (1 - 1e-12);
}

/* The best single move from len (chunk k gives a layer to k + 1 or takes one), applied;
 * 0 when none lowers the cost. */
static int best_move(const chunk_search *c, uint32_t *len, chunk_cost *cur) {
    size_t best_k = 0;
    int best_dir = 0;
    chunk_cost best = *cur;
    for (size_t k = 0; k + 1 < c->K; k++)
        for (int dir = -1; dir <= 1; dir += 2) { /* -1: k gives one to k + 1 */
            uint32_t *from = dir < 0 ? &len[k] : &len[k + 1], *to = dir < 0 ? &len[k + 1] : &len[k];
            if (*from < 2) continue;
            (*from)--, (*to)++;
            chunk_cost got = cost_of(c, len);
            (*from)++, (*to)--;
            if (lower(got, best)) best = got, best_k = k, best_dir = dir;
        }
    if (best_dir == 0) return 0;
    len[best_dir < 0 ? best_k : best_k + 1]--;
    len[best_dir < 0 ? best_k + 1 : best_k]++;
    *cur = best;
    return 1;
}

static chunk_cost descend(const chunk_search *c, uint32_t *len) {
    chunk_cost cur = cost_of(c, len);
    for (size_t i = 0; i < 8 * c->L && best_move(c, len, &cur); i++) {
    }
    return cur;
}

double plan_pp_best_chunks(const plan_stage *ps, uint32_t *split) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    size_t L = sh->n_layers, pp = sh->pp, K = (size_t)pp * sh->virtual_stages;
    if (pp < 2 || sh->virtual_stages < 2 || K > L || K > PLAN_MAX_SPLIT) return 0;
    double *pre = calloc(L + 1, sizeof *pre), *stage = calloc(pp, sizeof *stage);
    uint32_t *even = calloc(K, sizeof *even);
    double result = 0;
    if (pre != NULL && stage != NULL && even != NULL) {
        for (size_t l = 0; l < L; l++)
            pre[l + 1] = pre[l] + plan_pp_layer_flops(ps, (uint32_t)l);
        chunk_search c = {L, K, pp, pre, plan_pp_head_flops(ps), stage};
        for (size_t k = 0; k < K; k++)
            even[k] = (uint32_t)(L / K + (k < L % K));
        int listed = p->stage_layers != NULL && p->n_stage_layers == K;
        memcpy(split, listed ? p->stage_layers : even, K * sizeof *split);
        chunk_cost a = descend(&c, split), b = descend(&c, even);
        if (lower(b, a)) memcpy(split, even, K * sizeof *split), a = b;
        result = a.most * (double)pp / (pre[L] + c.head);
    }
    free(pre);
    free(stage);
    free(even);
    return result;
}
