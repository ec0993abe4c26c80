#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_select.h"
#include "layout.h"
#include "model_cp.h"
#include "model_moe.h"
#include "plan.h"
#include "plan_precision.h"
#include "util/clock.h"

/* Model FLOPs of one step: 6 N T for the matrices (embedding lookup excluded) plus
 * causal attention, 6 L C T per token (half of the 12 L C T of full attention). */
static double train_flops(const model *m, uint64_t tokens, uint32_t T) {
    const model_config *c = &m->cfg;
    double n = (double)m->sizes.global_param_floats - (double)c->vocab * c->dim;
    return 6.0 * n * (double)tokens + 6.0 * c->n_layers * (double)c->dim * T * (double)tokens;
}

static int train_check_layout(const Baton__StageSpec *spec, const train_groups *g, bt_diag *diag) {
    const Baton__Stage *s = spec->stage;
    const Baton__Parallel *p = s->parallel;
    uint32_t dp = g->dp ? (uint32_t)comm_size(g->dp) : 1;
    uint32_t tp = g->tp ? (uint32_t)comm_size(g->tp) : 1;
    uint32_t pp = g->pp ? (uint32_t)comm_size(g->pp) : 1;
    uint32_t cp = g->cp ? (uint32_t)comm_size(g->cp) : 1;
    uint32_t ep = g->ep ? (uint32_t)comm_size(g->ep) : 1;
    int fold = train_folds_experts(spec);
    /* the holders of an expert's copies: edp, drawn from tp x cp x dp under the fold */
    uint32_t holders = (fold ? p->tp : 1) * p->dp * p->cp / (p->ep ? p->ep : 1);
    if (p->ep != ep || (ep > 1 && (g->edp == NULL) != (holders == 1))) {
        bt_diag_set(diag, "stage \"%s\": ep %u needs an expert-parallel group of %u ranks (got %u)",
                    s->name, p->ep, p->ep, ep);
        return BT_EINVAL;
    }
    if (fold && (g->xdp ? (uint32_t)comm_size(g->xdp) : 1) != holders) {
        bt_diag_set(diag,
                    "stage \"%s\": the routed experts need their group of %u holders (edp over "
                    "tp x cp x dp)",
                    s->name, holders);
        return BT_EINVAL;
    }
    if (p->dp != dp || p->tp != tp || p->pp != pp || p->cp != cp ||
        (cp > 1 && (g->dpcp == NULL || (uint32_t)comm_size(g->dpcp) != dp * cp))) {
        uint32_t n = p->tp * p->pp * p->cp * p->dp;
        bt_diag_set(diag,
                    "stage \"%s\": layout tp%u pp%u cp%u dp%u ep%u is not supported by this "
                    "worker with %u tensor-, %u pipeline-, %u context- and %u data-parallel "
                    "rank(s): it needs %u ranks (launch it with -n %u, or pass --single-process)",
                    s->name, p->tp, p->pp, p->cp, p->dp, p->ep, tp, pp, cp, dp, n, n);
        return BT_EINVAL;
    }
    if (cp > 1 && s->seq_len % (2 * cp) != 0) {
        bt_diag_set(diag, "stage \"%s\": seq_len %llu is not a multiple of 2 x cp = %u", s->name,
                    (unsigned long long)s->seq_len, 2 * cp);
        return BT_EINVAL;
    }
    if (s->global_batch % (s->micro_batch * dp) != 0 || s->seq_len > INT32_MAX) {
        bt_diag_set(
            diag, "stage \"%s\": global_batch %llu is not a multiple of micro_batch %llu x dp %u",
            s->name, (unsigned long long)s->global_batch, (unsigned long long)s->micro_batch, dp);
        return BT_EINVAL;
    }
    return 0;
}

int train_folds_experts(const Baton__StageSpec *spec) {
    return plan_parallel_folds_experts(spec->stage->parallel,
                                       spec->model ? spec->model->moe : NULL);
}

static int train_segments(trainer *t) {
    int n = model_n_tensors(&t->m);
    t->segs = calloc((size_t)n, sizeof *t->segs);
    if (t->segs == NULL) return BT_ENOMEM;
    for (int i = 0; i < n; i++) {
        model_tensor mt;
        model_tensor_info(&t->m, i, &mt);
        t->segs[i] = (optim_segment){.offset = mt.offset, .n = mt.count, .decay = !mt.no_decay};
    }
    t->n_segs = (size_t)n;
    return 0;
}

/* Expert parallelism, or the tp ranks folded into the experts' parallelism (fold): the
 * routed experts' segments go to train_dp (train_dp_set_ep), reduced over their holders
 * (xdp under the fold, else edp; NULL: one). */
static int train_expert_segments(trainer *t, comm *ep, comm *edp, comm *xdp, int fold,
                                 bt_diag *diag) {
    if (ep == NULL && !fold) return 0;
    optim_segment *e = calloc(t->n_segs ? t->n_segs : 1, sizeof *e);
    if (e == NULL) return BT_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < t->n_segs; i++) {
        model_tensor mt;
        model_tensor_info(&t->m, (int)i, &mt);
        if (mt.expert) e[k++] = t->segs[i];
    }
    int rc = train_dp_set_ep(&t->dp, ep, fold ? xdp : edp, fold, e, k, t->segs, t->n_segs, diag);
    /* the norm's expert part, whole on every rank of an ep group, counted on tp rank 0 */
    t->dp.expert_norm_skip = t->tp.group != NULL && comm_rank(t->tp.group) != 0;
    if (rc == 0 && fold) model_moe_fold_tp(&t->m);
    free(e);
    return rc;
}

/* Under tp the gradient norm adds over the tp group, each tensor counted by the rank that
 * holds its replica 0 (the others hold bitwise copies of a norm weight or kv head); under
 * pp it adds over the pipeline group too (the stages hold disjoint tensors). */
static int train_norm_segments(trainer *t, bt_diag *diag) {
    if (t->tp.group == NULL && t->pp.group == NULL) return 0;
    optim_segment *mine = calloc(t->n_segs, sizeof *mine);
    if (mine == NULL) return BT_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < t->n_segs; i++) {
        model_tensor mt;
        model_tensor_info(&t->m, (int)i, &mt);
        if (mt.replica == 0) mine[k++] = t->segs[i];
    }
    comm *groups[2] = {t->tp.group, t->pp.group};
    int rc = train_dp_set_norm(&t->dp, groups, 2, mine, k, diag);
    rc = rc ? rc : train_zero_set_norm(&t->zero, mine, k);
    free(mine);
    return rc;
}

