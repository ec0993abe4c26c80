/* The model's forward and backward passes over the backend table. Backward
 * accumulates (+=) into parameter gradients and writes (=) activation gradients;
 * where the residual stream receives gradient from a branch, the two are added
 * explicitly. With full recomputation a layer's forward is rerun from its stored input
 * just before its backward, through exactly the same ops, so gradients are bitwise
 * those of the run that stored everything.
 *
 * Under tensor parallelism the passes run on the rank's shard (H/tp heads, F/tp ffn rows,
 * V/tp vocabulary rows) with Megatron's f and g operators (model_tp.h) around the
 * column- and row-parallel GEMMs; with tp 1 those are no-ops and the passes are the
 * one-process ones, op for op.
 *
 * Under pipeline parallelism the passes run the stage's layers on one activation slot
 * (model_stage_forward/backward); a stage starts from the embedding or from the previous
 * stage's output, and ends at the loss or at its output, whose gradient the next stage
 * sends back. With one stage and one slot they are the one-process passes.
 *
 * Under sequence parallelism (model_sp.h) the residual stream and the norms run on the
 * rank's N/tp rows; the gathered rows feed the tensor-parallel GEMMs through the
 * backward buffer g->dx (free in the forward), row-parallel outputs are reduce-scattered
 * from it, and the backward gathers the residual gradient and the norms' outputs into it
 * again. An MoE layer's block runs on the rank's rows alone (model_moe.h).
 *
 * Under ZeRO-3 each unit (the embedding, a layer, the final norm with the head) is
 * gathered before its forward, before its recomputed forward and before its backward,
 * and its gradients are reduced after its backward (model_zero.h; ZeRO-2 only the
 * latter); the hooks are no-ops otherwise. */
#include <math.h>

#include "model.h"
#include "model_cp.h"
#include "model_moe.h"
#include "model_sp.h"
#include "model_tp.h"
#include "model_zero.h"

static int qkv_width(const model *m) {
    return (m->shard.heads + 2 * m->shard.kv_heads) * m->cfg.head_dim;
}

void model_gemm_shape(const model *m, int i, int *C, int *OC) {
    int dim = m->cfg.dim, F = m->shard.ffn, l = i / MODEL_GEMMS_PER_LAYER;
    *C = *OC = 0;
    if (l == m->n_layers) { /* the LM head */
        *C = dim, *OC = m->shard.vocab;
        return;
    }
    int mlp = !model_layer_is_moe(&m->cfg, model_stage_layer(&m->cfg, l));
    switch (i % MODEL_GEMMS_PER_LAYER) {
    case MODEL_GEMM_QKV:
        *C = dim, *OC = qkv_width(m);
        break;
    case MODEL_GEMM_O:
        *C = m->shard.heads * m->cfg.head_dim, *OC = dim;
        break;
    case MODEL_GEMM_GATE_UP:
        *C = mlp ? dim : 0, *OC = mlp ? 2 * F : 0;
        break;
    default:
        *C = mlp ? F : 0, *OC = mlp ? dim : 0;
        break;
    }
}

/* The input of the stage's layer l in the slot in use, which holds the chunk in progress
 * (model.h); the chunk's output (l its end; l = n_layers: the last layer's) always at
 * index chunk_layers, where model_stage_output finds it whatever the chunk's length. */
static float *resid_at(const model *m, int l) {
    int l0 = m->chunk_l0;
    size_t k = l == l0 + m->chunk_len ? (size_t)m->chunk_layers : (size_t)(l - l0);
    if (m->cfg.forward_only) k = (size_t)l % 2; /* two buffers (model.h) */
    return m->acts.resid + k * model_sp_rows(m, m->B * m->T) * m->cfg.dim;
}

/* A norm's output whole (N, C), the input of a column-parallel GEMM in precision prec: ln
 * itself, or under sequence parallelism (ln this rank's rows) every rank's rows gathered
 * into g->dx. */
static const float *ln_whole(model *m, const float *ln, backend_prec prec) {
    if (!model_sp_on(m)) return ln; /* tp's f operator: the identity forward */
    model_sp_gather(m, m->gacts.dx, ln, m->B * m->T, prec);
    return m->gacts.dx;
}

/* The norm before a column-parallel GEMM: ln = norm(x) and rstd for x's rows (this rank's
 * under sequence parallelism, where only they are kept and the backward gathers them
 * again); returns the output whole (ln_whole). */
