/* Rank layout: the one pure mapping between a global rank and its parallel
 * coordinates, used by `baton plan` and by every worker to build its groups.
 *
 * The dense view has four dimensions, tp, cp, dp, pp, laid out in the order string
 * (default "tp-cp-ep-dp-pp", first = fastest varying); world = tp*cp*dp*pp. The expert
 * view (Megatron-Core's expert rank generator) reuses tp and pp in place and re-splits
 * the cp*dp block into ep (faster) x edp, so ep must divide cp*dp. An order string
 * names each of tp, cp, dp, pp once; ep may be named or left out (it always sits
 * inside the cp*dp block, which therefore must be adjacent in the order).
 * Ranks are numbered node-major: node = rank / gpus_per_node. */
#ifndef BATON_LAYOUT_H
#define BATON_LAYOUT_H

#include <stdint.h>

#include "util/err.h"

enum layout_dim {
    LAYOUT_TP = 0,
    LAYOUT_CP,
    LAYOUT_DP,
    LAYOUT_PP,
    LAYOUT_EP,  /* expert parallel (expert view) */
    LAYOUT_EDP, /* expert data parallel (expert view) */
    LAYOUT_NDIMS
};

typedef struct layout {
    uint32_t size[LAYOUT_NDIMS];   /* extent of each dimension */
    uint32_t stride[LAYOUT_NDIMS]; /* rank stride of each dimension */
    uint32_t world;
    uint32_t gpus_per_node;
    char order[64];
} layout;

typedef struct layout_coord {
    uint32_t c[LAYOUT_NDIMS];
} layout_coord;

/* Checks sizes and order and fills l. Returns BT_EINVAL with a message in diag. */
int layout_init(layout *l, uint32_t tp, uint32_t cp, uint32_t dp, uint32_t pp, uint32_t ep,
                const char *order, uint32_t gpus_per_node, bt_diag *diag);

layout_coord layout_coord_of(const layout *l, uint32_t rank);
uint32_t layout_rank_of(const layout *l, const layout_coord *c);
static inline uint32_t layout_node_of(const layout *l, uint32_t rank) {
    return rank / l->gpus_per_node;
}

/* The ranks of rank's group along dim, in coordinate order; writes l->size[dim]
 * entries to out and returns that count. */
uint32_t layout_group(const layout *l, enum layout_dim dim, uint32_t rank, uint32_t *out);

/* The ranks that hold rank's routed experts: its pp stage and ep coordinate, every tp
 * and edp coordinate (tp fastest); writes size[TP] x size[EDP] entries to out and
 * returns that count. Under layout_fold_tp_experts their gradients are reduced and
 * their optimizer state sharded over this group. */
uint32_t layout_expert_holders(const layout *l, uint32_t rank, uint32_t *out);

/* Whether the tp ranks join the experts' data-parallel group (Megatron-Core's expert
 * tensor parallelism of 1 with the tp ranks folded into the expert data parallelism):
 * under sequence parallelism each tp rank runs an MoE block on its own rows, so its
 * routed experts' gradients are partial sums, reduced over tp x edp in one collective,
 * and under ZeRO-1 their optimizer state is sharded over tp x edp (worker/engine/
 * train_dp.h). ZeRO-2/3 keep their own units (an all-reduce over tp first). */
static inline int layout_fold_tp_experts(uint32_t tp, int sequence_parallel, uint32_t zero,
                                         int moe) {
    return tp > 1 && sequence_parallel && zero <= 1 && moe;
}

/* 1 if the group along dim containing rank spans more than one node. */
int layout_group_crosses_nodes(const layout *l, enum layout_dim dim, uint32_t rank);

const char *layout_dim_name(enum layout_dim dim);

#endif
