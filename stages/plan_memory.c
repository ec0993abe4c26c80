/* Memory per GPU, for each pipeline stage; the heaviest stage is the one reported.
 *
 * Parameters on a rank of pipeline stage p: the stage's layers (split evenly, the
 * remainder to the first stages), plus the embedding on the first stage and the final
 * norm and head on the last. Attention, dense MLP, embedding and head are split by tp;
 * norms and the MoE block (router and shared experts) are whole on every tp rank; routed
 * experts are split by ep only (the engine's expert tensor parallelism is 1).
 *
 * Bytes per parameter, as baton's engines allocate them (worker/engine/train.c
 * train_state_bytes; not Megatron's bf16 weights with a sharded fp32 master):
 *   weights    4: the fp32 weights, which the optimizer updates in place, on every rank;
 *              plus, on the CUDA engine under bf16/fp16/fp8, each GEMM's converted copy
 *              (model.h weight_cache; not under ZeRO-3): 2 bytes per GEMM weight (under
 *              fp8 E4M3 and its transpose; 3 with a bf16 form too where a GEMM dimension
 *              is not a multiple of 16: worker/cuda/cuda_matmul.cu); none for the
 *              embedding, norms, routers
 *   grads      4: fp32 main-grad buffer that micro-batches accumulate into
 *   optimizer  8 (Adam m + v); ZeRO-1 (zero >= 1) shards it over the replicas of each
 *              parameter: dp*cp for dense parameters, edp = dp*cp/ep for routed experts
 *              (its collectives run in place in the weights and gradients).
 * ZeRO-2 and ZeRO-3 shard per unit (the embedding, each layer, the final norm with the
 * head; worker/engine/train_zero.h), n = dp*cp (an MoE layer's under ep: n/ep, the
 * expert-data-parallel group, whose ranks hold the same experts): S = sum over units of
 * ceil(unit / n) parameters per rank, U = the largest unit padded to a multiple of n (of
 * n/ep for such an MoE unit):
 *   ZeRO-2  weights x P (and the copies); grads 4 x (S + 2U): the accumulated shard and two
 *           units' gradient buffers (one in backward, one in its reduce-scatter; no whole
 *           gradient buffer: worker/engine/model_zero.h); optimizer x S.
 *   ZeRO-3  weights x (S + 2U): the shard and two units' gather buffers (one in use, one
 *           prefetched); grads 4 x (S + 2U), as ZeRO-2's; optimizer x S.
 * With dp*cp = 1 there is nothing to shard: the zero 0 figures.
 *
 * Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in
 * Large Transformer Models"), per layer and micro-batch, with s = seq_len/cp,
 * b = micro_batch, h = dim, a = n_heads, t = tp, in bytes for 16-bit activations:
 *   none       SP: sbh/t (34 + 5as/h)       no SP: sbh (10 + 24/t + 5as/(ht))
 *   selective  SP: sbh/t * 34               no SP: sbh (10 + 24/t)
 *   full       SP: 2sbh/t (layer input)     no SP: 2sbh,
 *              plus one layer's "none" activations once, the recompute working set.
 * The paper's constants are for a GPT block (4h GeLU MLP, multi-head attention); they
 * are used as they are for SwiGLU/GQA, so treat them as the paper's estimate, not an
 * exact count. MoE layers add their caches as the engines allocate them (moe_cache_bytes
 * below: top_k copies of the routed rows, the experts' activations; equal to the
 * worker's figure, engine.layout.ep*): one per MoE layer of a chunk per slot, one in all
 * under full recomputation.
 * fp32 activations double them. 1F1B keeps min(pp - p, m) micro-batches in flight on
 * stage p. The last stage also holds one micro-batch's fp32 logits, s*b*V*4/t.
 * Interleaved (v virtual stages, pipe_schedule.h) stage p keeps one model chunk's
 * activations per slot (layers/v; its longest chunk's under parallel.stage_layers), as
 * many slots as the schedule the worker runs needs (counted from its list:
 * min(m v, 2 (pp - p - 1) + (v - 1) pp + 1) when pp divides m, Megatron-LM's, one more
 * on the last stage, whose head slot is apart; m v when m = pp, every forward first,
 * every micro-batch's logits too; more when pp does not divide m, the last group of
 * micro-batches being larger), plus the buffers output gradients received ahead of their
 * backward wait in (sb/t h 4 each with sequence parallelism). */
