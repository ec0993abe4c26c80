/* The `baton plan` reports: a text block per stage with every figure next to the
 * formula that made it, and the same figures as JSON (see plan.h for its shape).
 * Sizes are decimal: 1 GB = 1e9 bytes, 1B parameters = 1e9. */
#include "plan.h"
#include "plan_precision.h"
#include "util/buf.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define REPORT_RANKS_HEAD 8 /* ranks shown before "..." in the rank table */

/* ---- number formatting ------------------------------------------------------------ */

/* 70553706496 -> "70.55B"; below 1000 the plain number. */
static const char *fmt_count(char *buf, size_t n, double v) {
    static const char units[] = "KMBT";
    if (fabs(v) < 1000) {
        snprintf(buf, n, "%.0f", v);
        return buf;
    }
    int u = -1;
    while (fabs(v) >= 1000 && u < 3) {
        v /= 1000;
        u++;
    }
    snprintf(buf, n, "%.2f%c", v, units[u]);
    return buf;
}

/* 70553706496 -> "70,553,706,496". */
static const char *fmt_grouped(char *buf, size_t n, uint64_t v) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%" PRIu64, v);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

static const char *fmt_bytes(char *buf, size_t n, double v) {
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (fabs(v) >= 1000 && u < 5) {
        v /= 1000;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
    return buf;
}

const char *plan_format_memory(char *buf, size_t n, double bytes) {
    if (fabs(bytes) < 1e9) return fmt_bytes(buf, n, bytes);
    snprintf(buf, n, "%.2f GB", bytes / 1e9);
    return buf;
}

const char *plan_format_memory_of(char *buf, size_t n, double used, double capacity) {
    char a[32], b[32];
    if (used >= 1e9 && capacity >= 1e9)
        snprintf(buf, n, "%.2f of %.2f GB", used / 1e9, capacity / 1e9);
    else
        snprintf(buf, n, "%s of %s", plan_format_memory(a, sizeof a, used),
                 plan_format_memory(b, sizeof b, capacity));
    return buf;
}

/* The data-parallel reduction group is dp*cp ranks. */
static const char *group_label(const plan_stage *ps, int g) {
    static const char *const names[PLAN_COMM_NGROUPS] = {"tp", "pp", "dp", "cp", "ep"};
    return g == PLAN_COMM_DP && ps->shape.cp > 1 ? "dp*cp" : names[g];
}

/* ---- text report ------------------------------------------------------------------ */

static const char *precision_name(Baton__Precision__Type t) {
    switch (t) {
    case BATON__PRECISION__TYPE__BF16:
        return "bf16";
    case BATON__PRECISION__TYPE__FP8:
        return "fp8";
    case BATON__PRECISION__TYPE__FP16:
        return "fp16";
    default:
        return "fp32";
    }
}

static const char *recompute_name(Baton__Stage__Recompute r) {
    switch (r) {
    case BATON__STAGE__RECOMPUTE__FULL:
        return "full";
    case BATON__STAGE__RECOMPUTE__SELECTIVE:
        return "selective";
    default:
        return "none";
    }
}

static const char *stage_name(const Baton__StageSpec *spec) {
    return spec && spec->stage && spec->stage->name ? spec->stage->name : "";
}

static void text_header(FILE *f, const Baton__StageSpec *spec, const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    fprintf(f, "== stage %u \"%s\" (%u of %u)", spec->stage_index, stage_name(spec),
            spec->stage_index + 1, spec->n_stages ? spec->n_stages : 1);
    if (spec->recipe_name)
        fprintf(f, ", recipe %s", spec->recipe_name[0] ? spec->recipe_name : "(unnamed)");
    fprintf(f, " ==\n");
    fprintf(f,
            "setup       seq_len %" PRIu64 ", global_batch %" PRIu64 ", micro_batch %" PRIu64
            " (%" PRIu64 " micro-batch%s per step), %s, recompute %s, zero %u%s\n",
            sh->seq_len, sh->global_batch, sh->micro_batch, ps->microbatches,
            ps->microbatches == 1 ? "" : "es", precision_name(sh->precision),
            recompute_name(sh->recompute), sh->zero,
            sh->sequence_parallel ? ", sequence parallel" : "");
    plan_precision_text(f, spec->stage ? spec->stage->precision : NULL,
                        ps->scale_carried ? ps->scale_from : NULL, ps->scale_init);
}

static void text_params_model(FILE *f, const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    char a[32], b[32], c[32];
    fprintf(
        f, "model       %s, %u layers, dim %u, %u heads (%u kv, head_dim %u), ffn %u, vocab %u\n",
        p->n_moe_layers ? "LLaMA MoE" : "LLaMA", sh->n_layers, sh->dim, sh->n_heads, sh->n_kv_heads,
        sh->head_dim, (unsigned)(p->n_dense_layers ? p->mlp_layer / 3 / sh->dim : 0), sh->vocab);
    fprintf(f, "parameters  %s total (%s), %s active\n", fmt_count(a, sizeof a, (double)p->total),
            fmt_grouped(b, sizeof b, p->total), fmt_count(c, sizeof c, (double)p->active));
    fprintf(f, "  embedding  %9s = V*d = %u*%u\n", fmt_count(a, sizeof a, (double)p->embedding),
            sh->vocab, sh->dim);
    fprintf(f,
            "  attention  %9s per layer = d*(H*hd) + 2*d*(KV*hd) + (H*hd)*d = 2*%u*%u + "
            "2*%u*%u\n",
            fmt_count(a, sizeof a, (double)p->attn_layer), sh->dim, sh->n_heads * sh->head_dim,
            sh->dim, sh->n_kv_heads * sh->head_dim);
    if (p->n_dense_layers)
        fprintf(f, "  mlp        %9s per dense layer = 3*d*ffn = 3*%u*%" PRIu64 "\n",
                fmt_count(a, sizeof a, (double)p->mlp_layer), sh->dim, p->mlp_layer / 3 / sh->dim);
}

static void text_params_rest(FILE *f, const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    char a[32], b[32];
    if (p->n_moe_layers) {
        uint64_t effn = p->moe_experts / p->n_experts / 3 / sh->dim;
        fprintf(f,
                "  moe        %9s per MoE layer = d*E + E*3*d*effn + S*3*d*effn, E %u, top_k %u, "
                "S %" PRIu64 ", effn %" PRIu64 "; layers %u.. every %u\n",
                fmt_count(a, sizeof a, (double)p->moe_layer), p->n_experts, p->top_k,
                effn ? p->moe_shared / (3 * sh->dim * effn) : 0, effn, p->moe_first_dense,
                p->moe_every);
    }
    fprintf(f, "  norms      %9s per layer = 2*d\n",
            fmt_count(a, sizeof a, (double)p->norms_layer));
    fprintf(f, "  final norm %9s = d,  head %s = d*V\n",
            fmt_count(a, sizeof a, (double)p->final_norm), fmt_count(b, sizeof b, (double)p->head));
    fprintf(f,
            "  total      = embedding + %u*(attention + norms) + %u*mlp + %u*moe + final norm + "
            "head\n",
            sh->n_layers, p->n_dense_layers, p->n_moe_layers);
}

static void text_layout_summary(FILE *f, const plan_stage *ps) {
    const layout *l = &ps->lay;
    uint32_t nodes = (l->world + l->gpus_per_node - 1) / l->gpus_per_node;
    fprintf(f, "layout      tp %u x cp %u x dp %u x pp %u = %u ranks (ep %u, edp %u",
            l->size[LAYOUT_TP], l->size[LAYOUT_CP], l->size[LAYOUT_DP], l->size[LAYOUT_PP],
            l->world, l->size[LAYOUT_EP], l->size[LAYOUT_EDP]);
    if (plan_folds_experts(ps))
        fprintf(f,
                "; ep x edp drawn from tp x cp x dp, the tp ranks folded in: each routed "
                "expert on %u rank%s",
                plan_expert_holders(ps), plan_expert_holders(ps) == 1 ? "" : "s");
    fprintf(f, "), order %s\n", l->order);
    fprintf(f, "            %u node%s x %u GPUs; within a node:", nodes, nodes == 1 ? "" : "s",
            l->gpus_per_node);
    for (int inside = 1; inside >= 0; inside--) {
        int any = 0;
        if (!inside) fprintf(f, "; across nodes:");
        for (int g = 0; g < PLAN_COMM_NGROUPS; g++) {
            if (ps->comm.group_size[g] > 1 && ps->comm.crosses_nodes[g] != inside) {
                fprintf(f, "%s %s", any ? "," : "", group_label(ps, g));
                any = 1;
            }
        }
        if (!any) fprintf(f, " -");
    }
    fprintf(f, "\n");
}

/* The rank table's columns: rank, node, gpu, then tp, cp, ep, dp, pp. */
enum { RANK_COLS = 8 };

/* Each column's width: its usual one (6, 5, then 4), wider where its largest value has
 * more digits (millions of ranks), so that a space always parts the columns. */
static void rank_widths(const layout *l, int w[RANK_COLS]) {
    static const int dim[5] = {LAYOUT_TP, LAYOUT_CP, LAYOUT_EP, LAYOUT_DP, LAYOUT_PP};
    uint32_t top[RANK_COLS] = {l->world - 1, layout_node_of(l, l->world - 1), l->gpus_per_node - 1};
    for (int k = 0; k < 5; k++)
        top[3 + k] = l->size[dim[k]] ? l->size[dim[k]] - 1 : 0;
    for (int k = 0; k < RANK_COLS; k++) {
        char digits[16];
        int n = snprintf(digits, sizeof digits, "%u", top[k]);
        w[k] = k == 0 ? 6 : k == 1 ? 5 : 4;
        w[k] = n > w[k] ? n : w[k];
    }
}

static void text_rank_row(FILE *f, const layout *l, const int w[RANK_COLS], uint32_t r) {
    layout_coord c = layout_coord_of(l, r);
    fprintf(f, "  %*u %*u %*u %*u %*u %*u %*u %*u\n", w[0], r, w[1], layout_node_of(l, r), w[2],
            r % l->gpus_per_node, w[3], c.c[LAYOUT_TP], w[4], c.c[LAYOUT_CP], w[5], c.c[LAYOUT_EP],
            w[6], c.c[LAYOUT_DP], w[7], c.c[LAYOUT_PP]);
}

static void text_rank_table(FILE *f, const layout *l) {
    int w[RANK_COLS];
    rank_widths(l, w);
    fprintf(f, "  %*s %*s %*s %*s %*s %*s %*s %*s\n", w[0], "rank", w[1], "node", w[2], "gpu", w[3],
            "tp", w[4], "cp", w[5], "ep", w[6], "dp", w[7], "pp");
    uint32_t head = l->world <= 2 * REPORT_RANKS_HEAD ? l->world : REPORT_RANKS_HEAD;
    for (uint32_t r = 0; r < head; r++)
        text_rank_row(f, l, w, r);
    if (head < l->world) {
        fprintf(f, "     ...\n");
        text_rank_row(f, l, w, l->world - 1);
    }
}

/* ZeRO-2/3's lines (plan_memory.c): S the rank's shard, U the largest unit padded. */
static void text_memory_zero(FILE *f, const plan_stage *ps) {
    const plan_memory *m = &ps->mem;
    char a[32], s[32], u[32];
    fmt_grouped(s, sizeof s, m->zero_shard);
    fmt_grouped(u, sizeof u, m->zero_unit);
    fprintf(f,
            "  grads       %10s = 4 B x (%s shard + 2 x %s buffers: one unit's backward, one "
            "being reduce-scattered; no whole gradient buffer)\n",
            plan_format_memory(a, sizeof a, m->grads), s, u);
    uint32_t n = ps->shape.dp * ps->shape.cp, ep = ps->shape.ep;
    fprintf(f,
            "  optimizer   %10s = %.0f B (%s) x %s shard (ZeRO-%u: per-unit shards over %u "
            "ranks",
            plan_format_memory(a, sizeof a, m->optimizer), m->optim_bytes,
            m->optim_bytes == 12 ? "fp32 master + Adam m, v" : "Adam m, v", s, m->zero_level, n);
    if (ep > 1 && m->moe_layers_on_stage > 0)
        fprintf(f, "; MoE layers' over the %u of the expert-data-parallel group", n / ep);
    fprintf(f, ")\n");
}

static void text_memory_params(FILE *f, const plan_stage *ps) {
    const plan_memory *m = &ps->mem;
    const plan_shape *sh = &ps->shape;
    char a[32], b[32], c[32];
    uint32_t st = m->heaviest_pp_stage;
    fprintf(f, "memory per GPU (heaviest rank: pipeline stage %u of %u, %u layers%s%s)\n", st,
            sh->pp, m->layers_on_stage, st == 0 ? " + embedding" : "",
            st + 1 == sh->pp ? " + final norm + head" : "");
    fmt_grouped(b, sizeof b, m->params_on_rank);
    fprintf(f, "  params      %10s = ", plan_format_memory(a, sizeof a, m->params));
    if (m->gemm_copies > 0) /* the sum's terms, each with what it is */
        fprintf(f, "%s (", plan_format_memory(a, sizeof a, m->params - m->gemm_copies));
    fprintf(f, "%.0f B x ", m->weight_bytes);
    if (m->zero_level == 3) /* the shard and two units' gather buffers (plan_memory.c) */
        fprintf(f, "(%s shard + 2 x %s gather buffer) of ", fmt_grouped(a, sizeof a, m->zero_shard),
                fmt_grouped(c, sizeof c, m->zero_unit));
    fprintf(f, "%s params on the rank: stage share / tp", b);
    if (m->expert_params_on_rank)
        fprintf(f, ", routed experts / ep, the MoE block whole on every tp rank%s%s",
                sh->sequence_parallel ? " (run on its own rows)" : "",
                ps->params.moe_bias ? " with its balancing bias (E)" : "");
    fprintf(f, "%s%s\n", m->zero_level == 3 ? "" : ", fp32 weights", m->gemm_copies > 0 ? ")" : "");
    if (m->gemm_copies > 0)
        fprintf(f, "                         + %s (the GEMMs' converted weight copies: %s)\n",
                plan_format_memory(a, sizeof a, m->gemm_copies),
                sh->precision == BATON__PRECISION__TYPE__FP8
                    ? "E4M3 and its transpose; the head bf16"
                    : "16-bit");
    if (m->zero_level >= 2) {
        text_memory_zero(f, ps);
        return;
    }
    fprintf(f, "  grads       %10s = 4 B (fp32 main grads) x %s\n",
            plan_format_memory(a, sizeof a, m->grads), b);
    fprintf(f, "  optimizer   %10s = %.0f B (%s) x (",
            plan_format_memory(a, sizeof a, m->optimizer), m->optim_bytes,
            m->optim_bytes == 12 ? "fp32 master + Adam m, v" : "Adam m, v");
    fprintf(f, "%s / %u", fmt_grouped(b, sizeof b, m->dense_params_on_rank), m->optim_shards_dense);
    if (m->expert_params_on_rank)
        fprintf(f, " + %s / %u", fmt_grouped(b, sizeof b, m->expert_params_on_rank),
                m->optim_shards_expert);
    int fold = plan_folds_experts(ps);
    fprintf(f, ")%s\n",
            !sh->zero                ? " (no ZeRO)"
            : !plan_zero1_active(ps) ? " (ZeRO-1 over dp*cp = 1: nothing sharded)"
            : (uint64_t)sh->dp * sh->cp == 1
                ? " (ZeRO-1: dp*cp = 1, only the experts sharded, over edp drawn from tp)"
            : fold ? " (ZeRO-1 over dp*cp; experts over edp, drawn from tp*cp*dp)"
                   : " (ZeRO-1 over dp*cp; experts over edp)");
}

/* The activations' lines (plan_memory.c): the headline the sum of the terms printed after
 * it, then what a slot and a layer's set hold. */
static void text_memory_acts(FILE *f, const plan_stage *ps) {
    const plan_memory *m = &ps->mem;
    const plan_shape *sh = &ps->shape;
    char a[32], b[32], c[32], of[80];
    uint32_t v = sh->pp > 1 && sh->virtual_stages > 1 ? sh->virtual_stages : 1;
    int full = sh->recompute == BATON__STAGE__RECOMPUTE__FULL;
    fprintf(f, "  activations %10s = %u x %s (%s in flight)",
            plan_format_memory(a, sizeof a, m->activations), m->microbatches_in_flight,
            fmt_bytes(b, sizeof b, m->act_per_slot),
            v > 1 ? "model chunks (interleaved)" : "micro-batches");
    if (m->act_logits > 0)
        fprintf(f, " + %u x %s (head)", m->head_slots, fmt_bytes(c, sizeof c, m->act_logits));
    if (m->act_moe > 0) fprintf(f, " + %s (MoE caches)", fmt_bytes(c, sizeof c, m->act_moe));
    fprintf(f, "\n");
    fprintf(
        f,
        "              a slot: %u layers x %s (each layer's input%s) + %s (the chunk's output%s)\n",
        m->layers_per_slot, fmt_bytes(b, sizeof b, m->act_per_layer),
        full ? "; recompute full" : " and its set", fmt_bytes(c, sizeof c, m->act_slot_extra),
        full ? " and the set of the layer being recomputed" : "");
    fprintf(f,
            "              a layer's set %s, float32 whatever the precision: norms, q/k/v, "
            "attention out, log-sum-exp, MLP gate/up/out%s (s=%" PRIu64 " b=%" PRIu64
            " h=%u t=%u%s)\n",
            fmt_bytes(b, sizeof b, m->act_layer_set),
            sh->recompute == BATON__STAGE__RECOMPUTE__NONE && sh->cp <= 1 &&
                    sh->precision == BATON__PRECISION__TYPE__FP32
                ? ", attention probabilities (fp32, no recompute)"
                : "; no attention probabilities",
            sh->seq_len / (sh->cp ? sh->cp : 1), sh->micro_batch, sh->dim, sh->tp,
            sh->sequence_parallel ? ", norms on s/t rows" : "");
    if (m->act_logits > 0)
        fprintf(f, "              head: final norm, fp32 logits (s*b*V/t), losses\n");
    if (m->act_moe > 0)
        fprintf(f, "              MoE caches: %u x %s (the MoE layers' kept activations%s)\n",
                m->moe_caches, fmt_bytes(b, sizeof b, m->act_moe / m->moe_caches),
                sh->ep > 1 ? "; their room for expert rows grows with the imbalance met" : "");
    fprintf(f, "  backward    %10s = %s (gradient buffers, RoPE tables) + %s (op scratch, %s)",
            plan_format_memory(a, sizeof a, m->backward),
            fmt_bytes(b, sizeof b, m->backward - m->act_scratch - m->act_grad_in),
            fmt_bytes(c, sizeof c, m->act_scratch), sh->cuda ? "CUDA" : "CPU");
    if (m->act_grad_in > 0)
        fprintf(f, " + %u x %s (received output gradients, interleaved)", m->grad_buffers,
                fmt_bytes(c, sizeof c, m->act_grad_in / m->grad_buffers));
    fprintf(f, "\n");
    fprintf(f, "  total       %10s: ", plan_format_memory(a, sizeof a, m->total));
    if (m->fits < 0)
        fprintf(f, "capacity not given\n");
    else
        fprintf(f, "%s (%s)\n", m->fits ? "fits" : "DOES NOT FIT",
                plan_format_memory_of(of, sizeof of, m->total, m->capacity));
}

/* A stage that does not fit: what does on the same devices, best first. */
static void text_alternatives(FILE *f, const plan_stage *ps) {
    if (ps->mem.fits != 0) return;
    if (ps->n_alts == 0) {
        fprintf(f,
                "  no split of the %u devices into tp, pp and dp, with ZeRO, recomputation "
                "or a smaller micro_batch, fits\n",
                ps->lay.world);
        return;
    }
    fprintf(f, "  on the same %u devices these fit (recipe keys for the stage; best first):\n",
            ps->lay.world);
    for (int k = 0; k < ps->n_alts; k++) {
        const plan_alt *a = &ps->alts[k];
        char keys[256], of[80];
        fprintf(f, "    %s: %s (%s)", plan_alt_keys(&ps->shape, a, keys, sizeof keys),
                a->tight ? "fits, tight" : "fits",
                plan_format_memory_of(of, sizeof of, a->memory, ps->mem.capacity));
        if (a->step_time_s > 0) fprintf(f, ", step %.3f s", a->step_time_s);
        fprintf(f, "\n");
    }
}

static void text_comm(FILE *f, const plan_stage *ps) {
    const plan_comm *c = &ps->comm;
    char a[32], b[32];
    fprintf(f, "communication per step (bytes a rank sends; busiest pipeline stage)\n");
    fprintf(f, "  group  ranks         bytes  link          seconds  stage\n");
    for (int g = 0; g < PLAN_COMM_NGROUPS; g++) {
        double bw = c->crosses_nodes[g] ? ps->shape.inter_bw : ps->shape.intra_bw;
        fprintf(f, "  %-6s%6u %13s  %-10s %10.4f  %5u  (%s/s)\n", group_label(ps, g),
                c->group_size[g], fmt_bytes(a, sizeof a, c->bytes[g]),
                c->crosses_nodes[g] ? "inter-node" : "intra-node", c->seconds[g],
                c->busiest_pp_stage[g], bw > 0 ? fmt_bytes(b, sizeof b, bw) : "? B");
    }
}

static void text_flops(FILE *f, const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    char a[32], b[32];
    fprintf(f,
            "flops       model %.3e per step = 6 N T + 6 L h s T (N %s active less embedding, "
            "T %s tokens; causal attention halved)\n",
            ps->flops_per_step,
            fmt_count(a, sizeof a, (double)(ps->params.active - ps->params.embedding)),
            fmt_count(b, sizeof b, ps->tokens_per_step));
    fprintf(f, "            hardware %.3e (recompute %s%s)\n", ps->hw_flops_per_step,
            recompute_name(sh->recompute),
            sh->recompute == BATON__STAGE__RECOMPUTE__FULL        ? ": x 4/3"
            : sh->recompute == BATON__STAGE__RECOMPUTE__SELECTIVE ? ": + 2 L h s T"
                                                                  : "");
}

/* The compute time's formula: under fp8 the fp8 GEMMs' flops at the fp8 peak, the rest at
 * bf16's. */
static void text_compute(FILE *f, const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    if (sh->precision != BATON__PRECISION__TYPE__FP8) {
        fprintf(f,
                "time        compute %.3f s = model flops / (%u devices x %.4g TFLOP/s %s x mfu "
                "%.2f)\n",
                ps->compute_s, ps->lay.world, sh->peak_flops / 1e12, precision_name(sh->precision),
                sh->mfu);
        return;
    }
    fprintf(f,
            "time        compute %.3f s = (fp8 GEMMs' %.3e flops + the rest's %.3e x %.3g) / "
            "(%u devices x %.4g TFLOP/s fp8 x mfu %.2f)\n",
            ps->compute_s, ps->fp8_flops_per_step, ps->flops_per_step - ps->fp8_flops_per_step,
            sh->fp8_speedup, ps->lay.world, sh->peak_flops / 1e12, sh->mfu);
    fprintf(f, "            the rest at the bf16 rate: attention scores, head%s%s%s\n",
            ps->params.n_experts ? ", router" : "",
            sh->fp8_first_last_bf16 ? ", first and last layers" : "",
            plan_fp8_all_native(ps) ? "" : ", GEMMs with a dimension not 16-aligned");
}

static void text_time(FILE *f, const plan_stage *ps) {
    const plan_shape *sh = &ps->shape;
    char a[32];
    if (ps->compute_s <= 0) {
        fprintf(f, "time        unknown: cluster.gpu.peak_tflops_bf16 not given (mfu %.2f)\n",
                sh->mfu);
    } else {
        text_compute(f, ps);
        if (sh->pp > 1)
            fprintf(f,
                    "            bubble %.3f s = compute x %.1f%% / (1 - %.1f%%) (the pipeline "
                    "bubble below)\n",
                    ps->bubble_s, 100 * ps->bubble, 100 * ps->bubble);
        fprintf(f,
                "            exposed comm %.3f s = tp + cp + ep + pp/2 + dp beyond the last "
                "micro-batch's backward\n",
                ps->exposed_comm_s);
        fprintf(f, "            step %.3f s = compute%s + exposed comm, %s tokens/s\n",
                ps->step_time_s, sh->pp > 1 ? " + bubble" : "",
                fmt_count(a, sizeof a, ps->tokens_per_s));
        fprintf(f,
                "            MFU %.3f end to end = model flops / (%u devices x %.4g TFLOP/s x "
                "step), as the workers log it (mfu %.2f is the compute's alone)\n",
                ps->mfu_e2e, ps->lay.world, sh->peak_flops / 1e12, sh->mfu);
    }
    if (sh->pp < 2) {
        fprintf(f, "            pipeline bubble 0%% (no pipeline), m %" PRIu64 "\n",
                ps->microbatches);
    } else {
        fprintf(f,
                "            pipeline bubble %.1f%% of the stages' time idle: %s, m %" PRIu64
                " (equal stages: (pp-1)/(v*m+pp-1) = %.1f%%)\n",
                100 * ps->bubble,
                ps->bubble_replayed ? "the workers' schedule replayed with each chunk's flops"
                                    : "not replayed (over 2^17 micro-batch chunks, or no "
                                      "memory): the equal-stage figure at the slowest "
                                      "stage's pace",
                ps->microbatches, 100 * plan_pp_bubble_equal(ps));
    }
    if (sh->pp > 1)
        fprintf(f,
                "            slowest pipeline stage %u: %.2fx the stages' mean compute (its "
                "layers' model flops%s%s)\n",
                ps->pp_slowest, ps->pp_balance,
                ps->pp_slowest == sh->pp - 1 ? " and the head's" : "",
                sh->fp8_speedup != 1 ? ", the fp8 GEMMs' at their rate" : "");
    if (ps->pp_best_balance > 0) {
        fprintf(f, "            evened out by parallel.stage_layers: [");
        for (uint32_t s = 0; s < ps->pp_best_split_n; s++)
            fprintf(f, "%s%u", s ? ", " : "", ps->pp_best_split[s]);
        fprintf(f, "] (the slowest %.2fx, the bubble %.1f%%)\n", ps->pp_best_balance,
                100 * ps->pp_best_bubble);
    }
}

static void text_warnings(FILE *f, const plan_stage *ps) {
    if (ps->n_warnings == 0) return;
    fprintf(f, "warnings\n");
    for (int i = 0; i < ps->n_warnings; i++)
        fprintf(f, "  - %s\n", ps->warnings[i]);
}

void plan_report_text(FILE *f, const Baton__StageSpec *spec, const plan_stage *ps) {
    static const Baton__StageSpec empty = BATON__STAGE_SPEC__INIT;
    if (spec == NULL) spec = &empty;
    text_header(f, spec, ps);
    text_params_model(f, ps);
    text_params_rest(f, ps);
    text_layout_summary(f, ps);
    text_rank_table(f, &ps->lay);
    text_memory_params(f, ps);
    text_memory_acts(f, ps);
    text_alternatives(f, ps);
    text_comm(f, ps);
    text_flops(f, ps);
    text_time(f, ps);
    text_warnings(f, ps);
}

/* ---- JSON ------------------------------------------------------------------------- */

static void json_num(bt_buf *b, const char *key, double v) {
    bt_buf_printf(b, "\"%s\": ", key);
    if (isfinite(v))
        bt_buf_printf(b, "%.15g", v);
    else
        bt_buf_printf(b, "null");
}

/* Byte counts as JSON integers. */
static void json_int(bt_buf *b, const char *key, double v) {
    bt_buf_printf(b, "\"%s\": ", key);
    if (isfinite(v))
        bt_buf_printf(b, "%.0f", v);
    else
        bt_buf_printf(b, "null");
}

static void json_layout(bt_buf *b, const layout *l) {
    bt_buf_printf(b,
                  "\"layout\": {\"tp\": %u, \"cp\": %u, \"dp\": %u, \"pp\": %u, \"ep\": %u, "
                  "\"order\": ",
                  l->size[LAYOUT_TP], l->size[LAYOUT_CP], l->size[LAYOUT_DP], l->size[LAYOUT_PP],
                  l->size[LAYOUT_EP]);
    bt_buf_json_string(b, l->order);
    bt_buf_printf(b,
                  ", \"nodes\": %u, \"gpus_per_node\": %u, \"edp\": %u, \"experts_over_tp\": %s}, ",
                  (l->world + l->gpus_per_node - 1) / l->gpus_per_node, l->gpus_per_node,
                  l->size[LAYOUT_EDP], l->fold_tp ? "true" : "false");
}

static void json_memory(bt_buf *b, const plan_memory *m) {
    bt_buf_printf(b, "\"memory_per_gpu\": {");
    json_int(b, "params", m->params);
    bt_buf_printf(b, ", ");
    json_int(b, "grads", m->grads);
    bt_buf_printf(b, ", ");
    json_int(b, "optimizer", m->optimizer);
    bt_buf_printf(b, ", ");
    json_int(b, "activations", m->activations);
    bt_buf_printf(b, ", ");
    json_int(b, "moe_cache_bytes", m->act_moe);
    bt_buf_printf(b, ", ");
    json_int(b, "activation_slot_bytes", m->act_per_slot);
    bt_buf_printf(b, ", ");
    json_int(b, "head_bytes", m->act_logits);
    bt_buf_printf(b, ", ");
    json_int(b, "backward", m->backward);
    bt_buf_printf(b, ", ");
    json_int(b, "op_scratch", m->act_scratch);
    bt_buf_printf(b, ", ");
    json_int(b, "total", m->total);
    bt_buf_printf(b, ", \"heaviest_pp_stage\": %u", m->heaviest_pp_stage);
    bt_buf_printf(b, ", \"activation_slots\": %u, \"grad_buffers\": %u", m->microbatches_in_flight,
                  m->grad_buffers);
    bt_buf_printf(b,
                  ", \"zero\": %u, \"zero_shard_params\": %" PRIu64
                  ", \"zero_unit_params\": %" PRIu64 "}, ",
                  m->zero_level, m->zero_shard, m->zero_unit);
    bt_buf_printf(b, "\"capacity\": %" PRIu64, m->capacity_bytes); /* as given, exact */
    bt_buf_printf(b, ", \"fits\": %s, ", m->fits < 0 ? "null" : m->fits ? "true" : "false");
}

static void json_comm(bt_buf *b, const char *key, const double *v, int integers) {
    static const char *const names[PLAN_COMM_NGROUPS] = {"tp", "pp", "dp", "cp", "ep"};
    bt_buf_printf(b, "\"%s\": {", key);
    for (int g = 0; g < PLAN_COMM_NGROUPS; g++) {
        if (g) bt_buf_printf(b, ", ");
        (integers ? json_int : json_num)(b, names[g], v[g]);
    }
    bt_buf_printf(b, "}, ");
}

static void json_warnings(bt_buf *b, const plan_stage *ps) {
    bt_buf_printf(b, "\"warnings\": [");
    for (int i = 0; i < ps->n_warnings; i++) {
        if (i) bt_buf_printf(b, ", ");
        bt_buf_json_string(b, ps->warnings[i]);
    }
    bt_buf_printf(b, "]");
}

/* The split balance_suggest found (plan.h: pp_best_split), or null. */
static void json_best_split(bt_buf *b, const plan_stage *ps) {
    bt_buf_printf(b, ", \"pipeline_best_split\": ");
    if (ps->pp_best_balance <= 0) {
        bt_buf_printf(b, "null");
        return;
    }
    for (uint32_t s = 0; s < ps->pp_best_split_n; s++)
        bt_buf_printf(b, "%s%u", s ? ", " : "[", ps->pp_best_split[s]);
    bt_buf_printf(b, "]");
}

static void json_times(bt_buf *b, const plan_stage *ps) {
    json_num(b, "flops_per_step", ps->flops_per_step);
    bt_buf_printf(b, ", ");
    json_num(b, "hw_flops_per_step", ps->hw_flops_per_step);
    bt_buf_printf(b, ", ");
    json_num(b, "fp8_flops_per_step", ps->fp8_flops_per_step);
    bt_buf_printf(b, ", ");
    json_num(b, "compute_s", ps->compute_s);
    bt_buf_printf(b, ", ");
    json_num(b, "bubble_s", ps->bubble_s);
    bt_buf_printf(b, ", ");
    json_num(b, "exposed_comm_s", ps->exposed_comm_s);
    bt_buf_printf(b, ", ");
    json_num(b, "step_time_s", ps->step_time_s);
    bt_buf_printf(b, ", ");
    json_num(b, "peak_flops", ps->shape.peak_flops);
    bt_buf_printf(b, ", ");
    json_num(b, "mfu", ps->shape.mfu);
    bt_buf_printf(b, ", ");
    json_num(b, "mfu_end_to_end", ps->mfu_e2e);
    bt_buf_printf(b, ", ");
    json_num(b, "tokens_per_s", ps->tokens_per_s);
    bt_buf_printf(b, ", ");
    json_num(b, "pipeline_bubble", ps->bubble);
    bt_buf_printf(b, ", \"pipeline_bubble_replayed\": %s", ps->bubble_replayed ? "true" : "false");
    if (ps->pp_best_split_n > 0) {
        bt_buf_printf(b, ", ");
        json_num(b, "pipeline_best_split_bubble", ps->pp_best_bubble);
    }
    bt_buf_printf(b, ", ");
    json_num(b, "pipeline_balance", ps->pp_balance);
    json_best_split(b, ps);
    bt_buf_printf(b, ", \"microbatches\": %" PRIu64 ", ", ps->microbatches);
}

/* "alternatives": [{"tp", "pp", "dp", "cp", "ep", "zero", "virtual_stages", "recompute",
 * "micro_batch", "memory_total", "tight", "step_time_s" (null: unknown), "keys"}], for a
 * stage that does not fit ([] where none does). */
static void json_alternatives(bt_buf *b, const plan_stage *ps) {
    static const char *const rc[] = {"none", "selective", "full"};
    bt_buf_printf(b, "\"alternatives\": [");
    for (int k = 0; k < ps->n_alts; k++) {
        const plan_alt *a = &ps->alts[k];
        char keys[256];
        bt_buf_printf(b,
                      "%s{\"tp\": %u, \"pp\": %u, \"dp\": %u, \"cp\": %u, \"ep\": %u, "
                      "\"zero\": %u, \"virtual_stages\": %u, \"recompute\": \"%s\", "
                      "\"micro_batch\": %llu, \"memory_total\": %.0f, \"tight\": %s, "
                      "\"step_time_s\": ",
                      k ? ", " : "", a->tp, a->pp, a->dp, ps->shape.cp, ps->shape.ep, a->zero,
                      a->virtual_stages, rc[a->recompute <= 2 ? a->recompute : 0],
                      (unsigned long long)a->micro_batch, a->memory, a->tight ? "true" : "false");
        if (a->step_time_s > 0)
            bt_buf_printf(b, "%.6g", a->step_time_s);
        else
            bt_buf_printf(b, "null");
        bt_buf_printf(b, ", \"keys\": ");
        bt_buf_json_string(b, plan_alt_keys(&ps->shape, a, keys, sizeof keys));
        bt_buf_printf(b, "}");
    }
    bt_buf_printf(b, "], ");
}

static void json_stage(bt_buf *b, const Baton__StageSpec *spec, const plan_stage *ps) {
    bt_buf_printf(b, "{\"name\": ");
    bt_buf_json_string(b, stage_name(spec));
    bt_buf_printf(b,
                  ", \"index\": %u, \"params_total\": %" PRIu64 ", \"params_active\": %" PRIu64
                  ", \"world\": %u, ",
                  spec ? spec->stage_index : 0, ps->params.total, ps->params.active, ps->lay.world);
    json_layout(b, &ps->lay);
    plan_precision_json(b, spec && spec->stage ? spec->stage->precision : NULL,
                        ps->scale_carried ? ps->scale_from : NULL, ps->scale_init);
    json_memory(b, &ps->mem);
    json_comm(b, "comm_bytes_per_step", ps->comm.bytes, 1);
    json_comm(b, "comm_seconds_per_step", ps->comm.seconds, 0);
    json_times(b, ps);
    json_alternatives(b, ps);
    json_warnings(b, ps);
    bt_buf_printf(b, "}");
}

void plan_report_json(FILE *f, Baton__StageSpec *const *specs, const plan_stage *stages, size_t n) {
    bt_buf b;
    bt_buf_init(&b);
    bt_buf_printf(&b, "{\"stages\": [");
    for (size_t i = 0; i < n; i++) {
        bt_buf_printf(&b, i ? ",\n  " : "\n  ");
        json_stage(&b, specs ? specs[i] : NULL, &stages[i]);
    }
    bt_buf_printf(&b, "%s]}\n", n ? "\n" : "");
    if (!b.oom) fwrite(bt_buf_str(&b), 1, b.len, f);
    bt_buf_free(&b);
}