/* Every GEMM record: the dense ones, then the experts' (model.h). */
static int train_n_gemm(const trainer *t) {
    return t->m.n_gemm + t->m.n_xgemm;
}

void train_fp8_reset(trainer *t) {
    if (t->fp8 == NULL) return;
    const Baton__Precision *p = t->spec->stage->precision;
    size_t n = (size_t)train_n_gemm(t), len = p->amax_history ? p->amax_history : 1;
    for (size_t g = 0; g < n; g++)
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++) {
            prec_fp8_format fmt =
                k == BACKEND_FP8_DY && t->m.gemm[g].dy_e5m2 ? PREC_E5M2 : PREC_E4M3;
            float *h = t->fp8_history + (g * BACKEND_FP8_SLOTS + (size_t)k) * len;
            prec_fp8_meta_init(&t->fp8[g].meta[k], h, (uint32_t)len, fmt, p->margin);
        }
    for (size_t g = 0; g < n; g++)
        t->fp8[g].fresh = 1;
}

static int train_fp8_init(trainer *t) {
    const Baton__Precision *p = t->spec->stage->precision;
    if (p->type != BATON__PRECISION__TYPE__FP8) return 0;
    size_t n = (size_t)train_n_gemm(t), len = p->amax_history ? p->amax_history : 1;
    t->fp8 = calloc(n, sizeof *t->fp8);
    t->fp8_history = calloc(n * BACKEND_FP8_SLOTS * len, sizeof(float));
    if (t->fp8 == NULL || t->fp8_history == NULL) return BT_ENOMEM;
    train_fp8_reset(t);
    for (size_t g = (size_t)t->m.n_gemm; g < n; g++) {
        model_xgemm x;
        model_xgemm_info(&t->m, (int)g - t->m.n_gemm, &x);
        t->fp8[g].routed = x.routed;
    }
    return 0;
}

static int train_loader_open(trainer *t, bt_diag *diag) {
    loader_source src[16];
    size_t n = loader_sources_from_data(t->spec->data, src, 16);
    if (n == 0) {
        bt_diag_set(diag, "stage \"%s\": no training data (data.train or data.mix)",
                    t->spec->stage->name);
        return BT_EINVAL;
    }
    loader_config lc = {.seq_len = t->T, .seed = t->spec->seed, .vocab_size = t->m.cfg.vocab};
    return loader_open(&t->ld, src, n, &lc, diag);
}

/* The compute backend of cluster.device (backend_select.h). */
static int train_backend_open(trainer *t, const train_groups *g, bt_diag *diag) {
    const Baton__Cluster *c = t->spec->cluster;
    int cuda = c != NULL && c->device == BATON__CLUSTER__DEVICE__CUDA;
    int rc = backend_open(&t->be, cuda, g->local_rank, &t->be_opened, diag);
    /* Collectives on the backend's memory run on its stream (groups split later, such as
     * the tp kv group, inherit it). */
    comm *groups[] = {g->tp, g->dp, g->pp, g->cp, g->dpcp, g->ep, g->edp, g->xdp};
    for (size_t i = 0; rc == 0 && t->be.stream && i < sizeof groups / sizeof *groups; i++)
        if ((t->on_stream[i] = groups[i]) != NULL) comm_set_stream(groups[i], t->be.stream);
    return rc;
}

static int train_model_init(trainer *t, const train_groups *g, bt_diag *diag) {
    comm *tp_group = g->tp, *pp_group = g->pp, *cp_group = g->cp;
    model_config cfg;
    int rc = model_config_from_pb(&cfg, t->spec->model, diag);
    if (rc != 0) return rc;
    model_config_apply_stage(&cfg, t->spec->stage);
    cfg.forward_only = t->forward_only;
    cfg.tp = tp_group ? comm_size(tp_group) : 1;
    cfg.tp_rank = tp_group ? comm_rank(tp_group) : 0;
    cfg.pp = pp_group ? comm_size(pp_group) : 1;
    cfg.pp_rank = pp_group ? comm_rank(pp_group) : 0;
    cfg.vp = cfg.pp > 1 ? (int)t->spec->stage->parallel->virtual_stages : 1;
    cfg.cp = cp_group ? comm_size(cp_group) : 1;
    cfg.cp_rank = cp_group ? comm_rank(cp_group) : 0;
    cfg.cp_ulysses = t->spec->stage->parallel->cp_comm == BATON__PARALLEL__CP_COMM__ULYSSES;
    cfg.ep = g->ep ? comm_size(g->ep) : 1;
    cfg.ep_rank = g->ep ? comm_rank(g->ep) : 0;
    cfg.expert_fold = train_folds_experts(t->spec);
    cfg.expert_holder = g->xdp ? comm_rank(g->xdp) : 0;
    /* the gradients' group: the dp x cp block under context parallelism (train_init) */
    comm *dp_group = cfg.cp > 1 ? g->dpcp : g->dp;
    int dp_ranks = dp_group ? comm_size(dp_group) : 1, zero = (int)t->spec->stage->parallel->zero;
    cfg.zero3 = zero == 3 && dp_ranks > 1; /* as train_zero_init decides: cp2 x dp1 shards too */
    cfg.zero2 = zero == 2 && dp_ranks > 1;
    if (zero == 1) cfg.param_pad = dp_ranks; /* ZeRO-1 in place (train_dp.h) */
    /* ZeRO-3 keeps the weights sharded */
    cfg.weight_cache = !cfg.zero3 && backend_env_switch("BATON_WEIGHT_CACHE", 1);
    cfg.comm_bf16 = backend_env_switch("BATON_COMM_BF16", 1);
    if (cfg.ep > 1 && cfg.moe.n_experts % cfg.ep == 0)
        cfg.moe.n_local = cfg.moe.n_experts / cfg.ep,
        cfg.moe.expert0 = cfg.ep_rank * cfg.moe.n_local;
    /* sequence parallelism: the residual stream's rows split over tp (model_sp.h) */
    cfg.sp = cfg.tp > 1 && t->spec->stage->parallel->sequence_parallel;
    size_t rows = (size_t)t->B * t->Tl / (size_t)(cfg.sp ? cfg.tp : 1);
    if (rows * (size_t)(cfg.sp ? cfg.tp : 1) != (size_t)t->B * t->Tl) {
        bt_diag_set(diag,
                    "stage \"%s\": sequence parallelism splits micro_batch x seq_len/cp = %u rows "
                    "over tp %d, which does not divide them (set sequence_parallel: false)",
                    t->spec->stage->name, t->B * t->Tl, cfg.tp);
        return BT_EINVAL;
    }
    rc = train_pp_init(&t->pp, pp_group, rows * (size_t)cfg.dim, cfg.vp, (int)t->accum, diag);
    if (rc != 0) return rc; /* recipe_validate refuses such stages first */
    /* the activations the schedule keeps at once (pipeline.h, pipe_schedule.h) */
    cfg.act_slots = pipeline_slots(cfg.pp, cfg.pp_rank, (int)t->accum);
    if (t->pp.vp > 1)
        cfg.act_slots = t->pp.sched.slots, cfg.head_slots = t->pp.sched.head_slots,
        cfg.grad_in = t->pp.sched.grad_bufs;
    rc = train_backend_open(t, g, diag);
    rc = rc ? rc : model_init_tp(&t->m, &cfg, &t->be, (int)t->B, (int)t->Tl, tp_group, diag);
    rc = rc ? rc : model_cp_init(&t->m, cp_group, diag);
    rc = rc ? rc : model_moe_init(&t->m, g->ep, diag);
    rc = rc ? rc : train_tp_init(&t->tp, tp_group, &t->m.cfg, diag);
    /* ZeRO-3: later, unit by unit into the shards (train_zero_init_weights). A stage that
     * starts from a checkpoint loads every weight (train_ckpt_load fails on a missing one;
     * a failed load ends the worker): the random values, which cost a restart seconds on
     * a large model, would only be overwritten. */
    const char *init = t->spec->init_checkpoint;
    if (rc == 0 && !cfg.zero3 && (init == NULL || init[0] == '\0'))
        rc = model_init_weights(&t->m, t->spec->seed);
    return rc;
}

