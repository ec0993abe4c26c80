/* model_config from the recipe's protobuf messages, and its validation. */
#include "model.h"
#include "plan.h"

_Static_assert(MOE_MAX_EXPERTS == PLAN_MAX_EXPERTS, "recipe validation bounds n_experts so");

static rope_type rope_type_from_pb(Baton__RopeScaling__Type t) {
    switch (t) {
    case BATON__ROPE_SCALING__TYPE__LINEAR:
        return ROPE_LINEAR;
    case BATON__ROPE_SCALING__TYPE__NTK:
        return ROPE_NTK;
    case BATON__ROPE_SCALING__TYPE__LLAMA3:
        return ROPE_LLAMA3;
    case BATON__ROPE_SCALING__TYPE__YARN:
        return ROPE_YARN;
    default:
        return ROPE_NONE;
    }
}

static void rope_from_pb(rope_config *rc, const Baton__Rope *pb) {
    rope_config_default(rc);
    if (pb == NULL) return;
    rc->theta = pb->theta;
    const Baton__RopeScaling *s = pb->scaling;
    if (s == NULL) return;
    rc->type = rope_type_from_pb(s->type);
    rc->factor = s->factor;
    rc->original_max_position = (double)s->original_max_position;
    rc->low_freq_factor = s->low_freq_factor;
    rc->high_freq_factor = s->high_freq_factor;
    rc->beta_fast = s->beta_fast;
    rc->beta_slow = s->beta_slow;
    rc->attn_factor = s->attn_factor;
    rc->truncate = s->truncate != 0;
}

/* Dimensions above this are rejected so that products of two fit the index types. */
#define MODEL_DIM_MAX (1 << 24)

static int dim_ok(uint32_t v) {
    return v > 0 && v <= MODEL_DIM_MAX;
}

/* The recipe's MoE block: top-k renormalised, the balancing mode's coefficient or rate. */
static void moe_from_pb(model_config *cfg, const Baton__Model *pb) {
    const Baton__Moe *m = pb->moe;
    if (m == NULL || m->n_experts == 0) return;
    cfg->moe = (moe_config){
        .dim = cfg->dim,
        .ffn_dim = m->expert_ffn_dim ? (int)m->expert_ffn_dim : cfg->ffn_dim,
        .n_experts = (int)m->n_experts,
        .top_k = (int)m->top_k,
        .n_shared = (int)m->n_shared_experts,
        .score = m->score == BATON__MOE__SCORE__SIGMOID ? MOE_SCORE_SIGMOID : MOE_SCORE_SOFTMAX,
        .norm_topk = 1,
        .capacity_factor = m->capacity_factor,
        .aux_loss_coef = m->balance == BATON__MOE__BALANCE__AUX_LOSS ? m->aux_loss_coef : 0.0,
        .bias_rate = m->balance == BATON__MOE__BALANCE__BIAS ? m->bias_update_rate : 0.0,
    };
    cfg->moe_every = m->every ? (int)m->every : 1;
    cfg->moe_first_dense = (int)m->first_dense_layers;
}

int model_layer_is_moe(const model_config *cfg, int l) {
    if (cfg->moe.n_experts == 0 || l < cfg->moe_first_dense) return 0;
    return (l - cfg->moe_first_dense) % (cfg->moe_every > 0 ? cfg->moe_every : 1) == 0;
}

int model_config_from_pb(model_config *cfg, const Baton__Model *pb, bt_diag *diag) {
    int moe = pb->moe != NULL && pb->moe->n_experts > 0;
    if (pb->arch != BATON__MODEL__ARCH__LLAMA && !(pb->arch == BATON__MODEL__ARCH__MOE && moe)) {
        bt_diag_set(diag, "model.arch: moe needs model.moe.n_experts");
        return BT_EUNSUPPORTED;
    }
    if (!dim_ok(pb->dim) || !dim_ok(pb->n_layers) || !dim_ok(pb->n_heads) || !dim_ok(pb->ffn_dim) ||
        !dim_ok(pb->vocab_size) || pb->n_kv_heads > MODEL_DIM_MAX) {
        bt_diag_set(diag, "model: dim, n_layers, n_heads, ffn_dim and vocab_size must be set "
                          "(between 1 and 2^24)");
        return BT_EINVAL;
    }
    *cfg = (model_config){
        .vocab = (int)pb->vocab_size,
        .dim = (int)pb->dim,
        .n_layers = (int)pb->n_layers,
        .n_heads = (int)pb->n_heads,
        .n_kv_heads = pb->n_kv_heads ? (int)pb->n_kv_heads : (int)pb->n_heads,
        .head_dim = (int)(pb->dim / pb->n_heads),
        .ffn_dim = (int)pb->ffn_dim,
        .norm_eps = (float)pb->norm_eps,
        .recompute = MODEL_RECOMPUTE_NONE,
        .prec = BACKEND_PREC_FP32,
        .fp8_hybrid = 1,
        .fp8_first_last_bf16 = 1,
        .tp = 1,
    };
    rope_from_pb(&cfg->rope, pb->rope);
    moe_from_pb(cfg, pb);
    return model_config_check(cfg, diag);
}

