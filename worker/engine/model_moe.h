/* The model's MoE layers (model.h: model_layer_is_moe): each runs moe.h's layer in place
 * of the dense SwiGLU MLP, on the post-attention norm's output, through the backend's ops
 * (moe_dev.h: the same code on the CPU and the CUDA engine; moe.c is its reference). Under
 * tensor parallelism the layer's weights are whole on every tp rank (Megatron's expert
 * tensor parallelism of 1; the router and shared experts replicated like the norm
 * weights, the routed experts too unless the tp ranks fold into expert parallelism and
 * hold different ones, stages/layout.h); with sequence parallelism
 * each tp rank runs the layer on its own rows only (no all-gather before it, no
 * reduce-scatter after it, a tp-th of the work), so its weight gradients are that rank's
 * share: summed over tp once a step (model_moe_reduce_tp; under zero 0/1 the routed
 * experts' with their data-parallel reduction instead, over their edp group drawn from
 * tp x cp x dp, the tp ranks folded into the experts' parallelism: train_dp.h), and the
 * loads over tp too (model_moe_step_end). Without sequence parallelism every tp rank runs it on
 * every row. Under expert parallelism the routed experts are split over the ep group. The aux loss
 * is part of the training objective (its gradient scaled like the loss's), not of the reported
 * loss. The selection bias of aux-loss-free balancing is a parameter tensor with no gradient,
 * nudged after each optimizer step from the step's loads (model_moe_step_end). */
#ifndef BATON_MODEL_MOE_H
#define BATON_MODEL_MOE_H

#include "model.h"

typedef struct model_moe {
    struct moe_dev_cache *caches; /* (slots, sets): sets = the most MoE layers of a chunk
                                   * (the stage when not interleaved; 0 and no caches nor
                                   * scratch on a stage of dense layers), slots the model's
                                   * activation slots; both 1 under full recompute */
    int sets, slots;
    int *index; /* (stage layers) each layer's place among its chunk's MoE layers; -1 dense */
    struct moe_dev_scratch *scratch; /* shared by the caches */
    struct moe_dev_kept *kept;       /* (stage layers) each MoE layer's experts' kept weight
                                      * conversions (cfg.weight_cache); NULL: none */
    float *y;       /* (max_B max_T, C) output when recomputing (nothing to keep) */
    double *routed; /* (stage layers, E) pairs routed per expert since the step began */
    double dropped; /* pairs dropped since then */
    double aux;     /* aux losses since then, summed over layers */
    double aux_n;   /* the MoE layer forwards they came from (layers x micro-batches) */
    int tp_folded;  /* the routed experts' gradients are summed over tp by the data-parallel
                     * update (model_moe_fold_tp), not by model_moe_reduce_tp */
} model_moe;

/* Sets up the MoE layers of a model made by model_init_tp (nothing to do for a dense
 * model): caches for every slot and, with cfg.ep > 1, expert parallelism over ep_group
 * (size cfg.ep, rank cfg.ep_rank; borrowed). */
int model_moe_init(model *m, comm *ep_group, bt_diag *diag);
void model_moe_free(model *m);
/* The weights may have changed: the experts' kept conversions dropped (model_weights_changed
 * calls it). */
void model_moe_weights_changed(model *m);

/* Layer l's MoE block from x (N, C) into y (N, C), N this rank's rows (model_sp_rows);
 * y NULL when recomputing. */
void model_moe_forward(model *m, int l, const float *x, float *y);
/* Its backward: dx (N, C) written from dy, weight gradients accumulated; the aux loss's
 * gradient is scaled by loss_scale. */
void model_moe_backward(model *m, int l, const float *dy, float *dx, float loss_scale);

/* A step's MoE figures (over the whole data-parallel block). */
typedef struct model_moe_step {
    int n_experts;        /* 0: a dense model */
    int layers;           /* MoE layers the figures cover */
    double load_max_mean; /* the largest max/mean expert load over the layers */
    double dropped;       /* (token, expert) pairs the capacity dropped */
    double aux; /* aux losses summed over the layers, the mean over the step's micro-batches
                 * (and ranks): comparable across micro_batch and dp */
    float expert_load[MOE_MAX_EXPERTS]; /* each expert's load / the mean, averaged over layers */
} model_moe_step;

/* The bytes of the MoE layers' caches (activations kept from a forward to its backward,
 * moe_dev.h; as allocated now: they grow under expert parallelism); 0 for a dense model. */
size_t model_moe_cache_bytes(const model *m);

/* Under expert parallelism: the rows the experts here have room for (N K at first, grown
 * when a forward received more: moe_dev.h) and the most a forward received; 0 and 0
 * without. */
void model_moe_rows(const model *m, size_t *room, size_t *most);

/* Under sequence parallelism (model_sp_on) the gradients of every MoE layer's block are
 * each tp rank's share: grads (the rank's gradient memory, model.h's layout) summed over
 * the tp group; after model_moe_fold_tp all but the routed experts' (the data-parallel
 * update reduces theirs over their edp group, train_dp.h). Nothing to do otherwise. 0 or the
 * collective's error. */
int model_moe_reduce_tp(model *m);
void model_moe_fold_tp(model *m);

/* The step's load figures, summed over tp under sequence parallelism and over group (every rank of
 * the data-parallel block, so that every replica takes the same bias step), then the bias update of
 * every MoE layer. Resets the counts, and frees the row buffers the step's forwards outgrew
 * (moe_dev_scratch_release). Collective over group (NULL: this rank alone). */
int model_moe_step_end(model *m, comm *group, model_moe_step *out);
/* The counts gathered since the last step end thrown away (passes that were not a step's:
 * the fp8 calibration), and the scratch released as model_moe_step_end does. */
void model_moe_step_discard(model *m);

#endif
