/* How evenly a pipeline's stages share the compute (plan.h: plan_pp_balance), and the
 * split of the layers that shares it best (plan_pp_best_split). A stage's compute per
 * token is the FLOPs of its layers, 6 x their active parameters + 6 h s for the
 * attention scores, with what recomputation repeats (plan_hw_flops), and on the last
 * stage the head's 6 x (d V + d), never recomputed; the embedding is a lookup. Under fp8
 * the FLOPs of the fp8 GEMMs count 1 / fp8_speedup each (plan_layer_fp8_flops): the
 * stages' times in bf16-rate FLOPs. The slowest stage sets the pace of every micro-batch
 * through the pipeline. */
#include <stdlib.h>

#include "plan.h"

/* The fp8 kernels take a product whose summed and output dimensions are multiples of 16
 * (the CUDA engine pads the rows to one, and carries the others' fp8 values in bf16). */
static int fp8_native(uint64_t C, uint64_t OC) {
    return C % 16 == 0 && OC % 16 == 0;
}

/* Per token, 6 x the weights of a layer's GEMMs whose products the fp8 kernels take on a
 * tp rank: the attention's always, with moe its experts' (routed: top_k of them, and the
 * shared ones; whole on a rank), else the MLP's; *all: of every one. */
static double fp8_layer_weights(const plan_stage *ps, int moe, double *all) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    uint64_t t = sh->tp, d = sh->dim, hd = sh->head_dim;
    uint64_t kv = sh->n_kv_heads ? sh->n_kv_heads : sh->n_heads;
    uint64_t ffn = d ? p->mlp_layer / (3 * d) : 0;
    uint64_t q = sh->n_heads * hd / t, kvw = t > kv ? hd : kv * hd / t;
    double dq = (double)d * sh->n_heads * hd, dkv = 2.0 * d * kv * hd, dm = (double)d * ffn;
    double w = (fp8_native(d, q + 2 * kvw) ? dq + dkv : 0) + (fp8_native(q, d) ? dq : 0);
    *all = 2 * dq + dkv;
    if (moe) { /* each expert a token reaches (top_k routed, the shared): 3 d F weights */
        uint64_t F = p->moe_ffn;
        double n = (double)p->top_k + p->moe_shared_n, dF = (double)d * F;
        w += n * ((fp8_native(d, 2 * F) ? 2 * dF : 0) + (fp8_native(F, d) ? dF : 0));
        *all += n * 3 * dF;
    } else {
        w += (fp8_native(d, 2 * ffn / t) ? 2 * dm : 0) + (fp8_native(ffn / t, d) ? dm : 0);
        *all += 3 * dm;
    }
    return 6 * w;
}

double plan_layer_fp8_flops(const plan_stage *ps, uint32_t l) {
    const plan_shape *sh = &ps->shape;
    const plan_params *p = &ps->params;
    if (!plan_layer_in_fp8(sh, l, p->n_layers)) return 0;
    double all;
    return fp8_layer_weights(ps, plan_layer_is_moe(p, l), &all);
}

int plan_fp8_all_native(const plan_stage *ps) {
    for (uint32_t l = 0; l < ps->params.n_layers; l++) {
        double all, w = fp8_layer_weights(ps, plan_layer_is_moe(&ps->params, l), &all);
        if (w != 6 * all) return 0;
    }
    return 1;
}

/* Layer l's FLOPs per token with recomputation; *model without (the forward is a third);
 * both bf16-rate FLOPs (plan.h). */
static double layer_flops_of(const plan_stage *ps, uint32_t l, double *model) {
    const plan_params *p = &ps->params;
    double params = (double)p->attn_layer + (double)p->norms_layer;
    if (plan_layer_is_moe(p, l))
        params += (double)p->moe_router + (double)p->moe_shared +
                  (p->n_experts ? (double)p->moe_experts * p->top_k / p->n_experts : 0);
    else
        params += (double)p->mlp_layer;
    double attn = 6.0 * ps->shape.dim * (double)ps->shape.seq_len;
    double fast = plan_layer_fp8_flops(ps, l) * (1 - 1 / ps->shape.fp8_speedup);
    *model = 6 * params + attn - fast;
    return plan_hw_flops(&ps->shape, *model, attn);
}

double plan_pp_layer_flops(const plan_stage *ps, uint32_t l) {
    double model;
    return layer_flops_of(ps, l, &model);
}