static int train_init_as(trainer *t, const Baton__StageSpec *spec, const train_groups *groups,
                         int forward_only, bt_diag *diag) {
    memset(t, 0, sizeof *t);
    t->spec = spec;
    t->forward_only = forward_only;
    train_groups none = {0}, g = groups ? *groups : none;
    int rc = train_check_layout(spec, &g, diag);
    if (rc != 0) return rc;
    const Baton__Stage *s = spec->stage;
    uint32_t dp = g.dp ? (uint32_t)comm_size(g.dp) : 1, cp = g.cp ? (uint32_t)comm_size(g.cp) : 1;
    comm *dp_group = cp > 1 ? g.dpcp : g.dp; /* gradients: over the dp x cp block */
    t->dp_rank = g.dp ? comm_rank(g.dp) : 0, t->dp_size = (int)dp;
    t->B = (uint32_t)s->micro_batch, t->T = (uint32_t)s->seq_len, t->Tl = t->T / cp;
    t->accum = (uint32_t)(s->global_batch / (s->micro_batch * dp));
    t->total_steps = s->steps, t->first_sample = spec->start_sample;
    t->step = t->step0 = spec->start_step;
    optim_hparams_from_pb(&t->hp, s->optimizer);
    train_scaler_init(&t->scaler, s->precision);
    t->edp_rank = g.edp ? comm_rank(g.edp) : 0;
    int fold = train_folds_experts(spec);
    t->x_holders = fold ? g.xdp : g.ep ? g.edp : dp_group, t->x_over_tp = !fold;
    rc = train_model_init(t, &g, diag);
    rc = rc ? rc : train_segments(t);
    int zero = (int)s->parallel->zero;
    rc = rc ? rc
            : train_dp_init(&t->dp, &t->be, dp_group, zero >= 2 ? 0 : zero, t->m.sizes.param_floats,
                            t->m.param_alloc, t->segs, t->n_segs, diag);
    rc =
        rc ? rc : train_zero_init(&t->zero, zero, dp_group, g.edp, &t->m, t->segs, t->n_segs, diag);
    if (rc == 0 && t->zero.level == 3) rc = train_zero_init_weights(&t->zero, &t->m, spec->seed);
    rc = rc ? rc : train_zero_moe_bias(&t->zero, &t->m);
    rc = rc ? rc : train_expert_segments(t, g.ep, g.edp, g.xdp, train_folds_experts(spec), diag);
    rc = rc ? rc : train_norm_segments(t, diag);
    rc = rc ? rc : train_dp_overlap_init(&t->dpo, &t->dp, &t->m, zero, diag);
    int pp_slots =
        t->pp.vp > 1 ? t->pp.sched.slots : pipeline_slots(t->pp.stages, t->pp.stage, (int)t->accum);
    rc = rc ? rc : pipeline_set_queue(&t->pp.pipe, &t->be, pp_slots, diag);
    rc = rc ? rc
            : optim_adamw_init_on(&t->opt, &t->be,
                                  t->zero.level ? t->zero.n : train_dp_optim_floats(&t->dp));
    rc = rc ? rc : train_fp8_init(t);
    rc = rc ? rc
            : train_spike_init(&t->spike, &t->be, s->restart ? s->restart->spike_zscore : 0,
                               t->zero.level == 3 ? t->zero.n : t->m.sizes.param_floats, t->opt.n,
                               spec);
    t->tokens = calloc((size_t)t->B * t->T, sizeof(int32_t));
    t->targets = calloc((size_t)t->B * t->T, sizeof(int32_t));
    if (rc == 0 && (t->tokens == NULL || t->targets == NULL)) rc = BT_ENOMEM;
    rc = rc ? rc : train_loader_open(t, diag);
    if (rc != 0) {
        bt_diag_set(diag, "training setup failed: %s", bt_strerror(rc));
        train_free(t);
        return rc;
    }
    /* This rank's share: the model's FLOPs of a step spread over tp x pp x cp x dp ranks. */
    double ranks = (double)s->parallel->tp * s->parallel->pp * s->parallel->cp * s->parallel->dp;
    t->flops_per_step = train_flops(&t->m, s->global_batch * s->seq_len, t->T) / ranks;
    return 0;
}

