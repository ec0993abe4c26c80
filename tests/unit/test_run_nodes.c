/* run_nodes.c: after lost nodes and no spare, data parallelism shrinks to the largest dp
 * that keeps the global batch whole and the experts divisible: ep over dp x cp, or over
 * tp x dp x cp when the tp ranks fold into the experts' parallelism (stages/layout.h). */
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
    run_nodes n;
    run_nodes_init(&n, &f->cluster);
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
    run_nodes n;
    run_nodes_init(&n, &f.cluster);
    CHECK(run_nodes_exclude(&n, "node1") == 0);
    CHECK(run_nodes_plan(&n, &f.spec, note, sizeof note, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "only 1 node of 1 device is left and no spare");
    CHECK_STR_CONTAINS(d.msg, "needs 1 device per replica");
    CHECK_STR_CONTAINS(d.msg, "the run cannot continue on it");
    f.par.ep = 1;
    run_nodes_init(&n, &f.cluster);
    CHECK(run_nodes_exclude(&n, "node1") == 0);
    CHECK(run_nodes_plan(&n, &f.spec, note, sizeof note, &d) == 0);
    CHECK_STR_CONTAINS(note, "1 node lost, no spare left: data parallelism shrinks from 2 to 1 "
                             "on 1 node, global batch 1024 kept");
}

int main(void) {
    test_shrink_folded();
    test_shrink_unfolded();
    test_counts_of_one();
    return check_status();
}