static const float *norm_gathered(model *m, float *ln, float *rstd, const float *x, const float *w,
                                  backend_prec prec) {
    int R = model_sp_rows(m, m->B * m->T), C = m->cfg.dim;
    m->be->rmsnorm_forward(m->be, ln, rstd, x, w, R, C, m->cfg.norm_eps);
    return ln_whole(m, ln, prec);
}

/* The backward of a norm over this rank's rows (all of them without sequence
 * parallelism) from dln, the gradient of its output there, whole: dx written, the norm
 * weight's gradient dw accumulated (under sequence parallelism summed over tp). */
static void norm_rows_backward(model *m, float *dx, float *dw, const float *dln, const float *x,
                               const float *w, const float *rstd) {
    backend *be = m->be;
    int R = model_sp_rows(m, m->B * m->T), C = m->cfg.dim;
    if (!model_sp_on(m)) {
        be->rmsnorm_backward(be, dx, dw, dln, x, w, rstd, R, C);
        return;
    }
    be->zero(be, m->gacts.dnorm, (size_t)C);
    be->rmsnorm_backward(be, dx, m->gacts.dnorm, dln, x, w, rstd, R, C);
    model_sp_norm_grad(m, dw);
}

/* The norm_gathered's backward from dln (N, C), the gradient of ln: a partial sum over the
 * tp ranks (a column-parallel GEMM's input gradient), summed (under sequence parallelism
 * reduce-scattered to this rank's rows) first. */
static void norm_gathered_backward(model *m, float *dx, float *dw, float *dln, const float *x,
                                   const float *w, const float *rstd) {
    int N = m->B * m->T, C = m->cfg.dim;
    float *mine = dln + (size_t)model_sp_row0(m, N) * C;
    if (model_sp_on(m))
        model_sp_scatter(m, dln, mine, N);
    else
        model_tp_copy_backward(m, dln, (size_t)N * C);
    norm_rows_backward(m, dx, dw, mine, x, w, rstd);
}

/* A row-parallel GEMM's partial output full (N, C) summed over the tp ranks into out
 * (this rank's rows under sequence parallelism; out may be full without it). */
static void reduce_rows(model *m, const float *full, float *out) {
    int N = m->B * m->T;
    if (model_sp_on(m))
        model_sp_scatter(m, full, out, N);
    else
        model_tp_reduce_forward(m, out, (size_t)N * m->cfg.dim);
}

/* The gradient of the residual stream, whole, for products in precision prec: g->dres
 * itself, or under sequence parallelism every rank's rows gathered into g->dx. */
static float *dres_whole(model *m, backend_prec prec) {
    model_grad_acts *g = &m->gacts;
    int N = m->B * m->T;
    if (!model_sp_on(m)) return g->dres;
    model_sp_gather(m, g->dx, g->dres, N, prec);
    return g->dx;
}

static model_layer_acts *acts_of(model *m, int l) {
    int shared = m->cfg.recompute == MODEL_RECOMPUTE_FULL || m->cfg.forward_only;
    return &m->acts.layer[shared ? 0 : l - m->chunk_l0];
}

static backend_gemm *gemm_of(model *m, int l, int which) {
    return &m->gemm[l * MODEL_GEMMS_PER_LAYER + which];
}

/* The precision of layer l's attention products: that of its GEMMs (fp32 keeps attention
 * float32; bf16, fp16 and fp8 layers let the backend use bf16 operands, backend.h). The
 * forward, its recomputation and the backward all ask here, so they agree. */
static backend_prec att_prec(model *m, int l) {
    return gemm_of(m, l, MODEL_GEMM_QKV)->prec;
}

/* Layer l from its input x. out (the layer's output) may be NULL when recomputing for
 * backward, which needs everything but the output. */
