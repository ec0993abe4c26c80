/* Model memory: the size tables that carve parameters, gradients, activations and
 * backward buffers out of one allocation each, initialization, and the parameter
 * iterator. The forward and backward passes are in model_pass.c. */
#include "model.h"

#include <limits.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_cp.h"
#include "model_moe.h"
#include "model_sp.h"
#include "model_zero.h"
#include "splitmix.h"

/* A size table as code: with base NULL it only counts, with base set it hands out
 * consecutive views. The same walk therefore sizes an allocation and carves it. */
typedef struct carve {
    float *base;
    size_t off;
} carve;

static float *take(carve *c, size_t n) {
    float *p = c->base ? c->base + c->off : NULL;
    c->off += n;
    return p;
}

/* The rank's widths: everything the carving needs from the shard. */
typedef struct local_dims {
    size_t H, KV, F, V; /* query heads, kv heads, ffn rows, vocabulary rows */
    size_t qd, qkv;     /* H*hd, (H + 2 KV)*hd */
} local_dims;

static local_dims dims_of(const model_config *cfg) {
    model_shard sh;
    model_shard_of(cfg, &sh);
    size_t hd = (size_t)cfg->head_dim;
    local_dims d = {.H = (size_t)sh.heads,
                    .KV = (size_t)sh.kv_heads,
                    .F = (size_t)sh.ffn,
                    .V = (size_t)sh.vocab};
    d.qd = d.H * hd;
    d.qkv = (d.H + 2 * d.KV) * hd;
    return d;
}

static int tp_of(const model_config *cfg) {
    return cfg->tp > 1 ? cfg->tp : 1;
}

static int pp_of(const model_config *cfg) {
    return cfg->pp > 1 ? cfg->pp : 1;
}

int model_chunks(const model_config *cfg) {
    return pp_of(cfg) > 1 && cfg->vp > 1 ? cfg->vp : 1;
}

int model_uneven_stages(const model_config *cfg) {
    return pp_of(cfg) > 1 && cfg->stage_layers != NULL &&
           cfg->n_stage_layers == (size_t)pp_of(cfg) * (size_t)model_chunks(cfg);
}

/* Model chunk k's layers (k = c pp + s: stage s's c-th chunk; without interleaving k = s):
 * [*first, *first + *n) of the model, as cfg->stage_layers gives them or evenly. */
static void model_chunk_at(const model_config *cfg, int k, int *first, int *n) {
    int pp = pp_of(cfg), v = model_chunks(cfg);
    if (model_uneven_stages(cfg)) {
        *first = 0;
        for (int j = 0; j < k; j++)
            *first += (int)cfg->stage_layers[j];
        *n = (int)cfg->stage_layers[k];
        return;
    }
    if (v > 1) { /* model_config_check: pp v divides n_layers */
        *n = cfg->n_layers / (pp * v), *first = k * *n;
        return;
    }
    int base = cfg->n_layers / pp, rem = cfg->n_layers % pp;
    *first = k * base + (k < rem ? k : rem);
    *n = base + (k < rem ? 1 : 0);
}

void model_chunk_span(const model_config *cfg, int c, int *first, int *n) {
    int pp = pp_of(cfg), s = pp > 1 ? cfg->pp_rank : 0, g;
    *first = 0;
    for (int j = 0; j < c; j++) {
        model_chunk_at(cfg, j * pp + s, &g, n);
        *first += *n;
    }
    model_chunk_at(cfg, c * pp + s, &g, n);
}

void model_stage_layers(const model_config *cfg, int *first, int *n) {
    int pp = pp_of(cfg), s = pp > 1 ? cfg->pp_rank : 0, len;
    model_chunk_at(cfg, s, first, n);
    for (int c = 1; c < model_chunks(cfg); c++) {
        int g;
        model_chunk_at(cfg, c * pp + s, &g, &len);
        *n += len;
    }
}

int model_chunk_layers(const model_config *cfg) {
    int most = 0, first, n;
    for (int c = 0; c < model_chunks(cfg); c++) {
        model_chunk_span(cfg, c, &first, &n);
        most = n > most ? n : most;
    }
    return most;
}

int model_stage_layer(const model_config *cfg, int i) {
    int pp = pp_of(cfg), s = pp > 1 ? cfg->pp_rank : 0, first, n;
    for (int c = 0; c < model_chunks(cfg); c++) {
        model_chunk_at(cfg, c * pp + s, &first, &n);
        if (i < n || c == model_chunks(cfg) - 1) return first + i;
        i -= n;
    }
    return i;
}

static int stage_n_layers(const model_config *cfg) {
    int first, n;
    model_stage_layers(cfg, &first, &n);
    return n;
}

static int is_first_stage(const model_config *cfg) {
    return pp_of(cfg) == 1 || cfg->pp_rank == 0;
}

static int is_last_stage(const model_config *cfg) {
    return pp_of(cfg) == 1 || cfg->pp_rank == cfg->pp - 1;
}

/* Model layer gl (a global index): dense, or MoE (model.h's model_layer_weights). */
static void carve_layer(carve *c, const model_config *cfg, int gl, model_layer_weights *w) {
    local_dims d = dims_of(cfg);
    size_t C = cfg->dim;
    w->attn_norm = take(c, C);
    w->wqkv = take(c, d.qkv * C);
    w->wo = take(c, C * d.qd);
    w->mlp_norm = take(c, C);
    w->w13 = w->w2 = w->moe = w->moe_bias = NULL;
    if (model_layer_is_moe(cfg, gl)) {
        w->moe = take(c, moe_weights_floats(&cfg->moe));
        if (cfg->moe.bias_rate > 0) w->moe_bias = take(c, (size_t)cfg->moe.n_experts);
        return;
    }
    w->w13 = take(c, 2 * d.F * C);
    w->w2 = take(c, C * d.F);
}

