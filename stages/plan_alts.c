/* plan_find_alternatives: for a stage whose heaviest rank does not fit, the settings that
 * do fit on the same devices, found by planning each candidate as the stage is planned:
 * tp and pp (dp taking the rest of the devices; cp and ep as the recipe has them), ZeRO,
 * the recomputation and the micro-batch. The fastest few are kept. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

/* Whether the recipe's validation would take tp and pp for this stage (the checks of
 * orchestrator/recipe/validate.c that the sizes meet). */
static int alt_valid_split(const plan_stage *ps, uint32_t tp, uint32_t pp) {
    const plan_shape *sh = &ps->shape;
    uint32_t kv = sh->n_kv_heads;
    if (sh->n_heads % tp || (kv % tp && tp % kv) || sh->ffn % tp || sh->vocab % tp) return 0;
    if (pp > sh->n_layers) return 0;
    uint64_t rows = sh->seq_len / sh->cp;
    if (tp > 1 && ps->shape.sequence_parallel && rows % tp) return 0;
    if (sh->cp_ulysses && sh->cp > 1) {
        uint32_t kv_tp = kv >= tp ? kv / tp : 1;
        if (sh->n_heads % (tp * sh->cp) || kv_tp % sh->cp) return 0;
    }
    return 1;
}

/* Plans candidate c (its tp, pp, dp, zero, recompute, micro_batch set) into alt, a copy
 * of ps: 1 when it is valid and its heaviest rank fits, with its step time. */
static int alt_plan(const plan_stage *ps, const plan_alt *c, plan_stage *alt) {
    const plan_shape *sh = &ps->shape;
    if (sh->global_batch % (c->micro_batch * c->dp) != 0) return 0;
    *alt = *ps;
    plan_shape *a = &alt->shape;
    int sp = sh->sequence_parallel || sh->tp == 1; /* the recipe's, or the default: on */
    a->tp = c->tp, a->pp = c->pp, a->dp = c->dp, a->zero = c->zero;
    a->recompute = c->recompute, a->micro_batch = c->micro_batch;
    a->virtual_stages = c->virtual_stages;
    a->sequence_parallel = sp && c->tp > 1;
    if (c->pp != sh->pp || c->virtual_stages != sh->virtual_stages)
        alt->params.stage_layers = NULL, alt->params.n_stage_layers = 0;
    alt->microbatches = (a->global_batch + a->micro_batch * a->dp - 1) / (a->micro_batch * a->dp);
    if (a->virtual_stages > 1 && alt->microbatches < a->pp) return 0;
    char order[64];
    bt_diag d;
    bt_diag_init(&d);
    if (layout_order_full(ps->lay.order, order, sizeof order) != BT_OK ||
        layout_init(&alt->lay, a->tp, a->cp, a->dp, a->pp, a->ep, plan_folds_experts(alt), order,
                    a->gpus_per_node, &d) != BT_OK)
        return 0;
    plan_memory_estimate(alt, &alt->mem);
    if (alt->mem.fits != 1) return 0;
    plan_comm_estimate(alt, &alt->comm);
    plan_time_estimate(alt);
    return 1;
}

/* How many settings c changes from the stage's. */
static int alt_changes(const plan_shape *sh, const plan_alt *c) {
    return (c->tp != sh->tp) + (c->pp != sh->pp) + (c->dp != sh->dp) + (c->zero != sh->zero) +
           (c->recompute != sh->recompute) + (c->micro_batch != sh->micro_batch) +
           (c->virtual_stages != sh->virtual_stages);
}

/* Whether a is better than b: one that fits with room (PLAN_MEMORY_HEADROOM) first, then
 * the shorter step (where the step time is known), then fewer changes, less memory. */
static int alt_better(const plan_alt *a, const plan_alt *b) {
    if (a->tight != b->tight) return !a->tight;
    if (a->step_time_s > 0 && b->step_time_s > 0 && a->step_time_s != b->step_time_s)
        return a->step_time_s < b->step_time_s;
    if (a->changes != b->changes) return a->changes < b->changes;
    return a->memory < b->memory;
}

/* Keeps c among the best PLAN_MAX_ALTS in ps->alts, in order; of candidates with the
 * same tp and pp (ZeRO, recomputation and micro-batch variants of one split) only the
 * best, so that the few offered are different layouts. */
