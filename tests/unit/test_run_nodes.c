/* run_nodes.c: after lost nodes and no spare, data parallelism shrinks to the largest dp
 * that keeps the global batch whole and the experts divisible: ep over dp x cp, or over
 * tp x dp x cp when the tp ranks fold into the experts' parallelism (stages/layout.h).
 * Every node of a cluster up to RUN_MAX_NODES is used as planned (none taken for lost);
 * more is refused, nodes + spare_nodes summed without wrapping. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "run_nodes.h"

typedef struct spec_fixture {
    Baton__StageSpec spec;
    Baton__Stage stage;
    Baton__Parallel par;
    Baton__Cluster cluster;
    Baton__Model model;
    Baton__Moe moe;
} spec_fixture;

/* deepseek-moe-16b's shape: tp2 pp2 dp8 ep8 on 4 nodes of 8, global batch 1024. */
static void fixture_init(spec_fixture *f, int sequence_parallel) {
    memset(f, 0, sizeof *f);
    baton__stage_spec__init(&f->spec);
    baton__stage__init(&f->stage);
    baton__parallel__init(&f->par);
    baton__cluster__init(&f->cluster);
    baton__model__init(&f->model);
    baton__moe__init(&f->moe);
    f->par.tp = 2, f->par.pp = 2, f->par.dp = 8, f->par.cp = 1, f->par.ep = 8, f->par.zero = 1;
    f->par.sequence_parallel = sequence_parallel;
    f->stage.parallel = &f->par;
    f->stage.name = "train";
    f->stage.global_batch = 1024, f->stage.micro_batch = 2;
    f->cluster.nodes = 4, f->cluster.gpus_per_node = 8;
    f->moe.n_experts = 64;
    f->model.moe = &f->moe;
    f->spec.stage = &f->stage;
    f->spec.cluster = &f->cluster;
    f->spec.model = &f->model;
}

static int plan_after_loss(spec_fixture *f, char *note, size_t cap, bt_diag *d) {
    static run_nodes n;
    CHECK(run_nodes_init(&n, &f->cluster, d) == 0);
    CHECK(run_nodes_exclude(&n, "node3") == 0);
    return run_nodes_plan(&n, &f->spec, note, cap, d);
}

static void test_shrink_folded(void) {
    spec_fixture f;
    fixture_init(&f, 1);
    char note[256];
    bt_diag d;
    bt_diag_init(&d);
    /* 3 nodes: dp <= 24 / 4 = 6; 4 is the largest dividing the batch with ep 8 | 2 x dp */
    CHECK(plan_after_loss(&f, note, sizeof note, &d) == 0);
    CHECK_EQ_U64(f.par.dp, 4);
    CHECK_EQ_U64(f.cluster.nodes, 2);
    CHECK_STR_CONTAINS(note, "1 node lost, no spare left: data parallelism shrinks from 8 to 4 "
                             "on 2 nodes, global batch 1024 kept");
}