/* w->layers must hold the stage's L views, or be NULL when only counting. */
static void carve_weights(carve *c, const model_config *cfg, model_weights *w) {
    size_t V = dims_of(cfg).V, C = cfg->dim;
    model_layer_weights scratch;
    int n = stage_n_layers(cfg);
    w->embed = is_first_stage(cfg) ? take(c, V * C) : NULL;
    for (int l = 0; l < n; l++)
        carve_layer(c, cfg, model_stage_layer(cfg, l), w->layers ? &w->layers[l] : &scratch);
    w->norm = is_last_stage(cfg) ? take(c, C) : NULL;
    w->lm_head = is_last_stage(cfg) ? take(c, V * C) : NULL;
}

/* cfg's model in one process (tp 1, ep 1), on stage `stage` */
static model_config one_process(const model_config *cfg, int stage) {
    model_config one = *cfg;
    one.tp = 1, one.tp_rank = 0, one.pp_rank = stage;
    one.ep = 1, one.ep_rank = 0, one.moe.expert0 = one.moe.n_local = 0;
    return one;
}

size_t model_stage_global_floats(const model_config *cfg, int stage) {
    model_config one = one_process(cfg, stage);
    carve c = {0};
    carve_weights(&c, &one, &(model_weights){0});
    return c.off;
}

size_t model_global_layer_offset(const model_config *cfg, int gl) {
    model_config one = one_process(cfg, 0);
    one.pp = 1, one.vp = 1;
    carve c = {0};
    model_layer_weights scratch;
    take(&c, (size_t)one.vocab * one.dim);
    for (int l = 0; l < gl && l < one.n_layers; l++)
        carve_layer(&c, &one, l, &scratch);
    return c.off;
}

/* Rows of the residual stream a rank holds: N, or its N/tp under sequence parallelism. */
static size_t sp_rows(const model_config *cfg, size_t N) {
    return cfg->sp && cfg->tp > 1 ? N / (size_t)cfg->tp : N;
}

static void carve_layer_acts(carve *c, const model_config *cfg, int B, int T, int with_att,
                             model_layer_acts *a) {
    local_dims d = dims_of(cfg);
    size_t N = (size_t)B * T, C = cfg->dim, R = sp_rows(cfg, N);
    a->ln1 = take(c, R * C);
    a->ln1_rstd = take(c, R);
    a->qkv = take(c, N * d.qkv);
    a->att = with_att ? take(c, (size_t)B * d.H * T * T) : NULL;
    a->lse = take(c, (size_t)B * d.H * T);
    a->atty = take(c, N * d.qd);
    a->xmid = take(c, R * C);
    a->ln2 = take(c, R * C);
    a->ln2_rstd = take(c, R);
    a->h13 = take(c, N * 2 * d.F);
    a->hs = take(c, N * d.F);
    int ulysses = cfg->cp > 1 && cfg->cp_ulysses;
    a->uqkv = ulysses ? take(c, N * d.qkv) : NULL;
    a->uout = ulysses ? take(c, N * d.qd) : NULL;
    a->ulse = ulysses ? take(c, (size_t)B * d.H * T) : NULL;
}

/* A slot holds one chunk's activations (the stage's layers when not interleaved). */
static int layer_act_sets(const model_config *cfg, model_recompute mode) {
    return mode == MODEL_RECOMPUTE_FULL || cfg->forward_only ? 1 : model_chunk_layers(cfg);
}

/* Residual-stream buffers of a slot: each layer's input and the output, or forward only
 * two, a layer reading one and writing the other. */
static size_t resid_sets(const model_config *cfg) {
    return cfg->forward_only ? 2 : (size_t)model_chunk_layers(cfg) + 1;
}

/* a->layer must hold layer_act_sets() views, or be NULL when only counting; head: the
 * slot holds the head's activations too (on the last stage). */
static void carve_acts(carve *c, const model_config *cfg, int B, int T, model_recompute mode,
                       int head, model_acts *a) {
    size_t N = (size_t)B * T, C = cfg->dim, V = dims_of(cfg).V;
    int tp = tp_of(cfg);
    model_layer_acts scratch;
    a->resid = take(c, resid_sets(cfg) * sp_rows(cfg, N) * C);
    /* Attention's probabilities are kept only under recompute none in float32: in bf16 or
     * fp8 the backend may run the flash kernels (the CUDA backend's tensor-core ones),
     * which keep none; the CPU backend's backward then recomputes them, bit for bit. A
     * forward-only model keeps none either: no backward reads them. */
    int with_att = mode == MODEL_RECOMPUTE_NONE && cfg->cp <= 1 && cfg->prec == BACKEND_PREC_FP32 &&
                   !cfg->forward_only;
    for (int s = 0; s < layer_act_sets(cfg, mode); s++)
        carve_layer_acts(c, cfg, B, T, with_att, a->layer ? &a->layer[s] : &scratch);
    a->lnf = a->lnf_rstd = a->logits = a->ce_lse = a->losses = a->ce_part = NULL;
    if (!is_last_stage(cfg) || !head) return;
    a->lnf = take(c, sp_rows(cfg, N) * C);
    a->lnf_rstd = take(c, sp_rows(cfg, N));
    a->logits = take(c, N * V);
    a->ce_lse = take(c, N);
    a->losses = take(c, N);
    a->ce_part = tp > 1 ? take(c, (size_t)tp * N * 3) : NULL;
}

static size_t max_z(size_t a, size_t b) {
    return a > b ? a : b;
}

static size_t scratch_floats(const model_config *cfg, backend *be, int B, int T) {
    local_dims d = dims_of(cfg);
    int N = B * T, C = cfg->dim, F = (int)d.F, qd = (int)d.qd;
    backend_prec p = cfg->prec;
    size_t s = be->attention_scratch_floats(be, T);
    s = max_z(s, be->matmul_scratch_floats(be, N, C, (int)d.qkv, p));
    s = max_z(s, be->matmul_scratch_floats(be, N, qd, C, p));
    s = max_z(s, be->matmul_scratch_floats(be, N, C, 2 * F, p));
    s = max_z(s, be->matmul_scratch_floats(be, N, F, C, p));
    s = max_z(s, be->matmul_scratch_floats(be, N, C, (int)d.V, p));
    return s;
}

/* Backward buffers, op scratch and the RoPE tables. Forward only: no backward buffers but
 * dx, where sequence parallelism gathers the norms' outputs in the forward too. */
