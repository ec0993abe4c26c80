/* The model's MoE layers (model_moe.h). */
#include "model_moe.h"

#include <stdlib.h>
#include <string.h>

#include "model_sp.h"
#include "moe_dev.h"

/* Layer l's place among its chunk's MoE layers, or -1 for a dense layer. */
static int moe_index(const model *m, int l) {
    if (!model_layer_is_moe(&m->cfg, model_stage_layer(&m->cfg, l))) return -1;
    int l0 = 0, len = 0, k = 0;
    for (int c = 0; c < m->n_chunks && l >= l0 + len; c++) /* l's chunk */
        model_chunk_span(&m->cfg, c, &l0, &len);
    for (int i = l0; i < l; i++)
        k += model_layer_is_moe(&m->cfg, model_stage_layer(&m->cfg, i));
    return k;
}

/* Caches per slot, from mo->index: the most MoE layers a chunk has (0: the stage has
 * none), and one under full recompute (a layer's forward is rerun just before its
 * backward, so one cache serves every layer and slot) or forward only (no backward). */
static int moe_sets(const model *m) {
    int most = 0;
    for (int l = 0; l < m->n_layers; l++)
        most = m->moew->index[l] + 1 > most ? m->moew->index[l] + 1 : most;
    int one = m->cfg.recompute == MODEL_RECOMPUTE_FULL || m->cfg.forward_only;
    return one && most > 0 ? 1 : most;
}

/* A slot holds one chunk's layers (model.h): MoE layer l's cache is the slot's k-th, k its
 * place among the chunk's MoE layers (dense layers have none). */
static moe_dev_cache *cache_of(model *m, int l) {
    model_moe *mo = m->moew;
    int k = mo->sets == 1 ? 0 : mo->index[l];
    return &mo->caches[(size_t)(mo->slots == 1 ? 0 : m->slot) * mo->sets + k];
}

/* Each MoE layer's experts' GEMM records (model.h: xgemm; none under fp32), and with
 * cfg.weight_cache their converted weights kept (per layer, not per slot: every
 * micro-batch of a step reads the same weights). */
static int moe_init_kept(model *m) {
    model_moe *mo = m->moew;
    if (m->n_xgemm == 0) return 0;
    mo->kept = calloc((size_t)m->n_layers, sizeof *mo->kept);
    if (mo->kept == NULL) return BT_ENOMEM;
    for (int l = 0; l < m->n_layers; l++) {
        if (m->xgemm_first[l] < 0) continue;
        int rc = moe_dev_kept_init(&mo->kept[l], m->be, &m->cfg.moe, m->gemm + m->xgemm_first[l],
                                   m->cfg.weight_cache);
        if (rc != 0) return rc;
        m->wcache_floats += mo->kept[l].floats;
    }
    return 0;
}

void model_moe_weights_changed(model *m) {
    model_moe *mo = m->moew;
    for (int l = 0; mo != NULL && mo->kept != NULL && l < m->n_layers; l++)
        moe_dev_kept_clear(&mo->kept[l]);
}

/* The cache of layer l's pass, pointed at the layer's kept conversions. */
static moe_dev_cache *layer_cache(model *m, int l) {
    moe_dev_cache *c = cache_of(m, l);
    c->kept = m->moew->kept != NULL ? &m->moew->kept[l] : NULL;
    return c;
}

/* Whether some MoE layer here runs its experts in bf16 (under fp8: its records'). */
static int moe_bf16_layers(const model *m) {
    if (m->cfg.prec != BACKEND_PREC_FP8) return m->cfg.prec == BACKEND_PREC_BF16;
    for (int l = 0; l < m->n_layers; l++)
        if (m->xgemm_first[l] >= 0 && m->gemm[m->xgemm_first[l]].prec == BACKEND_PREC_BF16)
            return 1;
    return 0;
}

