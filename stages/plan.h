/* `baton plan`: what a resolved stage costs before any hardware is touched: exact
 * parameter counts, the rank layout, memory per GPU for the heaviest rank,
 * communication per step by group, FLOPs per step and an estimated step time. */
#ifndef BATON_PLAN_H
#define BATON_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "layout.h"
#include "stage_spec.pb-c.h"
#include "util/err.h"

typedef struct plan_params {
    uint64_t embedding;   /* vocab * dim */
    uint64_t attn_layer;  /* q, k, v, o with GQA */
    uint64_t mlp_layer;   /* dense SwiGLU, 3 * dim * ffn */
    uint64_t moe_layer;   /* router + experts + shared experts (0 when dense) */
    uint64_t norms_layer; /* two RMSNorm weight vectors */
    uint64_t final_norm;
    uint64_t head; /* untied LM head, dim * vocab */
    uint32_t n_dense_layers;
    uint32_t n_moe_layers;
    uint64_t total;
    uint64_t active; /* parameters a token touches (top-k experts) */
    /* One MoE layer's parts (all 0 when dense): moe_layer = router + experts + shared. */
    uint64_t moe_router;  /* dim * n_experts, replicated across tp */
    uint64_t moe_experts; /* n_experts * 3 * dim * expert_ffn, split by ep (whole on tp) */
    uint64_t moe_shared;  /* n_shared * 3 * dim * expert_ffn, whole on every tp rank */
    /* balance: bias: the per-expert selection bias (n_experts, else 0), the block's last
     * floats on every rank, held with a gradient and optimizer state as the block's other
     * parameters (worker/engine/model.c), though not trained: not in moe_layer or total */
    uint64_t moe_bias;
    uint32_t n_experts, top_k;
    uint32_t moe_shared_n, moe_ffn;      /* shared experts; an expert's ffn width */
    uint32_t moe_first_dense, moe_every; /* layer pattern, see plan_layer_is_moe */
    int moe_counts; /* a capacity or an aux loss: a micro-batch split over cp or (sequence
                     * parallel) tp ranks exchanges its chunks' expert counts */
    uint32_t n_layers;
    /* parallel.stage_layers (borrowed from the spec): each pipeline stage's layers, or
     * interleaved each model chunk's, used when there are pp x v of them (pp > 1); NULL:
     * the even split */
    const uint32_t *stage_layers;
    size_t n_stage_layers;
} plan_params;

