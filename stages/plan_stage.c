/* plan_stage_build: reads a resolved StageSpec (defaults filled in where a submessage
 * is absent), builds the layout and runs the estimates, then collects warnings. */
#include "plan.h"
#include "pipe_order.h"
#include "plan_precision.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define PLAN_DEFAULT_MFU 0.4

/* Each accessor returns the submessage or a default-initialised one (proto defaults). */
static const Baton__Stage *spec_stage(const Baton__StageSpec *spec) {
    static const Baton__Stage def = BATON__STAGE__INIT;
    return spec->stage ? spec->stage : &def;
}

static const Baton__Parallel *spec_parallel(const Baton__StageSpec *spec) {
    static const Baton__Parallel def = BATON__PARALLEL__INIT;
    const Baton__Stage *st = spec_stage(spec);
    return st->parallel ? st->parallel : &def;
}

static const Baton__Cluster *spec_cluster(const Baton__StageSpec *spec) {
    static const Baton__Cluster def = BATON__CLUSTER__INIT;
    return spec->cluster ? spec->cluster : &def;
}

static Baton__Precision__Type spec_precision(const Baton__StageSpec *spec) {
    const Baton__Stage *st = spec_stage(spec);
    return st->precision ? st->precision->type : BATON__PRECISION__TYPE__FP32;
}

static void shape_model(const Baton__Model *m, plan_shape *sh) {
    sh->dim = m->dim;
    sh->n_layers = m->n_layers;
    sh->n_heads = m->n_heads;
    sh->n_kv_heads = m->n_kv_heads ? m->n_kv_heads : m->n_heads;
    sh->head_dim = m->n_heads ? m->dim / m->n_heads : 0;
    sh->vocab = m->vocab_size;
    sh->ffn = m->ffn_dim;
}

static void shape_stage(const Baton__StageSpec *spec, plan_shape *sh) {
    const Baton__Stage *st = spec_stage(spec);
    const Baton__Parallel *par = spec_parallel(spec);
    sh->seq_len = st->seq_len;
    sh->micro_batch = st->micro_batch ? st->micro_batch : 1;
    sh->global_batch = st->global_batch;
    sh->tp = par->tp;
    sh->cp = par->cp;
    sh->dp = par->dp;
    sh->pp = par->pp;
    sh->ep = par->ep;
    sh->virtual_stages = par->virtual_stages ? par->virtual_stages : 1;
    sh->zero = par->zero;
    sh->sequence_parallel = par->sequence_parallel && par->tp > 1;
    sh->sp_wanted = par->sequence_parallel != 0;
    sh->cp_ulysses = par->cp_comm == BATON__PARALLEL__CP_COMM__ULYSSES;
    sh->recompute = st->recompute;
    sh->precision = spec_precision(spec);
    sh->fp8_first_last_bf16 = st->precision ? st->precision->first_last_bf16 : 1;
}

static void shape_cluster(const Baton__StageSpec *spec, plan_shape *sh) {
    const Baton__Cluster *c = spec_cluster(spec);
    sh->nodes = c->nodes ? c->nodes : 1;
    sh->gpus_per_node = c->gpus_per_node ? c->gpus_per_node : 1;
    sh->cuda = c->device == BATON__CLUSTER__DEVICE__CUDA;
    const Baton__Gpu *gpu = c->gpu;
    sh->capacity_bytes = gpu && gpu->memory ? gpu->memory->bytes : 0;
    sh->capacity = (double)sh->capacity_bytes;
    const Baton__Links *links = c->links;
    sh->intra_bw = links && links->intra_node ? links->intra_node->bytes_per_s : 0;
    sh->inter_bw = links && links->inter_node ? links->inter_node->bytes_per_s : 0;
    sh->peak_flops = plan_peak_flops(gpu, sh->precision);
    sh->mfu = c->mfu > 0 ? c->mfu : PLAN_DEFAULT_MFU;
    sh->fp8_speedup = 1;
    if (sh->precision == BATON__PRECISION__TYPE__FP8)
        sh->fp8_speedup = gpu && gpu->peak_tflops_bf16 > 0 && gpu->peak_tflops_fp8 > 0
                              ? gpu->peak_tflops_fp8 / gpu->peak_tflops_bf16
                              : 2;
}

