/* Communication, FLOPs and step time per optimizer step.
 *
 * Bytes are what one rank sends, with ring-algorithm factors: all-reduce 2(n-1)/n x
 * size, all-gather and reduce-scatter (n-1)/n x size (size = the full tensor),
 * all-to-all (n-1)/n x the local tensor. Each group's figure is for its busiest rank
 * (the pipeline stage where it is largest). With s = seq_len/cp, b = micro_batch,
 * h = dim, m = micro-batches per step, A = s*b*h*4 activation bytes (the engines send
 * activations in float32, except where a bf16 product alone reads them: below; with
 * BATON_COMM_BF16=0 in the workers' environment those go in float32 too),
 * P = passes over a layer per micro-batch: forward + backward, plus the repeated
 * forward with full recomputation (P = 2 or 3):
 *   TP  per layer and micro-batch, in units of (t-1)/t x A: the forward's 2 all-reduces
 *       4, the backward's 4, full recomputation's forward (it stops before the down
 *       projection) + 2. With sequence parallelism, 4 reduce-scatters (+ 1 recomputed)
 *       and 6 all-gathers (+ 2): forward and backward 2 each, and the backward gathers
 *       the two norms' outputs again (only the rank's rows are kept,
 *       worker/engine/model_sp.h); a gather into the layer's products counts half when
 *       they run in bf16 (bf16 stages, and under fp8 the first and last layers with
 *       fp8_first_last_bf16), whose rows travel in bf16. An MoE layer's block is whole on
 *       every tp rank: only its attention's 4 (full recomputation + 2), or with sequence
 *       parallelism, where the block runs on the rank's rows, 2 reduce-scatters (+ 1)
 *       and 3 gathers (+ 1), and then once a step the all-reduce of the block's
 *       gradients, 2(t-1)/t x (router + shared experts + routed experts / ep) x 4 per MoE
 *       layer (under ZeRO-2/3 the busiest rank's part of it: the block ends its unit;
 *       under zero 0/1 the routed experts' go with DP instead, the tp ranks folded into
 *       their expert-data-parallel group: stages/layout.h's layout_fold_tp_experts),
 *       and with a capacity or an aux loss per forward pass the all-gather of the rank's
 *       per-chunk expert counts, (t-1) x 2*b*E*4 bytes. The ends, per micro-batch: the
 *       vocabulary-parallel embedding's reduction, 2 units on the first stage; the
 *       head's, 2 on the last (with sequence parallelism its reduce-scatter 1 and two
 *       gathers in the head's precision, bf16 under fp8 too), with the cross-entropy's
 *       all-gather of (t-1) x 3 floats per row; with sequence parallelism the norm
 *       weights' gradients, 2(t-1)/t x h x 4 per norm and pass (two a layer, the final
 *       one). With tp > n_kv_heads add the all-reduce of the replicated k/v gradients
 *       over the r = tp/n_kv_heads ranks sharing a head, once a step: 2(r-1)/r x 4 d hd x
 *       4 per layer (/(dp cp) under ZeRO-2/3).
 *   PP  A/t (sequence parallel) or A per message; a stage sends forward to the next
 *       stage and gradients back to the previous one: m x (number of neighbours)
 *       messages; interleaved (v virtual stages, the last stage sending to the first):
 *       m x (2v - 1) on the first and the last stage, m x 2v on the others.
 *   DP  over the dp*cp replicas of a parameter (edp = dp*cp/ep for routed experts, or
 *       t*dp*cp/ep with sequence parallelism under zero 0/1, where the tp ranks fold
 *       into the experts' parallelism and each copy holds a partial sum of their
 *       gradients: plan_expert_holders):
 *       ZeRO-1: reduce-scatter fp32 grads + all-gather weights,
 *       (n-1)/n x params x (4 + weight bytes); without ZeRO: all-reduce of fp32 grads,
 *       2(n-1)/n x params x 4. ZeRO-2 and ZeRO-3 work per unit (plan_zero_units: a
 *       unit of chunk c per rank over a group of g ranks moves (g-1) c; g = n, or for an
 *       MoE layer under ep the expert-data-parallel group, n/ep, its dense part then
 *       all-reduced over ep, counted under EP; R = the sum over units): ZeRO-2
 *       reduce-scatters the fp32 grads after every micro-batch and all-gathers the
 *       weights once, R (4m + weight bytes);
 *       ZeRO-3 all-gathers each unit before its forward and its backward (layers also
 *       before the recomputed forward of full recomputation) unless one of the model's
 *       two gather buffers still holds it, and reduce-scatters the grads per micro-batch:
 *       G x weight bytes + 4mR, G the (g-1) c of the units gathered in a step, counted by
 *       replaying the stage's passes (stages/pipe_order.h) through the two buffers as
 *       worker/engine/model_zero.c uses them (nothing resident when a step starts;
 *       plan_zero3.c, beyond 2^17 micro-batch chunks from two shorter replays).
 *   CP  ring: per layer and forward pass (cp-1) K/V chunks of 2*s*b*(kv heads per tp
 *       rank)*hd*4 bytes (two forward passes with full recomputation); backward sends
 *       K/V round again with dK/dV travelling beside them, plus one last hop of dK/dV
 *       home: (cp-1) + cp chunks; P(cp-1) + cp chunks in all (worker/engine/model_cp.h).
 *       Ulysses: all-to-alls of q, k, v and o, (cp-1)/cp x
 *       s*b*hd*4*(2*heads + 2*kv heads) per tp rank, per pass. MoE layers with a capacity
 *       or an aux loss add, per forward pass, an all-gather of each rank's per-chunk
 *       expert counts: (cp-1) x 2*b*E*4 bytes, x t with sequence parallelism (the tp
 *       ranks' counts, gathered over tp first; worker/engine/moe_dev.h).
 *   EP  per MoE layer and pass, two all-to-alls of top_k x tokens x h x (ep-1)/ep
 *       elements, tokens = s*b (s*b/t with sequence parallelism: each tp rank routes its
 *       own rows): the rows to the experts (forward) or their output gradients
 *       (backward), in bf16 (2 bytes) where the experts' products are (bf16 stages, and
 *       under fp8 the first and last layers' with first_last_bf16; fp8 products take
 *       float32 rows), and the results back in float32; under ZeRO-2/3 also,
 *       per MoE layer and micro-batch, the all-reduce of its unit's dense part in a
 *       rank's chunk, 2(ep-1)/ep x dense/edp x 4 (an average rank's).
 * Seconds: bytes / the bandwidth of the link the group runs on (intra_node when every
 * group of that kind stays inside a node, else inter_node; both per GPU).
 *
 * FLOPs (whole cluster, per step), T = global_batch * seq_len tokens, L layers:
 *   model     6 N T + 6 L h seq_len T; N = active parameters less the embedding table
 *             (a lookup, not a matmul); the attention term is 12 L h s T halved for
 *             the causal mask.
 *   hardware  + the forward again under full recomputation (x 4/3), or + the attention
 *             core's forward 2 L h seq_len T under selective recomputation.
 * compute_s = model FLOPs / (world x peak x mfu); mfu is end-to-end utilisation, so
 * the pipeline bubble is taken to be inside it. Under fp8 peak is the fp8 rate, which
 * only the fp8 GEMMs' FLOPs run at (plan_layer_fp8_flops); the rest (attention scores,
 * head, experts, bf16 layers) take fp8_speedup times as long: mfu is the share of the
 * rate each product runs at.
 * step_time_s = compute_s + exposed communication, where TP, CP and EP are exposed in
 * full (they sit between dependent GEMMs), PP half (1F1B overlaps the sends of one
 * direction with compute of the other), and DP beyond what hides behind the last
 * micro-batch's backward (2/3 of compute_s/m). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct comm_dims {
    double s, b, h, e, act; /* local sequence, micro-batch, hidden, bytes/elem, A */
    double passes;          /* 2, or 3 with full recomputation */
    double m;               /* micro-batches per step */
} comm_dims;