typedef struct plan_memory {
    /* bytes, heaviest rank; total = params + grads + optimizer + activations + backward */
    double params, grads, optimizer, activations, total;
    double capacity;         /* device memory, bytes */
    uint64_t capacity_bytes; /* the same as given (cluster.gpu.memory), exact: --json */
    int fits;                /* 1 fits, 0 does not, -1 capacity not given */
    uint32_t heaviest_pp_stage;
    uint64_t params_on_rank;   /* parameters held by the heaviest rank */
    double act_per_microbatch; /* bytes for one micro-batch on that rank */
    uint32_t microbatches_in_flight;
    uint32_t head_slots;   /* last stage: micro-batches whose logits are kept at once */
    uint32_t grad_buffers; /* interleaved: received output gradients waiting at once */
    /* The pieces behind the figures above, for the report's formulas. */
    uint32_t layers_on_stage, moe_layers_on_stage;
    uint32_t layers_per_slot;       /* an activation slot's: the stage's longest model chunk */
    uint64_t dense_params_on_rank;  /* split by tp (norms, routers replicated) */
    uint64_t expert_params_on_rank; /* routed experts, split by ep and tp */
    double weight_bytes, grad_bytes, optim_bytes; /* per parameter */
    double gemm_copies;           /* bytes of the GEMMs' converted weight copies (CUDA: model.h) */
    uint32_t optim_shards_dense;  /* ZeRO-1 divisor of dense optimizer state: dp*cp or 1 */
    uint32_t optim_shards_expert; /* ... of expert optimizer state: edp (over tp x cp x dp folded)
                                     or 1 */
    /* Activations as worker/engine/model.c carves them (all float32): a slot per
     * micro-batch (interleaved: model chunk) in flight holds layers_per_slot layers'
     * act_per_layer and act_slot_extra, a head slot on the last stage act_logits too. */
    double act_layer_set;  /* one layer's set (norms, q/k/v, attention, MLP), one micro-batch */
    double act_resid;      /* one layer's input in the residual stream, one micro-batch */
    double act_per_layer;  /* kept per layer and slot: act_resid, and the set unless full */
    double act_slot_extra; /* per slot: the chunk's output (act_resid), under full
                            * recomputation the set of the layer being recomputed */
    double act_per_slot;   /* layers_per_slot x act_per_layer + act_slot_extra */
    double act_logits;     /* last stage, a head slot: final norm, fp32 logits, losses */
    /* Backward buffers and op scratch (model.c carve_work), apart from the activations as
     * the worker's "memory:" line has them. */
    double backward;     /* all of it: the gradient buffers, act_grad_in, act_scratch, RoPE */
    double act_grad_in;  /* interleaved: received output gradients' buffers */
    double act_scratch;  /* the largest op's scratch (the backend's: CPU or CUDA) */
    double act_moe;      /* the MoE layers' caches (worker/engine/moe_dev.h), once */
    uint32_t moe_caches; /* how many: MoE layers of a chunk x slots, or 1 */
    /* ZeRO-2/3 (zero_level >= 2): per-unit shards (worker/engine/train_zero.h); the units are
     * the embedding, each layer and the final norm with the head, each padded to a multiple
     * of dp*cp. */
    uint32_t zero_level; /* the level in effect: zero, or 0/1 when dp*cp is 1 */
    uint64_t zero_shard; /* parameters in the rank's shard: the sum of ceil(unit / (dp*cp)) */
    uint64_t zero_unit;  /* the largest unit, padded: one gather / reduce-scatter buffer */
} plan_memory;

enum plan_comm_group {
    PLAN_COMM_TP = 0,
    PLAN_COMM_PP,
    PLAN_COMM_DP,
    PLAN_COMM_CP,
    PLAN_COMM_EP,
    PLAN_COMM_NGROUPS
};

typedef struct plan_comm {
    double bytes[PLAN_COMM_NGROUPS];   /* bytes each rank sends per optimizer step */
    double seconds[PLAN_COMM_NGROUPS]; /* at the link bandwidth the group runs on */
    int crosses_nodes[PLAN_COMM_NGROUPS];
    uint32_t group_size[PLAN_COMM_NGROUPS];       /* ranks in the group (dp: dp*cp) */
    uint32_t busiest_pp_stage[PLAN_COMM_NGROUPS]; /* whose rank the figures are */
} plan_comm;

/* What the estimates read from a StageSpec, with the proto defaults (or the fallback
 * named in the comment) filled in wherever a submessage or field is absent. */
typedef struct plan_shape {
    uint32_t dim, n_layers, n_heads, n_kv_heads, head_dim, vocab; /* n_kv 0 -> n_heads */
    uint32_t ffn; /* model.ffn_dim: every layer's activations carve its width, MoE too */
    uint64_t seq_len, micro_batch, global_batch; /* global_batch 0 -> micro_batch * dp */
    uint32_t tp, cp, dp, pp, ep, virtual_stages, zero;
    int sequence_parallel, cp_ulysses;
    int sp_wanted; /* parallel.sequence_parallel as the recipe has it (also at tp 1) */
    Baton__Stage__Recompute recompute;
    Baton__Precision__Type precision;
    int fp8_first_last_bf16; /* fp8: the first and last layers' GEMMs in bf16 */
    int cuda;                /* cluster.device cuda: the CUDA engine */
    uint32_t nodes, gpus_per_node;
    double capacity;           /* device memory, bytes; 0 = not given */
    uint64_t capacity_bytes;   /* the same, exact (a double rounds above 2^53) */
    double intra_bw, inter_bw; /* bytes/s per GPU; 0 = not given */
    double peak_flops;         /* per GPU at the stage's precision, FLOP/s; 0 = not given */
    double mfu;                /* 0 or absent -> 0.4 */
    double fp8_speedup;        /* fp8: its peak over bf16's (2 where either is not given); else 1 */
} plan_shape;

