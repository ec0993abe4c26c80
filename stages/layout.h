/* Rank layout: the one pure mapping between a global rank and its parallel
 * coordinates, used by `baton plan` and by every worker to build its groups.
 *
 * The dense view has four dimensions, tp, cp, dp, pp, laid out in the order string
 * (default "tp-cp-ep-dp-pp", first = fastest varying); world = tp*cp*dp*pp. The expert
 * view (Megatron-Core's expert rank generator) reuses tp and pp in place and re-splits
 * the cp*dp block into ep (faster) x edp, so ep must divide cp*dp. With the tp ranks
 * folded into the experts' parallelism (fold_tp, layout_fold_tp_experts: Megatron-Core's
 * expert tensor parallelism of 1, "MoE parallel folding") it re-splits the whole
 * tp*cp*dp block instead: ep takes the fastest ranks (the tp group's first, so an ep
 * group stays inside a node when it fits), ep must divide tp*cp*dp, and the edp group
 * holds every copy of a rank's routed experts. An order string names each of tp, cp,
 * dp, pp once, except that one of size 1 may be left out (the layout is the one naming it
 * beside the expert block would give: "tp-dp-pp" with cp 1 is "tp-cp-dp-pp"); ep may be
 * named or left out (it always takes the fastest ranks of its block; cp and dp must be
 * adjacent in the order when ep > 1).
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
    int fold_tp; /* the expert view spans tp x cp x dp (layout_fold_tp_experts) */
    char order[64];
} layout;

typedef struct layout_coord {
    uint32_t c[LAYOUT_NDIMS];
} layout_coord;

/* Checks sizes and order and fills l; fold_tp: layout_fold_tp_experts of the stage.
 * Returns BT_EINVAL with a message in diag. */
int layout_init(layout *l, uint32_t tp, uint32_t cp, uint32_t dp, uint32_t pp, uint32_t ep,
                int fold_tp, const char *order, uint32_t gpus_per_node, bt_diag *diag);

/* The order with every dense dimension it leaves out (those it may leave out at size 1)
 * placed where layout_init places them: "tp-dp-pp" -> "tp-cp-dp-pp", the order that names
 * them all and lays the ranks out the same. NULL or "" is the default order. Returns
 * BT_EINVAL (out: "") for an order layout_init refuses whatever the sizes. */
int layout_order_full(const char *order, char *out, size_t cap);

layout_coord layout_coord_of(const layout *l, uint32_t rank);
uint32_t layout_rank_of(const layout *l, const layout_coord *c);
static inline uint32_t layout_node_of(const layout *l, uint32_t rank) {
    return rank / l->gpus_per_node;
}

/* The ranks of rank's group along dim, in coordinate order; writes l->size[dim]
 * entries to out and returns that count. */
uint32_t layout_group(const layout *l, enum layout_dim dim, uint32_t rank, uint32_t *out);

/* Whether the tp ranks fold into the experts' parallelism (Megatron-Core's expert tensor
 * parallelism of 1, "MoE parallel folding"): under sequence parallelism each tp rank
 * runs an MoE block on its own rows, so the tp ranks can hold different experts (the
 * expert view over tp x cp x dp, above) and the copies of an expert (its edp group)
 * each hold a partial sum of its gradients, reduced over that group in one collective;
 * under ZeRO-1 their optimizer state is sharded over it (worker/engine/train_dp.h).
 * ZeRO-2/3 keep their own units (an all-reduce over tp first) and the cp x dp view. */
static inline int layout_fold_tp_experts(uint32_t tp, int sequence_parallel, uint32_t zero,
                                         int moe) {
    return tp > 1 && sequence_parallel && zero <= 1 && moe;
}

/* 1 if the group along dim containing rank spans more than one node. */
int layout_group_crosses_nodes(const layout *l, enum layout_dim dim, uint32_t rank);
/* 1 if any group along dim spans more than one node (O(world): each group once, through
 * its member with coordinate 0 along dim). */
int layout_any_group_crosses(const layout *l, enum layout_dim dim);

const char *layout_dim_name(enum layout_dim dim);

#endif
