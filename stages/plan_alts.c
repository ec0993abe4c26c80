/* plan_find_alternatives: for a stage whose heaviest rank does not fit, the settings that
 * do fit on the same devices, found by planning each candidate as the stage is planned:
 * tp and pp (dp taking the rest of the devices; cp and ep as the recipe has them), the
 * recipe's virtual_stages (where the split still interleaves) and none, ZeRO, the
 * recomputation and the micro-batch. The fastest few are kept.
 *
 * The search is bounded for any size: tp and pp range over the divisors of the devices,
 * the splits nearest the stage's (tp, pp) first; which groups cross nodes (a look at every
 * rank) is found once per split; and the splits planned are at most ALT_RANK_BUDGET / world
 * (ALT_MIN_SPLITS at least), so that a million devices take as long as a few thousand. */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ALT_RANK_BUDGET (1u << 24) /* world x splits planned, at most */
#define ALT_MIN_SPLITS  16
#define ALT_MAX_DIVS    2048 /* a uint32_t has at most 1344 divisors */

/* Whether the recipe's validation would take tp and pp for this stage (the checks of
 * orchestrator/recipe/validate.c that the sizes meet). */
static int alt_valid_split(const plan_stage *ps, uint32_t tp, uint32_t pp) {
    const plan_shape *sh = &ps->shape;
    uint32_t kv = sh->n_kv_heads;
    if (sh->n_heads % tp || (kv % tp && tp % kv) || sh->ffn % tp || sh->vocab % tp) return 0;
    if (pp > sh->n_layers) return 0;
    uint64_t rows = sh->seq_len / sh->cp;
    if (tp > 1 && ps->shape.sp_wanted && rows % tp) return 0;
    if (sh->cp_ulysses && sh->cp > 1) {
        uint32_t kv_tp = kv >= tp ? kv / tp : 1;
        if (sh->n_heads % (tp * sh->cp) || kv_tp % sh->cp) return 0;
    }
    return 1;
}

/* Which groups of one split's layout cross nodes, once found (alt_split). */
typedef struct alt_links {
    int known;
    int crosses[PLAN_COMM_NGROUPS];
} alt_links;

/* Plans candidate c (its tp, pp, dp, zero, recompute, micro_batch set) into alt, a copy
 * of ps: 1 when it is valid and its heaviest rank fits, with its step time. */
static int alt_plan(const plan_stage *ps, const plan_alt *c, plan_stage *alt, alt_links *links) {
    const plan_shape *sh = &ps->shape;
    if (sh->global_batch % (c->micro_batch * c->dp) != 0) return 0;
    *alt = *ps;
    plan_shape *a = &alt->shape;
    a->tp = c->tp, a->pp = c->pp, a->dp = c->dp, a->zero = c->zero;
    a->recompute = c->recompute, a->micro_batch = c->micro_batch;
    a->virtual_stages = c->virtual_stages;
    a->sequence_parallel = sh->sp_wanted && c->tp > 1; /* the recipe's choice */
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
    plan_comm_estimate_known(alt, &alt->comm, links->known ? links->crosses : NULL);
    if (!links->known) memcpy(links->crosses, alt->comm.crosses_nodes, sizeof links->crosses);
    links->known = 1;
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
    if (n_mb == 0 || mbs[n_mb - 1] != 1) mbs[n_mb++] = 1;
    alt_links links = {0};
    c.drop_split =
        ps->params.n_stage_layers > 0 && (c.pp != sh->pp || c.virtual_stages != sh->virtual_stages);
    for (uint32_t z = sh->zero; z <= 3; z++)
        for (int r = sh->recompute; r <= BATON__STAGE__RECOMPUTE__FULL; r++)
            for (int k = 0; k < n_mb; k++) {
                c.zero = z, c.recompute = (Baton__Stage__Recompute)r, c.micro_batch = mbs[k];
                if (z > 0 && z > sh->zero && (uint64_t)c.dp * sh->cp < 2) continue;
                if (alt_changes(sh, &c) == 0 || !alt_plan(ps, &c, scratch, &links)) continue;
                c.memory = scratch->mem.total;
                c.step_time_s = scratch->step_time_s;
                c.tight = c.memory > PLAN_MEMORY_HEADROOM * scratch->mem.capacity;
                c.changes = alt_changes(sh, &c);
                alt_keep(ps, &c);
            }
}