int train_init(trainer *t, const Baton__StageSpec *spec, const train_groups *groups,
               bt_diag *diag) {
    return train_init_as(t, spec, groups, 0, diag);
}

int train_init_forward(trainer *t, const Baton__StageSpec *spec, bt_diag *diag) {
    return train_init_as(t, spec, NULL, 1, diag);
}

void train_abort_comms(trainer *t) {
    if (t->tp.kv != NULL) comm_abort(t->tp.kv);
    if (t->zero.ep_dense != NULL) comm_abort(t->zero.ep_dense);
}

void train_free(trainer *t) {
    loader_close(&t->ld);
    optim_adamw_free(&t->opt);
    train_dp_overlap_free(&t->dpo);
    train_pp_free(&t->pp);
    train_dp_free(&t->dp);
    train_zero_free(&t->zero);
    if (t->m.be != NULL) model_free(&t->m);
    train_tp_free(&t->tp);
    free(t->segs);
    free(t->tokens);
    free(t->targets);
    free(t->fp8);
    free(t->fp8_history);
    free(t->fp8_saved);
    free(t->fp8_history_saved);
    train_spike_free(&t->spike);
    for (size_t i = 0; i < sizeof t->on_stream / sizeof *t->on_stream; i++)
        if (t->on_stream[i] != NULL) comm_set_stream(t->on_stream[i], NULL); /* outlive it */
    backend_close(&t->be, t->be_opened); /* last: the frees above may use it */
    memset(t, 0, sizeof *t);
}

void train_gemms_begin(trainer *t) {
    model_weights_changed(&t->m);
    if (t->fp8 == NULL) return;
    for (int g = 0; g < train_n_gemm(t); g++)
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
            t->m.gemm[g].scale[k] = t->fp8[g].meta[k].scale;
    if (t->m.amax_acc)
        t->be.zero(&t->be, t->m.amax_acc, (size_t)train_n_gemm(t) * BACKEND_FP8_SLOTS);
}

/* The step's amaxes: the maximum over every call of each GEMM (forward and backward of
 * every micro-batch), read from the backend in one copy. */
static int train_fp8_read(trainer *t, bt_diag *diag) {
    size_t n = (size_t)train_n_gemm(t) * BACKEND_FP8_SLOTS;
    float *host = malloc(n * sizeof *host);
    if (host == NULL) {
        bt_diag_set(diag, "step %llu: out of memory reading the fp8 amaxes",
                    (unsigned long long)t->step + 1);
        return BT_ENOMEM;
    }
    t->be.to_host(&t->be, host, t->m.amax_acc, n * sizeof *host);
    for (int g = 0; g < train_n_gemm(t); g++)
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
            t->fp8[g].amax_step[k] = host[(size_t)g * BACKEND_FP8_SLOTS + k];
    free(host);
    return 0;
}

/* The step's amaxes of the routed experts' records (routed 1) or of the others, max-reduced
 * in one buffer: over tp (a sharded GEMM's scales are the whole tensor's; an expert's tp
 * peers ran it on other rows), then over the ranks that hold the same weights (the dp x cp
 * block, or the experts' holders), so that they all keep the same scales. */
static int train_fp8_reduce(trainer *t, int routed, float *buf, bt_diag *diag) {
    size_t n = 0;
    for (int g = 0; g < train_n_gemm(t); g++)
        if (t->fp8[g].routed == routed)
            for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
                buf[n++] = t->fp8[g].amax_step[k];
    int rc = !routed || t->x_over_tp ? train_tp_max(&t->tp, buf, n, diag) : 0;
    if (rc == 0 && !routed) rc = train_dp_max(&t->dp, buf, n, diag);
    if (rc == 0 && routed && n > 0 && t->x_holders != NULL &&
        comm_allreduce(t->x_holders, buf, buf, n, COMM_F32, COMM_MAX, NULL) != 0) {
        bt_diag_set(diag, "fp8 amax all-reduce over the experts' holders (%s): %s",
                    comm_name(t->x_holders), comm_error(t->x_holders));
        rc = BT_EIO;
    }
    n = 0;
    for (int g = 0; rc == 0 && g < train_n_gemm(t); g++)
        if (t->fp8[g].routed == routed)
            for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
                t->fp8[g].amax_step[k] = buf[n++];
    return rc;
}

/* The step's amaxes, reduced over the ranks that hold each GEMM's weights
 * (train_fp8_reduce), go into the histories. */
static int train_fp8_end(trainer *t, bt_diag *diag) {
    if (t->fp8 == NULL) return 0;
    if (t->m.amax_acc != NULL) {
        int rc = train_fp8_read(t, diag);
        if (rc != 0) return rc;
    }
    float *buf = malloc((size_t)train_n_gemm(t) * BACKEND_FP8_SLOTS * sizeof *buf);
    if (buf == NULL) {
        bt_diag_set(diag, "out of memory reducing the fp8 amaxes");
        return BT_ENOMEM;
    }
    int rc = train_fp8_reduce(t, 0, buf, diag);
    rc = rc ? rc : train_fp8_reduce(t, 1, buf, diag);
    free(buf);
    for (int g = 0; rc == 0 && g < train_n_gemm(t); g++)
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
            prec_fp8_meta_update(&t->fp8[g].meta[k], t->fp8[g].amax_step[k]);
    return rc;
}

/* Under context parallelism: keeps this rank's rows of the first nb sequences (the two
 * zigzag chunks, model_cp.h), packed at the front of tokens and targets. */
static void train_cp_rows(trainer *t, uint32_t nb) {
    model_cp *c = t->m.cpw;
    if (c == NULL) return;
    size_t half = t->Tl / 2;
    for (uint32_t b = 0; b < nb; b++)
        for (int h = 0; h < 2; h++) {
            size_t from = (size_t)b * t->T +
                          (size_t)model_cp_position(c->size, c->rank, (int)t->Tl, (int)(h * half));
            size_t to = (size_t)b * t->Tl + h * half;
            memmove(t->tokens + to, t->tokens + from, half * sizeof *t->tokens);
            memmove(t->targets + to, t->targets + from, half * sizeof *t->targets);
        }
}

/* Fills the micro-batch j of this step from the loader (global sample indices; a logical
 * index in one of the spec's skip_samples windows reads the sample past it). */