static comm_dims comm_dims_of(const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    comm_dims d;
    d.s = (double)sh->seq_len / sh->cp;
    d.b = (double)sh->micro_batch;
    d.h = sh->dim;
    d.e = 4; /* the engines' activations are float32 */
    d.act = d.s * d.b * d.h * d.e;
    d.passes = sh->recompute == BATON__STAGE__RECOMPUTE__FULL ? 3 : 2;
    d.m = (double)ps->microbatches;
    return d;
}

/* The most of unit u's floats [lo, hi) in one rank's chunk. */
static uint64_t zero_range_most(const plan_zero_unit *u, uint64_t lo, uint64_t hi) {
    uint64_t most = 0;
    for (uint64_t r = 0; r < u->group; r++) {
        uint64_t a = r * u->chunk > lo ? r * u->chunk : lo;
        uint64_t b = (r + 1) * u->chunk < hi ? (r + 1) * u->chunk : hi;
        if (b > a && b - a > most) most = b - a;
    }
    return most;
}

/* tp > n_kv_heads: r = tp / n_kv_heads ranks hold each kv head's k and v (d hd each, as
 * model_tp_reduce_grads sums them), whose gradients are all-reduced over them once a step;
 * under ZeRO-2/3 the parts of them in the rank's shard (train_zero_reduce_tp), the
 * busiest rank's (a layer's k and v follow its norm and q: they may all fall in one
 * rank's chunk). */