static void alt_keep(plan_stage *ps, const plan_alt *c) {
    for (int k = 0; k < ps->n_alts; k++) {
        plan_alt *o = &ps->alts[k];
        if (o->tp != c->tp || o->pp != c->pp) continue;
        if (!alt_better(c, o)) return;
        memmove(o, o + 1, (size_t)(ps->n_alts - k - 1) * sizeof *o); /* c replaces it */
        ps->n_alts--;
        break;
    }
    int at = ps->n_alts;
    while (at > 0 && alt_better(c, &ps->alts[at - 1]))
        at--;
    if (at >= PLAN_MAX_ALTS) return;
    int n = ps->n_alts < PLAN_MAX_ALTS ? ps->n_alts : PLAN_MAX_ALTS - 1;
    memmove(&ps->alts[at + 1], &ps->alts[at], (size_t)(n - at) * sizeof *ps->alts);
    ps->alts[at] = *c;
    ps->n_alts = n + 1;
}

/* The candidates of one tp x pp split: ZeRO from the stage's up, the recomputation from
 * the stage's up, the micro-batch from the stage's down (halving, and 1). */
static void alt_split(plan_stage *ps, plan_stage *scratch, plan_alt c) {
    const plan_shape *sh = &ps->shape;
    uint64_t mbs[24];
    int n_mb = 0;
    for (uint64_t mb = sh->micro_batch; mb >= 1 && n_mb < 23; mb /= 2)
        mbs[n_mb++] = mb;
    if (mbs[n_mb - 1] != 1) mbs[n_mb++] = 1;
    for (uint32_t z = sh->zero; z <= 3; z++)
        for (int r = sh->recompute; r <= BATON__STAGE__RECOMPUTE__FULL; r++)
            for (int k = 0; k < n_mb; k++) {
                c.zero = z, c.recompute = (Baton__Stage__Recompute)r, c.micro_batch = mbs[k];
                if (z > 0 && z > sh->zero && (uint64_t)c.dp * sh->cp < 2) continue;
                if (alt_changes(sh, &c) == 0 || !alt_plan(ps, &c, scratch)) continue;
                c.memory = scratch->mem.total;
                c.step_time_s = scratch->step_time_s;
                c.tight = c.memory > PLAN_MEMORY_HEADROOM * scratch->mem.capacity;
                c.changes = alt_changes(sh, &c);
                alt_keep(ps, &c);
            }
}

void plan_find_alternatives(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    ps->n_alts = 0;
    if (ps->mem.fits != 0) return;
    plan_stage *scratch = malloc(sizeof *scratch);
    if (scratch == NULL) return;
    uint32_t world = ps->lay.world, cells = world / sh->cp;
    uint32_t most_tp = sh->tp > sh->gpus_per_node ? sh->tp : sh->gpus_per_node;
    for (uint32_t tp = 1; tp <= cells && tp <= most_tp; tp++) {
        if (cells % tp) continue;
        for (uint32_t pp = 1; pp <= cells / tp; pp++) {
            if ((cells / tp) % pp || !alt_valid_split(ps, tp, pp)) continue;
            plan_alt c = {.tp = tp, .pp = pp, .dp = cells / tp / pp, .virtual_stages = 1};
            uint32_t v = sh->virtual_stages; /* kept where it still interleaves */
            if (v > 1 && pp > 1 && sh->n_layers % (pp * v) == 0) c.virtual_stages = v;
            alt_split(ps, scratch, c);
        }
    }
    free(scratch);
}

const char *plan_alt_keys(const plan_shape *sh, const plan_alt *a, char *buf, size_t cap) {
    static const char *const rc[] = {"none", "selective", "full"};
    char par[160] = "";
    size_t o = 0;
#define PAR(cond, ...)                                                                             \
    if ((cond) && o < sizeof par)                                                                  \
        o += (size_t)snprintf(par + o, sizeof par - o, "%s", o ? ", " : ""),                       \
            o += o < sizeof par ? (size_t)snprintf(par + o, sizeof par - o, __VA_ARGS__) : 0;
    PAR(a->tp != sh->tp, "tp: %u", a->tp)
    PAR(a->pp != sh->pp, "pp: %u", a->pp)
    PAR(a->dp != sh->dp, "dp: %u", a->dp)
    PAR(a->zero != sh->zero, "zero: %u", a->zero)
    PAR(a->virtual_stages != sh->virtual_stages, "virtual_stages: %u", a->virtual_stages)
#undef PAR
    int n = 0;
    buf[0] = '\0';
    if (par[0]) n += snprintf(buf, cap, "parallel: {%s}", par);
    if (a->recompute != sh->recompute && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, "%srecompute: %s", n ? ", " : "",
                      rc[a->recompute <= 2 ? a->recompute : 0]);
    if (a->micro_batch != sh->micro_batch && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "%smicro_batch: %llu", n ? ", " : "",
                 (unsigned long long)a->micro_batch);
    return buf;
}
