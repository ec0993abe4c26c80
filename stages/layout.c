/* Rank layout arithmetic (see layout.h for the model).
 *
 * Invariants kept by layout_init:
 *   - tp, cp, dp, pp each occupy one slot of the order (one of size 1 that the order
 *     leaves out gets the slot order_insert gives it); stride[d] is the product of
 *     the sizes of the dense dims before d, so rank = sum c[d] * stride[d] over the
 *     dense dims (tp, cp, dp, pp) and world = tp * cp * dp * pp.
 *   - The expert view splits the "block index" of a rank into ep = b % ep (fastest) and
 *     edp = b / ep. The block is cp x dp, or tp x cp x dp when the tp ranks are folded
 *     into the experts' parallelism (fold_tp); b is the mixed-radix number of the
 *     block's coordinates, the dim with the smallest stride fastest. When the block's
 *     dims are a contiguous run of strides, stride[EP] is the fastest one's and
 *     stride[EDP] = stride[EP] * ep; otherwise (cp and dp apart, with ep == 1, or tp
 *     apart from them under the fold) EDP has no single stride and stride[EDP] is 0, and
 *     under the fold EP may have none either: its groups are not evenly spaced.
 * Groups are built through coordinates, never through strides, so they are right in
 * every case. */
#include "layout.h"

#include <stdio.h>
#include <string.h>

#define LAYOUT_DEFAULT_ORDER "tp-cp-ep-dp-pp"

static const char *const dim_names[LAYOUT_NDIMS] = {"tp", "cp", "dp", "pp", "ep", "edp"};

const char *layout_dim_name(enum layout_dim dim) {
    return (unsigned)dim < LAYOUT_NDIMS ? dim_names[dim] : "?";
}

/* The parsed order: dims[] in order, fastest first; n counts the tokens (4 or 5).
 * Duplicates are rejected before they are stored, so five slots always suffice. */
typedef struct order_parse {
    enum layout_dim dims[5];
    int n;
} order_parse;

static int order_token_dim(const char *tok, size_t len) {
    for (int d = 0; d <= LAYOUT_EP; d++)
        if (strlen(dim_names[d]) == len && strncmp(dim_names[d], tok, len) == 0) return d;
    return -1;
}

/* Where a dense dimension of size 1 that the order leaves out goes: beside the dims the
 * expert block needs it next to (cp just before dp, dp just after cp, tp just before cp),
 * pp last. Of size 1 it moves no rank; placed there, the expert block (cp x dp, tp x cp x
 * dp under the fold) stays as contiguous as the named dims make it, so the layout is the
 * one naming it there would give. */
static void order_insert(order_parse *op, enum layout_dim d) {
    int at = op->n;
    for (int i = 0; i < op->n; i++) {
        if ((d == LAYOUT_CP && op->dims[i] == LAYOUT_DP) ||
            (d == LAYOUT_TP && op->dims[i] == LAYOUT_CP))
            at = i;
        if (d == LAYOUT_DP && op->dims[i] == LAYOUT_CP) at = i + 1;
    }
    memmove(&op->dims[at + 1], &op->dims[at], (size_t)(op->n - at) * sizeof *op->dims);
    op->dims[at] = d;
    op->n++;
}

/* Parses order into op; size[d] are the sizes of the dense dims (tp, cp, dp, pp), of
 * which those of size 1 may be left out (order_insert places them). */
static int order_parse_string(const char *order, const uint32_t *size, order_parse *op,
                              bt_diag *diag) {
    int seen[LAYOUT_NDIMS] = {0};
    const char *p = order;
    op->n = 0;
    for (;;) {
        const char *end = strchr(p, '-');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int d = order_token_dim(p, len);
        if (d < 0) {
            bt_diag_set(diag,
                        "parallel.order \"%s\": unknown token \"%.*s\"; valid tokens are tp, cp, "
                        "ep, dp, pp separated by '-' (e.g. \"tp-cp-ep-dp-pp\")",
                        order, (int)len, p);
            return BT_EINVAL;
        }
        if (seen[d]++) {
            bt_diag_set(diag, "parallel.order \"%s\": \"%s\" is named twice; name each once", order,
                        dim_names[d]);
            return BT_EINVAL;
        }
        op->dims[op->n++] = (enum layout_dim)d;
        if (end == NULL) break;
        p = end + 1;
    }
    for (int d = LAYOUT_TP; d <= LAYOUT_PP; d++) {
        if (!seen[d] && size[d] != 1) {
            bt_diag_set(diag,
                        "parallel.order \"%s\": \"%s\" is missing, and %s is %u; name each of "
                        "tp, cp, dp and pp once (those of size 1, and ep, may be left out)",
                        order, dim_names[d], dim_names[d], size[d]);
            return BT_EINVAL;
        }
    }
    static const enum layout_dim fill[] = {LAYOUT_CP, LAYOUT_DP, LAYOUT_TP, LAYOUT_PP};
    for (int k = 0; k < 4; k++)
        if (!seen[fill[k]]) order_insert(op, fill[k]);
    return BT_OK;
}