#define PLAN_MAX_WARNINGS 16
/* Memory the plan does not count (the CUDA context, NCCL's and cuBLAS's buffers, the
 * allocator's fragmentation) takes several GB of a GPU: a plan above this share of
 * cluster.gpu.memory may not fit in practice. */
#define PLAN_MEMORY_HEADROOM 0.9

/* For a stage that does not fit: settings that do on the same devices (plan_alts.c). */
typedef struct plan_alt {
    uint32_t tp, pp, dp, zero, virtual_stages; /* cp and ep as the stage has them */
    Baton__Stage__Recompute recompute;
    uint64_t micro_batch;
    double memory;      /* the heaviest rank's total, bytes */
    double step_time_s; /* 0 when unknown (no peak given) */
    int tight;          /* above PLAN_MEMORY_HEADROOM of the capacity */
    int changes;        /* settings changed from the stage's */
    int drop_split;     /* pp or virtual_stages changed: the stage's stage_layers must go */
} plan_alt;
#define PLAN_MAX_ALTS 3
/* the most entries (stages, or interleaved chunks) a suggested split is given for; the
 * exact search for stages takes at most PLAN_MAX_DP_SPLIT (its cost: pp L^2) */
#define PLAN_MAX_SPLIT    256
#define PLAN_MAX_DP_SPLIT 64
#define PLAN_MAX_LAYERS   65536u /* model.n_layers at most (recipe validation) */
/* model.moe.n_experts at most (recipe validation): the worker's MoE layer holds that many
 * (worker/engine/moe.h MOE_MAX_EXPERTS), and so does a metrics record's expert_load
 * (orchestrator/control/control_metrics.h). Today's largest MoEs route over 256 (DeepSeek-V3)
 * to 384 (Kimi K2) experts. */
#define PLAN_MAX_EXPERTS 512u

typedef struct plan_stage {
    plan_params params;
    layout lay;
    plan_memory mem;
    plan_comm comm;
    double flops_per_step;     /* model FLOPs (6 N T + attention), whole cluster */
    double fp8_flops_per_step; /* those of the GEMMs that run in fp8 (plan_layer_fp8_flops) */
    double compute_s;      /* flops / (world * peak * mfu), the flops not in fp8 GEMMs at bf16's:
                            * cluster.mfu is the compute's efficiency, before the bubble and the
                            * communication not hidden */
    double bubble_s;       /* the pipeline bubble's time: compute_s * bubble / (1 - bubble) */
    double step_time_s;    /* compute + bubble + non-overlapped communication estimate */
    double mfu_e2e;        /* flops_per_step / (world * peak * step_time_s), as the workers log
                            * MFU (0 when the step time is unknown) */
    uint64_t microbatches; /* per data-parallel rank per step */
    char warnings[PLAN_MAX_WARNINGS][400];
    int n_warnings;
    /* An fp16 stage's loss scale when it is not its loss_scale.initial: scale_carried, it
     * is carried from the stage before, named scale_from (plan_scale_carried); scale_init:
     * the first stage, which starts from the recipe's init (whose fp16 scaler it would
     * carry). The caller, who sees the stages together, sets them (plan_stage_build
     * leaves them empty). */
    const char *scale_from; /* the stage before's name, in its spec (alive as long as it) */
    int scale_carried;
    int scale_init;
    plan_shape shape;
    double hw_flops_per_step; /* flops_per_step plus what recomputation repeats */
    double tokens_per_step;   /* global_batch * seq_len */
    double exposed_comm_s;    /* the communication step_time_s adds to compute_s */
    double tokens_per_s;      /* 0 when the step time is unknown */
    double bubble;            /* pipeline bubble: idle share of the stages' time (plan_pp_bubble) */
    int bubble_replayed;      /* it comes from a replay of the schedule (else an estimate) */
    double pp_balance;        /* the slowest pipeline stage's compute over the mean (1: even) */
    uint32_t pp_slowest;      /* that stage */
    /* When the slowest stage computes 10% more than the mean: the split of the layers
     * (pp_best_split_n <= PLAN_MAX_SPLIT entries: pp, or interleaved pp x v chunks) that
     * evens it best, if it fits in memory, and its slowest stage over the mean;
     * pp_best_balance 0: none. */
    uint32_t pp_best_split[PLAN_MAX_SPLIT];
    uint32_t pp_best_split_n;
    double pp_best_balance;
    double pp_best_bubble; /* the pipeline bubble with it */
    /* When the heaviest rank does not fit: the best settings that do on the same devices,
     * best first (plan_find_alternatives); n_alts 0: none found, or it fits. */
    plan_alt alts[PLAN_MAX_ALTS];
    int n_alts;
} plan_stage;