static void carve_work(carve *c, const model_config *cfg, backend *be, int B, int T,
                       model_grad_acts *g, float **rope_cos, float **rope_sin) {
    local_dims d = dims_of(cfg);
    size_t N = (size_t)B * T, C = cfg->dim, bwd = cfg->forward_only ? 0 : N;
    g->dres = take(c, bwd * C);
    g->dln = take(c, bwd * C);
    g->dx = take(c, (cfg->forward_only && !cfg->sp ? 0 : N) * C);
    g->dwide = take(c, bwd * max_z(d.qkv, 2 * d.F));
    g->dnarrow = take(c, bwd * max_z(d.qd, d.F));
    g->scratch = take(c, scratch_floats(cfg, be, B, T));
    g->dnorm = take(c, cfg->sp ? C : 0);
    g->grad_in = take(c, (size_t)(cfg->grad_in > 0 ? cfg->grad_in : 0) * sp_rows(cfg, N) * C);
    *rope_cos = take(c, (size_t)T * cfg->head_dim / 2);
    *rope_sin = take(c, (size_t)T * cfg->head_dim / 2);
}

int model_sizes_compute(const model_config *cfg, backend *be, int B, int T, model_sizes *s) {
    if (B <= 0 || T <= 0) return BT_EINVAL;
    carve c = {0};
    model_weights w = {0};
    carve_weights(&c, cfg, &w);
    s->param_floats = c.off;
    model_config one = *cfg;
    one.tp = 1, one.tp_rank = 0, one.pp = 1, one.pp_rank = 0;
    one.ep = 1, one.ep_rank = 0, one.moe.expert0 = one.moe.n_local = 0;
    c.off = 0;
    carve_weights(&c, &one, &w);
    s->global_param_floats = c.off;
    c.off = 0;
    carve_layer(&c, cfg, model_stage_layer(cfg, 0), &(model_layer_weights){0});
    s->layer_param_floats = c.off;
    for (int mode = 0; mode < 3; mode++) {
        c.off = 0;
        carve_acts(&c, cfg, B, T, (model_recompute)mode, 1, &(model_acts){0});
        s->act_floats[mode] = c.off;
    }
    c.off = 0;
    model_grad_acts g;
    float *rc, *rs;
    carve_work(&c, cfg, be, B, T, &g, &rc, &rs);
    s->scratch_floats = scratch_floats(cfg, be, B, T);
    s->grad_act_floats = c.off - s->scratch_floats - (size_t)T * cfg->head_dim;
    return 0;
}

/* The precision of each GEMM. Under fp8 the LM head always runs bf16 (Transformer
 * Engine and Megatron keep the output layer out of fp8), and with fp8_first_last_bf16
 * so do the GEMMs of the first and last layers (of the model, not of a stage), their
 * experts' too. */
static int setup_gemms(model *m) {
    const model_config *cfg = &m->cfg;
    int L = cfg->n_layers, n = m->n_gemm + m->n_xgemm;
    if (cfg->prec == BACKEND_PREC_FP8) { /* the running amaxes: read once per step */
        m->amax_acc = m->be->alloc(m->be, (size_t)n * BACKEND_FP8_SLOTS * sizeof(float));
        if (m->amax_acc == NULL) return BT_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        int l = i / MODEL_GEMMS_PER_LAYER, layer = l == m->n_layers ? L : model_stage_layer(cfg, l);
        if (i >= m->n_gemm) {
            model_xgemm x;
            model_xgemm_info(m, i - m->n_gemm, &x);
            layer = x.layer;
        }
        backend_prec p = cfg->prec;
        if (p == BACKEND_PREC_FP8 &&
            (layer == L || (cfg->fp8_first_last_bf16 && (layer == 0 || layer == L - 1))))
            p = BACKEND_PREC_BF16;
        m->gemm[i] = (backend_gemm){.prec = p, .dy_e5m2 = cfg->fp8_hybrid};
        if (m->amax_acc) m->gemm[i].amax_acc = m->amax_acc + (size_t)i * BACKEND_FP8_SLOTS;
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
            m->gemm[i].scale[k] = 1.0f;
    }
    return 0;
}

/* cfg.weight_cache: one block for every GEMM's cache (backend_gemm.wcache), where the
 * backend keeps conversions. */
static int setup_wcache(model *m) {
    backend *be = m->be;
    if (!m->cfg.weight_cache || be->matmul_wcache_floats == NULL) return 0;
    size_t total = 0, *off = calloc((size_t)m->n_gemm + 1, sizeof *off);
    if (off == NULL) return BT_ENOMEM;
    for (int i = 0; i < m->n_gemm; i++) {
        int C, OC;
        model_gemm_shape(m, i, &C, &OC);
        off[i] = total;
        if (C > 0 && OC > 0) total += be->matmul_wcache_floats(be, C, OC, m->gemm[i].prec);
    }
    off[m->n_gemm] = total;
    if (total > 0) m->wcache_mem = be->alloc(be, total * sizeof(float));
    for (int i = 0; m->wcache_mem != NULL && i < m->n_gemm; i++)
        if (off[i + 1] > off[i]) m->gemm[i].wcache = m->wcache_mem + off[i];
    free(off);
    if (total > 0 && m->wcache_mem == NULL) return BT_ENOMEM;
    m->wcache_floats = total;
    return 0;
}

void model_weights_changed(model *m) {
    for (int i = 0; i < m->n_gemm; i++)
        m->gemm[i].wcache_forms = 0;
    model_moe_weights_changed(m);
    model_zero_invalidate(m);
}

int model_upload_rope(model *m, int n_seg, const int *pos0, const int *rows) {
    int half = m->cfg.head_dim / 2;
    size_t n = (size_t)m->max_T * half, row = 0;
    float *cs = malloc(n * sizeof *cs), *sn = malloc(n * sizeof *sn);
    double *inv = malloc((size_t)half * sizeof *inv);
    int rc = BT_ENOMEM;
    if (cs && sn && inv) {
        for (int i = 0; i < n_seg; row += (size_t)rows[i++] * half)
            rope_tables(&m->cfg.rope, m->cfg.head_dim, pos0[i], rows[i], cs + row, sn + row, inv);
        m->be->from_host(m->be, m->rope_cos, cs, n * sizeof *cs);
        m->be->from_host(m->be, m->rope_sin, sn, n * sizeof *sn);
        rc = 0;
    }
    free(cs);
    free(sn);
    free(inv);
    return rc;
}

