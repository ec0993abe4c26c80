/* The LLaMA-style decoder: token embedding; L x [RMSNorm -> grouped-query attention
 * with RoPE -> residual -> RMSNorm -> SwiGLU MLP -> residual]; final RMSNorm; untied LM
 * head; cross-entropy averaged over the targets that are not ignored.
 *
 * All arithmetic goes through a backend table (backend.h), so the same model code runs
 * on the CPU and the GPU backends. Memory is allocated once, at model_init: parameters,
 * their gradients and the activations are each one allocation carved by a size table.
 *
 * Conventions (shared with the ops): backward ACCUMULATES (+=) into parameter
 * gradients and WRITES (=) activation gradients; a linear layer's weight is stored
 * (out features, in features) as torch.nn.Linear stores it; RoPE uses Hugging Face's
 * rotate-half pairing (i, i + hd/2); attention scores are scaled by 1/sqrt(hd) (YaRN's
 * attention factor is folded into the cos/sin tables, as Hugging Face does). Tensor
 * names, shapes and orientation are those of Hugging Face's LlamaForCausalLM, so an
 * export is a copy.
 *
 * Parameter memory is laid out tensor after tensor in model_tensor_info's order:
 * embed_tokens, then each layer's block [input_layernorm, q_proj, k_proj, v_proj,
 * o_proj, post_attention_layernorm, gate_proj, up_proj, down_proj], then norm and
 * lm_head. q/k/v of a layer are adjacent and so form one fused (QKV, C) matrix, as do
 * gate/up ((2F, C)): one GEMM each. Gradients use the same offsets.
 *
 * Tensor parallelism (Megatron-LM's layout, model_tp.c): with tp ranks each rank holds a
 * slice of every matrix and the same layout over its slice, so every size below is the
 * rank's own (H -> H/tp, KV -> max(KV/tp, 1), F -> F/tp, V -> V/tp; model_shard).
 *  - Column-parallel (rows of the weight split): q_proj by query head, k_proj and v_proj
 *    by kv head, gate_proj and up_proj by ffn row, embed_tokens and lm_head by vocab row.
 *    Rank r owns query heads [r H/tp, (r+1) H/tp) and, when tp divides KV, kv heads
 *    [r KV/tp, (r+1) KV/tp); when KV divides tp (tp > KV) it owns the one kv head
 *    r KV / tp (integer division), which is replicated on tp/KV consecutive ranks: the
 *    query heads of rank r all map to that kv head under GQA's h / (H/KV).
 *  - Row-parallel (columns split): o_proj by query head, down_proj by ffn column.
 *  - Replicated: the norm weights.
 * Within a fused matrix the rank's q, k, v (gate, up) slices keep their one-process
 * order, so the ops see an ordinary model with fewer heads (a narrower MLP, a smaller
 * vocabulary). model_tensor says where each slice sits in the one-process tensor.
 *
 * Pipeline parallelism (pipeline.h runs the schedule): with pp stages a rank holds the
 * layers of its stage only, split evenly with the remainder to the first stages
 * (model_stage_layers; stages/plan_params.c's plan_pp_stage_layers uses the same rule).
 * Stage 0 also holds embed_tokens, the last stage norm and lm_head; the parameters are
 * laid out in the same order as above over the tensors the stage holds, and every
 * tensor keeps its one-process name and values (model.layers.<global index>...). A stage
 * stores the activations of act_slots micro-batches at once (1F1B keeps at most
 * pp - stage in flight); model_stage_forward and model_stage_backward run the stage on
 * one slot. An interleaved pipeline (vp > 1 model chunks per stage, pipe_schedule.h) holds
 * non-contiguous layers (model_stage_layer), a slot one chunk's activations, and the
 * passes run one chunk. */
#ifndef BATON_MODEL_H
#define BATON_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "moe.h"
#include "recipe.pb-c.h"
#include "rope.h"
#include "util/err.h"

/* Targets below zero are ignored by the loss; -1 is the value the data pipeline uses. */
#define MODEL_IGNORE_INDEX (-1)