#include "plan.h"

#include "pipe_schedule.h"

#include <stdlib.h>
#include <string.h>

static uint64_t div_ceil(uint64_t a, uint64_t b) {
    return b ? (a + b - 1) / b : a;
}

/* A layer's attention parameters on one tp rank: q, k, v and o split by tp, except that
 * with tp > n_kv_heads every rank holds one kv head's k and v (replicated). */
static uint64_t attn_on_rank(const plan_params *p, const plan_shape *sh) {
    uint64_t t = sh->tp, d = sh->dim, hd = sh->head_dim;
    if (t <= sh->n_kv_heads || sh->n_kv_heads == 0) return div_ceil(p->attn_layer, t);
    uint64_t kv = 2 * d * hd * sh->n_kv_heads; /* k and v of every kv head */
    return div_ceil(p->attn_layer - kv, t) + 2 * d * hd;
}

static void memory_params(const plan_stage *ps, uint32_t stage, plan_memory *out) {
    const plan_params *p = &ps->params;
    const plan_shape *sh = &ps->shape;
    uint32_t first, n, n_moe;
    plan_pp_stage_layers(p, sh->pp, sh->virtual_stages, stage, &first, &n, &n_moe);
    uint64_t n_dense = n - n_moe;
    /* the MoE block (router, shared experts, the local routed experts) is whole on every
     * tp rank: the engine's expert tensor parallelism is 1 (worker/engine/model.c) */
    uint64_t split = n_dense * p->mlp_layer;
    uint64_t replicated =
        n * (p->norms_layer + attn_on_rank(p, sh)) + n_moe * (p->moe_router + p->moe_shared);
    if (stage == 0) split += p->embedding;
    if (stage + 1 == sh->pp) {
        split += p->head;
        replicated += p->final_norm;
    }
    out->layers_on_stage = n;
    out->moe_layers_on_stage = n_moe;
    out->dense_params_on_rank = div_ceil(split, sh->tp) + replicated;
    out->expert_params_on_rank = div_ceil(n_moe * p->moe_experts, sh->ep);
    out->params_on_rank = out->dense_params_on_rank + out->expert_params_on_rank;
}

uint32_t plan_zero_units(const plan_stage *ps, uint32_t stage, plan_zero_unit *out) {
    const plan_params *p = &ps->params;
    const plan_shape *sh = &ps->shape;
    uint64_t n = (uint64_t)sh->dp * sh->cp, t = sh->tp;
    n = n ? n : 1;
    uint64_t edp = sh->ep > 1 && n % sh->ep == 0 ? n / sh->ep : n; /* MoE units' group */
    uint32_t first, count, n_moe, k = 0;
    plan_pp_stage_layers(p, sh->pp, sh->virtual_stages, stage, &first, &count, &n_moe);
    uint64_t embed = div_ceil(p->embedding, t), head = div_ceil(p->head, t) + p->final_norm;
    if (stage == 0) out[k++] = (plan_zero_unit){div_ceil(embed, n), n, 0, embed, 0};
    for (uint32_t i = 0; i < count; i++) {
        uint32_t l = plan_pp_stage_layer(p, sh->pp, sh->virtual_stages, stage, i);
        uint64_t u = attn_on_rank(p, sh) + p->norms_layer;
        if (!plan_layer_is_moe(p, l)) {
            u += div_ceil(p->mlp_layer, t);
            out[k++] = (plan_zero_unit){div_ceil(u, n), n, 0, u, 0};
            continue;
        }
        uint64_t x = div_ceil(p->moe_experts, sh->ep), block = p->moe_shared + p->moe_router + x;
        u += p->moe_shared + p->moe_router;
        out[k++] = (plan_zero_unit){div_ceil(u + x, edp), edp, edp < n ? u : 0, u + x, block};
    }
    if (stage + 1 == sh->pp) out[k++] = (plan_zero_unit){div_ceil(head, n), n, 0, head, 0};
    return k;
}

/* The stage's units as a rank holds them (plan_zero_units): the shard and the largest
 * padded unit. */