static int train_fetch(trainer *t, uint32_t j, bt_diag *diag) {
    const Baton__Stage *s = t->spec->stage;
    for (uint32_t b = 0; b < t->B; b++) {
        uint64_t g = t->first_sample +
                     loader_global_index(t->step - t->step0, (uint32_t)s->global_batch,
                                         (uint32_t)t->dp_size, (uint32_t)t->dp_rank, j * t->B + b);
        g = train_spike_map_sample(t->spec, g);
        size_t off = (size_t)b * t->T;
        int lrc = loader_get(&t->ld, g, t->tokens + off, t->targets + off);
        if (lrc != 0) {
            bt_diag_set(diag, "sample %llu: %s", (unsigned long long)g, loader_error(&t->ld));
            /* a token outside the vocabulary is in the data: no retry reads it otherwise */
            return lrc == BT_ERANGE ? BT_ERECIPE : BT_EIO;
        }
    }
    train_cp_rows(t, t->B);
    return 0;
}

/* The failed collective behind m.comm_err: the first of the model's groups with an error
 * (ZeRO-2/3's data-parallel, expert-data-parallel and dense all-reduce groups,
 * model_zero.h; tp; cp; ep). */
static const char *train_comm_why(const trainer *t) {
    comm *g[6] = {t->zero.group, t->zero.edp,   t->zero.ep_dense,
                  t->tp.group,   t->m.cp_group, t->m.ep_group};
    for (int i = 0; i < 6; i++)
        if (g[i] != NULL && comm_error(g[i])[0] != '\0') return comm_error(g[i]);
    return bt_strerror(t->m.comm_err);
}

/* The schedule's view of the stage (pipeline.h); ctx is a train_pp_ctx. Micro-batch mb's
 * data is fetched on every stage (the first reads its tokens, the last its targets). */
typedef struct train_pp_ctx {
    trainer *t;
    bt_diag *diag;
} train_pp_ctx;

/* The loss gradient's factor: the mean over the step's global batch, every replica's
 * micro-batches (dp x accum), so that the dp reductions are plain sums and each
 * micro-batch's gradients are the one-process run's to the bit (fp8 quantizes them: a
 * factor applied after the sum would leave them dp times larger, their scales and
 * subnormals other than one process's). Times the fp16 loss scale and the spike test's. */
static float train_backward_scale(const trainer *t) {
    return train_spike_fault_scale(&t->spike, t->step + 1) * train_scaler_loss_scale(&t->scaler) /
           ((float)t->accum * (float)t->dp_size);
}

static int train_pp_forward(void *ctx, int mb, int chunk, int slot) {
    trainer *t = ((train_pp_ctx *)ctx)->t;
    float l = 0;
    int rc = train_fetch(t, (uint32_t)mb, ((train_pp_ctx *)ctx)->diag);
    rc = rc ? rc
            : model_stage_forward(&t->m, chunk, slot, t->tokens, t->targets, (int)t->B, (int)t->Tl,
                                  &l);
    if (rc == 0 && t->m.last_stage && chunk == t->m.n_chunks - 1) t->mb_loss += l / t->accum;
    return rc;
}

/* A chunk's last micro-batch finishes its gradients (the dp overlap reduces its units). */
static int train_pp_backward(void *ctx, int mb, int chunk, int slot) {
    trainer *t = ((train_pp_ctx *)ctx)->t;
    train_dp_overlap_arm(&t->dpo, mb + 1 == (int)t->accum);
    bt_diag *diag = ((train_pp_ctx *)ctx)->diag;
    int rc = model_stage_backward(&t->m, chunk, slot, train_backward_scale(t));
    return rc ? rc : train_zero_after_backward(&t->zero, &t->m, diag);
}

static float *train_pp_input(void *ctx, int slot) {
    return model_stage_input(&((train_pp_ctx *)ctx)->t->m, slot);
}

static float *train_pp_output(void *ctx, int slot) {
    return model_stage_output(&((train_pp_ctx *)ctx)->t->m, slot);
}

static float *train_pp_grad(void *ctx) {
    return model_stage_grad(&((train_pp_ctx *)ctx)->t->m);
}

static float *train_pp_grad_in(void *ctx, int i) {
    return model_stage_grad_in(&((train_pp_ctx *)ctx)->t->m, i);
}

static void train_pp_take_grad(void *ctx, int i) {
    model_stage_take_grad(&((train_pp_ctx *)ctx)->t->m, i);
}

/* The step's micro-batches through the pipeline; *loss is the step's mean loss on every
 * stage (summed over the pipeline group from the last stage's). */
static int train_micro_batches_pp(trainer *t, double *loss, bt_diag *diag) {
    train_pp_ctx ctx = {.t = t, .diag = diag};
    pipeline_stage st = {.ctx = &ctx,
                         .forward = train_pp_forward,
                         .backward = train_pp_backward,
                         .input = train_pp_input,
                         .output = train_pp_output,
                         .grad = train_pp_grad,
                         .grad_in = train_pp_grad_in,
                         .take_grad = train_pp_take_grad};
    t->mb_loss = 0;
    int rc = t->pp.vp > 1 ? pipeline_vp_run(&t->pp.pipe, &t->pp.sched, &st, diag)
                          : pipeline_run_1f1b(&t->pp.pipe, (int)t->accum, &st, diag);
    if (rc != 0) {
        if (!diag->msg[0] || t->m.comm_err)
            bt_diag_set(diag, "step %llu: %s", (unsigned long long)t->step + 1,
                        t->m.comm_err ? train_comm_why(t) : bt_strerror(rc));
        return rc;
    }
    *loss = t->mb_loss;
    return train_pp_sum(&t->pp, loss, diag);
}

static int train_micro_batches(trainer *t, double *loss, bt_diag *diag) {
    if (t->pp.group != NULL) return train_micro_batches_pp(t, loss, diag);
    *loss = 0;
    for (uint32_t j = 0; j < t->accum; j++) {
        float l = 0;
        int rc = train_fetch(t, j, diag);
        rc = rc ? rc : model_forward(&t->m, t->tokens, t->targets, (int)t->B, (int)t->Tl, &l);
        train_dp_overlap_arm(&t->dpo, j + 1 == t->accum);
        rc = rc ? rc : model_backward(&t->m, train_backward_scale(t));
        rc = rc ? rc : train_zero_after_backward(&t->zero, &t->m, diag);
        if (rc != 0) {
            const char *why = t->m.comm_err ? train_comm_why(t) : bt_strerror(rc);
            bt_diag_set(diag, "step %llu micro-batch %u: %s", (unsigned long long)t->step + 1, j,
                        why);
            return rc;
        }
        *loss += l / t->accum;
    }
    return 0;
}