typedef enum model_recompute {
    MODEL_RECOMPUTE_NONE = 0,      /* store every activation */
    MODEL_RECOMPUTE_SELECTIVE = 1, /* recompute the attention probabilities in backward */
    MODEL_RECOMPUTE_FULL = 2,      /* store each layer's input; recompute the layer */
} model_recompute;

typedef struct model_config {
    int vocab;      /* V */
    int dim;        /* C */
    int n_layers;   /* L */
    int n_heads;    /* H */
    int n_kv_heads; /* KV, divides H */
    int head_dim;   /* hd = C / H */
    int ffn_dim;    /* F */
    float norm_eps;
    rope_config rope;
    model_recompute recompute;
    backend_prec prec;       /* GEMM input precision */
    int fp8_hybrid;          /* fp8: gradients in E5M2 (else E4M3) */
    int fp8_first_last_bf16; /* fp8: layers 0 and L-1 run their GEMMs in bf16 */
    int tp;      /* tensor-parallel degree; 0 or 1: none. Divides H, F and V; divides KV or
                  * is a multiple of it */
    int tp_rank; /* this rank's place in the tensor-parallel group, [0, tp) */
    int pp;      /* pipeline stages; 0 or 1: none. At most n_layers */
    int pp_rank; /* this rank's stage, [0, pp) */
    int vp;      /* interleaved pipeline: model chunks per stage (virtual_stages); 0 or 1:
                  * none. Divides n_layers / pp unless stage_layers lists the chunks */
    const uint32_t *stage_layers; /* parallel.stage_layers (borrowed from the spec): each
                                   * stage's layers, or interleaved each model chunk's, used
                                   * when there are pp x vp of them (pp > 1); NULL: even */
    size_t n_stage_layers;
    int act_slots;  /* micro-batches (interleaved: chunks of micro-batches) whose activations
                     * are stored at once; 0 or 1: one */
    int head_slots; /* of those, slots that also hold the head's (final norm, logits, loss):
                     * slots [0, head_slots) on the last stage; 0: every slot */
    int grad_in;    /* interleaved: buffers received output gradients wait in (pipe_schedule.h) */
    int cp;         /* context-parallel degree; 0 or 1: none (model_cp.h) */
    int cp_rank;    /* this rank's place in the context-parallel group, [0, cp) */
    int cp_ulysses; /* context parallelism by all-to-all over heads (else ring attention) */
    /* Sequence parallelism (tp > 1; model_sp.h): the residual stream, the norms and their
     * inputs are split by rows over the tp ranks, all-gathered before the column-parallel
     * GEMMs and reduce-scattered after the row-parallel ones. */
    int sp;
    /* Mixture of experts (model_moe.h): moe.n_experts 0 for a dense model. Layer l (of the
     * model) is an MoE layer when l >= moe_first_dense and (l - moe_first_dense) % moe_every
     * is 0. Under expert parallelism (ep > 1) moe.expert0 and moe.n_local are this rank's
     * experts (ep_rank's share). */
    moe_config moe;
    int moe_every, moe_first_dense;
    int ep, ep_rank;
    /* With the tp ranks folded into the experts' parallelism (stages/layout.h's
     * layout_fold_tp_experts) the routed experts' copies are spread over tp x cp x dp,
     * not over tp: expert_fold is set and expert_holder is this rank's place among the
     * ranks holding its experts (their replica index, model_tensor.replica). */
    int expert_fold, expert_holder;
    /* ZeRO-3 (model_zero.h): the parameters and gradients live in the trainer's shards, so
     * model_init allocates neither; a unit's views point into the gather buffers while it
     * is resident. 0 for every other layout. */
    int zero3;
    /* ZeRO-2: the parameters are whole but the gradients live in model_zero.h's two unit
     * buffers (the trainer's shard keeps their sums), so model_init allocates no gradient
     * buffer. 0 for every other layout. */
    int zero2;
    /* params_mem and grads_mem hold a multiple of this many floats, the padding zero
     * (ZeRO-1's collectives run in place: train_dp.h); 0 or 1: no padding. */
    int param_pad;
    /* Keep each GEMM's converted weight from one micro-batch to the next
     * (backend_gemm.wcache; where the backend has one: the CUDA backend under bf16, fp16,
     * fp8): memory for a converted copy of the weights, conversions once per step instead
     * of twice per micro-batch. The trainer calls model_weights_changed before each step
     * and evaluation. */
    int weight_cache;
    /* Send in bf16 what only bf16 products read (the gathers of sequence parallelism, the
     * rows dispatched to the experts): half the bytes, the same results (backend.h:
     * pack_bf16). The trainer sets it (BATON_COMM_BF16=0: every transfer float32). */
    int comm_bf16;
    /* Forward passes only (baton eval): nothing is kept for a backward. One layer's
     * activations serve every layer, the residual stream alternates between two buffers,
     * attention keeps no probabilities (its memory grows with T, not T^2: the rows are
     * formed a block at a time, as under recompute selective, giving the same bits) and
     * backward's activation-gradient buffers are not allocated; model_backward refuses.
     * One pipeline stage only. */
    int forward_only;
} model_config;