static void layer_forward(model *m, int l, const float *x, float *out) {
    backend *be = m->be;
    const model_config *cfg = &m->cfg;
    const model_layer_weights *w = &m->params.layers[l];
    model_layer_acts *a = acts_of(m, l);
    float *scratch = m->gacts.scratch;
    int B = m->B, T = m->T, N = B * T, C = cfg->dim, F = m->shard.ffn;
    int H = m->shard.heads, KV = m->shard.kv_heads, hd = cfg->head_dim, qd = H * hd;
    int ld = qkv_width(m), R = model_sp_rows(m, N), sp = model_sp_on(m);
    float *q = a->qkv, *k = a->qkv + qd, *v = a->qkv + qd + KV * hd;
    /* (N, C) a row-parallel GEMM's partial output; the gathered norm outputs are in dx too,
     * read before */
    float *part = sp ? m->gacts.dx : NULL;

    backend_prec prec = att_prec(m, l); /* every GEMM of the layer's */
    const float *ln1 = norm_gathered(m, a->ln1, a->ln1_rstd, x, w->attn_norm, prec);
    be->matmul_forward(be, a->qkv, ln1, w->wqkv, N, C, ld, gemm_of(m, l, MODEL_GEMM_QKV), scratch);
    be->rope_forward(be, q, q, m->rope_cos, m->rope_sin, B, T, H, hd, ld);
    be->rope_forward(be, k, k, m->rope_cos, m->rope_sin, B, T, KV, hd, ld);
    if (m->cpw)
        model_cp_attention_forward(m, a);
    else
        be->attention_forward(be, a->atty, a->lse, a->att, q, k, v, ld, B, T, H, KV, hd,
                              1.0f / sqrtf((float)hd), att_prec(m, l), scratch);
    be->matmul_forward(be, sp ? part : a->xmid, a->atty, w->wo, N, qd, C,
                       gemm_of(m, l, MODEL_GEMM_O), scratch);
    reduce_rows(m, part, a->xmid);
    be->add(be, a->xmid, a->xmid, x, (size_t)R * C);
    if (w->moe != NULL) { /* an MoE layer (model_moe.h), on this rank's rows */
        be->rmsnorm_forward(be, a->ln2, a->ln2_rstd, a->xmid, w->mlp_norm, R, C, cfg->norm_eps);
        model_moe_forward(m, l, a->ln2, out);
        if (out != NULL) be->add(be, out, out, a->xmid, (size_t)R * C);
        return;
    }
    const float *ln2 = norm_gathered(m, a->ln2, a->ln2_rstd, a->xmid, w->mlp_norm, prec);
    be->matmul_forward(be, a->h13, ln2, w->w13, N, C, 2 * F, gemm_of(m, l, MODEL_GEMM_GATE_UP),
                       scratch);
    be->swiglu_forward(be, a->hs, a->h13, N, F);
    if (out == NULL) return;
    be->matmul_forward(be, sp ? part : out, a->hs, w->w2, N, F, C, gemm_of(m, l, MODEL_GEMM_DOWN),
                       scratch);
    reduce_rows(m, part, out);
    be->add(be, out, out, a->xmid, (size_t)R * C);
}

/* The dense MLP's backward from dout (the layer output's gradient, whole) to g->dln, the
 * gradient of the post-attention norm's output (this rank's partial sum under tp). */
static void mlp_backward(model *m, int l, const float *dout) {
    backend *be = m->be;
    const model_layer_weights *w = &m->params.layers[l];
    model_layer_weights *dw = &m->grads.layers[l];
    const model_layer_acts *a = acts_of(m, l);
    model_grad_acts *g = &m->gacts;
    int N = m->B * m->T, C = m->cfg.dim, F = m->shard.ffn;
    be->matmul_backward(be, g->dnarrow, dw->w2, dout, a->hs, w->w2, N, F, C,
                        gemm_of(m, l, MODEL_GEMM_DOWN), g->scratch);
    be->swiglu_backward(be, g->dwide, g->dnarrow, a->h13, N, F);
    /* dout (in dx under sp) is read by now */
    const float *ln2 = ln_whole(m, a->ln2, gemm_of(m, l, MODEL_GEMM_GATE_UP)->prec);
    be->matmul_backward(be, g->dln, dw->w13, g->dwide, ln2, w->w13, N, C, 2 * F,
                        gemm_of(m, l, MODEL_GEMM_GATE_UP), g->scratch);
}