static int upload_rope(model *m) {
    int zero = 0;
    return model_upload_rope(m, 1, &zero, &m->max_T);
}

/* The experts' GEMM records of each MoE layer (model.h: xgemm_first), none under fp32. */
static int count_xgemm(model *m) {
    const model_config *cfg = &m->cfg;
    int per = 2 * (moe_local_experts(&cfg->moe) + cfg->moe.n_shared);
    m->xgemm_first = malloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *m->xgemm_first);
    if (m->xgemm_first == NULL) return BT_ENOMEM;
    m->n_xgemm = 0;
    for (int l = 0; l < m->n_layers; l++) {
        int moe = cfg->moe.n_experts > 0 && cfg->prec != BACKEND_PREC_FP32 &&
                  model_layer_is_moe(cfg, model_stage_layer(cfg, l));
        m->xgemm_first[l] = moe ? m->n_gemm + m->n_xgemm : -1;
        m->n_xgemm += moe ? per : 0;
    }
    return 0;
}

void model_xgemm_info(const model *m, int x, model_xgemm *out) {
    const moe_config *c = &m->cfg.moe;
    int per = 2 * (moe_local_experts(c) + c->n_shared), l = 0, g = m->n_gemm + x;
    while (l + 1 < m->n_layers && (m->xgemm_first[l] < 0 || g >= m->xgemm_first[l] + per))
        l++;
    int i = g - m->xgemm_first[l], e = i / 2, El = moe_local_experts(c);
    out->layer = model_stage_layer(&m->cfg, l), out->w2 = i % 2;
    out->routed = e < El, out->expert = e < El ? c->expert0 + e : e - El;
}

static int alloc_host(model *m) {
    int L = m->n_layers, sets = layer_act_sets(&m->cfg, m->cfg.recompute), S = m->n_slots;
    m->params.layers = calloc((size_t)(L ? L : 1), sizeof *m->params.layers);
    m->grads.layers = calloc((size_t)(L ? L : 1), sizeof *m->grads.layers);
    m->slot_acts = calloc((size_t)S, sizeof *m->slot_acts);
    m->slot_n_valid = calloc((size_t)S, sizeof *m->slot_n_valid);
    m->acts.layer = calloc((size_t)(S * sets), sizeof *m->acts.layer);
    m->n_gemm = MODEL_GEMMS_PER_LAYER * L + (m->last_stage ? 1 : 0);
    if (count_xgemm(m) != 0) return BT_ENOMEM;
    m->gemm = calloc((size_t)(m->n_gemm + m->n_xgemm), sizeof *m->gemm);
    m->host_losses = calloc((size_t)m->max_B * m->max_T, sizeof *m->host_losses);
    if (!m->params.layers || !m->grads.layers || !m->slot_acts || !m->slot_n_valid ||
        !m->acts.layer || !m->gemm || !m->host_losses)
        return BT_ENOMEM;
    for (int s = 0; s < S; s++)
        m->slot_acts[s].layer = m->acts.layer + (size_t)s * sets;
    return 0;
}

/* Slot k holds the head's activations too (model_config.head_slots). */
static int head_slot(const model *m, int k) {
    return m->cfg.head_slots < 1 || k < m->cfg.head_slots;
}

static int alloc_device(model *m) {
    backend *be = m->be;
    const model_sizes *s = &m->sizes;
    size_t work = 0;
    {
        carve c = {0};
        model_grad_acts g;
        float *rc, *rs;
        carve_work(&c, &m->cfg, be, m->max_B, m->max_T, &g, &rc, &rs);
        work = c.off;
    }
    m->act_bytes = 0;
    for (int k = 0; k < m->n_slots; k++) {
        carve c = {0};
        carve_acts(&c, &m->cfg, m->max_B, m->max_T, m->cfg.recompute, head_slot(m, k),
                   &(model_acts){0});
        m->act_bytes += c.off * sizeof(float);
    }
    m->work_bytes = work * sizeof(float);
    /* ZeRO-3: the trainer's shards and model_zero's buffers; ZeRO-2: the gradients so */
    int full = !m->cfg.zero3, full_grads = full && !m->cfg.zero2;
    size_t pad = m->cfg.param_pad > 1 ? (size_t)m->cfg.param_pad : 1;
    m->param_alloc = (s->param_floats + pad - 1) / pad * pad;
    if (full) m->params_mem = be->alloc(be, m->param_alloc * sizeof(float));
    if (full_grads) m->grads_mem = be->alloc(be, m->param_alloc * sizeof(float));
    m->acts_mem = be->alloc(be, m->act_bytes);
    m->work_mem = be->alloc(be, m->work_bytes);
    m->tokens_mem =
        be->alloc(be, (size_t)m->n_slots * 2 * (size_t)m->max_B * m->max_T * sizeof(int32_t));
    if ((full && !m->params_mem) || (full_grads && !m->grads_mem) || !m->acts_mem || !m->work_mem ||
        !m->tokens_mem)
        return BT_ENOMEM;
    if (full) /* the padding: zero for ZeRO-1's in-place collectives */
        be->zero(be, m->params_mem + s->param_floats, m->param_alloc - s->param_floats);
    m->tokens = m->tokens_mem;
    m->targets = m->tokens + (size_t)m->max_B * m->max_T;
    carve c = {.base = m->params_mem};
    carve_weights(&c, &m->cfg, &m->params);
    c = (carve){.base = m->grads_mem};
    carve_weights(&c, &m->cfg, &m->grads);
    c = (carve){.base = m->acts_mem};
    for (int s = 0; s < m->n_slots; s++)
        carve_acts(&c, &m->cfg, m->max_B, m->max_T, m->cfg.recompute, head_slot(m, s),
                   &m->slot_acts[s]);
    m->acts = m->slot_acts[0];
    c = (carve){.base = m->work_mem};
    carve_work(&c, &m->cfg, be, m->max_B, m->max_T, &m->gacts, &m->rope_cos, &m->rope_sin);
    return 0;
}