/* The delayed-scaling state before an armed step's amaxes go in, for the spike guard to
 * put back (allocated on first use; nothing to do without fp8). */
static int train_fp8_snapshot(trainer *t) {
    if (t->fp8 == NULL) return 0;
    size_t n = (size_t)train_n_gemm(t), len = t->fp8[0].meta[0].len;
    size_t hist = n * BACKEND_FP8_SLOTS * len;
    if (t->fp8_saved == NULL) {
        t->fp8_saved = malloc(n * sizeof *t->fp8_saved);
        t->fp8_history_saved = malloc(hist * sizeof(float));
        if (t->fp8_saved == NULL || t->fp8_history_saved == NULL) return BT_ENOMEM;
    }
    memcpy(t->fp8_saved, t->fp8, n * sizeof *t->fp8);
    memcpy(t->fp8_history_saved, t->fp8_history, hist * sizeof(float));
    return 0;
}

static void train_fp8_unsnapshot(trainer *t) {
    if (t->fp8 == NULL || t->fp8_saved == NULL) return;
    size_t n = (size_t)train_n_gemm(t), len = t->fp8[0].meta[0].len;
    memcpy(t->fp8, t->fp8_saved, n * sizeof *t->fp8); /* the history pointers are the same */
    memcpy(t->fp8_history, t->fp8_history_saved, n * BACKEND_FP8_SLOTS * len * sizeof(float));
}

/* The parameters the optimizer moves: the whole buffer, or ZeRO-3's shard. */
static float *train_params(trainer *t) {
    return t->zero.level == 3 ? t->zero.params : t->m.params_mem;
}

/* Every gradient this rank accumulates into, zeroed. */
static void train_zero_grads(trainer *t) {
    if (t->zero.level)
        train_zero_begin_step(&t->zero, &t->m);
    else
        model_zero_grad(&t->m);
}

void train_state_bytes(const trainer *t, double *params, double *grads, double *optim) {
    const train_zero *z = &t->zero;
    double P = (double)t->m.sizes.param_floats, n = (double)z->n, cap = (double)z->cap;
    *optim = 8.0 * (double)t->opt.n;
    *params = *grads = 4.0 * P;
    if (z->level == 2) *grads = 4.0 * (n + 2 * cap);           /* the shard and two unit buffers */
    if (z->level == 3) *params = *grads = 4.0 * (n + 2 * cap); /* two buffers each */
}

/* After the update: a loss spike undoes it (train_spike.h); *spike and *z say so. Every
 * rank decides on the same reduced loss and norm. */
static void train_spike_judge(trainer *t, int armed, double loss, double norm, train_metrics *out) {
    train_spike *sp = &t->spike;
    if (sp->z <= 0 || !isfinite(norm) || !isfinite(loss)) return;
    if (!armed || !train_spike_check(sp, loss, norm, &out->spike_z)) {
        train_spike_push(sp, loss, norm);
        return;
    }
    train_spike_restore(sp, train_params(t), &t->opt);
    train_fp8_unsnapshot(t); /* the spiked amaxes leave no trace in the scales either */
    out->spike = 1;
    const Baton__Stage *s = t->spec->stage;
    uint64_t first = t->first_sample + (t->step - t->step0) * s->global_batch;
    uint32_t run = train_spike_note(sp, t->step + 1, first, first + s->global_batch);
    out->rollback = run >= TRAIN_SPIKE_ROLLBACK_AFTER;
}

/* fp16: the gradients divided by the loss scale, and every rank's verdict on Inf/NaN. */
static int train_scaler_check(trainer *t, int *overflow, bt_diag *diag) {
    /* Under cp, t->dp.group is the dp x cp block: the cp ranks vote too. */
    comm *groups[3] = {t->tp.group, t->pp.group, t->dp.group};
    if (t->zero.level) /* the reduced gradients are the shard's */
        return train_scaler_unscale(&t->scaler, &t->be, t->zero.grads, t->zero.n, groups, 3,
                                    overflow, diag);
    return train_scaler_unscale(&t->scaler, &t->be, t->m.grads_mem, t->m.sizes.param_floats, groups,
                                3, overflow, diag);
}

/* What this rank has sent on each counted group so far (comm_bytes_sent). */
static void train_comm_sent(const trainer *t, uint64_t out[TRAIN_COMM_GROUPS]) {
    comm *g[TRAIN_COMM_GROUPS] = {t->tp.group, t->pp.group, t->dp.group, t->m.cp_group,
                                  t->m.ep_group};
    for (int i = 0; i < TRAIN_COMM_GROUPS; i++)
        out[i] = g[i] ? comm_bytes_sent(g[i]) : 0;
    if (t->dp.edp != NULL) out[TRAIN_COMM_DP] += comm_bytes_sent(t->dp.edp); /* experts */
    if (t->tp.kv != NULL) out[TRAIN_COMM_TP] += comm_bytes_sent(t->tp.kv);   /* kv heads */
    /* ZeRO-2/3 under ep: the dense all-reduces' copy of the ep group */
    if (t->zero.ep_dense != NULL) out[TRAIN_COMM_EP] += comm_bytes_sent(t->zero.ep_dense);
}

static int train_step_counted(trainer *t, train_metrics *out, bt_diag *diag);

/* Under pp each stage has its own MoE layers: their figures combined over the pipeline
 * (the largest max/mean, dropped pairs and aux losses added, loads averaged over every
 * MoE layer of the model). */