/* dp 0 (unresolved) falls back to nodes * gpus_per_node / (tp * cp * pp). */
static int shape_resolve_dp(plan_shape *sh, bt_diag *diag) {
    uint64_t cells = (uint64_t)sh->tp * sh->cp * sh->pp;
    if (cells == 0 || sh->ep == 0) {
        bt_diag_set(diag, "parallel.tp, cp, pp and ep must be at least 1 (got %u, %u, %u, %u)",
                    sh->tp, sh->cp, sh->pp, sh->ep);
        return BT_EINVAL;
    }
    if (sh->dp != 0) return BT_OK;
    uint64_t gpus = (uint64_t)sh->nodes * sh->gpus_per_node;
    if (gpus % cells != 0) {
        bt_diag_set(diag,
                    "parallel.dp is not resolved and nodes*gpus_per_node = %llu is not a "
                    "multiple of tp*cp*pp = %llu",
                    (unsigned long long)gpus, (unsigned long long)cells);
        return BT_EINVAL;
    }
    sh->dp = (uint32_t)(gpus / cells);
    return BT_OK;
}

int plan_shape_resolve(const Baton__StageSpec *spec, plan_shape *out, bt_diag *diag) {
    memset(out, 0, sizeof *out);
    if (spec == NULL || spec->model == NULL) {
        bt_diag_set(diag, "stage spec has no model: nothing to plan");
        return BT_EINVAL;
    }
    shape_model(spec->model, out);
    shape_stage(spec, out);
    shape_cluster(spec, out);
    if (out->seq_len == 0) {
        bt_diag_set(diag, "stage \"%s\": seq_len is not given (must be > 0)",
                    spec->stage && spec->stage->name ? spec->stage->name : "?");
        return BT_EINVAL;
    }
    return shape_resolve_dp(out, diag);
}