int model_init(model *m, const model_config *cfg, backend *be, int max_B, int max_T,
               bt_diag *diag) {
    return model_init_tp(m, cfg, be, max_B, max_T, NULL, diag);
}

int model_init_tp(model *m, const model_config *cfg, backend *be, int max_B, int max_T,
                  comm *tp_group, bt_diag *diag) {
    memset(m, 0, sizeof *m);
    int rc = model_config_check(cfg, diag);
    if (rc) return rc;
    if (max_B < 1 || max_T < 1 || max_B > INT_MAX / max_T) {
        /* every op indexes the rows of a micro-batch, N = B * T, with int */
        bt_diag_set(diag, "model: micro-batch %d x %d tokens is empty or above 2^31", max_B, max_T);
        return BT_ERANGE;
    }
    int tp = tp_of(cfg);
    if (tp > 1 &&
        (tp_group == NULL || comm_size(tp_group) != tp || comm_rank(tp_group) != cfg->tp_rank)) {
        bt_diag_set(diag,
                    "model: tensor parallelism %d (rank %d) needs a group of that size in "
                    "which this process has that rank",
                    tp, cfg->tp_rank);
        return BT_EINVAL;
    }
    if (max_B <= 0 || max_T <= 0) {
        bt_diag_set(diag, "model: batch (%d) and sequence length (%d) must be positive", max_B,
                    max_T);
        return BT_EINVAL;
    }
    m->cfg = *cfg;
    m->cfg.tp = tp;
    m->cfg.pp = pp_of(cfg);
    m->cfg.pp_rank = m->cfg.pp > 1 ? cfg->pp_rank : 0;
    model_stage_layers(&m->cfg, &m->layer0, &m->n_layers);
    m->n_chunks = model_chunks(&m->cfg);
    m->chunk_layers = model_chunk_layers(&m->cfg);
    model_chunk_span(&m->cfg, 0, &m->chunk_l0, &m->chunk_len);
    m->first_stage = is_first_stage(&m->cfg);
    m->last_stage = is_last_stage(&m->cfg);
    m->n_slots = cfg->act_slots > 1 ? cfg->act_slots : 1;
    model_shard_of(&m->cfg, &m->shard);
    m->tp_group = tp > 1 ? tp_group : NULL;
    m->be = be;
    m->max_B = max_B;
    m->max_T = max_T;
    model_sizes_compute(cfg, be, max_B, max_T, &m->sizes);
    if ((rc = alloc_host(m)) || (rc = alloc_device(m)) || (rc = upload_rope(m)) ||
        (rc = setup_gemms(m)) || (rc = setup_wcache(m)) || (rc = model_sp_init(m)))
        goto error;
    return 0;
error:
    bt_diag_set(diag, "model: cannot allocate %zu parameters and %zu bytes of activations",
                m->sizes.param_floats, m->act_bytes);
    model_free(m);
    return rc;
}

void model_free(model *m) {
    backend *be = m->be;
    if (be) {
        model_cp_free(m);
        model_moe_free(m);
        model_zero_free(m);
        be->free(be, m->params_mem);
        be->free(be, m->grads_mem);
        be->free(be, m->acts_mem);
        be->free(be, m->work_mem);
        be->free(be, m->tokens_mem);
        if (m->amax_acc) be->free(be, m->amax_acc);
        if (m->wcache_mem) be->free(be, m->wcache_mem);
        if (m->sp16) be->free(be, m->sp16);
    }
    free(m->params.layers);
    free(m->grads.layers);
    /* The layer views' one allocation: slot 0's views start it once carved. */
    free(m->slot_acts && m->slot_acts[0].layer ? m->slot_acts[0].layer : m->acts.layer);
    free(m->slot_acts);
    free(m->slot_n_valid);
    free(m->gemm);
    free(m->xgemm_first);
    free(m->host_losses);
    memset(m, 0, sizeof *m);
}

void model_zero_grad(model *m) {
    if (m->grads_mem) m->be->zero(m->be, m->grads_mem, m->param_alloc);
}

/* A dense layer's tensors in memory order: the order carve_layer lays them out, with
 * q/k/v splitting wqkv and gate/up splitting w13. An MoE layer keeps the first
 * LAYER_ATTN_TENSORS and continues with its moe_weights block (moe_tensor). */
enum { LAYER_TENSORS = 9, LAYER_ATTN_TENSORS = 6 };

/* How a tensor is cut across tensor-parallel ranks. */
typedef enum split_kind {
    SPLIT_NONE = 0, /* replicated (norm weights) */
    SPLIT_ROWS = 1, /* column-parallel: output rows */
    SPLIT_COLS = 2, /* row-parallel: input columns */
} split_kind;

typedef struct layer_tensor_desc {
    char name[48];
    int rows, cols;   /* one-process shape; cols 0: a vector */
    split_kind split; /* SPLIT_ROWS / SPLIT_COLS: rows / columns [first, first + n) */
    int first, n;
    int replica;
    int expert;    /* a routed expert's tensor */
    size_t offset; /* floats from the start of the layer's block */
    int moe;       /* a tensor of an MoE layer's block */
} layer_tensor_desc;