static int order_position(const order_parse *op, enum layout_dim d, int skip_ep) {
    int pos = 0;
    for (int i = 0; i < op->n; i++) {
        if (op->dims[i] == d) return pos;
        if (!(skip_ep && op->dims[i] == LAYOUT_EP)) pos++;
    }
    return -1;
}

/* With ep > 1 the cp x dp block must be contiguous (cp and dp adjacent once ep is left
 * out) and a named ep must sit next to it. */
static int order_check_expert(const char *order, const order_parse *op, bt_diag *diag) {
    int pc = order_position(op, LAYOUT_CP, 1), pd = order_position(op, LAYOUT_DP, 1);
    if (pc - pd != 1 && pd - pc != 1) {
        bt_diag_set(diag,
                    "parallel.order \"%s\": with ep > 1, cp and dp must be adjacent (ep splits "
                    "the cp x dp block), e.g. \"tp-cp-ep-dp-pp\"",
                    order);
        return BT_EINVAL;
    }
    int pe = order_position(op, LAYOUT_EP, 0);
    if (pe < 0) return BT_OK;
    int near = 0;
    for (int i = pe - 1; i <= pe + 1; i += 2)
        if (i >= 0 && i < op->n && (op->dims[i] == LAYOUT_CP || op->dims[i] == LAYOUT_DP)) near = 1;
    if (!near) {
        bt_diag_set(diag,
                    "parallel.order \"%s\": ep must sit next to cp or dp (it lives inside the cp "
                    "x dp block), e.g. \"tp-cp-ep-dp-pp\"",
                    order);
        return BT_EINVAL;
    }
    return BT_OK;
}

static int layout_check_sizes(uint32_t tp, uint32_t cp, uint32_t dp, uint32_t pp, uint32_t ep,
                              int fold_tp, uint32_t gpus_per_node, bt_diag *diag) {
    if (tp == 0 || cp == 0 || dp == 0 || pp == 0 || ep == 0 || gpus_per_node == 0) {
        bt_diag_set(diag,
                    "parallel sizes must be at least 1 (got tp %u, cp %u, dp %u, pp %u, ep %u, "
                    "gpus_per_node %u)",
                    tp, cp, dp, pp, ep, gpus_per_node);
        return BT_EINVAL;
    }
    uint64_t world = (uint64_t)tp * cp * dp * pp;
    if (world > UINT32_MAX) {
        bt_diag_set(diag, "tp*cp*dp*pp = %llu ranks is too many", (unsigned long long)world);
        return BT_ERANGE;
    }
    if (fold_tp && ((uint64_t)tp * cp * dp) % ep != 0) {
        bt_diag_set(diag,
                    "parallel.ep %u must divide tp*cp*dp = %u (with the tp ranks folded into "
                    "the experts' parallelism the expert view re-splits the tp x cp x dp block "
                    "into ep x edp)",
                    ep, tp * cp * dp);
        return BT_EINVAL;
    }
    if (!fold_tp && ((uint64_t)cp * dp) % ep != 0) {
        bt_diag_set(diag,
                    "parallel.ep %u must divide cp*dp = %u (the expert view re-splits the cp x "
                    "dp block into ep x edp)",
                    ep, cp * dp);
        return BT_EINVAL;
    }
    return BT_OK;
}

/* The expert block's dims, fastest first: cp and dp, with tp too under fold_tp. */
static int block_dims(const layout *l, enum layout_dim *out) {
    int n = 0;
    if (l->fold_tp) out[n++] = LAYOUT_TP;
    out[n++] = LAYOUT_CP, out[n++] = LAYOUT_DP;
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && l->stride[out[j]] < l->stride[out[j - 1]]; j--) {
            enum layout_dim t = out[j];
            out[j] = out[j - 1], out[j - 1] = t;
        }
    return n;
}

static void layout_set_strides(layout *l, const order_parse *op) {
    uint32_t stride = 1;
    for (int i = 0; i < op->n; i++) {
        enum layout_dim d = op->dims[i];
        if (d == LAYOUT_EP) continue;
        l->stride[d] = stride;
        stride *= l->size[d];
    }
    enum layout_dim b[3];
    int n = block_dims(l, b), contiguous = 1;
    for (int i = 1; i < n; i++)
        contiguous &= l->stride[b[i]] == l->stride[b[i - 1]] * l->size[b[i - 1]];
    l->stride[LAYOUT_EP] = l->stride[b[0]];
    l->stride[LAYOUT_EDP] = contiguous ? l->stride[b[0]] * l->size[LAYOUT_EP] : 0;
}

