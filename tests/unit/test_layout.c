/* Rank layout: round trips, group partitions, node placement, custom orders, the
 * Megatron-Core examples and order-string errors. */
#include "check.h"
#include "layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int make_fold(layout *l, uint32_t tp, uint32_t cp, uint32_t dp, uint32_t pp, uint32_t ep,
                     int fold, const char *order, uint32_t gpn) {
    bt_diag d;
    bt_diag_init(&d);
    int rc = layout_init(l, tp, cp, dp, pp, ep, fold, order, gpn, &d);
    if (rc != BT_OK) fprintf(stderr, "layout_init: %s\n", d.msg);
    return rc;
}

static int make(layout *l, uint32_t tp, uint32_t cp, uint32_t dp, uint32_t pp, uint32_t ep,
                const char *order, uint32_t gpn) {
    return make_fold(l, tp, cp, dp, pp, ep, 0, order, gpn);
}

/* The dense dims the expert view re-splits: cp x dp, and tp under the fold. */
static int in_block(const layout *l, int d) {
    return d == LAYOUT_CP || d == LAYOUT_DP || (l->fold_tp && d == LAYOUT_TP);
}

/* Members of a group along d share every coordinate except d's own and, since the
 * expert view re-splits the block, the other view's block coordinates. */
static int may_differ(const layout *l, int d, int o) {
    if (o == d) return 1;
    if (in_block(l, d)) return o >= LAYOUT_EP;
    if (d >= LAYOUT_EP) return in_block(l, o);
    return 0;
}

/* coord_of and rank_of are inverse; the expert coordinates are a bijection of the
 * cp x dp block too (checked through the EP and EDP group members). */
static void check_round_trip(const layout *l, uint32_t step) {
    uint32_t *g = malloc(sizeof *g * l->world);
    for (uint32_t r = 0; r < l->world; r += step) {
        layout_coord c = layout_coord_of(l, r);
        for (int d = 0; d < LAYOUT_NDIMS; d++)
            CHECK(c.c[d] < l->size[d]);
        CHECK_EQ_U64(layout_rank_of(l, &c), r);
        for (int d = 0; d < LAYOUT_NDIMS; d++) {
            uint32_t n = layout_group(l, (enum layout_dim)d, r, g);
            CHECK_EQ_U64(n, l->size[d]);
            CHECK_EQ_U64(g[c.c[d]], r); /* rank sits at its own coordinate */
            for (uint32_t i = 0; i < n; i++) {
                layout_coord m = layout_coord_of(l, g[i]);
                CHECK_EQ_U64(m.c[d], i);
                for (int o = 0; o < LAYOUT_NDIMS; o++)
                    if (!may_differ(l, d, o)) CHECK_EQ_U64(m.c[o], c.c[o]);
            }
        }
    }
    free(g);
}

/* Every rank is in exactly one group per dim: labelling each rank by its group's
 * smallest member gives world / size labels, each used size times. */
static void check_partition(const layout *l, enum layout_dim dim) {
    uint32_t *label = malloc(sizeof *label * l->world);
    uint32_t *count = calloc(l->world, sizeof *count);
    uint32_t *g = malloc(sizeof *g * l->size[dim]);
    for (uint32_t r = 0; r < l->world; r++) {
        uint32_t n = layout_group(l, dim, r, g), lo = g[0];
        for (uint32_t i = 0; i < n; i++)
            lo = g[i] < lo ? g[i] : lo;
        label[r] = lo;
        count[lo]++;
    }
    uint32_t groups = 0;
    for (uint32_t r = 0; r < l->world; r++) {
        if (count[r] == 0) continue;
        groups++;
        CHECK_EQ_U64(count[r], l->size[dim]);
    }
    CHECK_EQ_U64(groups, l->world / l->size[dim]);
    for (uint32_t r = 0; r < l->world; r++) {
        uint32_t n = layout_group(l, dim, r, g);
        for (uint32_t i = 0; i < n; i++)
            CHECK_EQ_U64(label[g[i]], label[r]);
    }
    free(g);
    free(count);
    free(label);
}

/* Under the fold the ep group takes the block's fastest ranks: the members of rank r's
 * ep group are, in order, the ranks whose block index is r's rounded down to a multiple
 * of ep plus 0, 1, ... (the block index is r's own index in the tp x cp x dp dims
 * ordered by stride); every holder of a copy of r's experts (its edp group) has r's pp
 * and ep coordinates. */