/* Computes everything for one resolved stage (spec->stage fully resolved, dp != 0). */
int plan_stage_build(const Baton__StageSpec *spec, plan_stage *out, bt_diag *diag);
/* plan_stage_build's first part: the shape, parameters, layout and memory (out->mem) only,
 * no communication, time, alternatives or warnings (what `baton run` weighs at its start). */
int plan_stage_memory(const Baton__StageSpec *spec, plan_stage *out, bt_diag *diag);

/* For a stage that does not fit (mem.fits 0): plans every split of its devices into tp
 * (up to gpus_per_node, or the stage's own) and pp, dp taking the rest (cp, ep, the order
 * kept; a split the recipe's validation would refuse is skipped), with ZeRO and the
 * recomputation from the stage's up and the micro-batch from the stage's down, and keeps
 * in alts those whose heaviest rank fits: with room before tight ones, then the shortest
 * step, then the fewest changes; one per split of tp and pp. */
void plan_find_alternatives(plan_stage *ps);
/* What a changes from the stage (shape sh) as recipe keys: "parallel: {tp: 8, pp: 8, dp:
 * 1}, recompute: full". Returns buf. */
const char *plan_alt_keys(const plan_shape *sh, const plan_alt *a, char *buf, size_t cap);

/* Exact parameter counts of a model. */
int plan_params_count(const Baton__Model *m, plan_params *out, bt_diag *diag);

/* The parts of plan_stage_build, in the order it calls them; exposed for tests and for
 * callers that need one figure. Each later part reads what the earlier ones filled in
 * (shape, params, lay, microbatches). */
int plan_shape_resolve(const Baton__StageSpec *spec, plan_shape *out, bt_diag *diag);
/* 1 if layer (0-based) is an MoE layer: layer >= first_dense and
 * (layer - first_dense) % every == 0. */
int plan_layer_is_moe(const plan_params *p, uint32_t layer);
/* Pipeline stage `stage` of pp holds n layers starting at *first (layers split evenly,
 * the remainder going to the first stages, or as p->stage_layers lists them), n_moe of
 * them MoE. With v > 1 virtual stages (an interleaved pipeline; pp v divides the layers,
 * or p->stage_layers lists the pp v chunks) it holds v chunks, chunk c being the model's
 * (c pp + stage)-th: *first is chunk 0's first layer and plan_pp_stage_layer gives each
 * (worker/engine/model.h's model_stage_layer). */
void plan_pp_stage_layers(const plan_params *p, uint32_t pp, uint32_t v, uint32_t stage,
                          uint32_t *first, uint32_t *n, uint32_t *n_moe);
/* The model index of the stage's i-th layer. */
uint32_t plan_pp_stage_layer(const plan_params *p, uint32_t pp, uint32_t v, uint32_t stage,
                             uint32_t i);