/* 1 if layer l (a model layer index) is an MoE layer. */
int model_layer_is_moe(const model_config *cfg, int l);

/* The layers of stage cfg->pp_rank: [*first, *first + *n) of the model, cfg->stage_layers'
 * count for it when given (model_uneven_stages), else the remainder of n_layers / pp going
 * one each to the first stages. Interleaved (vp > 1): *n layers in vp chunks, chunk c being
 * the model's (c pp + pp_rank)-th (Megatron-LM's virtual pipeline), n_layers / (pp vp)
 * contiguous layers each or as cfg->stage_layers lists the pp vp chunks; *first is chunk
 * 0's first layer, model_stage_layer maps each. */
void model_stage_layers(const model_config *cfg, int *first, int *n);
/* Whether cfg->stage_layers sets the layers: pp > 1, pp x vp entries (each stage's, or
 * interleaved each model chunk's, in model order). */
int model_uneven_stages(const model_config *cfg);
/* The model layer index of the stage's i-th layer, i in [0, n). */
int model_stage_layer(const model_config *cfg, int i);
/* Model chunks per stage (cfg.vp, at least 1); the most layers one of the stage's chunks
 * has (what an activation slot holds); chunk c's layers, [*first, *first + *n) of the
 * stage's (stage-local indexes, model_stage_layer's i). */
int model_chunks(const model_config *cfg);
int model_chunk_layers(const model_config *cfg);
void model_chunk_span(const model_config *cfg, int c, int *first, int *n);
/* Offset, in the one-process (tp 1, pp 1, ep 1) parameters, of model layer gl's block
 * (gl = n_layers: the final norm's). */
size_t model_global_layer_offset(const model_config *cfg, int gl);
/* Parameters of stage `stage` in the one-process (tp 1) model, in floats. */
size_t model_stage_global_floats(const model_config *cfg, int stage);

/* One tensor-parallel rank's part of the model (the whole model when tp is 1). */
typedef struct model_shard {
    int tp, rank;
    int heads, head0;       /* query heads [head0, head0 + heads) */
    int kv_heads, kv_head0; /* kv heads [kv_head0, kv_head0 + kv_heads) */
    int kv_replica;         /* 0, or this rank's index among the ranks sharing its kv head */
    int ffn, ffn0;          /* gate/up rows and down_proj columns [ffn0, ffn0 + ffn) */
    int vocab, vocab0;      /* embed_tokens and lm_head rows [vocab0, vocab0 + vocab) */
} model_shard;

/* The shard of cfg->tp_rank (cfg must have passed model_config_check). */
void model_shard_of(const model_config *cfg, model_shard *s);

/* From the recipe's model (dense LLaMA only; MoE is rejected with BT_EUNSUPPORTED).
 * recompute and precision start as none and fp32; see model_config_apply_stage. */