static void layer_tensor_table(const model_config *cfg, layer_tensor_desc d[LAYER_TENSORS]) {
    model_shard s;
    model_shard_of(cfg, &s);
    int C = cfg->dim, F = cfg->ffn_dim, hd = cfg->head_dim, qd = cfg->n_heads * hd;
    int kvd = cfg->n_kv_heads * hd;
    int q0 = s.head0 * hd, qn = s.heads * hd, kv0 = s.kv_head0 * hd, kvn = s.kv_heads * hd;
    const layer_tensor_desc table[LAYER_TENSORS] = {
        {"input_layernorm", C, 0, SPLIT_NONE, 0, C, s.rank, 0, 0, 0},
        {"self_attn.q_proj", qd, C, SPLIT_ROWS, q0, qn, 0, 0, 0, 0},
        {"self_attn.k_proj", kvd, C, SPLIT_ROWS, kv0, kvn, s.kv_replica, 0, 0, 0},
        {"self_attn.v_proj", kvd, C, SPLIT_ROWS, kv0, kvn, s.kv_replica, 0, 0, 0},
        {"self_attn.o_proj", C, qd, SPLIT_COLS, q0, qn, 0, 0, 0, 0},
        {"post_attention_layernorm", C, 0, SPLIT_NONE, 0, C, s.rank, 0, 0, 0},
        {"mlp.gate_proj", F, C, SPLIT_ROWS, s.ffn0, s.ffn, 0, 0, 0, 0},
        {"mlp.up_proj", F, C, SPLIT_ROWS, s.ffn0, s.ffn, 0, 0, 0, 0},
        {"mlp.down_proj", C, F, SPLIT_COLS, s.ffn0, s.ffn, 0, 0, 0, 0},
    };
    memcpy(d, table, sizeof table);
    size_t off = 0;
    for (int k = 0; k < LAYER_TENSORS; k++) {
        d[k].offset = off;
        int rows = d[k].split == SPLIT_ROWS ? d[k].n : d[k].rows;
        int cols = d[k].split == SPLIT_COLS ? d[k].n : d[k].cols;
        off += (size_t)rows * (size_t)(cols ? cols : 1);
    }
}

static int moe_layer_tensors(const model_config *cfg) {
    const moe_config *c = &cfg->moe;
    return 1 + 3 * moe_local_experts(c) + 3 * c->n_shared + (c->bias_rate > 0);
}

static int layer_n_tensors(const model_config *cfg, int gl) {
    return model_layer_is_moe(cfg, gl) ? LAYER_ATTN_TENSORS + moe_layer_tensors(cfg)
                                       : LAYER_TENSORS;
}

/* Tensor k >= 0 of an MoE layer's moe_weights block (moe.h's carve order), its offset
 * relative to the block: router, every local expert's gate and up, their downs, the shared
 * experts' likewise, the bias. Replicated over tp (replica = tp rank); the routed experts
 * under expert_fold over their holders (replica = expert_holder). */
static void moe_tensor(const model_config *cfg, int k, layer_tensor_desc *d) {
    const moe_config *c = &cfg->moe;
    int C = cfg->dim, F = c->ffn_dim, E = c->n_experts, El = moe_local_experts(c);
    int S = c->n_shared, rank = cfg->tp > 1 ? cfg->tp_rank : 0;
    size_t FC = (size_t)F * C, base = (size_t)E * C;
    *d = (layer_tensor_desc){.split = SPLIT_NONE, .replica = rank, .moe = 1};
    if (k >= 1 && k < 1 + 3 * El && cfg->expert_fold) d->replica = cfg->expert_holder;
    if (k == 0) {
        snprintf(d->name, sizeof d->name, "mlp.gate");
        d->rows = E, d->cols = C, d->offset = 0;
    } else if (k < 1 + 2 * El) {
        int j = (k - 1) / 2, up = (k - 1) % 2;
        snprintf(d->name, sizeof d->name, "mlp.experts.%d.%s_proj", c->expert0 + j,
                 up ? "up" : "gate");
        d->rows = F, d->cols = C, d->expert = 1;
        d->offset = base + (size_t)j * 2 * FC + (size_t)up * FC;
    } else if (k < 1 + 3 * El) {
        int j = k - 1 - 2 * El;
        snprintf(d->name, sizeof d->name, "mlp.experts.%d.down_proj", c->expert0 + j);
        d->rows = C, d->cols = F, d->expert = 1;
        d->offset = base + (size_t)El * 2 * FC + (size_t)j * FC;
    } else if (k < 1 + 3 * El + 2 * S) {
        int j = (k - 1 - 3 * El) / 2, up = (k - 1 - 3 * El) % 2;
        snprintf(d->name, sizeof d->name, "mlp.shared_experts.%d.%s_proj", j, up ? "up" : "gate");
        d->rows = F, d->cols = C;
        d->offset = base + (size_t)El * 3 * FC + (size_t)j * 2 * FC + (size_t)up * FC;
    } else if (k < 1 + 3 * El + 3 * S) {
        int j = k - 1 - 3 * El - 2 * S;
        snprintf(d->name, sizeof d->name, "mlp.shared_experts.%d.down_proj", j);
        d->rows = C, d->cols = F;
        d->offset = base + (size_t)El * 3 * FC + (size_t)S * 2 * FC + (size_t)j * FC;
    } else {
        snprintf(d->name, sizeof d->name, "mlp.gate.e_score_correction_bias");
        d->rows = E, d->cols = 0;
        d->offset = base + (size_t)(El + S) * 3 * FC;
    }
    d->first = 0, d->n = d->rows;
}

/* Tensor k of model layer gl. */
static void layer_tensor(const model_config *cfg, int gl, int k, layer_tensor_desc *d) {
    layer_tensor_desc table[LAYER_TENSORS];
    layer_tensor_table(cfg, table);
    if (k < LAYER_ATTN_TENSORS || !model_layer_is_moe(cfg, gl)) {
        *d = table[k];
        return;
    }
    moe_tensor(cfg, k - LAYER_ATTN_TENSORS, d);
    d->offset += table[LAYER_ATTN_TENSORS].offset; /* the block follows mlp_norm */
}

static size_t layer_floats(const model_config *cfg, int gl) {
    carve c = {0};
    carve_layer(&c, cfg, gl, &(model_layer_weights){0});
    return c.off;
}

int model_n_units(const model *m) {
    return m->first_stage + m->n_layers + m->last_stage;
}

void model_unit_range(const model *m, int u, size_t *offset, size_t *n) {
    size_t VC = (size_t)m->shard.vocab * m->cfg.dim, off = m->first_stage ? VC : 0;
    int l = u - m->first_stage; /* -1: the embedding, n_layers: norm and head */
    if (l < 0) {
        *offset = 0, *n = VC;
        return;
    }
    for (int k = 0; k < l && k < m->n_layers; k++)
        off += layer_floats(&m->cfg, model_stage_layer(&m->cfg, k));
    *offset = off;
    *n = l < m->n_layers ? layer_floats(&m->cfg, model_stage_layer(&m->cfg, l))
                         : (size_t)m->cfg.dim + VC;
}