static void memory_zero_units(const plan_stage *ps, uint32_t stage, plan_memory *out) {
    const plan_shape *sh = &ps->shape;
    uint64_t n = (uint64_t)sh->dp * sh->cp;
    out->zero_level = sh->zero >= 2 && n < 2 ? 0 : sh->zero;
    if (out->zero_level < 2) return;
    plan_zero_unit *unit = malloc(((size_t)ps->params.n_layers + 2) * sizeof *unit);
    if (unit == NULL) return; /* the figures stay 0 */
    uint32_t units = plan_zero_units(ps, stage, unit);
    for (uint32_t k = 0; k < units; k++) {
        out->zero_shard += unit[k].chunk;
        if (unit[k].chunk * unit[k].group > out->zero_unit)
            out->zero_unit = unit[k].chunk * unit[k].group;
    }
    free(unit);
}

/* fp8's copies take 2 bytes per parameter: every dense GEMM dimension on a tp rank (dim,
 * the heads' and kv heads' widths, ffn) is a multiple of 16. A rank holds a whole kv head
 * where tp > n_kv_heads. */
static int fp8_aligned(const plan_shape *sh, const plan_params *p) {
    uint64_t t = sh->tp, d = sh->dim, hd = sh->head_dim;
    uint64_t ffn = d ? p->mlp_layer / (3 * d) : 0;
    uint64_t kvw = t > sh->n_kv_heads ? hd : sh->n_kv_heads * hd / t;
    return d % 16 == 0 && (sh->n_heads * hd / t) % 16 == 0 && kvw % 16 == 0 && (ffn / t) % 16 == 0;
}

/* The GEMMs' converted weight copies on stage's rank, in bytes (see the top). */
static double memory_gemm_copies(const plan_stage *ps, uint32_t stage, uint32_t zero_level) {
    const plan_params *p = &ps->params;
    const plan_shape *sh = &ps->shape;
    if (!sh->cuda || sh->precision == BATON__PRECISION__TYPE__FP32 || zero_level == 3) return 0;
    int fp8 = sh->precision == BATON__PRECISION__TYPE__FP8 && !fp8_aligned(sh, p);
    /* the experts' fp8 copies likewise, per weight: w13 (2F, d), 2/3 of them, and w2 (d, F) */
    uint64_t F = p->moe_ffn, d = sh->dim;
    double w13 = d % 16 || (2 * F) % 16 ? 3 : 2, w2 = d % 16 || F % 16 ? 3 : 2;
    double xb = sh->precision == BATON__PRECISION__TYPE__FP8 ? (2 * w13 + w2) / 3 : 2;
    uint64_t t = sh->tp;
    uint32_t first, n, n_moe, L = p->n_layers;
    plan_pp_stage_layers(p, sh->pp, sh->virtual_stages, stage, &first, &n, &n_moe);
    double bytes = stage + 1 == sh->pp ? 2.0 * (double)div_ceil(p->head, t) : 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t l = plan_pp_stage_layer(p, sh->pp, sh->virtual_stages, stage, i);
        int in_fp8 = plan_layer_in_fp8(sh, l, L);
        double b = fp8 && in_fp8 ? 3 : 2;
        bytes += b * (double)attn_on_rank(p, sh);
        if (plan_layer_is_moe(p, l))
            bytes +=
                (in_fp8 ? xb : 2.0) * (double)(p->moe_shared + div_ceil(p->moe_experts, sh->ep));
        else
            bytes += b * (double)div_ceil(p->mlp_layer, t);
    }
    return bytes;
}

int plan_folds_experts(const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    return layout_fold_tp_experts(sh->tp, sh->sequence_parallel, sh->zero,
                                  ps->params.n_experts > 0);
}

int plan_zero1_active(const plan_stage *ps) {
    return ps->shape.zero &&
           ((uint64_t)ps->shape.dp * ps->shape.cp > 1 || plan_expert_holders(ps) > 1);
}

int plan_parallel_folds_experts(const Baton__Parallel *p, const Baton__Moe *moe) {
    return p != NULL && layout_fold_tp_experts(p->tp, p->sequence_parallel, p->zero,
                                               moe != NULL && moe->n_experts > 0);
}

uint32_t plan_expert_holders(const plan_stage *ps) {
    return ps->lay.size[LAYOUT_EDP];
}

