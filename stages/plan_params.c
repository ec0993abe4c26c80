/* Exact parameter counts of a LLaMA-style model (untied LM head, GQA, SwiGLU,
 * RMSNorm without biases), dense or MoE.
 *
 *   embedding   V*d
 *   per layer   attn  d*(H*hd) + 2*d*(KV*hd) + (H*hd)*d      hd = d/H (q, k, v, o)
 *               mlp   3*d*ffn                                 (gate, up, down)
 *               norms 2*d
 *   MoE layer   router d*E + E*3*d*effn + S*3*d*effn in place of mlp
 *               (S shared experts, each of expert_ffn_dim like the routed ones)
 *   final norm  d,  head d*V
 *   active      total - n_moe * (E - top_k) * 3*d*effn */
#include "plan.h"

#include <string.h>

static int params_check_model(const Baton__Model *m, bt_diag *diag) {
    if (m == NULL) {
        bt_diag_set(diag, "model is missing: dim, n_layers, n_heads and vocab_size are needed");
        return BT_EINVAL;
    }
    if (m->dim == 0 || m->n_layers == 0 || m->n_heads == 0 || m->vocab_size == 0) {
        bt_diag_set(diag,
                    "model: dim (%u), n_layers (%u), n_heads (%u) and vocab_size (%u) must all "
                    "be positive",
                    m->dim, m->n_layers, m->n_heads, m->vocab_size);
        return BT_EINVAL;
    }
    if (m->dim % m->n_heads != 0) {
        bt_diag_set(diag, "model.dim %u must be a multiple of model.n_heads %u (head_dim = dim/H)",
                    m->dim, m->n_heads);
        return BT_EINVAL;
    }
    uint32_t kv = m->n_kv_heads ? m->n_kv_heads : m->n_heads;
    if (kv > m->n_heads || m->n_heads % kv != 0) {
        bt_diag_set(diag, "model.n_kv_heads %u must divide model.n_heads %u", kv, m->n_heads);
        return BT_EINVAL;
    }
    return BT_OK;
}

static int moe_enabled(const Baton__Model *m) {
    return m->arch == BATON__MODEL__ARCH__MOE || (m->moe != NULL && m->moe->n_experts > 0);
}

/* Fills the MoE fields of out; leaves them 0 for a dense model. */
static int params_moe(const Baton__Model *m, plan_params *out, bt_diag *diag) {
    if (!moe_enabled(m)) return BT_OK;
    const Baton__Moe *moe = m->moe;
    if (moe == NULL || moe->n_experts == 0) {
        bt_diag_set(diag, "model.arch is moe but model.moe.n_experts is not given (must be > 0)");
        return BT_EINVAL;
    }
    uint32_t top_k = moe->top_k ? moe->top_k : 1;
    if (top_k > moe->n_experts) {
        bt_diag_set(diag, "model.moe.top_k %u exceeds model.moe.n_experts %u", top_k,
                    moe->n_experts);
        return BT_EINVAL;
    }
    /* expert_ffn_dim 0 falls back to the dense ffn_dim. */
    uint64_t d = m->dim, effn = moe->expert_ffn_dim ? moe->expert_ffn_dim : m->ffn_dim;
    if (effn == 0) {
        bt_diag_set(diag, "model.moe.expert_ffn_dim (or model.ffn_dim) must be > 0");
        return BT_EINVAL;
    }
    out->n_experts = moe->n_experts;
    out->top_k = top_k;
    out->moe_shared_n = moe->n_shared_experts;
    out->moe_ffn = (uint32_t)effn;
    out->moe_first_dense = moe->first_dense_layers;
    out->moe_every = moe->every ? moe->every : 1;
    out->moe_router = d * moe->n_experts;
    out->moe_experts = (uint64_t)moe->n_experts * 3 * d * effn;
    out->moe_shared = (uint64_t)moe->n_shared_experts * 3 * d * effn;
    out->moe_layer = out->moe_router + out->moe_experts + out->moe_shared;
    out->moe_bias = moe->balance == BATON__MOE__BALANCE__BIAS ? moe->n_experts : 0;
    out->moe_counts = moe->capacity_factor > 0 ||
                      (moe->balance == BATON__MOE__BALANCE__AUX_LOSS && moe->aux_loss_coef != 0);
    return BT_OK;
}

int plan_layer_is_moe(const plan_params *p, uint32_t layer) {
    if (p->n_experts == 0 || layer < p->moe_first_dense) return 0;
    uint32_t every = p->moe_every ? p->moe_every : 1;
    return (layer - p->moe_first_dense) % every == 0;
}

static uint32_t moe_layers_in(const plan_params *p, uint32_t first, uint32_t n) {
    uint32_t count = 0;
    for (uint32_t i = first; i < first + n; i++)
        count += (uint32_t)plan_layer_is_moe(p, i);
    return count;
}

/* v as the stage holds its layers: 1 unless pp > 1 and pp v divides the layers or
 * parallel.stage_layers lists the pp v chunks. */
static uint32_t chunks_of(const plan_params *p, uint32_t pp, uint32_t v) {
    int listed = p->stage_layers != NULL && p->n_stage_layers == (size_t)pp * v;
    return pp > 1 && v > 1 && (p->n_layers % (pp * v) == 0 || listed) ? v : 1;
}