void model_config_apply_stage(model_config *cfg, const Baton__Stage *stage) {
    if (stage->has_recompute) cfg->recompute = (model_recompute)stage->recompute;
    if (stage->parallel != NULL && stage->parallel->n_stage_layers > 0)
        cfg->stage_layers = stage->parallel->stage_layers,
        cfg->n_stage_layers = stage->parallel->n_stage_layers;
    const Baton__Precision *p = stage->precision;
    if (p == NULL) return;
    switch (p->type) {
    case BATON__PRECISION__TYPE__BF16:
        cfg->prec = BACKEND_PREC_BF16;
        break;
    case BATON__PRECISION__TYPE__FP8:
        cfg->prec = BACKEND_PREC_FP8;
        break;
    case BATON__PRECISION__TYPE__FP16:
        cfg->prec = BACKEND_PREC_FP16;
        break;
    default:
        cfg->prec = BACKEND_PREC_FP32;
        break;
    }
    cfg->fp8_hybrid = p->format == BATON__PRECISION__FORMAT__HYBRID;
    cfg->fp8_first_last_bf16 = p->first_last_bf16;
}

/* parallel.stage_layers, when the stage runs a pipeline (pp > 1; one process runs every
 * layer): stages/plan.h's plan_check_stage_layers. */
static int model_config_check_stages(const model_config *cfg, bt_diag *diag) {
    if (cfg->stage_layers == NULL || cfg->n_stage_layers == 0 || cfg->pp <= 1) return 0;
    return plan_check_stage_layers(cfg->stage_layers, cfg->n_stage_layers, (uint32_t)cfg->pp,
                                   (uint32_t)(cfg->vp > 1 ? cfg->vp : 1), (uint32_t)cfg->n_layers,
                                   diag);
}

/* Megatron's even split: query heads, ffn rows and vocabulary rows divide by tp; kv heads
 * split (tp divides KV) or are replicated (KV divides tp). */
static int model_config_check_tp(const model_config *cfg, bt_diag *diag) {
    int tp = cfg->tp > 1 ? cfg->tp : 1;
    if (cfg->tp < 0 || cfg->tp_rank < 0 || cfg->tp_rank >= tp) {
        bt_diag_set(diag, "tensor parallelism: rank %d of %d is out of range", cfg->tp_rank,
                    cfg->tp);
        return BT_EINVAL;
    }
    if (cfg->n_heads % tp || cfg->ffn_dim % tp || cfg->vocab % tp) {
        bt_diag_set(diag,
                    "parallel.tp %d must divide model.n_heads (%d), model.ffn_dim (%d) and "
                    "model.vocab_size (%d)",
                    tp, cfg->n_heads, cfg->ffn_dim, cfg->vocab);
        return BT_EINVAL;
    }
    if (cfg->n_kv_heads % tp && tp % cfg->n_kv_heads) {
        bt_diag_set(diag,
                    "parallel.tp %d must divide model.n_kv_heads (%d) or be a multiple of it "
                    "(kv heads replicated)",
                    tp, cfg->n_kv_heads);
        return BT_EINVAL;
    }
    return 0;
}

/* Context parallelism: Ulysses spreads every rank's query and kv heads over the cp ranks. */
static int model_config_check_cp(const model_config *cfg, bt_diag *diag) {
    int cp = cfg->cp > 1 ? cfg->cp : 1;
    if (cfg->cp < 0 || cfg->cp_rank < 0 || cfg->cp_rank >= cp) {
        bt_diag_set(diag, "context parallelism: rank %d of %d is out of range", cfg->cp_rank,
                    cfg->cp);
        return BT_EINVAL;
    }
    model_shard s;
    model_shard_of(cfg, &s);
    if (cp > 1 && cfg->cp_ulysses && (s.heads % cp || s.kv_heads % cp)) {
        bt_diag_set(diag,
                    "parallel.cp_comm ulysses: cp %d must divide the query heads (%d) and the kv "
                    "heads (%d) of each tensor-parallel rank",
                    cp, s.heads, s.kv_heads);
        return BT_EINVAL;
    }
    return 0;
}