static uint32_t block_index(const layout *l, uint32_t r) {
    layout_coord c = layout_coord_of(l, r);
    int dims[3] = {LAYOUT_TP, LAYOUT_CP, LAYOUT_DP};
    uint32_t b = 0;
    for (int k = 0; k < 3; k++) { /* largest stride first */
        int best = -1;
        for (int j = 0; j < 3; j++)
            if (dims[j] >= 0 && (best < 0 || l->stride[dims[j]] > l->stride[dims[best]])) best = j;
        b = b * l->size[dims[best]] + c.c[dims[best]];
        dims[best] = -1;
    }
    return b;
}

static void check_fold_view(const layout *l) {
    uint32_t *g = malloc(sizeof *g * l->world);
    for (uint32_t r = 0; r < l->world; r++) {
        uint32_t b = block_index(l, r), n = layout_group(l, LAYOUT_EP, r, g);
        layout_coord c = layout_coord_of(l, r);
        for (uint32_t i = 0; i < n; i++) {
            CHECK_EQ_U64(block_index(l, g[i]), b / n * n + i);
            CHECK_EQ_U64(layout_coord_of(l, g[i]).c[LAYOUT_PP], c.c[LAYOUT_PP]);
        }
        n = layout_group(l, LAYOUT_EDP, r, g);
        CHECK_EQ_U64(n, l->size[LAYOUT_TP] * l->size[LAYOUT_CP] * l->size[LAYOUT_DP] /
                            l->size[LAYOUT_EP]);
        for (uint32_t i = 0; i < n; i++) {
            layout_coord m = layout_coord_of(l, g[i]);
            CHECK_EQ_U64(m.c[LAYOUT_EP], c.c[LAYOUT_EP]);
            CHECK_EQ_U64(m.c[LAYOUT_PP], c.c[LAYOUT_PP]);
        }
    }
    free(g);
}

static void test_round_trips_small(void) {
    static const uint32_t sizes[] = {1, 2, 4};
    static const char *const orders[] = {NULL, "tp-cp-ep-dp-pp", "tp-dp-cp-pp", "pp-tp-ep-cp-dp",
                                         "tp-pp-dp-ep-cp"};
    int shapes = 0;
    for (int o = 0; o < 5; o++)
        for (int fold = 0; fold < 2; fold++)
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++)
                    for (int c = 0; c < 3; c++)
                        for (int d = 0; d < 3; d++)
                            for (int e = 0; e < 3; e++) {
                                uint32_t tp = sizes[a], cp = sizes[b], dp = sizes[c], pp = sizes[d];
                                uint32_t ep = sizes[e];
                                if (((fold ? tp : 1) * cp * dp) % ep != 0 || tp * cp * dp * pp > 64)
                                    continue;
                                layout l;
                                if (make_fold(&l, tp, cp, dp, pp, ep, fold, orders[o], 8) !=
                                    BT_OK) {
                                    CHECK(0);
                                    continue;
                                }
                                check_round_trip(&l, 1);
                                for (int dim = 0; dim < LAYOUT_NDIMS; dim++)
                                    check_partition(&l, (enum layout_dim)dim);
                                if (fold) check_fold_view(&l);
                                shapes++;
                            }
    CHECK(shapes > 700);
}

static void test_round_trips_large(void) {
    layout l;
    CHECK(make(&l, 8, 2, 128, 8, 8, NULL, 8) == BT_OK);
    CHECK_EQ_U64(l.world, 16384);
    check_round_trip(&l, 97);
    CHECK(make(&l, 8, 1, 128, 16, 1, "tp-pp-dp-cp", 8) == BT_OK);
    CHECK_EQ_U64(l.world, 16384);
    check_round_trip(&l, 101);
    check_partition(&l, LAYOUT_TP);
    /* last rank: every coordinate at its maximum */
    layout_coord c = layout_coord_of(&l, 16383);
    CHECK_EQ_U64(c.c[LAYOUT_TP], 7);
    CHECK_EQ_U64(c.c[LAYOUT_PP], 15);
    CHECK_EQ_U64(c.c[LAYOUT_DP], 127);
    CHECK_EQ_U64(layout_node_of(&l, 16383), 2047);
}