/* On entry g->dres is the gradient of the layer's output; on return, of its input x. */
static void layer_backward(model *m, int l, const float *x) {
    backend *be = m->be;
    const model_config *cfg = &m->cfg;
    const model_layer_weights *w = &m->params.layers[l];
    model_layer_weights *dw = &m->grads.layers[l];
    const model_layer_acts *a = acts_of(m, l);
    model_grad_acts *g = &m->gacts;
    int B = m->B, T = m->T, N = B * T, C = cfg->dim, R = model_sp_rows(m, N);
    int H = m->shard.heads, KV = m->shard.kv_heads, hd = cfg->head_dim, qd = H * hd;
    int ld = qkv_width(m);
    const float *q = a->qkv, *k = a->qkv + qd, *v = a->qkv + qd + KV * hd;
    float *dq = g->dwide, *dk = g->dwide + qd, *dv = g->dwide + qd + KV * hd;

    /* MLP: out = xmid + g(down(swiglu(gate_up(f(norm(xmid)))))), or xmid + moe(norm(xmid)) */
    if (w->moe != NULL) { /* on this rank's rows */
        model_moe_backward(m, l, g->dres, g->dln, m->bwd_scale);
        norm_rows_backward(m, g->dx, dw->mlp_norm, g->dln, a->xmid, w->mlp_norm, a->ln2_rstd);
    } else {
        mlp_backward(m, l, dres_whole(m, gemm_of(m, l, MODEL_GEMM_DOWN)->prec));
        norm_gathered_backward(m, g->dx, dw->mlp_norm, g->dln, a->xmid, w->mlp_norm, a->ln2_rstd);
    }
    be->add(be, g->dres, g->dres, g->dx, (size_t)R * C);

    /* Attention: xmid = x + g(o(attention(rope(qkv(f(norm(x))))))) */
    const float *dout = dres_whole(m, gemm_of(m, l, MODEL_GEMM_O)->prec);
    be->matmul_backward(be, g->dnarrow, dw->wo, dout, a->atty, w->wo, N, qd, C,
                        gemm_of(m, l, MODEL_GEMM_O), g->scratch);
    if (m->cpw)
        model_cp_attention_backward(m, a, g->dnarrow, g->dwide);
    else
        be->attention_backward(be, dq, dk, dv, g->dnarrow, a->atty, a->att, a->lse, q, k, v, ld, B,
                               T, H, KV, hd, 1.0f / sqrtf((float)hd), att_prec(m, l), g->scratch);
    be->rope_backward(be, dq, dq, m->rope_cos, m->rope_sin, B, T, H, hd, ld);
    be->rope_backward(be, dk, dk, m->rope_cos, m->rope_sin, B, T, KV, hd, ld);
    /* dout (in dx under sp) is read by now */
    const float *ln1 = ln_whole(m, a->ln1, gemm_of(m, l, MODEL_GEMM_QKV)->prec);
    be->matmul_backward(be, g->dln, dw->wqkv, g->dwide, ln1, w->wqkv, N, C, ld,
                        gemm_of(m, l, MODEL_GEMM_QKV), g->scratch);
    norm_gathered_backward(m, g->dx, dw->attn_norm, g->dln, x, w->attn_norm, a->ln1_rstd);
    be->add(be, g->dres, g->dres, g->dx, (size_t)R * C);
}

/* Tokens in [0, V); targets in [0, V) or negative (ignored). Counts the targets. */
static int check_tokens(const model *m, const int32_t *tokens, const int32_t *targets, int N,
                        int *n_valid) {
    int V = m->cfg.vocab;
    *n_valid = 0;
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= V) return BT_ERANGE;
        if (targets && targets[n] >= V) return BT_ERANGE;
        if (targets && targets[n] >= 0) (*n_valid)++;
    }
    return 0;
}

/* The embedding lookup; vocabulary-parallel (each rank's rows, then g) under tp. */
static void embed_forward(model *m, float *out, int N) {
    backend *be = m->be;
    const model_shard *s = &m->shard;
    if (m->tp_group == NULL) {
        be->embedding_forward(be, out, m->tokens, m->params.embed, N, m->cfg.dim);
        return;
    }
    float *part = model_sp_on(m) ? m->gacts.dx : out; /* (N, C) this rank's vocabulary's */
    be->vocab_embedding_forward(be, part, m->tokens, m->params.embed, N, m->cfg.dim, s->vocab0,
                                s->vocab);
    reduce_rows(m, part, out);
}

/* From g->dres, the gradient of the embedding's output (every row's: dres_whole). */
static void embed_backward(model *m, int N) {
    backend *be = m->be;
    const model_shard *s = &m->shard;
    const float *dout = dres_whole(m, BACKEND_PREC_FP32); /* the embedding's: float32 */
    if (m->tp_group == NULL) {
        be->embedding_backward(be, m->grads.embed, dout, m->tokens, N, m->cfg.dim);
        return;
    }
    be->vocab_embedding_backward(be, m->grads.embed, dout, m->tokens, N, m->cfg.dim, s->vocab0,
                                 s->vocab);
}