static double comm_tp_kv(const plan_stage *ps, uint32_t stage, uint32_t layers) {
    const plan_shape *sh = &ps->shape;
    if (sh->n_kv_heads == 0 || sh->tp <= sh->n_kv_heads) return 0;
    double r = (double)sh->tp / sh->n_kv_heads;
    uint64_t C = sh->dim, kv = 2 * C * sh->head_dim, held = layers * kv;
    uint64_t at = C + (uint64_t)(sh->n_heads / sh->tp) * sh->head_dim * C; /* norm, q */
    if (sh->zero >= 2 && (uint64_t)sh->dp * sh->cp >= 2) {
        plan_zero_unit *unit = malloc(((size_t)ps->params.n_layers + 2) * sizeof *unit);
        if (unit == NULL) return 0;
        uint32_t n = plan_zero_units(ps, stage, unit), first = stage == 0;
        held = 0;
        for (uint32_t k = first; k < n && k < first + layers; k++)
            held += zero_range_most(&unit[k], at, at + kv);
        free(unit);
    }
    return 2 * (r - 1) / r * (double)held * 4;
}

/* MoE layers (worker/engine/model_moe.h): whole on every tp rank, so without sequence
 * parallelism nothing to sum; with it each rank runs the block on its own rows: the
 * block's gradients all-reduced over tp once a step (under ZeRO-2/3 the rank's shard of
 * them, a g-th, g the group its unit is sharded over), and with a capacity or an aux
 * loss each forward pass all-gathers the rank's per-chunk expert counts over tp. */
/* The most of unit u's MoE block (its last parameters, the balancing bias last of all) in
 * one rank's chunk. The stage's MoE units have one shape, so one rank is the busiest in
 * each and the sum of these is that rank's. */
static uint64_t zero_moe_most(const plan_zero_unit *u) {
    return zero_range_most(u, u->size - u->moe, u->size);
}

/* The MoE blocks' parameters on the stage whose gradients a rank holds: whole, or under
 * ZeRO-2/3 the busiest rank's parts of them. */
static double moe_blocks_held(const plan_stage *ps, uint32_t stage, uint32_t moe_layers) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    double ep = sh->ep > 1 ? sh->ep : 1;
    /* the routed experts' reduced with the data-parallel ones when the tp ranks fold in */
    double routed = plan_folds_experts(ps) ? 0 : p->moe_experts / ep;
    if (sh->zero < 2 || (uint64_t)sh->dp * sh->cp < 2)
        return moe_layers * ((double)p->moe_router + p->moe_shared + routed);
    plan_zero_unit *unit = malloc(((size_t)p->n_layers + 2) * sizeof *unit);
    if (unit == NULL) return 0;
    double held = 0;
    for (uint32_t k = 0, n = plan_zero_units(ps, stage, unit); k < n; k++)
        held += unit[k].moe ? (double)zero_moe_most(&unit[k]) : 0;
    free(unit);
    return held;
}

static double comm_tp_moe(const plan_stage *ps, const comm_dims *d, uint32_t moe_layers,
                          uint32_t stage) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    double t = sh->tp;
    if (!sh->sequence_parallel || moe_layers == 0) return 0;
    double counts = p->moe_counts ? (t - 1) * 2 * d->b * p->n_experts * 4 : 0;
    return 2 * (t - 1) / t * moe_blocks_held(ps, stage, moe_layers) * 4 +
           moe_layers * d->m * (d->passes - 1) * counts;
}