static void warn(plan_stage *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warn(plan_stage *ps, const char *fmt, ...) {
    if (ps->n_warnings >= PLAN_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->warnings[ps->n_warnings++], sizeof ps->warnings[0], fmt, ap);
    va_end(ap);
}

/* The ranks rank 0's group along dim spans, first to last (every group is a translate of
 * it); its stride says less for the expert view, whose block need not be contiguous. */
static uint64_t group_span(const layout *l, enum layout_dim dim) {
    uint32_t *g = malloc((size_t)l->size[dim] * sizeof *g), lo = UINT32_MAX, hi = 0;
    if (g == NULL) return (uint64_t)l->stride[dim] * (l->size[dim] - 1) + 1;
    for (uint32_t i = 0, n = layout_group(l, dim, 0, g); i < n; i++)
        lo = g[i] < lo ? g[i] : lo, hi = g[i] > hi ? g[i] : hi;
    free(g);
    return (uint64_t)hi - lo + 1;
}

static void warn_groups(plan_stage *ps) {
    static const enum plan_comm_group hungry[] = {PLAN_COMM_TP, PLAN_COMM_CP, PLAN_COMM_EP};
    static const enum layout_dim dims[] = {LAYOUT_TP, LAYOUT_CP, LAYOUT_EP};
    static const char *const names[] = {"TP", "CP", "EP"};
    const layout *l = &ps->lay;
    for (int i = 0; i < 3; i++) {
        if (!ps->comm.crosses_nodes[hungry[i]]) continue;
        uint64_t span = group_span(l, dims[i]);
        if (span > l->gpus_per_node)
            warn(ps,
                 "%s group of %u ranks spans %llu consecutive ranks, more than gpus_per_node %u: "
                 "it runs at the inter-node bandwidth (move it earlier in parallel.order or "
                 "shrink it)",
                 names[i], l->size[dims[i]], (unsigned long long)span, l->gpus_per_node);
        else
            warn(ps,
                 "%s group of %u ranks crosses a node boundary (gpus_per_node %u is not a "
                 "multiple of its span %llu): it runs at the inter-node bandwidth",
                 names[i], l->size[dims[i]], l->gpus_per_node, (unsigned long long)span);
    }
}

static uint64_t stage_microbatches(const plan_shape *sh);

/* The heaviest rank's total with one setting changed (what = 0: zero 2, 1: zero 3, 2: full
 * recomputation, 3: micro_batch 1), or 0 where it would change nothing or cannot be
 * tried. */
static double memory_if(const plan_stage *ps, int what) {
    const plan_shape *sh = &ps->shape;
    uint64_t replicas = (uint64_t)sh->dp * sh->cp;
    if ((what == 0 && (sh->zero >= 2 || replicas < 2)) ||
        (what == 1 && (sh->zero >= 3 || replicas < 2)) ||
        (what == 2 && sh->recompute == BATON__STAGE__RECOMPUTE__FULL) ||
        (what == 3 && sh->micro_batch <= 1))
        return 0;
    plan_stage *alt = malloc(sizeof *alt);
    if (alt == NULL) return 0;
    *alt = *ps;
    if (what <= 1) alt->shape.zero = what == 0 ? 2 : 3;
    if (what == 2) alt->shape.recompute = BATON__STAGE__RECOMPUTE__FULL;
    if (what == 3) {
        alt->shape.micro_batch = 1;
        alt->microbatches = stage_microbatches(&alt->shape);
    }
    plan_memory m;
    plan_memory_estimate(alt, &m);
    free(alt);
    return m.total < ps->mem.total ? m.total : 0;
}

static void warn_memory(plan_stage *ps) {
    static const char *const change[4] = {"zero: 2", "zero: 3", "recompute: full",
                                          "micro_batch: 1"};
    const plan_memory *m = &ps->mem;
    char need[32], have[32], alt[32], advice[200] = "";
    plan_format_memory(need, sizeof need, m->total);
    plan_format_memory(have, sizeof have, m->capacity);
    if (m->fits == 0) {
        /* the changes that would lower the total, each with what it would need */
        size_t o = 0;
        for (int w = 0; w < 4; w++) {
            double t = memory_if(ps, w);
            if (t <= 0 || o >= sizeof advice) continue;
            o += (size_t)snprintf(advice + o, sizeof advice - o, "%s%s would need %s%s",
                                  o ? ", " : "", change[w], plan_format_memory(alt, sizeof alt, t),
                                  t <= PLAN_MEMORY_HEADROOM * m->capacity ? " (fits)"
                                  : t <= m->capacity                      ? " (fits, tight)"
                                                                          : "");
        }
        warn(ps, "DOES NOT FIT: %s needed on pipeline stage %u, %s available; %s%sraise tp or pp%s",
             need, m->heaviest_pp_stage, have, advice, advice[0] ? "; or " : "",
             ps->n_alts ? " (what fits on the same devices: under \"memory\")" : "");
    } else if (m->fits > 0 && m->total > PLAN_MEMORY_HEADROOM * m->capacity) {
        warn(ps,
             "%s of %s is above %.0f%% of cluster.gpu.memory: the plan does not count the "
             "CUDA context, NCCL's and cuBLAS's buffers or the allocator's fragmentation "
             "(several GB on a GPU), so it may not fit",
             need, have, 100 * PLAN_MEMORY_HEADROOM);
    } else if (m->fits < 0) {
        warn(ps, "cluster.gpu.memory not given: cannot tell whether %s per GPU fits", need);
    }
}

static void warn_batch(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    uint64_t per_step = sh->micro_batch * sh->dp;
    if (sh->global_batch % per_step != 0)
        warn(ps,
             "global_batch %llu is not a multiple of micro_batch*dp = %llu; planned with %llu "
             "micro-batches",
             (unsigned long long)sh->global_batch, (unsigned long long)per_step,
             (unsigned long long)ps->microbatches);
    if (sh->pp > 1 && ps->bubble > 0.2)
        warn(ps,
             "pipeline bubble %.0f%% (the stages idle) with pp %u, v %u, m %llu micro-batches: "
             "raise global_batch or virtual_stages, or lower micro_batch",
             100 * ps->bubble, sh->pp, sh->virtual_stages, (unsigned long long)ps->microbatches);
    uint64_t m = ps->microbatches;
    if (sh->pp > 1 && sh->virtual_stages > 1 && m > sh->pp && m % sh->pp != 0)
        warn(ps,
             "%llu micro-batches with pp %u and virtual_stages %u: the last group of %llu keeps "
             "more model chunks in flight than a multiple of pp would (the memory figures "
             "count them)",
             (unsigned long long)m, sh->pp, sh->virtual_stages,
             (unsigned long long)pipe_order_last_group(sh->pp, (uint32_t)m));
}

static void warn_divisibility(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    if (sh->n_heads % sh->tp != 0)
        warn(ps, "model.n_heads %u is not a multiple of tp %u", sh->n_heads, sh->tp);
    else if (sh->n_kv_heads < sh->tp && sh->tp % sh->n_kv_heads == 0)
        warn(ps, "n_kv_heads %u < tp %u: each kv head is replicated on %u ranks", sh->n_kv_heads,
             sh->tp, sh->tp / sh->n_kv_heads);
    else if (sh->n_kv_heads % sh->tp != 0)
        warn(ps, "n_kv_heads %u is neither a multiple nor a divisor of tp %u", sh->n_kv_heads,
             sh->tp);
    /* Ring CP balances causal work with 2*cp chunks; sequence parallel splits by tp. */
    uint64_t seq_div =
        (uint64_t)(sh->cp > 1 ? 2ull * sh->cp : 1) * (sh->sequence_parallel ? sh->tp : 1);
    if (sh->seq_len % seq_div != 0)
        warn(ps,
             "seq_len %llu is not a multiple of %llu (2*cp when cp > 1, times tp with "
             "sequence parallelism)",
             (unsigned long long)sh->seq_len, (unsigned long long)seq_div);
    if (ps->params.n_experts && ps->params.n_experts % sh->ep != 0)
        warn(ps, "model.moe.n_experts %u is not a multiple of ep %u", ps->params.n_experts, sh->ep);
    if (sh->n_layers % sh->pp != 0 && ps->params.stage_layers == NULL)
        warn(ps, "n_layers %u is not a multiple of pp %u: the first %u stages hold one layer more",
             sh->n_layers, sh->pp, sh->n_layers % sh->pp);
}

static void warn_cluster(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    uint64_t gpus = (uint64_t)sh->nodes * sh->gpus_per_node;
    if (ps->lay.world > gpus)
        warn(ps, "the layout needs %u ranks but the cluster has %llu (nodes %u x gpus_per_node %u)",
             ps->lay.world, (unsigned long long)gpus, sh->nodes, sh->gpus_per_node);
    if (sh->intra_bw <= 0 || (sh->inter_bw <= 0 && ps->lay.world > sh->gpus_per_node))
        warn(ps, "cluster.links bandwidth not given: communication seconds count as 0");
    if (sh->peak_flops <= 0) warn(ps, "cluster.gpu.peak_tflops_bf16 not given: step time unknown");
}

/* What the split's heaviest rank needs, planned like ps, and, where *bubble < 0 (the
 * search did not replay the split), the pipeline bubble with it (-1: not replayed). */
static double split_memory(const plan_stage *ps, const uint32_t *split, uint32_t n, int *fits,
                           double *bubble) {
    plan_stage *alt = malloc(sizeof *alt);
    if (alt == NULL) return *fits = -1, 0;
    *alt = *ps;
    alt->params.stage_layers = split, alt->params.n_stage_layers = n;
    plan_memory_estimate(alt, &alt->mem);
    double total = alt->mem.total;
    int replayed;
    *fits = alt->mem.fits;
    if (*bubble < 0) {
        double b = plan_pp_bubble(alt, &replayed);
        *bubble = replayed ? b : -1;
    }
    free(alt);
    return total;
}

/* A pipeline whose slowest stage computes 10% more than the mean: the split that evens
 * it best (interleaved: the chunk lengths for the shortest step the searches found,
 * plan_pp_best_chunks_step), kept when the replayed schedule idles less with it and it
 * fits in memory. */
static void balance_suggest(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    int v = sh->virtual_stages > 1;
    uint32_t n = v ? sh->pp * sh->virtual_stages : sh->pp;
    if (sh->pp < 2 || ps->pp_balance <= 1.10 || n > PLAN_MAX_SPLIT) return;
    uint32_t split[PLAN_MAX_SPLIT];
    double step_bubble = -1;
    double best =
        v ? plan_pp_best_chunks_step(ps, split, &step_bubble) : plan_pp_best_split(ps, split);
    if (best <= 0 || (best > ps->pp_balance - 0.02 && step_bubble < 0)) return;
    const char *what = ps->pp_slowest == sh->pp - 1 ? " (its layers and the head)" : "";
    int fits;
    double bubble = step_bubble, need = split_memory(ps, split, n, &fits, &bubble);
    char gb[32];
    /* evening the stages' totals can still lengthen a step (interleaved: a chunk's length
     * counts too; few micro-batches): offered only where the replayed schedule idles less */
    if (ps->bubble_replayed && (bubble < 0 || bubble >= ps->bubble - 0.001)) return;
    if (fits == 0) {
        warn(ps,
             "pipeline stage %u computes %.2fx the stages' mean%s; the split that evens it "
             "best (%.2fx) would need %s a GPU, more than there is",
             ps->pp_slowest, ps->pp_balance, what, best, plan_format_memory(gb, sizeof gb, need));
        return;
    }
    memcpy(ps->pp_best_split, split, n * sizeof *split);
    ps->pp_best_split_n = n;
    ps->pp_best_balance = best;
    if (bubble < 0) bubble = ps->bubble; /* neither replayed */
    ps->pp_best_bubble = bubble;
    warn(ps,
         "pipeline stage %u computes %.2fx the stages' mean%s: the parallel.stage_layers "
         "under \"time\" (--json: pipeline_best_split) would make the slowest %.2fx and the "
         "bubble %.1f%% (now %.1f%%)",
         ps->pp_slowest, ps->pp_balance, what, best, 100 * bubble, 100 * ps->bubble);
}

static void plan_stage_warnings(plan_stage *ps) {
    warn_memory(ps);
    balance_suggest(ps);
    warn_groups(ps);
    warn_batch(ps);
    warn_divisibility(ps);
    warn_cluster(ps);
}

static int stage_layout(const Baton__StageSpec *spec, plan_stage *ps, bt_diag *diag) {
    const plan_shape *sh = &ps->shape;
    if (sh->pp > sh->n_layers) {
        bt_diag_set(diag, "parallel.pp %u exceeds model.n_layers %u: a stage would be empty",
                    sh->pp, sh->n_layers);
        return BT_EINVAL;
    }
    return layout_init(&ps->lay, sh->tp, sh->cp, sh->dp, sh->pp, sh->ep, plan_folds_experts(ps),
                       spec_parallel(spec)->order, sh->gpus_per_node, diag);
}

/* parallel.stage_layers, checked (plan_check_stage_layers) and kept for the layer maps. */
static int stage_layers(const Baton__StageSpec *spec, plan_stage *ps, bt_diag *diag) {
    const Baton__Parallel *par = spec_parallel(spec);
    if (par == NULL || par->n_stage_layers == 0) return BT_OK;
    int rc = plan_check_stage_layers(par->stage_layers, par->n_stage_layers, ps->shape.pp,
                                     ps->shape.virtual_stages, ps->params.n_layers, diag);
    if (rc != BT_OK) return rc;
    ps->params.stage_layers = par->stage_layers;
    ps->params.n_stage_layers = par->n_stage_layers;
    return BT_OK;
}

static uint64_t stage_microbatches(const plan_shape *sh) {
    uint64_t per_step = sh->micro_batch * sh->dp;
    if (sh->global_batch == 0) return 1;
    return (sh->global_batch + per_step - 1) / per_step;
}

int plan_stage_memory(const Baton__StageSpec *spec, plan_stage *out, bt_diag *diag) {
    memset(out, 0, sizeof *out);
    int rc = plan_shape_resolve(spec, &out->shape, diag);
    if (rc == BT_OK) rc = plan_params_count(spec->model, &out->params, diag);
    if (rc == BT_OK) rc = stage_layers(spec, out, diag);
    if (rc == BT_OK) rc = stage_layout(spec, out, diag);
    if (rc != BT_OK) return rc;
    if (out->shape.global_batch == 0)
        out->shape.global_batch = out->shape.micro_batch * out->shape.dp;
    out->microbatches = stage_microbatches(&out->shape);
    plan_memory_estimate(out, &out->mem);
    return BT_OK;
}

int plan_stage_build(const Baton__StageSpec *spec, plan_stage *out, bt_diag *diag) {
    int rc = plan_stage_memory(spec, out, diag);
    if (rc != BT_OK) return rc;
    plan_comm_estimate(out, &out->comm);
    plan_time_estimate(out);
    plan_pp_balance(out, &out->pp_balance, &out->pp_slowest);
    plan_find_alternatives(out);
    plan_stage_warnings(out);
    return BT_OK;
}