/* MoE: a valid layer (moe.h) whose experts split evenly over the ep ranks. */
static int model_config_check_moe(const model_config *cfg, bt_diag *diag) {
    int ep = cfg->ep > 1 ? cfg->ep : 1;
    if (cfg->moe.n_experts == 0) {
        if (ep == 1) return 0;
        bt_diag_set(diag, "parallel.ep %d needs an MoE model (model.moe.n_experts)", ep);
        return BT_EINVAL;
    }
    moe_config c = cfg->moe;
    if (moe_config_check(&c) != 0 || c.dim != cfg->dim) {
        bt_diag_set(diag, "model.moe: %d experts, top_k %d, %d shared: out of range", c.n_experts,
                    c.top_k, c.n_shared);
        return BT_EINVAL;
    }
    if (c.n_experts % ep != 0 || cfg->ep_rank < 0 || cfg->ep_rank >= ep ||
        (ep > 1 && (c.n_local != c.n_experts / ep || c.expert0 != cfg->ep_rank * c.n_local))) {
        bt_diag_set(diag, "parallel.ep %d must divide model.moe.n_experts (%d)", ep, c.n_experts);
        return BT_EINVAL;
    }
    return 0;
}

int model_config_check(const model_config *cfg, bt_diag *diag) {
    if (cfg->vocab <= 0 || cfg->dim <= 0 || cfg->n_layers <= 0 || cfg->n_heads <= 0 ||
        cfg->n_kv_heads <= 0 || cfg->ffn_dim <= 0) {
        bt_diag_set(diag, "model: every dimension must be positive");
        return BT_EINVAL;
    }
    if (cfg->dim % cfg->n_heads || cfg->head_dim != cfg->dim / cfg->n_heads) {
        bt_diag_set(diag, "model.dim (%d) must be a multiple of model.n_heads (%d)", cfg->dim,
                    cfg->n_heads);
        return BT_EINVAL;
    }
    if (cfg->n_heads % cfg->n_kv_heads) {
        bt_diag_set(diag, "model.n_kv_heads (%d) must divide model.n_heads (%d)", cfg->n_kv_heads,
                    cfg->n_heads);
        return BT_EINVAL;
    }
    int rc = model_config_check_tp(cfg, diag);
    rc = rc ? rc : model_config_check_cp(cfg, diag);
    rc = rc ? rc : model_config_check_moe(cfg, diag);
    if (rc != 0) return rc;
    int pp = cfg->pp > 1 ? cfg->pp : 1;
    if (cfg->pp < 0 || cfg->pp_rank < 0 || cfg->pp_rank >= pp || pp > cfg->n_layers) {
        bt_diag_set(diag,
                    "pipeline parallelism: stage %d of %d is out of range (pp must be at most "
                    "model.n_layers %d)",
                    cfg->pp_rank, cfg->pp, cfg->n_layers);
        return BT_EINVAL;
    }
    rc = model_config_check_stages(cfg, diag);
    if (rc != 0) return rc;
    if (cfg->vp < 0 || (cfg->vp > 1 && (pp < 2 || (cfg->n_layers % (pp * cfg->vp) != 0 &&
                                                   !model_uneven_stages(cfg))))) {
        bt_diag_set(diag,
                    "parallel.virtual_stages %d: interleaved pipelines need pp > 1 (pp %d) and "
                    "n_layers (%d) divisible by pp x virtual_stages, or parallel.stage_layers",
                    cfg->vp, cfg->pp, cfg->n_layers);
        return BT_EINVAL;
    }
    if (cfg->act_slots < 0 || cfg->head_slots < 0) {
        bt_diag_set(diag, "model: %d activation slots, %d of them with the head's (none negative)",
                    cfg->act_slots, cfg->head_slots);
        return BT_EINVAL;
    }
    if (!(cfg->norm_eps > 0)) {
        bt_diag_set(diag, "model.norm_eps must be positive");
        return BT_EINVAL;
    }
    char msg[256];
    if (rope_config_check(&cfg->rope, cfg->head_dim, msg, (int)sizeof msg)) {
        bt_diag_set(diag, "model.%s (head dimension %d)", msg, cfg->head_dim);
        return BT_EINVAL;
    }
    if (cfg->recompute < MODEL_RECOMPUTE_NONE || cfg->recompute > MODEL_RECOMPUTE_FULL) {
        bt_diag_set(diag, "stage.recompute must be none, selective or full");
        return BT_EINVAL;
    }
    if (cfg->forward_only && (cfg->pp > 1 || cfg->vp > 1)) {
        bt_diag_set(diag, "model: forward-only passes run one pipeline stage, not pp %d vp %d",
                    cfg->pp, cfg->vp);
        return BT_EINVAL;
    }
    return 0;
}