static void loss_forward(model *m, const int32_t *targets, float *loss) {
    backend *be = m->be;
    int N = m->B * m->T;
    model_acts *a = &m->acts;
    if (m->tp_group == NULL)
        be->crossentropy_forward(be, a->losses, a->ce_lse, a->logits, m->targets, N, m->cfg.vocab);
    else
        model_tp_crossentropy_forward(m, N);
    be->to_host(be, m->host_losses, a->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int n = 0; n < N; n++)
        if (targets[n] >= 0) sum += m->host_losses[n];
    model_cp_sum_double(m, &sum); /* the whole sequence's (model_cp.h) */
    m->loss = m->n_valid ? (float)(sum / m->n_valid) : 0.0f;
    if (loss) *loss = m->loss;
}

/* Points the passes at slot's activations and token copies. */
static void select_slot(model *m, int slot) {
    size_t bt = (size_t)m->max_B * m->max_T;
    m->acts = m->slot_acts[slot];
    m->slot = slot;
    m->tokens = m->tokens_mem + (size_t)slot * 2 * bt;
    m->targets = m->tokens + bt;
}

float *model_stage_input(model *m, int slot) {
    return m->slot_acts[slot].resid;
}

float *model_stage_output(model *m, int slot) {
    return m->slot_acts[slot].resid +
           (size_t)m->chunk_layers * model_sp_rows(m, m->B * m->T) * m->cfg.dim;
}

float *model_stage_grad(model *m) {
    return m->gacts.dres;
}

static size_t boundary_floats(const model *m) {
    return (size_t)model_sp_rows(m, m->max_B * m->max_T) * m->cfg.dim;
}

float *model_stage_grad_in(model *m, int i) {
    return m->gacts.grad_in + (size_t)i * boundary_floats(m);
}

void model_stage_take_grad(model *m, int i) {
    m->be->copy(m->be, m->gacts.dres, model_stage_grad_in(m, i), boundary_floats(m));
}

/* The pass in progress runs the embedding / the head (model.h's chunks). */
static int runs_embed(const model *m) {
    return m->first_stage && m->chunk == 0;
}

static int runs_head(const model *m) {
    return m->last_stage && m->chunk == m->n_chunks - 1;
}

/* ZeRO-3's prefetch: the unit a pass takes after u (dir 1 forward, -1 backward), among the
 * chunk's units; -1 for none. */
static int next_unit(const model *m, int u, int dir) {
    int l0 = m->chunk_l0, first = m->first_stage;
    int lo = runs_embed(m) ? 0 : first + l0;
    int hi = runs_head(m) ? first + m->n_layers : first + l0 + m->chunk_len - 1;
    int v = u + dir;
    return m->zw != NULL && v >= lo && v <= hi ? v : -1;
}

/* A chunk and slot in range, the slot holding the head's activations where the chunk runs
 * the head; selects them. */
static int select_chunk(model *m, int chunk, int slot) {
    if (chunk < 0 || chunk >= m->n_chunks || slot < 0 || slot >= m->n_slots) return BT_ERANGE;
    m->chunk = chunk;
    model_chunk_span(&m->cfg, chunk, &m->chunk_l0, &m->chunk_len);
    if (runs_head(m) && m->slot_acts[slot].logits == NULL) return BT_ERANGE;
    return 0;
}

int model_stage_forward(model *m, int chunk, int slot, const int32_t *tokens,
                        const int32_t *targets, int B, int T, float *loss) {
    backend *be = m->be;
    const model_config *cfg = &m->cfg;
    if (B <= 0 || T <= 0 || B > m->max_B || T > m->max_T || select_chunk(m, chunk, slot) != 0 ||
        (m->cpw && T != m->cpw->T) || (model_sp_on(m) && (B * T) % m->cfg.tp != 0))
        return BT_ERANGE;
    int N = B * T, rc = check_tokens(m, tokens, targets, N, &m->n_valid);
    if (rc) return rc;
    if (targets) model_cp_sum_int(m, &m->n_valid);
    if (m->comm_err) return m->comm_err;
    select_slot(m, slot);
    m->B = B;
    m->T = T;
    m->has_targets = targets != NULL;
    m->slot_n_valid[slot] = targets ? m->n_valid : -1;
    int l0 = m->chunk_l0, l1 = l0 + m->chunk_len; /* select_chunk's */
    if (runs_embed(m)) {
        be->from_host(be, m->tokens, tokens, (size_t)N * sizeof(int32_t));
        model_zero_forward(m, 0, next_unit(m, 0, 1));
        embed_forward(m, resid_at(m, 0), N);
    }
    if (targets && runs_head(m))
        be->from_host(be, m->targets, targets, (size_t)N * sizeof(int32_t));
    for (int l = l0; l < l1; l++) {
        int u = m->first_stage + l;
        model_zero_forward(m, u, next_unit(m, u, 1));
        layer_forward(m, l, resid_at(m, l), resid_at(m, l + 1));
    }
    if (runs_head(m)) {
        model_acts *a = &m->acts;
        int L = m->n_layers;
        model_zero_forward(m, m->first_stage + L, -1);
        backend_gemm *head = &m->gemm[MODEL_GEMMS_PER_LAYER * L];
        const float *lnf =
            norm_gathered(m, a->lnf, a->lnf_rstd, resid_at(m, L), m->params.norm, head->prec);
        be->matmul_forward(be, a->logits, lnf, m->params.lm_head, N, cfg->dim, m->shard.vocab, head,
                           m->gacts.scratch);
        if (targets) loss_forward(m, targets, loss);
    }
    rc = be->sync(be);
    return rc ? rc : m->comm_err;
}