/* The bytes per element of sequence parallelism's gathers into products in bf16 (model
 * layer l's, or the head's with l = n_layers): 2, they travel in bf16
 * (worker/engine/model_sp.h); else 4. */
static double gather_bytes(const plan_stage *ps, uint32_t l) {
    const plan_shape *sh = &ps->shape;
    uint32_t L = ps->params.n_layers;
    if (sh->precision == BATON__PRECISION__TYPE__BF16) return 2;
    if (sh->precision != BATON__PRECISION__TYPE__FP8) return 4;
    return l == L || !plan_layer_in_fp8(sh, l, L) ? 2 : 4;
}

/* The stage's ends and norms, per micro-batch: the vocabulary-parallel embedding's
 * reduction (2 units: forward all-reduce, or with sequence parallelism reduce-scatter +
 * backward all-gather) on the first stage; on the last the head's (2: the backward's
 * all-reduce, or 3: the final norm's output gathered forward and again backward, its
 * gradient reduce-scattered) and the cross-entropy's all-gather of 3 floats per row and
 * rank; with sequence parallelism the norm weights' gradients all-reduced every pass. */
static double comm_tp_ends(const plan_stage *ps, const comm_dims *d, uint32_t layers,
                           uint32_t stage) {
    const plan_shape *sh = &ps->shape;
    double t = sh->tp, first = stage == 0, last = stage + 1 == sh->pp;
    int sp = sh->sequence_parallel;
    /* the head's gathers (forward, and again backward) in its products' precision */
    double head = sp ? 2 * gather_bytes(ps, ps->params.n_layers) / d->e + 1 : 2;
    double units = 2 * first + head * last;
    double ce = last * (t - 1) * 3 * d->s * d->b * 4;
    double norms = sp ? (2.0 * layers + last) * 2 * (t - 1) / t * d->h * 4 : 0;
    return d->m * (units * (t - 1) / t * d->act + ce + norms);
}

/* Layer l's units (above) in float32 units: a gather into bf16 products counts
 * gather_bytes / 4. */
static double tp_layer_units(const plan_stage *ps, const comm_dims *d, uint32_t l) {
    int sp = ps->shape.sequence_parallel, rc = d->passes > 2,
        moe = plan_layer_is_moe(&ps->params, l);
    if (!sp) return moe ? 4 + 2 * rc : 8 + 2 * rc; /* all-reduces */
    double g = gather_bytes(ps, l) / d->e;
    /* dense: 6 gathers (+ 2 recomputed), 4 reduce-scatters (+ 1); an MoE layer, whose
     * block takes no gather: 3 (+ 1), 2 (+ 1) */
    return moe ? g * (3 + rc) + 2 + rc : g * (6 + 2 * rc) + 4 + rc;
}

static double comm_tp(const plan_stage *ps, const comm_dims *d, uint32_t stage) {
    const plan_shape *sh = &ps->shape;
    double t = sh->tp, units = 0;
    if (t < 2) return 0;
    uint32_t first, n, n_moe;
    plan_pp_stage_layers(&ps->params, sh->pp, sh->virtual_stages, stage, &first, &n, &n_moe);
    for (uint32_t i = 0; i < n; i++)
        units += tp_layer_units(
            ps, d, plan_pp_stage_layer(&ps->params, sh->pp, sh->virtual_stages, stage, i));
    return d->m * units * (t - 1) / t * d->act + comm_tp_kv(ps, stage, n) +
           comm_tp_moe(ps, d, n_moe, stage) + comm_tp_ends(ps, d, n, stage);
}

static double comm_pp(const plan_stage *ps, const comm_dims *d, uint32_t stage) {
    const plan_shape *sh = &ps->shape;
    if (sh->pp < 2) return 0;
    double msg = d->act / (sh->sequence_parallel ? sh->tp : 1), v = sh->virtual_stages;
    if (v > 1) /* every chunk's output but the model's last, every input gradient but its first */
        return d->m * (2 * v - (stage == 0) - (stage + 1 == sh->pp)) * msg;
    double neighbours = (stage > 0) + (stage + 1 < sh->pp);
    return d->m * neighbours * msg;
}