static void memory_states(const plan_stage *ps, uint32_t stage, plan_memory *out) {
    const plan_shape *sh = &ps->shape;
    out->weight_bytes = 4;
    out->grad_bytes = 4;
    out->optim_bytes = 8;
    out->gemm_copies = memory_gemm_copies(ps, stage, out->zero_level);
    int zero1 = plan_zero1_active(ps);
    out->optim_shards_dense = zero1 ? sh->dp * sh->cp : 1;
    out->optim_shards_expert = zero1 ? plan_expert_holders(ps) : 1;
    out->params = out->weight_bytes * (double)out->params_on_rank + out->gemm_copies;
    out->grads = out->grad_bytes * (double)out->params_on_rank;
    out->optimizer =
        out->optim_bytes * ((double)out->dense_params_on_rank / out->optim_shards_dense +
                            (double)out->expert_params_on_rank / out->optim_shards_expert);
    double S = (double)out->zero_shard, U = (double)out->zero_unit;
    if (out->zero_level < 2) return;
    out->optimizer = out->optim_bytes * S;
    /* the shard and two units' gradient buffers; ZeRO-3 the same for the weights */
    out->grads = out->grad_bytes * (S + 2 * U);
    if (out->zero_level == 3) out->params = out->weight_bytes * (S + 2 * U);
}

/* Korthikanti's per-layer activations without recomputation. */
static double act_layer_full(const plan_shape *sh, double s) {
    double b = (double)sh->micro_batch, h = sh->dim, a = sh->n_heads, t = sh->tp;
    double sbh = s * b * h;
    if (sh->sequence_parallel) return sbh / t * (34 + 5 * a * s / h);
    return sbh * (10 + 24 / t + 5 * a * s / (h * t));
}

/* The most layers one of the stage's chunks has: what an activation slot holds (the
 * stage's layers without interleaving). */
static uint32_t stage_chunk_most(const plan_stage *ps, uint32_t stage) {
    const plan_shape *sh = &ps->shape;
    uint32_t v = sh->pp > 1 && sh->virtual_stages > 1 ? sh->virtual_stages : 1, most = 0;
    for (uint32_t c = 0; c < v; c++) {
        uint32_t first, n;
        plan_pp_chunk_span(&ps->params, sh->pp, sh->virtual_stages, stage, c, &first, &n);
        most = n > most ? n : most;
    }
    return most;
}

/* The interleaved schedule's slots (its model chunks' activations in flight, the head's
 * among them), head slots and received-gradient buffers on stage `stage`, counted from the
 * list the worker runs (pipe_schedule.h). Its buffers do not grow past two groups of
 * micro-batches (the steady state repeats), so it is made for 2 pp + (K mod pp) of them
 * when K is larger: the same counts, cheaply. Left as they are if it cannot be made. */
static void memory_vp_slots(uint32_t pp, uint32_t stage, uint64_t K, uint64_t v, uint64_t *slots,
                            uint64_t *heads, uint64_t *grads) {
    pipe_schedule s;
    bt_diag d;
    bt_diag_init(&d);
    uint64_t k = K < 2ull * pp ? K : 2ull * pp + K % pp;
    if (pipe_schedule_make((int)pp, (int)stage, (int)k, (int)v, &s, &d) != 0) return;
    *slots = (uint64_t)s.slots, *heads = (uint64_t)s.head_slots, *grads = (uint64_t)s.grad_bufs;
    pipe_schedule_free(&s);
}

static void memory_activations(const plan_stage *ps, uint32_t stage, plan_memory *out) {
    const plan_shape *sh = &ps->shape;
    double s = (double)sh->seq_len / sh->cp, b = (double)sh->micro_batch, h = sh->dim;
    double t = sh->tp, sbh = s * b * h,
           scale = sh->precision == BATON__PRECISION__TYPE__FP32 ? 2 : 1;
    double t_sp = sh->sequence_parallel ? t : 1;
    out->act_working_set = 0;
    switch (sh->recompute) {
    case BATON__STAGE__RECOMPUTE__FULL:
        out->act_per_layer = 2 * sbh / t_sp;
        out->act_working_set = act_layer_full(sh, s) * scale;
        break;
    case BATON__STAGE__RECOMPUTE__SELECTIVE:
        out->act_per_layer = sh->sequence_parallel ? sbh * 34 / t : sbh * (10 + 24 / t);
        break;
    default:
        out->act_per_layer = act_layer_full(sh, s);
        break;
    }
    out->act_per_layer *= scale;
    out->act_logits = stage + 1 == sh->pp ? s * b * sh->vocab * 4 / t : 0;
    uint64_t K = ps->microbatches, v = sh->virtual_stages > 1 ? sh->virtual_stages : 1;
    uint64_t in_flight = sh->pp - stage, heads = 1, grads = 0;
    if (v > 1 && sh->pp > 1) {        /* chunk activations (pipe_schedule.h) */
        in_flight = K * v, heads = K; /* at most; the schedule's own counts below */
        memory_vp_slots(sh->pp, stage, K, v, &in_flight, &heads, &grads);
    }
    in_flight = in_flight < K * v ? in_flight : K * v;
    out->microbatches_in_flight = (uint32_t)in_flight;
    out->head_slots = (uint32_t)(out->act_logits > 0 ? heads : 0);
    out->grad_buffers = (uint32_t)grads;
    out->layers_per_slot = stage_chunk_most(ps, stage);
    double per_slot = (double)out->layers_per_slot * out->act_per_layer;
    out->act_per_microbatch = out->layers_on_stage * out->act_per_layer + out->act_logits;
    /* interleaved: output gradients received ahead wait in buffers of the rank's rows */
    out->act_grad_in = (double)grads * s * b / t_sp * h * 4;
    out->activations = (double)in_flight * per_slot + out->act_working_set +
                       (double)heads * out->act_logits + out->act_grad_in;
}