double plan_pp_layer_flops_fwd(const plan_stage *ps, uint32_t l, double *fwd) {
    double model, all = layer_flops_of(ps, l, &model);
    *fwd = model / 3;
    return all;
}

double plan_pp_head_flops(const plan_stage *ps) {
    return 6.0 * ((double)ps->params.head + (double)ps->params.final_norm);
}

void plan_pp_chunk_flops(const plan_stage *ps, uint32_t stage, uint32_t c, double *fwd,
                         double *bwd) {
    const plan_shape *sh = &ps->shape;
    uint32_t first, n, v = sh->virtual_stages ? sh->virtual_stages : 1;
    double model, all = 0, forward = 0;
    plan_pp_chunk_span(&ps->params, sh->pp, v, stage, c, &first, &n);
    for (uint32_t i = first; i < first + n; i++) {
        all += layer_flops_of(ps, plan_pp_stage_layer(&ps->params, sh->pp, v, stage, i), &model);
        forward += model / 3;
    }
    if (stage == sh->pp - 1 && c == v - 1)
        all += plan_pp_head_flops(ps), forward += plan_pp_head_flops(ps) / 3;
    *fwd = forward, *bwd = all - forward;
}

void plan_pp_balance(const plan_stage *ps, double *ratio, uint32_t *slowest) {
    const plan_shape *sh = &ps->shape;
    double most = 0, sum = 0;
    *ratio = 1, *slowest = 0;
    if (sh->pp < 2) return;
    for (uint32_t s = 0; s < sh->pp; s++) {
        uint32_t first, n, moe;
        double w = s == sh->pp - 1 ? plan_pp_head_flops(ps) : 0;
        plan_pp_stage_layers(&ps->params, sh->pp, sh->virtual_stages, s, &first, &n, &moe);
        for (uint32_t i = 0; i < n; i++)
            w += plan_pp_layer_flops(
                ps, plan_pp_stage_layer(&ps->params, sh->pp, sh->virtual_stages, s, i));
        sum += w;
        if (w > most) most = w, *slowest = s;
    }
    *ratio = sum > 0 ? most * sh->pp / sum : 1;
}

/* best[k * W + i] (W = L + 1): the least possible slowest stage when layers [0, i) make
 * k stages of at least one layer each; cut[] the first layer of the last of them. */
static void split_table(const double *pre, size_t L, size_t pp, double *best, size_t *cut) {
    size_t W = L + 1;
    for (size_t i = 1; i <= L; i++)
        best[1 * W + i] = pre[i], cut[1 * W + i] = 0;
    for (size_t k = 2; k < pp; k++)
        for (size_t i = k; i <= L; i++) {
            double b = -1;
            for (size_t j = k - 1; j < i; j++) {
                double prev = best[(k - 1) * W + j], last = pre[i] - pre[j];
                double w = prev > last ? prev : last;
                if (b < 0 || w < b) b = w, cut[k * W + i] = j;
            }
            best[k * W + i] = b;
        }
}

double plan_pp_best_split(const plan_stage *ps, uint32_t *split) {
    size_t L = ps->shape.n_layers, pp = ps->shape.pp, W = L + 1;
    if (pp < 2 || pp > L || L > PLAN_MAX_LAYERS || pp > PLAN_MAX_DP_SPLIT ||
        (double)pp * (double)L * (double)L > (double)(1u << 30))
        return 0;
    double *pre = calloc(W, sizeof *pre), *best = calloc(pp * W, sizeof *best);
    size_t *cut = calloc(pp * W, sizeof *cut);
    double result = 0;
    if (pre != NULL && best != NULL && cut != NULL) {
        for (size_t l = 0; l < L; l++)
            pre[l + 1] = pre[l] + plan_pp_layer_flops(ps, (uint32_t)l);
        split_table(pre, L, pp, best, cut);
        size_t j_best = pp - 1; /* the last stage: layers [j, L) and the head */
        for (size_t j = pp - 1; j < L; j++) {
            double prev = best[(pp - 1) * W + j], last = pre[L] - pre[j] + plan_pp_head_flops(ps);
            double w = prev > last ? prev : last;
            if (result == 0 || w < result) result = w, j_best = j;
        }
        split[pp - 1] = (uint32_t)(L - j_best);
        for (size_t k = pp - 1, i = j_best; k >= 1; i = cut[k * W + i], k--)
            split[k - 1] = (uint32_t)(i - cut[k * W + i]);
        result = result * (double)pp / (pre[L] + plan_pp_head_flops(ps));
    }
    free(pre);
    free(best);
    free(cut);
    return result;
}