/* Whether a parallel.stage_layers list of n entries suits pp stages of v chunks (v <= 1:
 * none) and n_layers layers: pp v entries of at least one layer, summing to n_layers; the
 * message (for `what`, the list's owner) in diag when not. The worker and the planner
 * both check it (the recipe's validation says the same at its place in the file). */
int plan_check_stage_layers(const uint32_t *list, size_t n, uint32_t pp, uint32_t v,
                            uint32_t n_layers, bt_diag *diag);
/* The stage's chunk c: its layers [*first, *first + *n) among the stage's (the i of
 * plan_pp_stage_layer), as worker/engine/model.h's model_chunk_span. */
void plan_pp_chunk_span(const plan_params *p, uint32_t pp, uint32_t v, uint32_t stage, uint32_t c,
                        uint32_t *first, uint32_t *n);
/* A ZeRO-2/3 unit as a rank holds it. */
typedef struct plan_zero_unit {
    uint64_t chunk; /* ceil(unit / group) parameters per rank */
    uint64_t group; /* the ranks it is sharded over: dp*cp; an MoE layer's under ep the
                     * expert-data-parallel group, dp*cp/ep (worker/engine/train_zero.h) */
    uint64_t dense; /* such an MoE unit: its dense parameters (all-reduced over ep); else 0 */
    uint64_t size;  /* the unit's parameters */
    uint64_t moe;   /* an MoE layer's: its MoE block's parameters, the unit's last; else 0 */
} plan_zero_unit;
/* ZeRO-2/3's units on pipeline stage `stage` in the worker's order (the embedding on the
 * first stage, each layer, the final norm with the head on the last): their count; out
 * (n_layers + 2 entries) gets each one. */
uint32_t plan_zero_units(const plan_stage *ps, uint32_t stage, plan_zero_unit *out);
/* What a rank sends to all-gather (or reduce-scatter) unit u: (group - 1) chunks. */
double plan_zero_unit_volume(const plan_zero_unit *u);
/* ZeRO-3's parameters a rank of pipeline stage `stage` sends to gather in a step (unit:
 * plan_zero_units'), from a replay of the stage's passes (stages/pipe_order.h) through the
 * model's two gather buffers as worker/engine/model_zero.c uses them, nothing resident when
 * the step starts (stages/plan_zero3.c). Up to max_chunks micro-batches × chunks (or 8 pp
 * micro-batches) every pass is replayed; beyond, where the order repeats every pp
 * micro-batches, two steps of 6 to 8 pp replayed give the gathers each group adds. Needs no
 * memory: never an estimate for want of it. */
#define PLAN_ZERO3_REPLAY (1u << 17)
double plan_zero3_gathered(const plan_stage *ps, uint32_t stage, const plan_zero_unit *unit,
                           uint64_t max_chunks);
/* Whether the tp ranks fold into the experts' parallelism (stages/layout.h's
 * layout_fold_tp_experts), of a stage's parallel settings and model (moe: the recipe's
 * or spec's), or of a planned stage; and the ranks that hold copies of a rank's routed
 * experts, which reduce their gradients: the expert-data-parallel group (under the
 * fold drawn from tp x cp x dp). */
int plan_parallel_folds_experts(const Baton__Parallel *p, const Baton__Moe *moe);
int plan_folds_experts(const plan_stage *ps);
/* ZeRO-1 shards anything: zero 1 over a dp x cp block of two ranks or more, or with the
 * routed experts held by two ranks or more (under the fold, tp ranks: dp x cp = 1 shards
 * only them; worker/engine/train_dp.h); else the gradients are all-reduced. */
int plan_zero1_active(const plan_stage *ps);
uint32_t plan_expert_holders(const plan_stage *ps);
/* How evenly the pipeline stages share the compute (stages/plan_balance.c): the slowest
 * stage's model FLOPs per token (its layers, the head on the last) over the stages' mean,
 * and that stage; 1 and 0 without a pipeline. */