void model_point_unit(model *m, int u, float *params, float *grads) {
    size_t C = (size_t)m->cfg.dim;
    int l = u - m->first_stage;
    if (l < 0) {
        m->params.embed = params, m->grads.embed = grads;
    } else if (l == m->n_layers) {
        m->params.norm = params, m->params.lm_head = params ? params + C : NULL;
        m->grads.norm = grads, m->grads.lm_head = grads ? grads + C : NULL;
    } else {
        carve cp = {.base = params}, cg = {.base = grads};
        int gl = model_stage_layer(&m->cfg, l);
        carve_layer(&cp, &m->cfg, gl, &m->params.layers[l]);
        carve_layer(&cg, &m->cfg, gl, &m->grads.layers[l]);
    }
}

/* The stage's tensors: the embedding on the first stage, each layer's, the final norm and
 * the head on the last. */
static int stage_n_tensors(const model_config *cfg) {
    int L = stage_n_layers(cfg), n = is_first_stage(cfg) + 2 * is_last_stage(cfg);
    for (int l = 0; l < L; l++)
        n += layer_n_tensors(cfg, model_stage_layer(cfg, l));
    return n;
}

int model_n_tensors(const model *m) {
    return stage_n_tensors(&m->cfg);
}

/* Fills t's shapes and slice from d (name and offset are the caller's). */
static void set_slice(model_tensor *t, const layer_tensor_desc *d) {
    int rows = d->rows, cols = d->cols;
    t->ndim = cols ? 2 : 1;
    t->global_shape[0] = rows, t->global_shape[1] = cols;
    t->global_count = (size_t)rows * (cols ? (size_t)cols : 1);
    if (d->split == SPLIT_ROWS) t->row0 = d->first, rows = d->n;
    if (d->split == SPLIT_COLS) t->col0 = d->first, cols = d->n;
    t->shape[0] = rows, t->shape[1] = cols;
    t->count = (size_t)rows * (cols ? (size_t)cols : 1);
    t->no_decay = cols == 0;
    t->replica = d->replica;
    t->expert = d->expert;
    t->moe = d->moe;
}

/* Tensor i of the stage's layers (i counted from the first layer's first tensor). */
static void layers_tensor(const model_config *cfg, int i, size_t base, model_tensor *t) {
    int L = stage_n_layers(cfg);
    for (int l = 0; l < L; l++) {
        int gl = model_stage_layer(cfg, l), n = layer_n_tensors(cfg, gl);
        if (i < n) {
            layer_tensor_desc d;
            layer_tensor(cfg, gl, i, &d);
            set_slice(t, &d);
            t->offset = base + d.offset;
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s%s", gl, d.name,
                     d.cols == 0 && strstr(d.name, "bias") ? "" : ".weight");
            size_t len = strlen(name); /* at most 61: 7-digit layer, the longest name */
            len = len < sizeof t->name ? len : sizeof t->name - 1;
            memcpy(t->name, name, len);
            t->name[len] = '\0';
            return;
        }
        i -= n, base += layer_floats(cfg, gl);
    }
}

int model_tensor_slice(const model_config *cfg, int i, model_tensor *t) {
    int n = stage_n_tensors(cfg), C = cfg->dim, L = stage_n_layers(cfg);
    if (i < 0 || i >= n) return BT_ERANGE;
    memset(t, 0, sizeof *t);
    model_shard s;
    model_shard_of(cfg, &s);
    layer_tensor_desc vocab = {"", cfg->vocab, C, SPLIT_ROWS, s.vocab0, s.vocab, 0, 0, 0, 0};
    layer_tensor_desc norm = {"", C, 0, SPLIT_NONE, 0, C, s.rank, 0, 0, 0};
    int first = is_first_stage(cfg), last = is_last_stage(cfg);
    size_t embed = first ? (size_t)s.vocab * C : 0, layers = 0;
    for (int l = 0; l < L; l++)
        layers += layer_floats(cfg, model_stage_layer(cfg, l));
    if (!first) i++; /* index as if the stage held the embedding */
    if (first && i == 0) {
        snprintf(t->name, sizeof t->name, "model.embed_tokens.weight");
        set_slice(t, &vocab);
        t->offset = 0;
    } else if (last && i == n - 2 + !first) {
        snprintf(t->name, sizeof t->name, "model.norm.weight");
        set_slice(t, &norm);
        t->offset = embed + layers;
    } else if (last && i == n - 1 + !first) {
        snprintf(t->name, sizeof t->name, "lm_head.weight");
        set_slice(t, &vocab);
        t->offset = embed + layers + (size_t)C;
    } else {
        layers_tensor(cfg, i - 1, embed, t);
    }
    return 0;
}

/* The index in the stage's one-process tensors (ep 1: every routed expert's) of tensor i
 * of a rank holding the routed experts [x0, x0 + El) of E: each MoE block's tensors are
 * the router, the experts' gates and ups, their downs, then the rest (moe_tensor). */
static int one_process_index(const model_config *cfg, int x0, int i) {
    int E = cfg->moe.n_experts, El = moe_local_experts(&cfg->moe), L = stage_n_layers(cfg);
    int j = i, k = i - is_first_stage(cfg); /* k: from the first layer's first tensor */
    for (int l = 0; l < L && k >= 0; l++) {
        int gl = model_stage_layer(cfg, l), n = layer_n_tensors(cfg, gl);
        int moe = model_layer_is_moe(cfg, gl), b = k - LAYER_ATTN_TENSORS; /* in the block */
        if (k >= n || !moe) {
            j += moe ? 3 * (E - El) : 0, k -= n;
            continue;
        }
        if (b >= 1 && b < 1 + 2 * El) return j + 2 * x0;
        if (b >= 1 + 2 * El && b < 1 + 3 * El) return j + 2 * (E - El) + x0;
        return b >= 1 ? j + 3 * (E - El) : j;
    }
    return j;
}