/* The divisors of n, ascending, into d (at most ALT_MAX_DIVS); returns how many. */
static int alt_divisors(uint32_t n, uint32_t *d) {
    int lo = 0, hi = 0;
    uint32_t big[ALT_MAX_DIVS / 2];
    for (uint32_t k = 1; (uint64_t)k * k <= n && lo < ALT_MAX_DIVS / 2; k++) {
        if (n % k) continue;
        d[lo++] = k;
        if (k != n / k) big[hi++] = n / k;
    }
    while (hi > 0)
        d[lo++] = big[--hi];
    return lo;
}

typedef struct alt_cand {
    uint32_t tp, pp;
    double far; /* from the stage's split: |log2 tp/tp0| + |log2 pp/pp0| */
} alt_cand;

static int alt_nearer(const void *a, const void *b) {
    const alt_cand *x = a, *y = b;
    if (x->far != y->far) return x->far < y->far ? -1 : 1;
    return x->tp != y->tp ? (x->tp < y->tp ? -1 : 1) : (x->pp < y->pp ? -1 : 1);
}

/* The valid tp x pp splits of the devices, nearest the stage's first; returns how many
 * (*out malloc'd). */
static size_t alt_splits(const plan_stage *ps, alt_cand **out) {
    const plan_shape *sh = &ps->shape;
    uint32_t cells = ps->lay.world / sh->cp,
             most_tp = sh->tp > sh->gpus_per_node ? sh->tp : sh->gpus_per_node;
    uint32_t *div = malloc(ALT_MAX_DIVS * sizeof *div);
    int nd = div ? alt_divisors(cells, div) : 0, ntp = 0;
    while (ntp < nd && div[ntp] <= most_tp)
        ntp++;
    alt_cand *v = ntp ? malloc((size_t)ntp * (size_t)nd * sizeof *v) : NULL;
    size_t n = 0;
    for (int i = 0; v != NULL && i < ntp; i++)
        for (int j = 0; j < nd && (uint64_t)div[i] * div[j] <= cells; j++) {
            uint32_t tp = div[i], pp = div[j];
            if ((cells / tp) % pp || !alt_valid_split(ps, tp, pp)) continue;
            double far = fabs(log2((double)tp / sh->tp)) + fabs(log2((double)pp / sh->pp));
            v[n++] = (alt_cand){.tp = tp, .pp = pp, .far = far};
        }
    free(div);
    if (n > 0) qsort(v, n, sizeof *v, alt_nearer);
    *out = v;
    return n;
}

void plan_find_alternatives(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    ps->n_alts = 0;
    if (ps->mem.fits != 0 || sh->tp == 0 || sh->pp == 0 || sh->cp == 0) return;
    plan_stage *scratch = malloc(sizeof *scratch);
    alt_cand *v = NULL;
    size_t n = scratch ? alt_splits(ps, &v) : 0;
    uint32_t world = ps->lay.world ? ps->lay.world : 1, cells = world / sh->cp;
    size_t most = ALT_RANK_BUDGET / world;
    most = most < ALT_MIN_SPLITS ? ALT_MIN_SPLITS : most;
    for (size_t k = 0; k < n && k < most; k++) {
        uint32_t tp = v[k].tp, pp = v[k].pp;
        plan_alt c = {.tp = tp, .pp = pp, .dp = cells / tp / pp, .virtual_stages = 1};
        uint32_t vs = sh->virtual_stages; /* kept where it still interleaves */
        if (vs > 1 && pp > 1 && sh->n_layers % (pp * vs) == 0) c.virtual_stages = vs;
        alt_split(ps, scratch, c);
        if (c.virtual_stages > 1) { /* and without interleaving: fewer in-flight activations */
            c.virtual_stages = 1;
            alt_split(ps, scratch, c);
        }
    }
    free(v);
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
    PAR(a->drop_split, "stage_layers: []") /* the old split does not fit the new pipeline */
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
