/* The planner tests' fixtures: a StageSpec and every message it points to, owned by the
 * test, for the LLaMA-70B plan, a small dense and a small MoE model (test_plan.c,
 * test_plan_pipeline.c). */
#ifndef BATON_TEST_PLAN_FIXTURE_H
#define BATON_TEST_PLAN_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan.h"

/* Every message a StageSpec points to, owned by the test. */
typedef struct fixture {
    Baton__StageSpec spec;
    Baton__Model model;
    Baton__Moe moe;
    Baton__Stage stage;
    Baton__Parallel par;
    Baton__Precision prec;
    Baton__Cluster cluster;
    Baton__Gpu gpu;
    Baton__ByteSize mem;
    Baton__Links links;
    Baton__Bandwidth intra, inter;
} fixture;

static inline void fixture_init(fixture *fx) {
    fixture z = {
        .spec = BATON__STAGE_SPEC__INIT,
        .model = BATON__MODEL__INIT,
        .moe = BATON__MOE__INIT,
        .stage = BATON__STAGE__INIT,
        .par = BATON__PARALLEL__INIT,
        .prec = BATON__PRECISION__INIT,
        .cluster = BATON__CLUSTER__INIT,
        .gpu = BATON__GPU__INIT,
        .mem = BATON__BYTE_SIZE__INIT,
        .links = BATON__LINKS__INIT,
        .intra = BATON__BANDWIDTH__INIT,
        .inter = BATON__BANDWIDTH__INIT,
    };
    *fx = z;
    fx->spec.model = &fx->model;
    fx->spec.stage = &fx->stage;
    fx->spec.cluster = &fx->cluster;
    fx->stage.parallel = &fx->par;
    fx->stage.precision = &fx->prec;
    fx->cluster.gpu = &fx->gpu;
    fx->cluster.links = &fx->links;
    fx->gpu.memory = &fx->mem;
    fx->links.intra_node = &fx->intra;
    fx->links.inter_node = &fx->inter;
}

static inline void set_model(Baton__Model *m, uint32_t dim, uint32_t layers, uint32_t heads,
                             uint32_t kv, uint32_t ffn, uint32_t vocab) {
    m->dim = dim;
    m->n_layers = layers;
    m->n_heads = heads;
    m->n_kv_heads = kv;
    m->ffn_dim = ffn;
    m->vocab_size = vocab;
}

static inline void set_parallel(Baton__Parallel *p, uint32_t tp, uint32_t cp, uint32_t dp,
                                uint32_t pp, uint32_t ep) {
    p->tp = tp;
    p->cp = cp;
    p->dp = dp;
    p->pp = pp;
    p->ep = ep;
}

/* recipes/llama3-70b: 8 nodes x 8 H100-80GB, tp 8 pp 4 dp 2, ZeRO-1, BF16, seq 8K,
 * micro-batch 1, global batch 512, full recomputation, sequence parallel. */
static inline void fixture_70b(fixture *fx) {
    fixture_init(fx);
    set_model(&fx->model, 8192, 80, 64, 8, 28672, 128256);
    fx->stage.name = "pretrain-8k";
    fx->stage.seq_len = 8192;
    fx->stage.micro_batch = 1;
    fx->stage.global_batch = 512;
    fx->stage.recompute = BATON__STAGE__RECOMPUTE__FULL;
    set_parallel(&fx->par, 8, 1, 2, 4, 1);
    fx->prec.type = BATON__PRECISION__TYPE__BF16;
    fx->cluster.nodes = 8;
    fx->cluster.gpus_per_node = 8;
    fx->mem.bytes = 80000000000ull;
    fx->gpu.peak_tflops_bf16 = 989;
    fx->intra.bytes_per_s = 450e9;
    fx->inter.bytes_per_s = 50e9;
}

/* d 64, 2 layers, 4 heads (2 kv), ffn 176, vocab 100; tp 2 pp 2 dp 2 on one node. */
static inline void fixture_small(fixture *fx) {
    fixture_init(fx);
    set_model(&fx->model, 64, 2, 4, 2, 176, 100);
    fx->stage.name = "small";
    fx->stage.seq_len = 128;
    fx->stage.micro_batch = 2;
    fx->stage.global_batch = 16;
    set_parallel(&fx->par, 2, 1, 2, 2, 1);
    fx->prec.type = BATON__PRECISION__TYPE__BF16;
    fx->cluster.nodes = 1;
    fx->cluster.gpus_per_node = 8;
    fx->mem.bytes = 1000000000ull;
    fx->gpu.peak_tflops_bf16 = 100;
    fx->cluster.mfu = 0.5;
    fx->intra.bytes_per_s = 100e9;
    fx->inter.bytes_per_s = 10e9;
}

/* d 32, 4 layers, 4 heads, ffn 64, vocab 50; 4 experts (top 2) of ffn 16, 1 shared,
 * MoE every 2nd layer after 1 dense layer: layers 1 and 3. */
static inline void fixture_moe(fixture *fx) {
    fixture_small(fx);
    set_model(&fx->model, 32, 4, 4, 0, 64, 50);
    fx->model.arch = BATON__MODEL__ARCH__MOE;
    fx->model.moe = &fx->moe;
    fx->moe.n_experts = 4;
    fx->moe.top_k = 2;
    fx->moe.expert_ffn_dim = 16;
    fx->moe.n_shared_experts = 1;
    fx->moe.every = 2;
    fx->moe.first_dense_layers = 1;
}

static inline int build(fixture *fx, plan_stage *ps) {
    bt_diag d;
    bt_diag_init(&d);
    int rc = plan_stage_build(&fx->spec, ps, &d);
    if (rc != BT_OK) fprintf(stderr, "plan_stage_build: %s\n", d.msg);
    return rc;
}

static inline char *report_text(const fixture *fx, const plan_stage *ps) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    plan_report_text(f, &fx->spec, ps);
    fclose(f);
    return text;
}

static inline int has_warning(const plan_stage *ps, const char *needle) {
    for (int i = 0; i < ps->n_warnings; i++)
        if (strstr(ps->warnings[i], needle)) return 1;
    return 0;
}

#endif