size_t model_tensor_global_offset(const model_config *cfg, int ep_rank, int i) {
    model_config one = one_process(cfg, cfg->pp_rank);
    model_tensor t;
    int x0 = ep_rank * moe_local_experts(&cfg->moe);
    if (model_tensor_slice(&one, one_process_index(cfg, x0, i), &t) != 0) return 0;
    return t.offset;
}

int model_tensor_info(const model *m, int i, model_tensor *t) {
    int rc = model_tensor_slice(&m->cfg, i, t);
    if (rc != 0) return rc;
    if (m->zw != NULL) { /* ZeRO-2/3: where the tensor's unit is resident, if it is */
        model_zero_views(m, t->offset, &t->data, &t->grad);
        return 0;
    }
    t->data = m->params_mem ? m->params_mem + t->offset : NULL;
    t->grad = m->grads_mem ? m->grads_mem + t->offset : NULL;
    return 0;
}

static uint64_t splitmix64(uint64_t x) {
    return splitmix64_mix(x + SPLITMIX64_GAMMA);
}

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* normal(0, std) for elements [begin, begin + n) of the stream `key`, as model.h
 * documents; x[0] is element begin. */
static void fill_normal(float *x, size_t begin, size_t n, uint64_t key, double std) {
    const double two_pi = 6.28318530717958647692528676655900577;
    const double inv53 = 1.0 / 9007199254740992.0; /* 2^-53 */
    for (size_t k = begin - begin % 2; k < begin + n; k += 2) {
        double u1 = (double)((splitmix64(key + k) >> 11) + 1) * inv53;
        double u2 = (double)(splitmix64(key + k + 1) >> 11) * inv53;
        double r = sqrt(-2.0 * log(u1));
        if (k >= begin) x[k - begin] = (float)(r * cos(two_pi * u2) * std);
        if (k + 1 >= begin && k + 1 < begin + n)
            x[k + 1 - begin] = (float)(r * sin(two_pi * u2) * std);
    }
}

/* Elements [lo, hi) of this rank's slice of tensor t of the one-process model into x
 * (x[0] is element lo): element (i, j) of the slice is element (row0 + i, col0 + j) of the
 * global tensor, generated from its global index. */
static void fill_slice_range(float *x, const model_tensor *t, uint64_t key, double std, size_t lo,
                             size_t hi) {
    size_t gcols = (size_t)t->global_shape[1], cols = (size_t)t->shape[1];
    if (t->ndim == 1 || cols == gcols) {
        fill_normal(x, (size_t)t->row0 * (t->ndim == 1 ? 1 : gcols) + lo, hi - lo, key, std);
        return;
    }
    for (size_t k = lo; k < hi;) {
        size_t i = k / cols, j = k % cols, n = cols - j < hi - k ? cols - j : hi - k;
        fill_normal(x + (k - lo), ((size_t)t->row0 + i) * gcols + (size_t)t->col0 + j, n, key, std);
        k += n;
    }
}

typedef struct fill_part {
    float *x;
    const model_tensor *t;
    uint64_t key;
    double std;
    size_t lo, hi;
} fill_part;

static void *fill_part_run(void *arg) {
    fill_part *p = arg;
    fill_slice_range(p->x + p->lo, p->t, p->key, p->std, p->lo, p->hi);
    return NULL;
}

/* Threads for the initialization: this host's CPUs shared among its ranks (BATON_HOST_RANKS,
 * which baton launch sets), at most FILL_MAX_THREADS. */
#define FILL_MAX_THREADS 32
#define FILL_MIN_PART    ((size_t)1 << 18)
static int fill_threads(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *v = getenv("BATON_HOST_RANKS");
    long ranks = v ? strtol(v, NULL, 10) : 1;
    long n = cpus / (ranks > 0 ? ranks : 1);
    return n < 1 ? 1 : n > FILL_MAX_THREADS ? FILL_MAX_THREADS : (int)n;
}

/* The whole slice, split over threads when large: every element is a function of its
 * global index alone, so the bits do not depend on the split. */
static void fill_slice(float *x, const model_tensor *t, uint64_t key, double std) {
    size_t n = t->count;
    int nt = fill_threads();
    if (nt > (int)(n / FILL_MIN_PART)) nt = (int)(n / FILL_MIN_PART);
    if (nt < 2) {
        fill_slice_range(x, t, key, std, 0, n);
        return;
    }
    fill_part part[FILL_MAX_THREADS];
    pthread_t th[FILL_MAX_THREADS];
    int started[FILL_MAX_THREADS] = {0};
    for (int i = 0; i < nt; i++) {
        part[i] = (fill_part){
            x, t, key, std, n * (size_t)i / (size_t)nt, n * (size_t)(i + 1) / (size_t)nt};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, fill_part_run, &part[i]) == 0;
    }
    fill_part_run(&part[0]);
    for (int i = 1; i < nt; i++)
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fill_part_run(&part[i]);
}

int model_init_weights(model *m, uint64_t seed) {
    size_t biggest = 0;
    model_tensor t;
    for (int i = 0; i < model_n_tensors(m); i++) {
        model_tensor_info(m, i, &t);
        biggest = t.count > biggest ? t.count : biggest;
    }
    float *host = malloc(biggest * sizeof *host);
    if (host == NULL) return BT_ENOMEM;
    double resid_std = 0.02 / sqrt(2.0 * m->cfg.n_layers);
    for (int i = 0; i < model_n_tensors(m); i++) {
        model_tensor_info(m, i, &t);
        /* ZeRO-3: only the resident unit's tensors have memory */
        if (t.data == NULL) continue;
        if (strstr(t.name, "e_score_correction_bias")) { /* MoE selection bias: 0 */
            memset(host, 0, t.count * sizeof *host);
        } else if (t.no_decay) {
            for (size_t k = 0; k < t.count; k++)
                host[k] = 1.0f;
        } else {
            int resid = strstr(t.name, "o_proj") || strstr(t.name, "down_proj");
            fill_slice(host, &t, splitmix64(seed ^ fnv1a64(t.name)), resid ? resid_std : 0.02);
        }
        m->be->from_host(m->be, t.data, host, t.count * sizeof *host);
    }
    free(host);
    return m->be->sync(m->be);
}