static double dp_volume(double n, double params, double weight_bytes, int zero) {
    if (n < 2) return 0;
    if (zero) return (n - 1) / n * params * (4 + weight_bytes);
    return 2 * (n - 1) / n * params * 4;
}

/* ZeRO-2/3's data-parallel bytes (an MoE unit's over the expert-data-parallel group,
 * counted with dp): ZeRO-2 reduce-scatters every unit per micro-batch and all-gathers it
 * once after the update; ZeRO-3 reduce-scatters so and all-gathers what plan_zero3_gathered
 * counts. The all-reduce of an MoE unit's dense part under ep is comm_zero_ep's. */
static double dp_volume_zero(const plan_stage *ps, uint32_t stage, const plan_memory *m) {
    double mb = (double)ps->microbatches, wb = m->weight_bytes, R = 0, gathered;
    plan_zero_unit *unit = malloc(((size_t)ps->params.n_layers + 2) * sizeof *unit);
    if (unit == NULL) return 0;
    uint32_t n = plan_zero_units(ps, stage, unit);
    for (uint32_t k = 0; k < n; k++)
        R += plan_zero_unit_volume(&unit[k]);
    gathered = m->zero_level == 2 ? R : plan_zero3_gathered(ps, stage, unit, PLAN_ZERO3_REPLAY);
    free(unit);
    return gathered * wb + mb * 4 * R;
}

/* ZeRO-2/3 under ep: each MoE unit's dense part, a 1/edp chunk of it per rank (on average),
 * all-reduced over the ep group after every micro-batch's reduce-scatter. */
static double comm_zero_ep(const plan_stage *ps, uint32_t stage) {
    const plan_shape *sh = &ps->shape;
    double ep = sh->ep, sum = 0;
    if (ep < 2 || sh->zero < 2 || (uint64_t)sh->dp * sh->cp < 2) return 0;
    plan_zero_unit *unit = malloc(((size_t)ps->params.n_layers + 2) * sizeof *unit);
    if (unit == NULL) return 0;
    uint32_t n = plan_zero_units(ps, stage, unit);
    for (uint32_t k = 0; k < n; k++)
        sum += (double)unit[k].dense / (double)unit[k].group;
    free(unit);
    return (double)ps->microbatches * 2 * (ep - 1) / ep * sum * 4;
}

static double comm_dp(const plan_stage *ps, uint32_t stage) {
    plan_memory m;
    plan_memory_for_pp_stage(ps, stage, &m);
    if (m.zero_level >= 2) return dp_volume_zero(ps, stage, &m);
    int zero = plan_zero1_active(ps);
    double dense = dp_volume((double)ps->shape.dp * ps->shape.cp, (double)m.dense_params_on_rank,
                             m.weight_bytes, zero);
    double expert =
        dp_volume(plan_expert_holders(ps), (double)m.expert_params_on_rank, m.weight_bytes, zero);
    return dense + expert;
}

static double comm_cp(const plan_stage *ps, const comm_dims *d, uint32_t layers,
                      uint32_t moe_layers) {
    const plan_shape *sh = &ps->shape;
    double cp = sh->cp, t = sh->tp;
    if (cp < 2) return 0;
    double kv = sh->n_kv_heads >= sh->tp ? sh->n_kv_heads / t : 1;
    double heads = sh->n_heads / t, hd = sh->head_dim;
    double per_layer;
    if (sh->cp_ulysses) {
        per_layer = d->passes * (cp - 1) / cp * d->s * d->b * hd * d->e * (2 * heads + 2 * kv);
    } else {
        double chunk = 2 * d->s * d->b * kv * hd * d->e;
        per_layer = (d->passes * (cp - 1) + cp) * chunk;
    }
    /* each rank's chunk counts; under sequence parallelism the cp rank's tp ranks' */
    double q = sh->sequence_parallel ? t : 1;
    double counts = ps->params.moe_counts ? (cp - 1) * q * 2 * d->b * ps->params.n_experts * 4 : 0;
    return d->m * (layers * per_layer + moe_layers * (d->passes - 1) * counts);
}

/* Whether MoE layer l's experts' products run in bf16 (under fp8: the first and last
 * layers' with fp8_first_last_bf16; the others' in fp8). */