static void test_shrink_unfolded(void) {
    spec_fixture f;
    fixture_init(&f, 0); /* no sequence parallelism: ep 8 must divide dp */
    char note[256];
    bt_diag d;
    bt_diag_init(&d);
    CHECK(plan_after_loss(&f, note, sizeof note, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "only 3 nodes of 8 devices each are left and no spare");
    CHECK_STR_CONTAINS(d.msg, "needs 4 devices per replica");
    CHECK_STR_CONTAINS(d.msg, "ep 8 must divide the expert ranks; the run cannot continue on them");
    fixture_init(&f, 0);
    f.par.ep = 4; /* dp 4 holds ep 4 */
    CHECK(plan_after_loss(&f, note, sizeof note, &d) == 0);
    CHECK_EQ_U64(f.par.dp, 4);
}

/* Counts of one are said in the singular: "1 node", "1 device", "is left". */
static void test_counts_of_one(void) {
    spec_fixture f;
    fixture_init(&f, 0);
    f.cluster.nodes = 2, f.cluster.gpus_per_node = 1, f.par.tp = 1, f.par.pp = 1, f.par.dp = 2;
    f.par.ep = 2; /* dp 1 on the one node left cannot hold ep 2 */
    char note[256];
    bt_diag d;
    bt_diag_init(&d);
    static run_nodes n;
    CHECK(run_nodes_init(&n, &f.cluster, &d) == 0);
    CHECK(run_nodes_exclude(&n, "node1") == 0);
    CHECK(run_nodes_plan(&n, &f.spec, note, sizeof note, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "only 1 node of 1 device is left and no spare");
    CHECK_STR_CONTAINS(d.msg, "needs 1 device per replica");
    CHECK_STR_CONTAINS(d.msg, "the run cannot continue on it");
    f.par.ep = 1;
    CHECK(run_nodes_init(&n, &f.cluster, &d) == 0);
    CHECK(run_nodes_exclude(&n, "node1") == 0);
    CHECK(run_nodes_plan(&n, &f.spec, note, sizeof note, &d) == 0);
    CHECK_STR_CONTAINS(note, "1 node lost, no spare left: data parallelism shrinks from 2 to 1 "
                             "on 1 node, global batch 1024 kept");
}

/* A cluster of nodes x 1 device, dp = nodes: every node used, nothing said. */
static void check_all_used(uint32_t nodes, uint32_t spares) {
    spec_fixture f;
    fixture_init(&f, 0);
    f.cluster.nodes = nodes, f.cluster.spare_nodes = spares, f.cluster.gpus_per_node = 1;
    f.par.tp = f.par.pp = f.par.cp = f.par.ep = 1, f.par.dp = nodes;
    f.stage.global_batch = nodes, f.stage.micro_batch = 1;
    char note[256];
    bt_diag d;
    bt_diag_init(&d);
    static run_nodes n;
    CHECK(run_nodes_init(&n, &f.cluster, &d) == 0);
    CHECK_EQ_U64(n.total, (uint64_t)nodes + spares);
    CHECK(run_nodes_plan(&n, &f.spec, note, sizeof note, &d) == 0);
    CHECK_EQ_U64(n.n_active, nodes);
    CHECK_EQ_U64(f.par.dp, nodes);
    CHECK_EQ_U64(n.active[nodes - 1], nodes - 1);
    CHECK(note[0] == '\0');
    char name[32], want[32];
    run_nodes_name(&n, (int)nodes - 1, name, sizeof name);
    snprintf(want, sizeof want, "node%u", nodes - 1);
    CHECK_STR_CONTAINS(name, want);
    CHECK(run_nodes_exclude(&n, "node0") == 0); /* a spare, if any, replaces it */
    CHECK(run_nodes_plan(&n, &f.spec, note, sizeof note, &d) == 0);
    CHECK_EQ_U64(n.n_active, spares ? nodes : nodes / 2);
}

/* More nodes + spares than a run takes: refused, naming the cap, never clamped. */
static void check_refused(uint32_t nodes, uint32_t spares, const char *total) {
    Baton__Cluster c;
    baton__cluster__init(&c);
    c.nodes = nodes, c.spare_nodes = spares, c.gpus_per_node = 8;
    bt_diag d;
    bt_diag_init(&d);
    static run_nodes n;
    CHECK(run_nodes_init(&n, &c, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, total);
    CHECK_STR_CONTAINS(d.msg, "a run takes at most 16384");
    CHECK_EQ_U64(n.total, 0);
}

static void test_large_clusters(void) {
    check_all_used(260, 0);
    check_all_used(260, 4);
    check_all_used(2048, 0);
    check_all_used(RUN_MAX_NODES, 0);
    check_all_used(RUN_MAX_NODES - 8, 8);
    check_refused(RUN_MAX_NODES, 1, "the cluster has 16385 nodes");
    check_refused(64, 4294967232u, "the cluster has 4294967296 nodes"); /* no wrap to 0 */
    check_refused(4294967295u, 4294967295u, "the cluster has 8589934590 nodes");
}

int main(void) {
    test_large_clusters();
    test_shrink_folded();
    test_shrink_unfolded();
    test_counts_of_one();
    return check_status();
}