static void test_tp_in_node(void) {
    layout l;
    CHECK(make(&l, 8, 2, 4, 2, 1, NULL, 8) == BT_OK);
    for (uint32_t r = 0; r < l.world; r++) {
        CHECK(!layout_group_crosses_nodes(&l, LAYOUT_TP, r));
        CHECK(layout_group_crosses_nodes(&l, LAYOUT_DP, r));
    }
    /* dp fastest: the tp group strides across dp*... and leaves the node */
    CHECK(make(&l, 8, 1, 2, 1, 1, "dp-tp-pp-cp", 8) == BT_OK);
    CHECK(layout_group_crosses_nodes(&l, LAYOUT_TP, 0));
    CHECK(!layout_group_crosses_nodes(&l, LAYOUT_DP, 0));
}

static void test_custom_order(void) {
    layout l;
    CHECK(make(&l, 2, 2, 2, 2, 1, "dp-tp-pp-cp", 4) == BT_OK);
    CHECK_EQ_U64(l.stride[LAYOUT_DP], 1);
    CHECK_EQ_U64(l.stride[LAYOUT_TP], 2);
    CHECK_EQ_U64(l.stride[LAYOUT_PP], 4);
    CHECK_EQ_U64(l.stride[LAYOUT_CP], 8);
    layout_coord c = layout_coord_of(&l, 13); /* 13 = 1 + 0*2 + 1*4 + 1*8 */
    CHECK_EQ_U64(c.c[LAYOUT_DP], 1);
    CHECK_EQ_U64(c.c[LAYOUT_TP], 0);
    CHECK_EQ_U64(c.c[LAYOUT_PP], 1);
    CHECK_EQ_U64(c.c[LAYOUT_CP], 1);
    CHECK(make(&l, 2, 2, 2, 2, 1, NULL, 4) == BT_OK);
    CHECK_EQ_U64(l.stride[LAYOUT_TP], 1);
    CHECK_EQ_U64(l.stride[LAYOUT_CP], 2);
    CHECK_EQ_U64(l.stride[LAYOUT_DP], 4);
    CHECK_EQ_U64(l.stride[LAYOUT_PP], 8);
    CHECK_STR_CONTAINS(l.order, "tp-cp-ep-dp-pp");
}

static void check_groups(const layout *l, enum layout_dim dim, const uint32_t *want,
                         uint32_t ngroups) {
    uint32_t g[16], n = l->size[dim];
    for (uint32_t k = 0; k < ngroups; k++) {
        CHECK_EQ_U64(layout_group(l, dim, want[k * n], g), n);
        for (uint32_t i = 0; i < n; i++)
            CHECK_EQ_U64(g[i], want[k * n + i]);
    }
}

/* Megatron-Core's documented example: 8 GPUs, tp 2, pp 2, dp 2. */
static void test_megatron_example(void) {
    layout l;
    CHECK(make(&l, 2, 1, 2, 2, 1, NULL, 8) == BT_OK);
    static const uint32_t tp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const uint32_t dp[] = {0, 2, 1, 3, 4, 6, 5, 7};
    static const uint32_t pp[] = {0, 4, 1, 5, 2, 6, 3, 7};
    check_groups(&l, LAYOUT_TP, tp, 4);
    check_groups(&l, LAYOUT_DP, dp, 4);
    check_groups(&l, LAYOUT_PP, pp, 4);
}

/* Expert view (Megatron-Core's expert generator "tp-ep-dp-pp" with edp = cp*dp/ep):
 * tp 2, cp 2, dp 4, ep 2 -> ep stride tp = 2, edp stride tp*ep = 4. */
static void test_expert_view(void) {
    layout l;
    CHECK(make(&l, 2, 2, 4, 1, 2, NULL, 8) == BT_OK);
    CHECK_EQ_U64(l.size[LAYOUT_EDP], 4);
    CHECK_EQ_U64(l.stride[LAYOUT_EP], 2);
    CHECK_EQ_U64(l.stride[LAYOUT_EDP], 4);
    static const uint32_t ep[] = {0, 2, 1, 3, 4, 6, 13, 15};
    static const uint32_t edp[] = {0, 4, 8, 12, 3, 7, 11, 15};
    check_groups(&l, LAYOUT_EP, ep, 4);
    check_groups(&l, LAYOUT_EDP, edp, 2);
    /* ep 4 over cp 2 x dp 2: the whole block is one EP group, edp 1 */
    CHECK(make(&l, 1, 2, 2, 1, 4, NULL, 8) == BT_OK);
    static const uint32_t ep4[] = {0, 1, 2, 3};
    check_groups(&l, LAYOUT_EP, ep4, 1);
    CHECK_EQ_U64(l.size[LAYOUT_EDP], 1);
}