static int experts_bf16(const plan_shape *sh, uint32_t l, uint32_t L) {
    if (sh->precision == BATON__PRECISION__TYPE__FP8) return !plan_layer_in_fp8(sh, l, L);
    return sh->precision == BATON__PRECISION__TYPE__BF16;
}

static double comm_ep(const plan_stage *ps, const comm_dims *d, uint32_t stage) {
    const plan_shape *sh = &ps->shape;
    double ep = sh->ep;
    if (ep < 2) return 0;
    /* the rank's rows: a tp-th under sequence parallelism */
    double tokens = d->s * d->b / (sh->sequence_parallel ? sh->tp : 1);
    double a2a = ps->params.top_k * tokens * d->h * (ep - 1) / ep, sum = 0;
    uint32_t first, n, n_moe, v = sh->virtual_stages ? sh->virtual_stages : 1;
    plan_pp_stage_layers(&ps->params, sh->pp, v, stage, &first, &n, &n_moe);
    /* per pass rows to the experts (in bf16 where their products are) and back */
    for (uint32_t i = 0; i < n && n_moe > 0; i++) {
        uint32_t l = plan_pp_stage_layer(&ps->params, sh->pp, v, stage, i);
        if (plan_layer_is_moe(&ps->params, l))
            sum += (experts_bf16(sh, l, ps->params.n_layers) ? 2 : 4) + d->e;
    }
    return sum * d->m * d->passes * a2a;
}

static void comm_stage(const plan_stage *ps, const comm_dims *d, uint32_t stage,
                       double bytes[PLAN_COMM_NGROUPS]) {
    uint32_t first, n, n_moe;
    plan_pp_stage_layers(&ps->params, ps->shape.pp, ps->shape.virtual_stages, stage, &first, &n,
                         &n_moe);
    bytes[PLAN_COMM_TP] = comm_tp(ps, d, stage);
    bytes[PLAN_COMM_PP] = comm_pp(ps, d, stage);
    bytes[PLAN_COMM_DP] = comm_dp(ps, stage);
    bytes[PLAN_COMM_CP] = comm_cp(ps, d, n, n_moe);
    bytes[PLAN_COMM_EP] = comm_ep(ps, d, stage) + comm_zero_ep(ps, stage);
}

/* The data-parallel reduction runs over the whole cp x dp block of a (tp, pp) cell. */
static int any_block_crosses(const layout *l) {
    for (uint32_t r = 0; r < l->world; r++) {
        layout_coord c = layout_coord_of(l, r);
        if (c.c[LAYOUT_CP] != 0 || c.c[LAYOUT_DP] != 0) continue;
        for (uint32_t i = 0; i < l->size[LAYOUT_CP] * l->size[LAYOUT_DP]; i++) {
            layout_coord m = c;
            m.c[LAYOUT_CP] = i % l->size[LAYOUT_CP];
            m.c[LAYOUT_DP] = i / l->size[LAYOUT_CP];
            if (layout_node_of(l, layout_rank_of(l, &m)) != layout_node_of(l, r)) return 1;
        }
    }
    return 0;
}

static void comm_links(const plan_stage *ps, plan_comm *out, const int *crosses) {
    const layout *l = &ps->lay;
    const plan_shape *sh = &ps->shape;
    if (crosses != NULL) {
        memcpy(out->crosses_nodes, crosses, sizeof out->crosses_nodes);
    } else {
        out->crosses_nodes[PLAN_COMM_TP] = layout_any_group_crosses(l, LAYOUT_TP);
        out->crosses_nodes[PLAN_COMM_PP] = layout_any_group_crosses(l, LAYOUT_PP);
        out->crosses_nodes[PLAN_COMM_CP] = layout_any_group_crosses(l, LAYOUT_CP);
        out->crosses_nodes[PLAN_COMM_EP] = layout_any_group_crosses(l, LAYOUT_EP);
        out->crosses_nodes[PLAN_COMM_DP] = any_block_crosses(l);
    }
    out->group_size[PLAN_COMM_TP] = sh->tp;
    out->group_size[PLAN_COMM_PP] = sh->pp;
    out->group_size[PLAN_COMM_DP] = sh->dp * sh->cp;
    out->group_size[PLAN_COMM_CP] = sh->cp;
    out->group_size[PLAN_COMM_EP] = sh->ep;
    for (int g = 0; g < PLAN_COMM_NGROUPS; g++) {
        double bw = out->crosses_nodes[g] ? sh->inter_bw : sh->intra_bw;
        out->seconds[g] = bw > 0 ? out->bytes[g] / bw : 0;
    }
}