/* Every slot's caches, one scratch for all. */
static int moe_init_caches(model *m, comm *ep_group) {
    model_moe *mo = m->moew;
    /* under sequence parallelism each tp rank runs the layer on its own rows */
    int max_tokens = model_sp_rows(m, m->max_B * m->max_T), ep = ep_group ? comm_size(ep_group) : 1;
    size_t n = (size_t)mo->slots * mo->sets;
    mo->caches = calloc(n, sizeof *mo->caches);
    mo->scratch = calloc(1, sizeof *mo->scratch);
    if (mo->caches == NULL || mo->scratch == NULL) return BT_ENOMEM;
    /* The experts' GEMMs in the model's precision (each with its record: moe_init_kept);
     * the router's in float32. */
    int rc = moe_dev_scratch_init(mo->scratch, m->be, &m->cfg.moe, max_tokens, ep, m->cfg.prec);
    if (rc == 0 && m->cfg.comm_bf16 && moe_bf16_layers(m))
        rc = moe_dev_scratch_set_bf16(mo->scratch, &m->cfg.moe, max_tokens);
    if (rc == 0)
        rc = moe_dev_scratch_set_split(mo->scratch, &m->cfg.moe, m->cp_group,
                                       model_sp_on(m) ? m->tp_group : NULL, m->max_T, max_tokens);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = moe_dev_cache_init(&mo->caches[i], m->be, &m->cfg.moe, max_tokens, mo->scratch,
                                ep_group);
    return rc ? rc : moe_init_kept(m);
}

int model_moe_init(model *m, comm *ep_group, bt_diag *diag) {
    if (m->cfg.moe.n_experts == 0) return 0;
    int ep = m->cfg.ep > 1 ? m->cfg.ep : 1;
    if (ep > 1 &&
        (ep_group == NULL || comm_size(ep_group) != ep || comm_rank(ep_group) != m->cfg.ep_rank)) {
        bt_diag_set(diag,
                    "model: expert parallelism %d (rank %d) needs a group of that size in "
                    "which this process has that rank",
                    ep, m->cfg.ep_rank);
        return BT_EINVAL;
    }
    if (m->be->moe_route == NULL || m->be->moe_router_backward == NULL) {
        bt_diag_set(diag, "model: the %s backend has no MoE operations (moe_route ...)",
                    m->be->name);
        return BT_EUNSUPPORTED;
    }
    model_moe *mo = calloc(1, sizeof *mo);
    if (mo == NULL) return BT_ENOMEM;
    m->moew = mo, m->ep_group = ep > 1 ? ep_group : NULL;
    mo->slots = m->cfg.recompute == MODEL_RECOMPUTE_FULL || m->cfg.forward_only ? 1 : m->n_slots;
    mo->index = calloc((size_t)(m->n_layers ? m->n_layers : 1), sizeof *mo->index);
    for (int l = 0; mo->index != NULL && l < m->n_layers; l++)
        mo->index[l] = moe_index(m, l);
    mo->sets = mo->index ? moe_sets(m) : 0;
    size_t rows = (size_t)model_sp_rows(m, m->max_B * m->max_T);
    mo->y = m->be->alloc(m->be, rows * m->cfg.dim * sizeof(float));
    mo->routed =
        calloc((size_t)(m->n_layers ? m->n_layers : 1) * m->cfg.moe.n_experts, sizeof(double));
    int rc = mo->y && mo->routed && mo->index ? 0 : BT_ENOMEM;
    if (rc == 0 && mo->sets > 0) rc = moe_init_caches(m, m->ep_group); /* none: all dense */
    if (rc != 0) {
        bt_diag_set(diag, "model: cannot set up the MoE layers (%d experts, %d here): %s",
                    m->cfg.moe.n_experts, moe_local_experts(&m->cfg.moe), bt_strerror(rc));
        model_moe_free(m);
    }
    return rc;
}