int model_config_from_pb(model_config *cfg, const Baton__Model *pb, bt_diag *diag);
/* Takes recompute and precision from a resolved stage. */
void model_config_apply_stage(model_config *cfg, const Baton__Stage *stage);
int model_config_check(const model_config *cfg, bt_diag *diag);

/* GEMMs of a layer, in the order of model.gemm; the LM head's follows the layers'. */
enum {
    MODEL_GEMM_QKV = 0,
    MODEL_GEMM_O = 1,
    MODEL_GEMM_GATE_UP = 2,
    MODEL_GEMM_DOWN = 3,
    MODEL_GEMMS_PER_LAYER = 4,
};

typedef struct model_sizes {
    size_t param_floats;        /* this rank's parameters (the gradients have as many) */
    size_t global_param_floats; /* the one-process model's parameters (every stage) */
    size_t layer_param_floats;  /* one layer's block */
    size_t act_floats[3];       /* one slot's stored activations, per model_recompute */
    size_t grad_act_floats;     /* backward's activation-gradient buffers */
    size_t scratch_floats;      /* op scratch: attention blocks, rounded GEMM inputs */
} model_sizes;

/* Sizes for batches of at most B sequences of at most T tokens, for cfg's shard. */
int model_sizes_compute(const model_config *cfg, backend *be, int B, int T, model_sizes *s);

/* One layer's parameters (or gradients): views into the one allocation. */
typedef struct model_layer_weights {
    float *attn_norm; /* (C) */
    float *wqkv;      /* (H*hd + 2*KV*hd, C): q_proj (H*hd, C), k_proj, v_proj (KV*hd, C) */
    float *wo;        /* (C, H*hd) */
    float *mlp_norm;  /* (C) */
    float *w13;       /* (2F, C): gate_proj (w1, (F, C)), then up_proj (w3, (F, C)) */
    float *w2;        /* (C, F) */
    /* MoE layers instead of w13 and w2 (NULL): the moe_weights block (router, this rank's
     * experts, shared experts) and, with bias balancing, the selection bias (E), a
     * parameter the optimizer never moves (its gradient is 0) that model_moe_bias_update
     * nudges after each step. */
    float *moe;
    float *moe_bias;
} model_layer_weights;

/* Under pp, L below is the stage's layer count (model.n_layers) and the tensors a stage
 * does not hold are NULL. */
typedef struct model_weights {
    float *embed;                /* (V, C); first stage only */
    model_layer_weights *layers; /* (L) views */
    float *norm;                 /* (C); last stage only */
    float *lm_head;              /* (V, C); last stage only */
} model_weights;

/* One layer's activations; N = B*T rows, QKV = H*hd + 2*KV*hd. Under sequence parallelism
 * (model_sp.h) ln1, ln2, xmid and the rstds hold the rank's R = N/tp rows only. */
typedef struct model_layer_acts {
    float *ln1;      /* (N, C) input_layernorm output */
    float *ln1_rstd; /* (N) */
    float *qkv;      /* (N, QKV) q, k after RoPE; v */
    float *att;      /* (B, H, T, T) softmax probabilities; NULL unless recompute none in
                      * float32 and not forward_only */
    float *lse;      /* (B, H, T) softmax log-sum-exp */
    float *atty;     /* (N, H*hd) attention output, input of o_proj */
    float *xmid;     /* (N, C) residual stream after attention */
    float *ln2;      /* (N, C) post_attention_layernorm output */
    float *ln2_rstd; /* (N) */
    float *h13;      /* (N, 2F) gate and up projections */
    float *hs;       /* (N, F) silu(gate) * up, input of down_proj */
    /* Ulysses context parallelism only (else NULL), over the whole sequence of this rank's
     * cp-th of the heads: q, k, v (B*T*cp rows of (H + 2 KV)/cp heads), the attention
     * output and its log-sum-exp. */
    float *uqkv, *uout, *ulse;
} model_layer_acts;