/* One MoE layer's cache as worker/engine/moe_dev.c carves it, in bytes: float32 x, scores,
 * their sums, gates, the grouped rows in and out (N K C each), the shared experts'
 * activations (3 F a row each), room for N K rows at the experts (SwiGLU in and out,
 * 3 F, and under ep the rows received, C); int32 selections, rows, tokens, slots (N K
 * each) and the counts. N = the rank's tokens of a micro-batch (a tp-th under sequence
 * parallelism); the room grows when a forward receives more. */
static double moe_cache_bytes(const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    double N = (double)sh->seq_len / sh->cp * sh->micro_batch;
    if (sh->sequence_parallel) N /= sh->tp;
    double C = sh->dim, E = p->n_experts, K = p->top_k, S = p->moe_shared_n, F = p->moe_ffn;
    double floats = N * C + N * E + N + N * K + 2 * N * K * C + S * N * 3 * F +
                    N * K * ((sh->ep > 1 ? C : 0) + 3 * F);
    return 4 * (floats + 4 * N * K + 6 * E + 1);
}

/* The stage's MoE caches: one under full recomputation; else, for every activation slot
 * (micro-batches, or model chunks, in flight), one per MoE layer of the chunk that has
 * the most. */
static void memory_moe(const plan_stage *ps, uint32_t stage, plan_memory *out) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    uint32_t v = sh->pp > 1 && sh->virtual_stages > 1 ? sh->virtual_stages : 1;
    uint32_t first, n, n_moe, most = 0;
    plan_pp_stage_layers(p, sh->pp, sh->virtual_stages, stage, &first, &n, &n_moe);
    if (n_moe == 0) return;
    for (uint32_t c = 0; c < v; c++) {
        uint32_t k = 0, c0, len;
        plan_pp_chunk_span(p, sh->pp, sh->virtual_stages, stage, c, &c0, &len);
        for (uint32_t i = c0; i < c0 + len; i++)
            k += plan_layer_is_moe(p, plan_pp_stage_layer(p, sh->pp, sh->virtual_stages, stage, i));
        most = k > most ? k : most;
    }
    int full = sh->recompute == BATON__STAGE__RECOMPUTE__FULL;
    out->moe_caches = full ? 1 : out->microbatches_in_flight * most;
    out->act_moe = out->moe_caches * moe_cache_bytes(ps);
    out->activations += out->act_moe;
}

void plan_memory_for_pp_stage(const plan_stage *ps, uint32_t stage, plan_memory *out) {
    memset(out, 0, sizeof *out);
    out->heaviest_pp_stage = stage;
    memory_params(ps, stage, out);
    memory_zero_units(ps, stage, out);
    memory_states(ps, stage, out);
    memory_activations(ps, stage, out);
    memory_moe(ps, stage, out);
    out->total = out->params + out->grads + out->optimizer + out->activations;
    out->capacity = ps->shape.capacity;
    out->fits = out->capacity > 0 ? out->total <= out->capacity : -1;
}

void plan_memory_estimate(const plan_stage *ps, plan_memory *out) {
    plan_memory_for_pp_stage(ps, 0, out);
    for (uint32_t stage = 1; stage < ps->shape.pp; stage++) {
        plan_memory m;
        plan_memory_for_pp_stage(ps, stage, &m);
        if (m.total > out->total) *out = m;
    }
}