void plan_pp_balance(const plan_stage *ps, double *ratio, uint32_t *slowest);
/* Pipeline stage `stage`'s model chunk c (plan_pp_chunk_span; the last stage's last chunk
 * with the head): FLOPs per token of its forward, and of its backward with what
 * recomputation repeats (the two add up to plan_pp_balance's stage compute). */
void plan_pp_chunk_flops(const plan_stage *ps, uint32_t stage, uint32_t c, double *fwd,
                         double *bwd);
/* The pipeline bubble (stages/plan_pipe_time.c): the share of the stages' time a step
 * leaves idle, from a replay of the workers' schedule (their lists of computations and
 * batches of transfers) with each chunk's forward and backward compute
 * (plan_pp_chunk_flops), transfers taking no time. Equal stages give
 * (pp - 1)/(v m + pp - 1); uneven stages or chunks (the head's, parallel.stage_layers)
 * more. 0 without a pipeline. *replayed 0: not replayed (pp m v > 2^17, or no memory),
 * the equal-stage figure scaled by the slowest stage's compute instead. */
double plan_pp_bubble(const plan_stage *ps, int *replayed);
/* Megatron's bubble for equal stages, (pp - 1)/(v m + pp - 1); 0 without a pipeline. */
double plan_pp_bubble_equal(const plan_stage *ps);
/* The replay made once for pp stages of v chunks and K micro-batches (the workers' lists)
 * and run for any chunk times (plan_pp_replay's fwd, bwd); NULL where plan_pp_replay
 * gives -1 for want of a replay (too large, K < pp interleaved, no memory). */
typedef struct plan_pp_replayer plan_pp_replayer;
plan_pp_replayer *plan_pp_replayer_new(uint32_t pp, uint32_t v, uint32_t K);
double plan_pp_replayer_run(plan_pp_replayer *x, const double *fwd, const double *bwd);
void plan_pp_replayer_free(plan_pp_replayer *x);
/* The replay itself: pp stages of v chunks, K micro-batches, fwd[s v + c] and bwd[s v + c]
 * the durations of stage s's chunk c; the idle share, or -1 when out of memory, too
 * large, or v > 1 with K < pp (which no schedule runs). */
double plan_pp_replay(uint32_t pp, uint32_t v, uint32_t K, const double *fwd, const double *bwd);
/* Per token: layer l's FLOPs with what recomputation repeats, and the head's (the last
 * stage's; never recomputed). Under fp8 they are bf16-rate FLOPs: those of the layer's
 * fp8 GEMMs count 1 / fp8_speedup each. */
double plan_pp_layer_flops(const plan_stage *ps, uint32_t l);
/* Per token: the model FLOPs of layer l's GEMMs that run at the fp8 rate: under fp8 its
 * attention projections and a dense layer's MLP or an MoE layer's experts (top_k routed
 * and the shared ones), unless the layer is the model's first or last with
 * fp8_first_last_bf16; of those, the products whose summed and output dimensions on a tp
 * rank are multiples of 16 (the CUDA engine pads the rows, and carries the others' fp8
 * values in bf16). The attention scores, the head and the router are not. */
double plan_layer_fp8_flops(const plan_stage *ps, uint32_t l);
/* Whether the fp8 kernels take every GEMM of every layer (plan_layer_fp8_flops). */
int plan_fp8_all_native(const plan_stage *ps);
/* Whether model layer l's GEMMs (its experts' too) run in fp8: under fp8, all but the
 * first and last of L layers with fp8_first_last_bf16 (worker/engine/model.c). */
static inline int plan_layer_in_fp8(const plan_shape *sh, uint32_t l, uint32_t L) {
    return sh->precision == BATON__PRECISION__TYPE__FP8 &&
           !(sh->fp8_first_last_bf16 && (l == 0 || l + 1 == L));
}
/* The same, and *fwd its forward's share (a third of the model FLOPs). */
double plan_pp_layer_flops_fwd(const plan_stage *ps, uint32_t l, double *fwd);
double plan_pp_head_flops(const plan_stage *ps);
/* Interleaved (v > 1): pp v chunk lengths (split, model order) that even the stages'
 * compute, found by a local search from the recipe's lengths and the even ones
 * (stages/plan_chunks.c; not exhaustive), and the slowest stage's compute over the mean
 * with them; 0 when there is none to give (v < 2, pp v > n_layers or > PLAN_MAX_SPLIT). */