/* One slot's activations; lnf .. ce_part exist on the last stage only. */
typedef struct model_acts {
    float *resid;            /* (L+1, N, C) each layer's input, then the last output (N/tp
                              * rows under sequence parallelism, as xmid and the rstds);
                              * (2, N, C) under forward_only: layer l reads l % 2 */
    model_layer_acts *layer; /* (L) views, or (1) shared when recompute is full or
                              * forward_only */
    float *lnf;              /* (N, C) final norm output (R rows under sequence parallelism, */
    float *lnf_rstd;         /* (N)  as lnf_rstd) */
    float *logits;           /* (N, V); backward overwrites it with dlogits */
    float *ce_lse;           /* (N) */
    float *losses;           /* (N) per-token loss, 0 where ignored */
    float *ce_part;          /* (tp, N, 3) vocab-parallel loss partials; NULL unless tp > 1 */
} model_acts;

/* Backward's activation gradients (one layer's worth, reused) and op scratch. */
typedef struct model_grad_acts {
    float *dres;    /* (N, C) gradient of the residual stream */
    float *dln;     /* (N, C) gradient of a norm's output */
    float *dx;      /* (N, C) gradient of a norm's input */
    float *dwide;   /* (N, max(QKV, 2F)) dqkv or dh13 */
    float *dnarrow; /* (N, max(H*hd, F)) datty or dhs */
    float *scratch; /* (model_sizes.scratch_floats) */
    float *dnorm;   /* (C) under sequence parallelism: a norm weight's gradient, one pass's */
    float *grad_in; /* (cfg.grad_in, R, C) received output gradients (model_stage_grad_in) */
} model_grad_acts;

typedef struct model {
    model_config cfg;
    model_shard shard;
    comm *tp_group;         /* the tensor-parallel group (size cfg.tp); NULL when tp is 1 */
    comm *cp_group;         /* the context-parallel group (size cfg.cp); NULL when cp is 1 */
    struct model_cp *cpw;   /* context parallelism's buffers (model_cp.h); NULL when cp is 1 */
    struct model_moe *moew; /* MoE layers' caches and load counts (model_moe.h); NULL: dense */
    comm *ep_group;         /* the expert-parallel group; NULL when ep is 1 */
    struct model_zero *zw;  /* ZeRO-2/3's unit buffers (model_zero.h); NULL otherwise */
    /* When not NULL, the backward calls unit_grads_done(unit_grads_ctx, u) as soon as unit
     * u's gradients of the pass are complete (model_n_units' order reversed: the head,
     * the layers from the last, the embedding): the trainer's all-reduce overlapped with
     * the rest of the backward (train_dp.h). */
    void (*unit_grads_done)(void *ctx, int u);
    void *unit_grads_ctx;
    /* When not NULL, model_moe_step_end hands each MoE layer's selection-bias step to
     * moe_bias_step(moe_bias_ctx, l, stats) (ZeRO-3: the bias lives in the trainer's
     * shard) instead of applying it to params.layers[l].moe_bias. */
    void (*moe_bias_step)(void *ctx, int l, const moe_stats *stats);
    void *moe_bias_ctx;
    int layer0, n_layers;        /* this stage's layers [layer0, layer0 + n_layers); interleaved:
                                  * n_layers of them, model_stage_layer's */
    int first_stage, last_stage; /* holds the embedding / the final norm, head and loss */
    int n_chunks, chunk_layers;  /* model_chunks, model_chunk_layers (the most of a chunk) */
    int chunk;                   /* of the pass in progress */
    int chunk_l0, chunk_len;     /* its layers among the stage's (model_chunk_span) */
    int n_slots;                 /* activation slots (cfg.act_slots, at least 1) */
    backend *be;
    int max_B, max_T;
    int B, T; /* of the last forward */
    model_sizes sizes;
    size_t act_bytes;  /* stored activations actually allocated (this recompute mode, every
                        * slot) */
    size_t work_bytes; /* activation gradients and scratch actually allocated */

    float *params_mem, *grads_mem; /* (param_alloc) each; NULL under ZeRO-3 (cfg.zero3), and
                                    * grads_mem under ZeRO-2 (cfg.zero2) */
    size_t param_alloc;            /* param_floats rounded up to cfg.param_pad */
    model_weights params, grads;
    float *acts_mem;
    model_acts acts;       /* the slot in use (a copy of slot_acts[slot]) */
    int slot;              /* which one */
    float bwd_scale;       /* loss_scale of the backward in progress (the MoE aux loss's) */
    model_acts *slot_acts; /* (n_slots) */
    int *slot_n_valid;     /* (n_slots) targets counted by the slot's forward */
    float *work_mem;
    model_grad_acts gacts;
    float *rope_cos, *rope_sin; /* (max_T, hd/2) */
    int32_t *tokens, *targets;  /* the slot in use's device copies, (max_B * max_T) each */
    int32_t *tokens_mem;        /* (n_slots, 2, max_B * max_T): every slot's copies */

    backend_gemm *gemm; /* (4L [+ 1 on the last stage]) per-GEMM precision and fp8 metadata,
                         * then the n_xgemm expert records */
    int n_gemm;
    /* The MoE layers' experts' GEMM records (model_xgemm_info), gemm[n_gemm ..
     * n_gemm + n_xgemm): per MoE layer l from xgemm_first[l] (-1: a dense layer), 2 (El + S)
     * of them, (local routed expert, w13 | w2) then (shared expert, w13 | w2), in the
     * layer's precision as the dense GEMMs'; none under fp32. */
    int n_xgemm;
    int *xgemm_first;
    float *amax_acc;      /* under fp8: (n_gemm + n_xgemm, BACKEND_FP8_SLOTS) backend memory,
                           * each GEMM's running amaxes (backend_gemm.amax_acc); NULL otherwise */
    float *wcache_mem;    /* cfg.weight_cache: every GEMM's weight cache, or NULL */
    size_t wcache_floats; /* its size */
    uint16_t *sp16;       /* cfg.comm_bf16 under sequence parallelism: (max_B max_T, dim) bf16
                           * rows of a gather (model_sp.h), or NULL */

    float *host_losses; /* (max_B * max_T) */
    int has_targets;    /* the last forward computed a loss */
    int n_valid;        /* targets counted by the last forward */
    float loss;         /* mean loss of the last forward */
    int comm_err;       /* first error of a tensor-parallel collective (sticky) */
} model;