/* The fold (Megatron-Core's expert tensor parallelism 1): the expert view re-splits the
 * tp x cp x dp block, ep the fastest, so ep groups take the tp ranks first. */
static void test_fold_view(void) {
    layout l;
    CHECK(make_fold(&l, 2, 2, 4, 1, 2, 1, NULL, 8) == BT_OK); /* ep 2 = the tp group */
    CHECK_EQ_U64(l.size[LAYOUT_EDP], 8);
    CHECK_EQ_U64(l.stride[LAYOUT_EP], 1);
    CHECK_EQ_U64(l.stride[LAYOUT_EDP], 2);
    static const uint32_t ep[] = {0, 1, 2, 3, 14, 15};
    static const uint32_t edp[] = {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15};
    check_groups(&l, LAYOUT_EP, ep, 3);
    check_groups(&l, LAYOUT_EDP, edp, 2);
    CHECK(make_fold(&l, 2, 1, 4, 1, 4, 1, NULL, 8) == BT_OK); /* ep over tp x dp */
    static const uint32_t ep4[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const uint32_t edp4[] = {0, 4, 1, 5, 3, 7};
    check_groups(&l, LAYOUT_EP, ep4, 2);
    check_groups(&l, LAYOUT_EDP, edp4, 3);
    CHECK(make_fold(&l, 2, 1, 1, 2, 2, 1, NULL, 8) == BT_OK); /* ep = tp, one holder */
    static const uint32_t ep2pp[] = {0, 1, 2, 3};
    check_groups(&l, LAYOUT_EP, ep2pp, 2);
    CHECK_EQ_U64(l.size[LAYOUT_EDP], 1);
    /* tp slower than dp in the order: ep takes the dp ranks first */
    CHECK(make_fold(&l, 2, 1, 2, 1, 2, 1, "cp-dp-tp-pp", 8) == BT_OK);
    static const uint32_t epdp[] = {0, 1, 2, 3};
    static const uint32_t edpdp[] = {0, 2, 1, 3};
    check_groups(&l, LAYOUT_EP, epdp, 2);
    check_groups(&l, LAYOUT_EDP, edpdp, 2);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(layout_init(&l, 2, 1, 1, 1, 4, 1, NULL, 8, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "must divide tp*cp*dp = 2");
}

/* Whether a and b are the same layout: sizes, strides and every rank's group along every
 * dim (the expert view's included). */
static void check_same(const layout *a, const layout *b) {
    CHECK_EQ_U64(a->world, b->world);
    for (int d = 0; d < LAYOUT_NDIMS; d++) {
        CHECK_EQ_U64(a->size[d], b->size[d]);
        CHECK_EQ_U64(a->stride[d], b->stride[d]);
    }
    uint32_t ga[64], gb[64];
    for (uint32_t r = 0; r < a->world && r < 64; r++)
        for (int d = 0; d < LAYOUT_NDIMS; d++) {
            uint32_t n = layout_group(a, (enum layout_dim)d, r, ga);
            CHECK_EQ_U64(layout_group(b, (enum layout_dim)d, r, gb), n);
            for (uint32_t i = 0; i < n; i++)
                CHECK_EQ_U64(ga[i], gb[i]);
        }
}

/* A dense dim of size 1 may be left out of the order, as ep may: the layout is the one
 * naming it beside the expert block gives. */
static void test_order_leaves_out_size_one(void) {
    static const struct {
        uint32_t tp, cp, dp, pp, ep;
        int fold;
        const char *given, *named;
    } cases[] = {
        {2, 1, 2, 2, 1, 0, "tp-dp-pp", "tp-cp-dp-pp"},
        {2, 1, 2, 2, 1, 0, "dp-tp-pp", "cp-dp-tp-pp"},
        {2, 1, 4, 1, 2, 0, "tp-ep-dp-pp", NULL},
        {2, 1, 4, 1, 4, 0, "tp-dp", NULL},
        {2, 1, 4, 1, 2, 1, "tp-dp-pp", NULL},
        {1, 2, 2, 1, 4, 1, "cp-dp-pp", NULL},
        {2, 2, 2, 1, 1, 0, "dp-cp-tp", "dp-cp-tp-pp"},
        {1, 1, 4, 1, 1, 0, "dp", NULL},
        {2, 2, 1, 2, 2, 0, "pp-cp-tp", "pp-cp-dp-tp"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        layout a, b;
        int ra = make_fold(&a, cases[k].tp, cases[k].cp, cases[k].dp, cases[k].pp, cases[k].ep,
                           cases[k].fold, cases[k].given, 4);
        int rb = make_fold(&b, cases[k].tp, cases[k].cp, cases[k].dp, cases[k].pp, cases[k].ep,
                           cases[k].fold, cases[k].named, 4);
        CHECK(ra == BT_OK && rb == BT_OK);
        if (ra != BT_OK || rb != BT_OK) continue;
        check_same(&a, &b);
        check_round_trip(&a, 1);
        CHECK_STR_CONTAINS(a.order, cases[k].given); /* the order as the recipe gave it */
        /* the order naming every dense dim, which the validator suggests, is that layout */
        char full[64];
        CHECK(layout_order_full(cases[k].given, full, sizeof full) == BT_OK);
        if (cases[k].named != NULL) CHECK(strcmp(full, cases[k].named) == 0);
        CHECK(make_fold(&b, cases[k].tp, cases[k].cp, cases[k].dp, cases[k].pp, cases[k].ep,
                        cases[k].fold, full, 4) == BT_OK);
        check_same(&a, &b);
    }
    char full[64];
    CHECK(layout_order_full(NULL, full, sizeof full) == BT_OK);
    CHECK(strcmp(full, "tp-cp-ep-dp-pp") == 0);
    CHECK(layout_order_full("tp-xx", full, sizeof full) == BT_EINVAL && full[0] == '\0');
}

static void expect_error(uint32_t tp, uint32_t cp, uint32_t dp, uint32_t pp, uint32_t ep,
                         const char *order, const char *needle) {
    layout l;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(layout_init(&l, tp, cp, dp, pp, ep, 0, order, 8, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, needle);
}

static void test_errors(void) {
    expect_error(1, 1, 1, 1, 1, "tp-xx-dp-pp", "unknown token \"xx\"");
    expect_error(1, 1, 1, 1, 1, "tp-cp-dp-pp-tp", "\"tp\" is named twice");
    expect_error(1, 1, 1, 2, 1, "tp-cp-dp", "\"pp\" is missing, and pp is 2");
    expect_error(1, 2, 2, 1, 1, "tp-dp-pp", "\"cp\" is missing, and cp is 2");
    expect_error(1, 1, 1, 1, 1, "tp--cp-dp-pp", "unknown token");
    expect_error(1, 2, 2, 1, 2, "tp-cp-pp-dp", "cp and dp must be adjacent");
    expect_error(1, 2, 2, 1, 2, "ep-tp-cp-dp-pp", "ep must sit next to cp or dp");
    expect_error(1, 1, 3, 1, 2, NULL, "must divide cp*dp");
    expect_error(0, 1, 1, 1, 1, NULL, "at least 1");
    layout l;
    /* with ep 1 cp and dp need not be adjacent */
    CHECK(make(&l, 2, 2, 2, 2, 1, "tp-cp-pp-dp", 8) == BT_OK);
    check_round_trip(&l, 1);
    check_partition(&l, LAYOUT_EDP);
    CHECK(make(&l, 2, 2, 2, 2, 2, "dp-cp-tp-pp", 8) == BT_OK);
    check_round_trip(&l, 1);
    CHECK_STR_CONTAINS(layout_dim_name(LAYOUT_EDP), "edp");
}

int main(void) {
    test_round_trips_small();
    test_round_trips_large();
    test_tp_in_node();
    test_custom_order();
    test_order_leaves_out_size_one();
    test_megatron_example();
    test_expert_view();
    test_fold_view();
    test_errors();
    return check_status();
}