int model_forward(model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                  float *loss) {
    return model_stage_forward(m, 0, 0, tokens, targets, B, T, loss);
}

/* The loss's backward down to the gradient of the last layer's output, in g->dres. */
static void head_backward(model *m, float loss_scale) {
    backend *be = m->be;
    model_acts *a = &m->acts;
    model_grad_acts *g = &m->gacts;
    int N = m->B * m->T, C = m->cfg.dim, L = m->n_layers, V = m->shard.vocab;
    float dloss = m->n_valid ? loss_scale / (float)m->n_valid : 0.0f;
    if (m->tp_group == NULL)
        be->crossentropy_backward(be, a->logits, a->logits, a->ce_lse, m->targets, dloss, N, V);
    else
        be->vocab_ce_backward(be, a->logits, a->logits, a->ce_lse, m->targets, dloss, N, V,
                              m->shard.vocab0);
    backend_gemm *head = &m->gemm[MODEL_GEMMS_PER_LAYER * L];
    be->matmul_backward(be, g->dln, m->grads.lm_head, a->logits, ln_whole(m, a->lnf, head->prec),
                        m->params.lm_head, N, C, V, head, g->scratch);
    norm_gathered_backward(m, g->dres, m->grads.norm, g->dln, resid_at(m, L), m->params.norm,
                           a->lnf_rstd);
}

static void unit_done(model *m, int u) {
    if (m->unit_grads_done != NULL) m->unit_grads_done(m->unit_grads_ctx, u);
}

int model_stage_backward(model *m, int chunk, int slot, float loss_scale) {
    backend *be = m->be;
    const model_config *cfg = &m->cfg;
    if (select_chunk(m, chunk, slot) != 0) return BT_ERANGE;
    if (cfg->forward_only) return BT_EINVAL; /* nothing was kept for it */
    int N = m->B * m->T;
    m->n_valid = m->slot_n_valid[slot];
    /* backward needs a forward, with targets where it ran the loss */
    if (N == 0 || (runs_head(m) && m->n_valid < 0)) return BT_EINVAL;
    if (m->comm_err) return m->comm_err;
    select_slot(m, slot);
    m->bwd_scale = loss_scale;
    int head = m->first_stage + m->n_layers;  /* the ZeRO-2/3 units (model_zero.h) */
    int l0 = m->chunk_l0, len = m->chunk_len; /* select_chunk's */
    if (runs_head(m)) {
        model_zero_backward(m, head, next_unit(m, head, -1));
        head_backward(m, loss_scale);
        model_zero_backward_done(m, head);
        unit_done(m, head);
    }
    for (int l = l0 + len - 1; l >= l0; l--) {
        int u = m->first_stage + l;
        if (cfg->recompute == MODEL_RECOMPUTE_FULL) {
            model_zero_forward(m, u, next_unit(m, u, -1));
            layer_forward(m, l, resid_at(m, l), NULL);
        }
        model_zero_backward(m, u, next_unit(m, u, -1));
        layer_backward(m, l, resid_at(m, l));
        model_zero_backward_done(m, u);
        unit_done(m, u);
    }
    if (runs_embed(m)) {
        model_zero_backward(m, 0, -1);
        embed_backward(m, N);
        model_zero_backward_done(m, 0);
        unit_done(m, 0);
    }
    model_zero_flush(m); /* ZeRO-2/3: every unit's reduction in the shard */
    int rc = be->sync(be);
    return rc ? rc : m->comm_err;
}

int model_backward(model *m, float loss_scale) {
    if (!m->has_targets) return BT_EINVAL;
    return model_stage_backward(m, 0, 0, loss_scale);
}