double plan_pp_best_chunks(const plan_stage *ps, uint32_t *split);
/* The chunk lengths for the shortest step: from plan_pp_best_chunks' lengths, the even
 * ones and the recipe's, a local search on the replayed schedule's idle share
 * (plan_pp_replayer; one layer across a boundary at a time), where the replay is small
 * (pp m v <= 2^13, at most 64 moves); else plan_pp_best_chunks' lengths. Returns their
 * slowest stage over the mean (0: none, as plan_pp_best_chunks), *bubble their replayed
 * idle share (-1: not replayed). */
double plan_pp_best_chunks_step(const plan_stage *ps, uint32_t *split, double *bubble);
/* The split of the layers over the pp stages (split: pp counts, first to last, each at
 * least 1) whose slowest stage computes least, and that stage's compute over the mean;
 * 0 when there is none to give (pp < 2, pp > n_layers or > PLAN_MAX_DP_SPLIT, pp
 * n_layers^2 > 2^30, or out of memory). */
double plan_pp_best_split(const plan_stage *ps, uint32_t *split);
/* Memory of a rank on pipeline stage `stage`; plan_memory_estimate picks the heaviest. */
void plan_memory_for_pp_stage(const plan_stage *ps, uint32_t stage, plan_memory *out);
void plan_memory_estimate(const plan_stage *ps, plan_memory *out);
void plan_comm_estimate(const plan_stage *ps, plan_comm *out);
/* The same with which groups cross nodes taken from crosses (a plan of the same layout),
 * not looked up rank by rank (O(world)); NULL: looked up. */
void plan_comm_estimate_known(const plan_stage *ps, plan_comm *out, const int *crosses);
/* Model FLOPs with what recomputation repeats: x 4/3 under full recomputation, the
 * attention scores' (attn of flops) a third again under selective. */
double plan_hw_flops(const plan_shape *sh, double flops, double attn);
/* Fills flops_per_step, hw_flops_per_step, tokens_per_step, compute_s, bubble, bubble_s,
 * exposed_comm_s, step_time_s, tokens_per_s and mfu_e2e from the parts above (mem, comm). */
void plan_time_estimate(plan_stage *ps);

/* A memory size as the report prints it: in GB with 2 decimals from 1 GB up, below that
 * in the unit that fits ("12.34 MB", "512 B"), so that a small model or GPU never reads
 * "0.00 GB". Decimal units. Returns buf (32 bytes are enough). */
const char *plan_format_memory(char *buf, size_t n, double bytes);
/* "35.84 of 80.00 GB", or, where either is below 1 GB, each in its own unit ("12.34 MB
 * of 2.00 GB"). Returns buf (80 bytes are enough). */
const char *plan_format_memory_of(char *buf, size_t n, double used, double capacity);

/* The human-readable report for one stage, formulas shown next to the figures. */
void plan_report_text(FILE *f, const Baton__StageSpec *spec, const plan_stage *ps);

/* The whole plan as JSON:
 * {"stages": [{"name", "params_total", "world", "layout", "memory_per_gpu":
 *   {"params", "grads", "optimizer", "activations", "moe_cache_bytes" (part of activations),
 *    "total", "heaviest_pp_stage", "activation_slots" (micro-batches, or interleaved model
 *    chunks, in flight), "grad_buffers" (interleaved: received gradients waiting),
 *    "zero", "zero_shard_params", "zero_unit_params"}, "fits", "alternatives",
 *   "comm_bytes_per_step": {"tp", "pp", "dp", "cp", "ep"}, "flops_per_step",
 *   "warnings": [...]}]} */
void plan_report_json(FILE *f, Baton__StageSpec *const *specs, const plan_stage *stages, size_t n);

#endif