/* Whether parallel.stage_layers sets the layers (as model.c's model_uneven_stages). */
static int uneven(const plan_params *p, uint32_t pp, uint32_t v) {
    return pp > 1 && p->stage_layers != NULL &&
           p->n_stage_layers == (size_t)pp * chunks_of(p, pp, v);
}

/* Model chunk k's layers (k = c pp + s; without interleaving k = s): [*first, *first + *n)
 * of the model. */
static void chunk_at(const plan_params *p, uint32_t pp, uint32_t v, uint32_t k, uint32_t *first,
                     uint32_t *n) {
    if (pp == 0) pp = 1;
    if (uneven(p, pp, v)) {
        *first = 0;
        for (uint32_t j = 0; j < k; j++)
            *first += p->stage_layers[j];
        *n = p->stage_layers[k];
    } else if (chunks_of(p, pp, v) > 1) {
        *n = p->n_layers / (pp * v), *first = k * *n;
    } else {
        uint32_t base = p->n_layers / pp, rem = p->n_layers % pp;
        *first = k * base + (k < rem ? k : rem);
        *n = base + (k < rem ? 1 : 0);
    }
}

void plan_pp_chunk_span(const plan_params *p, uint32_t pp, uint32_t v, uint32_t stage, uint32_t c,
                        uint32_t *first, uint32_t *n) {
    uint32_t g;
    *first = 0;
    for (uint32_t j = 0; j < c; j++) {
        chunk_at(p, pp, v, j * pp + stage, &g, n);
        *first += *n;
    }
    chunk_at(p, pp, v, c * pp + stage, &g, n);
}

uint32_t plan_pp_stage_layer(const plan_params *p, uint32_t pp, uint32_t v, uint32_t stage,
                             uint32_t i) {
    uint32_t first, n, chunks = chunks_of(p, pp, v);
    for (uint32_t c = 0; c < chunks; c++) {
        chunk_at(p, pp, v, c * pp + stage, &first, &n);
        if (i < n || c + 1 == chunks) return first + i;
        i -= n;
    }
    return i;
}

void plan_pp_stage_layers(const plan_params *p, uint32_t pp, uint32_t v, uint32_t stage,
                          uint32_t *first, uint32_t *n, uint32_t *n_moe) {
    uint32_t g, len, chunks = chunks_of(p, pp, v);
    chunk_at(p, pp, v, stage, first, n);
    for (uint32_t c = 1; c < chunks; c++) {
        chunk_at(p, pp, v, c * pp + stage, &g, &len);
        *n += len;
    }
    if (chunks == 1) {
        *n_moe = moe_layers_in(p, *first, *n);
        return;
    }
    *n_moe = 0;
    for (uint32_t i = 0; i < *n; i++)
        *n_moe += (uint32_t)plan_layer_is_moe(p, plan_pp_stage_layer(p, pp, v, stage, i));
}

int plan_check_stage_layers(const uint32_t *list, size_t n, uint32_t pp, uint32_t v,
                            uint32_t n_layers, bt_diag *diag) {
    uint64_t sum = 0, low = UINT32_MAX, want = (uint64_t)pp * (pp > 1 && v > 1 ? v : 1);
    for (size_t k = 0; k < n; k++)
        sum += list[k], low = list[k] < low ? list[k] : low;
    if (n == want && sum == n_layers && low > 0) return BT_OK;
    bt_diag_set(diag,
                "parallel.stage_layers: %zu entries summing to %llu (smallest %llu) for pp %u x "
                "virtual_stages %llu and model.n_layers %u: it needs one entry per stage (per "
                "model chunk when interleaved), each at least 1, summing to n_layers",
                n, (unsigned long long)sum, (unsigned long long)(n ? low : 0), pp,
                (unsigned long long)(want / (pp ? pp : 1)), n_layers);
    return BT_EINVAL;
}

int plan_params_count(const Baton__Model *m, plan_params *out, bt_diag *diag) {
    memset(out, 0, sizeof *out);
    int rc = params_check_model(m, diag);
    if (rc == BT_OK) rc = params_moe(m, out, diag);
    if (rc != BT_OK) return rc;
    uint64_t d = m->dim, v = m->vocab_size, hd = m->dim / m->n_heads;
    uint64_t q = m->n_heads * hd, kv = (m->n_kv_heads ? m->n_kv_heads : m->n_heads) * hd;
    out->n_layers = m->n_layers;
    out->n_moe_layers = moe_layers_in(out, 0, m->n_layers);
    out->n_dense_layers = m->n_layers - out->n_moe_layers;
    if (out->n_dense_layers > 0 && m->ffn_dim == 0) {
        bt_diag_set(diag, "model.ffn_dim must be > 0 (%u dense layers need it)",
                    out->n_dense_layers);
        return BT_EINVAL;
    }
    out->embedding = v * d;
    out->attn_layer = d * q + 2 * d * kv + q * d;
    out->mlp_layer = 3 * d * m->ffn_dim;
    out->norms_layer = 2 * d;
    out->final_norm = d;
    out->head = d * v;
    uint64_t common = out->attn_layer + out->norms_layer;
    out->total = out->embedding + out->final_norm + out->head + m->n_layers * common +
                 out->n_dense_layers * out->mlp_layer + out->n_moe_layers * out->moe_layer;
    uint64_t idle_experts =
        out->n_experts ? out->moe_experts / out->n_experts * (out->n_experts - out->top_k) : 0;
    out->active = out->total - out->n_moe_layers * idle_experts;
    return BT_OK;
}