void plan_comm_estimate(const plan_stage *ps, plan_comm *out) {
    plan_comm_estimate_known(ps, out, NULL);
}

void plan_comm_estimate_known(const plan_stage *ps, plan_comm *out, const int *crosses) {
    memset(out, 0, sizeof *out);
    comm_dims d = comm_dims_of(ps);
    for (uint32_t stage = 0; stage < ps->shape.pp; stage++) {
        double bytes[PLAN_COMM_NGROUPS];
        comm_stage(ps, &d, stage, bytes);
        for (int g = 0; g < PLAN_COMM_NGROUPS; g++) {
            if (stage == 0 || bytes[g] > out->bytes[g]) {
                out->bytes[g] = bytes[g];
                out->busiest_pp_stage[g] = stage;
            }
        }
    }
    comm_links(ps, out, crosses);
}

double plan_hw_flops(const plan_shape *sh, double flops, double attn) {
    if (sh->recompute == BATON__STAGE__RECOMPUTE__FULL) return flops * 4.0 / 3.0;
    if (sh->recompute == BATON__STAGE__RECOMPUTE__SELECTIVE) return flops + attn / 3;
    return flops;
}

static void time_flops(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    double tokens = (double)sh->global_batch * (double)sh->seq_len;
    double n = (double)(p->active - p->embedding);
    double attn = 6.0 * sh->n_layers * sh->dim * (double)sh->seq_len * tokens;
    ps->tokens_per_step = tokens;
    ps->flops_per_step = 6 * n * tokens + attn;
    ps->hw_flops_per_step = plan_hw_flops(sh, ps->flops_per_step, attn);
    double f8 = 0;
    for (uint32_t l = 0; sh->precision == BATON__PRECISION__TYPE__FP8 && l < p->n_layers; l++)
        f8 += plan_layer_fp8_flops(ps, l);
    ps->fp8_flops_per_step = f8 * tokens;
}

void plan_time_estimate(plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    const double *s = ps->comm.seconds;
    time_flops(ps);
    double m = ps->microbatches ? (double)ps->microbatches : 1;
    ps->bubble = plan_pp_bubble(ps, &ps->bubble_replayed);
    double peak = (double)ps->lay.world * sh->peak_flops * sh->mfu;
    /* the flops not in fp8 GEMMs at the bf16 rate, fp8_speedup times slower */
    double f8 = ps->fp8_flops_per_step, slow = ps->flops_per_step - f8;
    ps->compute_s = peak > 0 ? (f8 + slow * sh->fp8_speedup) / peak : 0;
    double dp_hidden = 2.0 / 3.0 * ps->compute_s / m;
    double dp_exposed = s[PLAN_COMM_DP] > dp_hidden ? s[PLAN_COMM_DP] - dp_hidden : 0;
    ps->exposed_comm_s =
        s[PLAN_COMM_TP] + s[PLAN_COMM_CP] + s[PLAN_COMM_EP] + s[PLAN_COMM_PP] / 2 + dp_exposed;
    /* The bubble is the idle share of the stages' time, so a stage's compute (the mean
     * stage's, compute_s) takes 1 - bubble of the pipeline's span. */
    ps->bubble_s =
        ps->bubble > 0 && ps->bubble < 1 ? ps->compute_s * ps->bubble / (1 - ps->bubble) : 0;
    ps->step_time_s = ps->compute_s > 0 ? ps->compute_s + ps->bubble_s + ps->exposed_comm_s : 0;
    ps->tokens_per_s = ps->step_time_s > 0 ? ps->tokens_per_step / ps->step_time_s : 0;
    /* end to end, as the workers log it and as papers report it: every model FLOP over the
     * devices' peak (the stage precision's, plan_peak_flops) for the whole step */
    double world_peak = (double)ps->lay.world * sh->peak_flops;
    ps->mfu_e2e = ps->step_time_s > 0 && world_peak > 0
                      ? ps->flops_per_step / (world_peak * ps->step_time_s)
                      : 0;
}