/* Allocates everything for batches up to max_B x max_T; 0 or a negative BT_ code. */
int model_init(model *m, const model_config *cfg, backend *be, int max_B, int max_T, bt_diag *diag);
/* The same for one rank of a tensor-parallel group: tp_group's size and rank must be
 * cfg->tp and cfg->tp_rank (tp_group may be NULL when cfg->tp is 1). The group is
 * borrowed: it must outlive the model. */
int model_init_tp(model *m, const model_config *cfg, backend *be, int max_B, int max_T,
                  comm *tp_group, bt_diag *diag);
void model_free(model *m);

/* Expert GEMM record x (gemm[n_gemm + x]): its model layer, whether a routed expert's
 * (*expert its global index) or a shared one's (*expert its index), and which weight
 * (0 w13, 1 w2). */
typedef struct model_xgemm {
    int layer, routed, expert, w2;
} model_xgemm;
void model_xgemm_info(const model *m, int x, model_xgemm *out);

/* GEMM i's weight (OC, C): the products of model.gemm[i]; both 0 for a GEMM that does not
 * run (an MoE layer's MLP products: its experts have their own). */
void model_gemm_shape(const model *m, int i, int *C, int *OC);
/* The weights' values may have changed: every GEMM's cached conversion is dropped
 * (cfg.weight_cache). */
void model_weights_changed(model *m);

/* Rebuilds the RoPE tables for rows at other positions: n_seg segments, segment i being
 * rows[i] rows at positions pos0[i], pos0[i] + 1, ...; the rows add up to max_T. (Context
 * parallelism: a rank's rows are two chunks of the sequence, model_cp.h.) */
int model_upload_rope(model *m, int n_seg, const int *pos0, const int *rows);