static int train_moe_pp(trainer *t, model_moe_step *s) {
    comm *pp = t->pp.group;
    int E = t->m.cfg.moe.n_experts;
    if (pp == NULL || E == 0) return 0;
    double v[MOE_MAX_EXPERTS + 3];
    for (int e = 0; e < E; e++)
        v[e] = (double)s->expert_load[e] * s->layers;
    v[E] = s->layers, v[E + 1] = s->dropped, v[E + 2] = s->aux;
    if (comm_allreduce(pp, v, v, (size_t)E + 3, COMM_F64, COMM_SUM, NULL) != 0 ||
        comm_allreduce(pp, &s->load_max_mean, &s->load_max_mean, 1, COMM_F64, COMM_MAX, NULL) != 0)
        return BT_EIO;
    s->n_experts = E, s->layers = (int)v[E], s->dropped = v[E + 1], s->aux = v[E + 2];
    for (int e = 0; e < E; e++)
        s->expert_load[e] = s->layers > 0 ? (float)(v[e] / s->layers) : 0.0f;
    return 0;
}

/* Achieved over peak: the recipe's cluster.gpu peak for the stage's precision, as the
 * plan takes it (plan_peak_flops: fp8 its own or twice bf16's, fp32 its own or half
 * bf16's); 0 when the recipe gives none. */
static double train_mfu(const trainer *t, double gflops_per_s) {
    const Baton__Cluster *c = t->spec->cluster;
    const Baton__Precision *p = t->spec->stage->precision;
    double peak = plan_peak_flops(c ? c->gpu : NULL, p ? p->type : BATON__PRECISION__TYPE__FP32);
    return peak > 0 ? gflops_per_s * 1e9 / peak : 0;
}

int train_step(trainer *t, train_metrics *out, bt_diag *diag) {
    uint64_t before[TRAIN_COMM_GROUPS], after[TRAIN_COMM_GROUPS];
    train_comm_sent(t, before);
    int rc = train_step_counted(t, out, diag);
    train_comm_sent(t, after);
    for (int i = 0; i < TRAIN_COMM_GROUPS; i++)
        t->comm_bytes[i] += after[i] - before[i];
    t->comm_steps++;
    return rc;
}

static int train_step_counted(trainer *t, train_metrics *out, bt_diag *diag) {
    double t0 = bt_clock_now(), loss = 0;
    *out = (train_metrics){0};
    train_zero_grads(t);
    train_gemms_begin(t);
    /* The schedule advances with the updates applied, not with the steps: a skipped step
     * (fp16 overflow, non-finite gradients, a loss spike) leaves it where it was, as
     * Megatron's and DeepSpeed's schedulers do. */
    double lr = optim_lr_at(t->step - t->skipped_steps + 1, t->total_steps, &t->hp), norm = 0;
    t->dp.grads_reduced = 0;
    int rc = train_micro_batches(t, &loss, diag);
    /* Unhooked and waited for even after a failure: nothing may still write the gradients. */
    int orc = train_dp_overlap_finish(&t->dpo, rc != 0, diag);
    rc = rc ? rc : orc;
    int armed = train_spike_armed(&t->spike);
    if (rc == 0 && armed) rc = train_fp8_snapshot(t);
    rc = rc ? rc : train_fp8_end(t, diag);
    /* tp > n_kv_heads: the replicated k/v slices' gradients summed over their holders;
     * under sequence parallelism the MoE layers' over tp (zero 0/1: but the routed experts',
     * summed over their edp group by the update, train_dp.h) */
    rc = rc              ? rc
         : t->zero.level ? train_zero_reduce_tp(&t->zero, &t->m, t->tp.kv, diag)
                         : train_tp_reduce_grads(&t->tp, &t->m, diag);
    int overflow = 0; /* fp16: Inf/NaN gradients on some rank: no update (train_scaler.h) */
    rc = rc ? rc : train_scaler_check(t, &overflow, diag);
    /* The dp mean of the loss before the update: the spike guard judges the step on it. */
    rc = rc ? rc : train_dp_mean(&t->dp, &loss, diag);
    if (rc == 0 && armed) train_spike_save(&t->spike, train_params(t), &t->opt);
    if (rc == 0 && overflow)
        norm = NAN;
    else
        rc = rc ? rc
             : t->zero.level
                 ? train_zero_update(&t->zero, &t->dp, &t->m, &t->opt, &t->hp, lr, &norm, diag)
                 : train_dp_update(&t->dp, t->m.params_mem, t->m.grads_mem, t->segs, t->n_segs,
                                   &t->opt, &t->hp, lr, &norm, diag);
    if (rc != 0) return rc;
    int exhausted = train_scaler_update(&t->scaler, overflow);
    out->scaled = t->scaler.on;
    out->overflow = overflow, out->loss_scale = t->scaler.on ? t->scaler.scale : 0;
    train_spike_judge(t, armed, loss, norm, out);
    if (model_moe_step_end(&t->m, t->dp.group, &out->moe) != 0 || train_moe_pp(t, &out->moe) != 0) {
        bt_diag_set(diag, "step %llu: MoE load all-reduce: %s", (unsigned long long)t->step + 1,
                    comm_error(t->dp.group));
        return BT_EIO;
    }
    t->step++;
    /* A non-finite norm: the optimizer left the weights alone (optim.h). */
    int skipped = !isfinite(norm) || out->spike;
    t->skipped_steps += (uint64_t)skipped;
    out->n_skipped = t->skipped_steps;
    if (t->be.sync(&t->be) != 0) { /* an asynchronous backend's first failure */
        bt_diag_set(diag, "step %llu: the %s backend failed: %s", (unsigned long long)t->step,
                    t->be.name, t->be.error ? t->be.error(&t->be) : "(no message)");
        return BT_EIO;
    }
    double dt = bt_clock_now() - t0; /* after the sync: the step's queued work included */
    const Baton__Stage *s = t->spec->stage;
    out->step = t->step, out->loss = loss, out->lr = lr, out->grad_norm = norm;
    out->skipped = skipped, out->step_s = dt;
    out->tokens_per_s = (double)(s->global_batch * s->seq_len) / dt;
    out->gflops_per_s = t->flops_per_step / dt * 1e-9;
    out->mfu = train_mfu(t, out->gflops_per_s);
    out->memory_bytes = 8 * (uint64_t)t->m.sizes.param_floats + 8 * (uint64_t)t->opt.n +
                        (uint64_t)t->m.act_bytes + (uint64_t)t->m.work_bytes +
                        4 * (uint64_t)t->m.wcache_floats + (uint64_t)model_moe_cache_bytes(&t->m);
    if (!isfinite(loss)) {
        bt_diag_set(diag, "step %llu: loss is %g", (unsigned long long)t->step, loss);
        t->nonfinite_step = t->step, t->nonfinite_floor = 0;
        return BT_ERANGE;
    }
    if (exhausted) {
        bt_diag_set(diag,
                    "step %llu: the fp16 gradients hold Inf/NaN even at the loss scale's "
                    "floor (precision.loss_scale.min, %g), after %llu overflowed steps in "
                    "this stage",
                    (unsigned long long)t->step, (double)t->scaler.min_scale,
                    (unsigned long long)t->scaler.overflow_steps);
        t->nonfinite_step = t->step, t->nonfinite_floor = 1;
        return BT_ERANGE;
    }
    return 0;
}

