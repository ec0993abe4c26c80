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
 * Activations are what worker/engine/model.c carves for them (its size tables, mirrored
 * below: act_layer_set, act_head), all float32 whatever the precision (only the GEMMs'
 * operands are rounded), per micro-batch with T = seq_len/cp tokens, N = B T rows, R = N/tp
 * rows of the residual stream under sequence parallelism (else N): a layer's set is the
 * norms' inputs, outputs and rstds, q/k/v, the log-sum-exp, the attention output and the
 * MLP's gate, up and SwiGLU output, about (3C + 3F/t + qkv/t + qd/t) N floats; the attention
 * probabilities (B H/t T^2) only without recomputation, in fp32 and without cp (the flash
 * kernels that bf16/fp16/fp8 may run keep none; the CPU backward recomputes them). No
 * dropout, so none of Korthikanti et al.'s 5as/h masks. Per slot: every layer's input
 * (R C) and the chunk's output, plus every layer's set (recompute none and selective,
 * which the engine keeps alike but for the probabilities) or, under full recomputation,
 * one set for the layer being recomputed. MoE layers add their caches as the engines
 * allocate them (moe_cache_bytes below: top_k copies of the routed rows, the experts'
 * activations; equal to the worker's figure, engine.layout.ep*): one per MoE layer of a
 * chunk per slot, one in all under full recomputation.
 * The backward's buffers and op scratch (model.c carve_work) are counted apart.
 * 1F1B keeps min(pp - p, m) micro-batches in flight on stage p. The last stage's slot
 * also holds the final norm, the fp32 logits (N V/t) and the losses.
 * Interleaved (v virtual stages, pipe_schedule.h) stage p keeps one model chunk's
 * activations per slot (layers/v; its longest chunk's under parallel.stage_layers), as
 * many slots as the schedule the worker runs needs (counted from its list:
 * min(m v, 2 (pp - p - 1) + (v - 1) pp + 1) when pp divides m, Megatron-LM's, one more
 * on the last stage, whose head slot is apart; m v when m = pp, every forward first,
 * every micro-batch's logits too; more when pp does not divide m, the last group of
 * micro-batches being larger); the buffers output gradients received ahead of their
 * backward wait in (R C floats each) are among the backward's. */
#include "plan.h"

#include "pipe_schedule.h"

#include <math.h>
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
    uint64_t replicated = n * (p->norms_layer + attn_on_rank(p, sh)) +
                          n_moe * (p->moe_router + p->moe_shared + p->moe_bias);
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
        uint64_t x = div_ceil(p->moe_experts, sh->ep);
        uint64_t block = p->moe_shared + p->moe_router + p->moe_bias + x;
        u += p->moe_shared + p->moe_router + p->moe_bias;
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

/* The rank's widths and rows of one micro-batch, as worker/engine/model.c's dims_of and
 * sp_rows: T = seq_len / cp tokens, N = B T rows, R = N / tp under sequence parallelism;
 * the query heads, kv heads (one where tp > n_kv_heads), ffn rows and vocabulary rows of
 * a tp rank. */
typedef struct act_dims {
    double B, T, N, R, C, H, qkv, qd, F, V, hd, t;
} act_dims;

static act_dims act_dims_of(const plan_shape *sh) {
    act_dims d;
    d.t = sh->tp ? sh->tp : 1;
    d.B = (double)sh->micro_batch, d.T = (double)(sh->seq_len / (sh->cp ? sh->cp : 1));
    d.N = d.B * d.T, d.R = sh->sequence_parallel ? d.N / d.t : d.N, d.C = sh->dim;
    d.hd = sh->head_dim, d.H = (double)(sh->n_heads / sh->tp);
    double KV = sh->n_kv_heads >= sh->tp ? (double)(sh->n_kv_heads / sh->tp) : 1;
    d.qkv = (d.H + 2 * KV) * d.hd, d.qd = d.H * d.hd;
    d.F = (double)(sh->ffn / sh->tp), d.V = (double)(sh->vocab / sh->tp);
    return d;
}

/* Whether the engine keeps attention's probabilities (model.c carve_acts): only without
 * recomputation, without context parallelism and in float32; the flash kernels that bf16,
 * fp16 and fp8 may run keep none, and the CPU backward recomputes them. */
static int act_keeps_probs(const plan_shape *sh) {
    return sh->recompute == BATON__STAGE__RECOMPUTE__NONE && sh->cp <= 1 &&
           sh->precision == BATON__PRECISION__TYPE__FP32;
}

/* One layer's activation set as model.c carve_layer_acts carves it, in floats: the norms'
 * inputs and outputs (ln1, xmid, ln2: R C each) and rstds (R each), q/k/v (N qkv), the
 * log-sum-exp (B H T), the attention output (N qd), the MLP's gate and up (2 N F) and
 * SwiGLU output (N F); the probabilities (B H T^2) where act_keeps_probs; under Ulysses
 * the all-to-all's copies (N qkv + N qd + B H T). Every activation is float32, whatever
 * the precision: only the GEMMs' operands are rounded. */
static double act_layer_set(const plan_shape *sh, const act_dims *d) {
    double f = 3 * d->R * d->C + 2 * d->R + d->N * d->qkv + d->B * d->H * d->T + d->N * d->qd +
               3 * d->N * d->F;
    if (act_keeps_probs(sh)) f += d->B * d->H * d->T * d->T;
    if (sh->cp > 1 && sh->cp_ulysses) f += d->N * d->qkv + d->N * d->qd + d->B * d->H * d->T;
    return f;
}

/* The head's part of a slot on the last stage (model.c carve_acts): the final norm's
 * output and rstd, the logits (N V), the cross-entropy's log-sum-exp and losses, and under
 * tp its partial sums (3 tp N), in floats. */
static double act_head(const act_dims *d) {
    return d->R * d->C + d->R + d->N * d->V + 2 * d->N + (d->t > 1 ? 3 * d->t * d->N : 0);
}

/* The CUDA backend's own buffer for the tensor-core attention backward under
 * grouped-query attention (worker/cuda/cuda_attention_tc.cu tc_dkdv_slices): the dk/dv
 * kernel splits each kv head's group of query heads into the fewest slices S (a divisor
 * of the group) that give 1024 blocks of 64 keys, each slice's partial dk and dv kept,
 * 2 S B T KV hd floats; none for a group of one, float32 attention, heads the tensor
 * cores do not take, or ring attention (its own kernels). Under Ulysses the attention
 * sees the whole sequence with cp times fewer heads. */
static double act_dkdv_slices(const plan_shape *sh, const act_dims *d) {
    uint32_t cp = sh->cp ? sh->cp : 1, hd = sh->head_dim;
    if (!sh->cuda || sh->precision == BATON__PRECISION__TYPE__FP32 || hd % 16 || hd > 128 ||
        (cp > 1 && !sh->cp_ulysses))
        return 0;
    double T = cp > 1 ? d->T * cp : d->T, H = d->H / cp;
    uint32_t kv = sh->n_kv_heads ? sh->n_kv_heads : sh->n_heads;
    double KV = kv >= sh->tp * cp ? (double)kv / sh->tp / cp : 1;
    uint32_t rep = (uint32_t)(H / KV), S = 1;
    double blocks = ceil(T / 64) * d->B * KV;
    while (S < rep && blocks * S < 1024) {
        S++;
        while (rep % S != 0)
            S++;
    }
    return S > 1 ? 2 * S * d->B * T * KV * hd : 0;
}

/* The op scratch (model.c scratch_floats): the most any GEMM or the attention takes, in
 * floats. The CPU backend rounds a GEMM's operands into copies of N C + OC C + N OC floats
 * (bf16/fp16/fp8) and its attention takes 2 min(T, 64) T; the CUDA backend keeps 16-bit
 * copies (half as many floats; under fp8 the rows padded to 16 and a 16-row tail) and its
 * grouped-query attention's dk/dv slices, added (worker/cpu/cpu_matmul.c,
 * worker/cuda/cuda_matmul.cu; its alignment padding not counted). */
static double act_scratch(const plan_shape *sh, const act_dims *d) {
    const double shapes[5][2] = {
        {d->C, d->qkv}, {d->qd, d->C}, {d->C, 2 * d->F}, {d->F, d->C}, {d->C, d->V}};
    int fp8 = sh->precision == BATON__PRECISION__TYPE__FP8;
    double most = sh->cuda ? 0 : 2 * (d->T < 64 ? d->T : 64) * d->T;
    for (int i = 0; sh->precision != BATON__PRECISION__TYPE__FP32 && i < 5; i++) {
        double C = shapes[i][0], OC = shapes[i][1], f;
        if (sh->cuda) {
            double rows = fp8 ? ceil(d->N / 16) * 16 : d->N;
            f = (rows * C + OC * C + rows * OC) / 2 + 64 + (fp8 ? 16 * (C > OC ? C : OC) + 64 : 0);
        } else {
            f = d->N * C + OC * C + d->N * OC;
        }
        most = f > most ? f : most;
    }
    return most + act_dkdv_slices(sh, d);
}

static void memory_activations(const plan_stage *ps, uint32_t stage, plan_memory *out) {
    const plan_shape *sh = &ps->shape;
    act_dims d = act_dims_of(sh);
    int full = sh->recompute == BATON__STAGE__RECOMPUTE__FULL;
    out->act_layer_set = 4 * act_layer_set(sh, &d);
    out->act_resid = 4 * d.R * d.C;
    /* per layer of a slot: its input in the residual stream, and its set unless full
     * recomputation keeps one set per slot for the layer being recomputed */
    out->act_per_layer = out->act_resid + (full ? 0 : out->act_layer_set);
    out->act_slot_extra = out->act_resid + (full ? out->act_layer_set : 0);
    out->act_logits = stage + 1 == sh->pp ? 4 * act_head(&d) : 0;
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
    out->act_per_slot = (double)out->layers_per_slot * out->act_per_layer + out->act_slot_extra;
    out->act_per_microbatch = out->layers_on_stage * out->act_per_layer + out->act_logits;
    out->activations = (double)in_flight * out->act_per_slot + (double)heads * out->act_logits;
    /* model.c carve_work: the backward's gradient buffers (dres, dln, dx: N C each; the
     * wider and narrower of the layer's GEMM outputs), the op scratch, the norm weights'
     * gradient under sequence parallelism, interleaved the buffers output gradients received
     * ahead wait in (R C each), the RoPE tables (T hd) */
    double wide = d.qkv > 2 * d.F ? d.qkv : 2 * d.F, narrow = d.qd > d.F ? d.qd : d.F;
    out->act_grad_in = 4 * (double)grads * d.R * d.C;
    out->act_scratch = 4 * act_scratch(sh, &d);
    out->backward = 4 * (3 * d.N * d.C + d.N * wide + d.N * narrow +
                         (sh->sequence_parallel ? d.C : 0) + d.T * d.hd) +
                    out->act_grad_in + out->act_scratch;
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
    out->total = out->params + out->grads + out->optimizer + out->activations + out->backward;
    out->capacity = ps->shape.capacity, out->capacity_bytes = ps->shape.capacity_bytes;
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