/* Deterministic initialization from seed: every matrix element is normal(0, 0.02),
 * o_proj and down_proj scaled by 1/sqrt(2L), norm weights 1. Element i of tensor
 * `name` depends only on (seed, name, i): key = splitmix64(seed ^ fnv1a64(name)); the
 * pair (2j, 2j+1) is Box-Muller of u1 = (splitmix64(key + 2j) >> 11 + 1) 2^-53 and
 * u2 = (splitmix64(key + 2j + 1) >> 11) 2^-53: z0 = r cos(2 pi u2), z1 = r sin(2 pi u2),
 * r = sqrt(-2 ln u1). Any shard of a tensor can therefore be generated alone: under
 * tensor parallelism every rank generates exactly its slice of the one-process tensor. */
int model_init_weights(model *m, uint64_t seed);
/* Under ZeRO-3 model_init_weights fills the tensors of the resident unit only (the others
 * have no memory): the trainer places each unit in turn and keeps its own share. */

/* tokens, targets: host arrays (B, T); targets may be NULL (no loss, no backward).
 * Computes the logits (in m->acts.logits until backward overwrites them) and, with
 * targets, the mean loss over the targets >= 0 into m->loss and *loss (when loss is
 * not NULL); 0 when every target is ignored. Returns 0, BT_ERANGE for a batch larger
 * than model_init's or a token/target outside the vocabulary, or the backend's error. */
int model_forward(model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                  float *loss);
/* One pipeline stage's forward on activation slot `slot`: on the first stage from
 * tokens, on the others from model_stage_input(m, slot) (the previous stage's output,
 * which the caller has put there); leaves the output in model_stage_output(m, slot) or,
 * on the last stage, computes the logits and, with targets, the loss as model_forward
 * does. Every stage checks tokens and targets; only the first reads tokens and only the
 * last targets (NULL elsewhere is fine). model_forward is this on slot 0. */
int model_stage_forward(model *m, int chunk, int slot, const int32_t *tokens,
                        const int32_t *targets, int B, int T, float *loss);
/* Backward of the slot's forward: on the last stage from the loss (scaled by
 * loss_scale), elsewhere from the gradient of the stage's output, which the caller has
 * put in model_stage_grad(m). On return model_stage_grad(m) holds the gradient of the
 * stage's input (on the first stage it has gone into the embedding). model_backward is
 * this on slot 0. */
int model_stage_backward(model *m, int chunk, int slot, float loss_scale);
/* Interleaved (cfg.vp > 1): chunk c in [0, vp) runs the stage's c-th chunk of layers, the
 * embedding only in chunk 0 of the first stage, the head and loss only in the last chunk of
 * the last stage; a slot holds one chunk's activations. Otherwise chunk is 0.
 * (B*T, C) activations at the stage's boundary: the input and output of slot's layers,
 * and the gradient buffer of the backward. */
float *model_stage_input(model *m, int slot);
float *model_stage_output(model *m, int slot);
float *model_stage_grad(model *m);
/* Interleaved: received output gradient buffer i (< cfg.grad_in), and its move into
 * model_stage_grad(m) before the backward that takes it. */
float *model_stage_grad_in(model *m, int i);
void model_stage_take_grad(model *m, int i);

/* Backward of the last forward: parameter gradients += d(loss * loss_scale)/dparam.
 * Use loss_scale 1/K for K accumulated micro-batches. Gradients are reduced across
 * data-parallel ranks only after the last micro-batch (the parallel engine's contract).
 * Under tensor parallelism forward and backward are collective over the group (every
 * rank calls them with the same batch); a failed collective returns its code. */
int model_backward(model *m, float loss_scale);
void model_zero_grad(model *m);

/* After the last micro-batch of a step, under tensor parallelism with tp > KV: sums the
 * k_proj and v_proj gradients over the ranks that share a kv head (kv_group: those
 * ranks, NULL when none share), so that every copy gets the full gradient and the
 * copies stay identical. Nothing else needs a tensor-parallel gradient reduction: see
 * model_tp.c. */
int model_tp_reduce_grads(model *m, comm *kv_group);