int layout_init(layout *l, uint32_t tp, uint32_t cp, uint32_t dp, uint32_t pp, uint32_t ep,
                int fold_tp, const char *order, uint32_t gpus_per_node, bt_diag *diag) {
    memset(l, 0, sizeof *l);
    if (order == NULL || order[0] == '\0') order = LAYOUT_DEFAULT_ORDER;
    if (strlen(order) >= sizeof l->order) {
        bt_diag_set(diag, "parallel.order \"%.40s...\" is too long", order);
        return BT_EINVAL;
    }
    int rc = layout_check_sizes(tp, cp, dp, pp, ep, fold_tp, gpus_per_node, diag);
    if (rc != BT_OK) return rc;
    order_parse op;
    const uint32_t size[LAYOUT_NDIMS] = {
        [LAYOUT_TP] = tp, [LAYOUT_CP] = cp, [LAYOUT_DP] = dp, [LAYOUT_PP] = pp};
    rc = order_parse_string(order, size, &op, diag);
    if (rc == BT_OK && ep > 1) rc = order_check_expert(order, &op, diag);
    if (rc != BT_OK) return rc;
    l->size[LAYOUT_TP] = tp;
    l->size[LAYOUT_CP] = cp;
    l->size[LAYOUT_DP] = dp;
    l->size[LAYOUT_PP] = pp;
    l->size[LAYOUT_EP] = ep;
    l->size[LAYOUT_EDP] = (fold_tp ? tp : 1) * cp * dp / ep;
    l->fold_tp = fold_tp != 0;
    l->world = tp * cp * dp * pp;
    l->gpus_per_node = gpus_per_node;
    snprintf(l->order, sizeof l->order, "%s", order);
    layout_set_strides(l, &op);
    return BT_OK;
}

int layout_order_full(const char *order, char *out, size_t cap) {
    static const uint32_t ones[LAYOUT_NDIMS] = {1, 1, 1, 1, 1, 1};
    order_parse op;
    bt_diag d;
    bt_diag_init(&d);
    if (order == NULL || order[0] == '\0') order = LAYOUT_DEFAULT_ORDER;
    if (cap > 0) out[0] = '\0';
    if (strlen(order) >= 64 || order_parse_string(order, ones, &op, &d) != BT_OK) return BT_EINVAL;
    for (int i = 0, used = 0; i < op.n && used >= 0 && (size_t)used < cap; i++)
        used +=
            snprintf(out + used, cap - (size_t)used, "%s%s", i ? "-" : "", dim_names[op.dims[i]]);
    return BT_OK;
}

static void coord_expert_from_dense(const layout *l, layout_coord *c) {
    enum layout_dim b[3];
    uint32_t block = 0;
    for (int i = block_dims(l, b) - 1; i >= 0; i--)
        block = block * l->size[b[i]] + c->c[b[i]];
    c->c[LAYOUT_EP] = block % l->size[LAYOUT_EP];
    c->c[LAYOUT_EDP] = block / l->size[LAYOUT_EP];
}

static void coord_dense_from_expert(const layout *l, layout_coord *c) {
    enum layout_dim b[3];
    uint32_t block = c->c[LAYOUT_EP] + l->size[LAYOUT_EP] * c->c[LAYOUT_EDP];
    for (int i = 0, n = block_dims(l, b); i < n; i++)
        c->c[b[i]] = block % l->size[b[i]], block /= l->size[b[i]];
}

layout_coord layout_coord_of(const layout *l, uint32_t rank) {
    layout_coord c;
    memset(&c, 0, sizeof c);
    for (int d = LAYOUT_TP; d <= LAYOUT_PP; d++)
        c.c[d] = (rank / l->stride[d]) % l->size[d];
    coord_expert_from_dense(l, &c);
    return c;
}

/* Uses the dense coordinates (tp, cp, dp, pp); ep and edp are derived from them. */
uint32_t layout_rank_of(const layout *l, const layout_coord *c) {
    uint32_t rank = 0;
    for (int d = LAYOUT_TP; d <= LAYOUT_PP; d++)
        rank += c->c[d] * l->stride[d];
    return rank;
}

static uint32_t group_member(const layout *l, enum layout_dim dim, layout_coord c, uint32_t i) {
    c.c[dim] = i;
    if (dim == LAYOUT_EP || dim == LAYOUT_EDP) coord_dense_from_expert(l, &c);
    return layout_rank_of(l, &c);
}

uint32_t layout_group(const layout *l, enum layout_dim dim, uint32_t rank, uint32_t *out) {
    if ((unsigned)dim >= LAYOUT_NDIMS) return 0;
    layout_coord c = layout_coord_of(l, rank);
    for (uint32_t i = 0; i < l->size[dim]; i++)
        out[i] = group_member(l, dim, c, i);
    return l->size[dim];
}

int layout_group_crosses_nodes(const layout *l, enum layout_dim dim, uint32_t rank) {
    if ((unsigned)dim >= LAYOUT_NDIMS) return 0;
    layout_coord c = layout_coord_of(l, rank);
    uint32_t node = layout_node_of(l, rank);
    for (uint32_t i = 0; i < l->size[dim]; i++)
        if (layout_node_of(l, group_member(l, dim, c, i)) != node) return 1;
    return 0;
}

int layout_any_group_crosses(const layout *l, enum layout_dim dim) {
    for (uint32_t r = 0; r < l->world; r++) {
        layout_coord c = layout_coord_of(l, r);
        if (c.c[dim] == 0 && layout_group_crosses_nodes(l, dim, r)) return 1;
    }
    return 0;
}