/* Whether any rank of the stage's world holds a record with a fresh state (the max over
 * tp, pp and the dp x cp block, which together span it): calibration is collective, so a
 * rank that could not snapshot the loaded states (ok 0) stops every rank, BT_ENOMEM. */
static int train_fp8_any_fresh(trainer *t, int ok, int *any, bt_diag *diag) {
    float f = ok ? 0 : 2;
    for (int g = 0; ok && g < train_n_gemm(t); g++)
        if (t->fp8[g].fresh) f = 1;
    comm *groups[3] = {t->tp.group, t->pp.group, t->dp.group};
    for (int i = 0; i < 3; i++)
        if (groups[i] && comm_allreduce(groups[i], &f, &f, 1, COMM_F32, COMM_MAX, NULL) != 0) {
            bt_diag_set(diag, "fp8 calibration vote over %s: %s", comm_name(groups[i]),
                        comm_error(groups[i]));
            return BT_EIO;
        }
    if (f > 1) {
        bt_diag_set(diag, "fp8 calibration: out of memory for a copy of the scaling states");
        return BT_ENOMEM;
    }
    *any = f != 0;
    return 0;
}

/* After calibrating: the loaded (not fresh) records' states put back as they were. */
static void train_fp8_keep_loaded(trainer *t) {
    size_t len = t->fp8[0].meta[0].len, per = BACKEND_FP8_SLOTS * len;
    for (int g = 0; g < train_n_gemm(t); g++) {
        if (!t->fp8[g].fresh) {
            t->fp8[g] = t->fp8_saved[g]; /* the history pointers are the same */
            memcpy(t->fp8_history + (size_t)g * per, t->fp8_history_saved + (size_t)g * per,
                   per * sizeof(float));
        }
        t->fp8[g].fresh = 0;
    }
}

int train_fp8_calibrate(trainer *t, uint32_t *n_micro, float *lo, float *hi, bt_diag *diag) {
    *n_micro = 0, *lo = *hi = 1.0f;
    int any = 0;
    if (t->fp8 == NULL || t->step >= t->total_steps) return 0;
    /* a copy of the states, for those loaded beside fresh ones to stay as saved */
    int rc = train_fp8_any_fresh(t, train_fp8_snapshot(t) == 0, &any, diag);
    if (rc != 0 || !any) return rc;
    double loss = 0;
    train_zero_grads(t);
    train_gemms_begin(t);
    rc = rc ? rc : train_micro_batches(t, &loss, diag);
    /* the reductions the last backward started (train_dp_overlap.h): completed, and their
     * sums thrown away with the gradients; the MoE layers' counts too (not a step's) */
    int orc = train_dp_overlap_finish(&t->dpo, rc != 0, diag);
    rc = rc ? rc : orc;
    t->dp.grads_reduced = 0;
    model_moe_step_discard(&t->m);
    rc = rc ? rc : train_fp8_end(t, diag);
    train_zero_grads(t);
    if (rc != 0) return rc;
    train_fp8_keep_loaded(t);
    *n_micro = t->accum, *lo = INFINITY, *hi = 0; /* over the GEMMs that run in fp8 */
    for (int g = 0; g < train_n_gemm(t); g++)
        for (int k = 0; k < BACKEND_FP8_SLOTS && t->m.gemm[g].prec == BACKEND_PREC_FP8; k++) {
            float sc = t->fp8[g].meta[k].scale;
            *lo = fminf(*lo, sc), *hi = fmaxf(*hi, sc);
        }
    if (*lo > *hi) *lo = *hi = 0; /* none of this rank's GEMMs runs in fp8 */
    return 0;
}

int train_eval(trainer *t, const char *prefix, uint32_t *n_io, double *loss, bt_diag *diag) {
    train_gemms_begin(t); /* the scales the last step's amaxes gave, not the ones it ran with */
    loader ev;
    loader_source src = {.prefix = prefix, .weight = 1};
    loader_config lc = {
        .seq_len = t->T, .seed = t->spec->seed, .vocab_size = t->m.cfg.vocab, .allow_empty = 1};
    *loss = 0;
    int rc = loader_open(&ev, &src, 1, &lc, diag);
    if (rc != 0) return rc;
    uint32_t n = *n_io;
    if (ev.src[0].n_windows < n) n = (uint32_t)ev.src[0].n_windows;
    *n_io = n;
    double sum = 0;
    uint32_t done = 0;
    int read_rc = 0; /* the loader's failure, which it words (a token outside the vocabulary) */
    for (uint32_t i = 0; rc == 0 && i < n; i += t->B) {
        uint32_t b = 0;
        for (; b < t->B && i + b < n && rc == 0; b++)
            rc = read_rc = loader_get_window(&ev, i + b, t->tokens + (size_t)b * t->T,
                                             t->targets + (size_t)b * t->T);
        train_cp_rows(t, b);
        float l = 0;
        if (rc == 0 && t->pp.group != NULL)
            rc = train_pp_eval_batch(&t->pp, &t->m, t->tokens, t->targets, (int)b, (int)t->Tl, &l,
                                     diag);
        else
            rc = rc ? rc : model_forward(&t->m, t->tokens, t->targets, (int)b, (int)t->Tl, &l);
        sum += (double)l * b, done += b;
    }
    if (read_rc != 0)
        bt_diag_set(diag, "eval on %s: %s", prefix, loader_error(&ev));
    else if (rc != 0)
        bt_diag_set(diag, "eval on %s: %s", prefix, bt_strerror(rc));
    loader_close(&ev);
    model_moe_step_discard(&t->m); /* its routing counts are not the next step's */
    *loss = done ? sum / done : 0;
    return rc;
}