/* model_gather_tensor's buffers under tensor parallelism, sized for the largest tensor:
 * dev on the device, host in host memory, model_gather_bufs_floats(m) floats each (0, and
 * none allocated, without tensor parallelism). Allocating them before a gather, rather than
 * per tensor, lets the caller vote on them over every rank that takes part (a rank that
 * failed to allocate would skip collectives the others wait in). alloc: 0 or BT_ENOMEM
 * (both NULL then). */
typedef struct model_gather_bufs {
    float *dev, *host;
} model_gather_bufs;
size_t model_gather_bufs_floats(const model *m);
int model_gather_bufs_alloc(model *m, model_gather_bufs *b);
void model_gather_bufs_free(model *m, model_gather_bufs *b);

/* The one-process tensor i assembled from the group's slices: a collective over the
 * tensor-parallel group, through b (model_gather_bufs_alloc); out (host, global count
 * floats) is written on every rank. */
int model_gather_tensor(model *m, int i, float *out, const model_gather_bufs *b, bt_diag *diag);

/* Parameters, one tensor at a time, in memory order (HF names, e.g.
 * "model.layers.0.self_attn.q_proj.weight"): the stage's tensors under pp, with their
 * one-process names. */
typedef struct model_tensor {
    char name[64];
    float *data;   /* device pointer into the parameters; under ZeRO-3 into the gather
                    * buffer while the tensor's unit is resident, else NULL */
    float *grad;   /* the gradient at the same offset */
    size_t offset; /* floats from the start of the parameters */
    size_t count;
    int ndim;
    int shape[2];
    int no_decay; /* norm weights: excluded from weight decay */
    /* Under tensor parallelism this rank's slice of the one-process tensor: rows
     * [row0, row0 + shape[0]) and columns [col0, col0 + shape[1]) of global_shape.
     * replica 0 marks the copy that counts (gradient norm, export); a replicated norm
     * weight or kv head has replica > 0 on every other rank that holds it. */
    int global_shape[2];
    size_t global_count;
    int row0, col0;
    int replica;
    /* A routed expert's tensor: held by the expert-parallel rank that owns the expert, the
     * same on every expert-data-parallel copy. */
    int expert;
    /* A tensor of an MoE layer's block (router, experts, shared experts, bias): whole on
     * every tp rank; under sequence parallelism its gradient is summed over tp once a step
     * (model_moe.h; the routed experts' under zero 0/1 over their edp group, drawn from
     * tp x cp x dp, by train_dp.h). */
    int moe;
} model_tensor;

/* Units: what ZeRO-2/3 shard and gather as one piece. Unit 0 is the embedding on the
 * first stage, then one per layer of the stage, then the final norm with the head (adjacent
 * in memory) on the last stage: first_stage + n_layers + last_stage units, in memory
 * order, covering the stage's parameters. */
int model_n_units(const model *m);
/* Unit u's parameters are [*offset, *offset + *n) of the stage's flat layout. */
void model_unit_range(const model *m, int u, size_t *offset, size_t *n);
/* Points unit u's parameter and gradient views at params and grads (unit-relative layout,
 * as in the full allocation); NULL leaves the views NULL. ZeRO-3 only. */
void model_point_unit(model *m, int u, float *params, float *grads);

int model_n_tensors(const model *m);
int model_tensor_info(const model *m, int i, model_tensor *t);
/* Tensor i's name, shapes, slice and offset for the rank cfg->tp_rank, without pointers:
 * what model_tensor_info gives on that rank. */
int model_tensor_slice(const model_config *cfg, int i, model_tensor *t);
/* Where tensor i of the stage cfg->pp_rank lies in that stage's one-process (tp 1, ep 1)
 * parameters (model_stage_global_floats floats): its float offset there, on the expert-
 * parallel rank ep_rank (which holds the routed experts [ep_rank x n_local, + n_local);
 * cfg->ep_rank for this rank's own tensors). */
size_t model_tensor_global_offset(const model_config *cfg, int ep_rank, int i);

#endif