void model_moe_free(model *m) {
    model_moe *mo = m->moew;
    if (mo == NULL) return;
    size_t n = (size_t)mo->slots * mo->sets;
    for (size_t i = 0; mo->caches && i < n; i++)
        moe_dev_cache_free(&mo->caches[i]);
    for (int l = 0; mo->kept != NULL && l < m->n_layers; l++)
        moe_dev_kept_free(&mo->kept[l]);
    free(mo->kept);
    if (mo->scratch) moe_dev_scratch_free(mo->scratch);
    free(mo->caches);
    free(mo->scratch);
    if (mo->y) m->be->free(m->be, mo->y);
    free(mo->routed);
    free(mo->index);
    free(mo);
    m->moew = NULL;
}

static void moe_views(const model *m, int l, moe_weights *w, moe_weights *g) {
    moe_weights_carve(&m->cfg.moe, w, m->params.layers[l].moe);
    if (g) moe_weights_carve(&m->cfg.moe, g, m->grads.layers[l].moe);
}

void model_moe_forward(model *m, int l, const float *x, float *y) {
    model_moe *mo = m->moew;
    moe_weights w;
    moe_views(m, l, &w, NULL);
    moe_stats st;
    int N = model_sp_rows(m, m->B * m->T), E = m->cfg.moe.n_experts;
    if (m->comm_err != 0) return;
    const float *bias = m->params.layers[l].moe_bias;
    int rc = moe_dev_forward(&m->cfg.moe, &w, bias, x, y ? y : mo->y, N, layer_cache(m, l), &st);
    if (rc != 0) {
        m->comm_err = rc;
        return;
    }
    if (y == NULL) return; /* a recomputation: the forward was counted already */
    for (int e = 0; e < E; e++)
        mo->routed[(size_t)l * E + e] += (double)st.routed[e];
    mo->dropped += (double)st.dropped, mo->aux += st.aux_loss, mo->aux_n += 1;
}

void model_moe_backward(model *m, int l, const float *dy, float *dx, float loss_scale) {
    moe_weights w, g;
    moe_views(m, l, &w, &g);
    moe_config c = m->cfg.moe;
    c.aux_loss_coef *= loss_scale;
    if (m->comm_err != 0) return;
    int rc = moe_dev_backward(&c, &w, layer_cache(m, l), dy, dx, &g);
    if (rc != 0) m->comm_err = rc;
}

size_t model_moe_cache_bytes(const model *m) {
    const model_moe *mo = m->moew;
    size_t bytes = 0, n = mo ? (size_t)mo->slots * mo->sets : 0;
    for (size_t i = 0; i < n; i++)
        bytes += mo->caches[i].bytes;
    return bytes;
}

void model_moe_rows(const model *m, size_t *room, size_t *most) {
    const model_moe *mo = m->moew;
    int ep = mo != NULL && mo->scratch != NULL && m->ep_group != NULL;
    *room = ep ? mo->scratch->rx_cap : 0;
    *most = ep ? mo->scratch->rx_most : 0;
}

void model_moe_fold_tp(model *m) {
    if (m->moew != NULL) m->moew->tp_folded = 1;
}

static int moe_sum_tp(model *m, float *g, size_t n) {
    return n ? comm_allreduce(m->tp_group, g, g, n, COMM_F32, COMM_SUM, NULL) : 0;
}

int model_moe_reduce_tp(model *m) {
    if (m->moew == NULL || !model_sp_on(m)) return 0;
    const moe_config *c = &m->cfg.moe;
    size_t n = moe_weights_floats(c);
    for (int l = 0; l < m->n_layers; l++) {
        float *g = m->grads.layers[l].moe;
        if (g == NULL) continue;
        moe_weights w; /* the router, the routed experts, the rest */
        moe_weights_carve(c, &w, g);
        int folded = m->moew->tp_folded, rc;
        rc = moe_sum_tp(m, g, folded ? (size_t)(w.w13 - g) : n);
        if (folded) rc = rc ? rc : moe_sum_tp(m, w.shared_w13, n - (size_t)(w.shared_w13 - g));
        if (rc != 0) return rc;
    }
    return 0;
}

/* max / mean routed load of layer l's counts r (E). */
static double load_ratio(const double *r, int E) {
    double sum = 0, mx = 0;
    for (int e = 0; e < E; e++)
        sum += r[e], mx = r[e] > mx ? r[e] : mx;
    return sum > 0 ? mx / (sum / E) : 0;
}

/* Layer l's bias step from its routed counts r (E). */
static void moe_bias_step(model *m, int l, const double *r) {
    const moe_config *c = &m->cfg.moe;
    if (c->bias_rate <= 0) return;
    moe_stats st = {0};
    double sum = 0;
    for (int e = 0; e < c->n_experts; e++)
        st.routed[e] = (long)r[e], sum += r[e];
    st.n_tokens = (int)(sum / c->top_k);
    if (m->moe_bias_step != NULL) {
        m->moe_bias_step(m->moe_bias_ctx, l, &st);
        return;
    }
    float *bias = m->params.layers[l].moe_bias, host[MOE_MAX_EXPERTS];
    if (bias == NULL) return;
    m->be->to_host(m->be, host, bias, (size_t)c->n_experts * sizeof(float));
    moe_bias_update(c, host, &st);
    m->be->from_host(m->be, bias, host, (size_t)c->n_experts * sizeof(float));
}

/* The counts summed over group (NULL or one rank: nothing to do). */
static int moe_counts_sum(model_moe *mo, comm *group, size_t n) {
    if (group == NULL || comm_size(group) < 2) return 0;
    double v[3] = {mo->dropped, mo->aux, mo->aux_n};
    if (comm_allreduce(group, mo->routed, mo->routed, n, COMM_F64, COMM_SUM, NULL) != 0 ||
        comm_allreduce(group, v, v, 3, COMM_F64, COMM_SUM, NULL) != 0)
        return BT_EIO;
    mo->dropped = v[0], mo->aux = v[1], mo->aux_n = v[2];
    return 0;
}

void model_moe_step_discard(model *m) {
    model_moe *mo = m->moew;
    if (mo == NULL) return;
    memset(mo->routed, 0, (size_t)m->n_layers * m->cfg.moe.n_experts * sizeof *mo->routed);
    mo->dropped = mo->aux = mo->aux_n = 0;
    if (mo->scratch) moe_dev_scratch_release(mo->scratch);
}

int model_moe_step_end(model *m, comm *group, model_moe_step *out) {
    model_moe *mo = m->moew;
    memset(out, 0, sizeof *out);
    if (mo == NULL) return 0;
    const moe_config *c = &m->cfg.moe;
    int E = c->n_experts, L = m->n_layers;
    size_t n = (size_t)L * E;
    /* under sequence parallelism each tp rank counted its own rows */
    if (moe_counts_sum(mo, model_sp_on(m) ? m->tp_group : NULL, n) != 0 ||
        moe_counts_sum(mo, group, n) != 0)
        return BT_EIO;
    int layers = 0;
    out->n_experts = E;
    for (int l = 0; l < L; l++) {
        if (!model_layer_is_moe(&m->cfg, model_stage_layer(&m->cfg, l))) continue;
        const double *r = mo->routed + (size_t)l * E;
        double ratio = load_ratio(r, E), sum = 0;
        out->load_max_mean = ratio > out->load_max_mean ? ratio : out->load_max_mean;
        for (int e = 0; e < E; e++)
            sum += r[e];
        for (int e = 0; e < E; e++)
            out->expert_load[e] += sum > 0 ? (float)(r[e] / (sum / E)) : 0.0f;
        layers++;
        moe_bias_step(m, l, r);
    }
    for (int e = 0; e < E && layers > 0; e++)
        out->expert_load[e] /= (float)layers;
    out->layers = layers;
    /* aux_n / layers: the micro-batch forwards counted (each ran every MoE layer here) */
    out->dropped = mo->dropped, out->aux = mo->aux_n > 0 ? mo->aux * layers / mo->aux_n : 0;
    memset(mo->routed, 0, n * sizeof *mo->routed);
    mo->dropped = mo->aux = mo->aux_n = 0;
    if (mo->scratch) moe_dev_scratch_release(mo->scratch); /* the step's work is queued */
    return 0;
}
