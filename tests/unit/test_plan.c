/* The planner: exact parameter counts (LLaMA-3 70B/405B, hand-counted small dense and
 * MoE models), memory for the 64-GPU LLaMA-70B plan, activation ordering by
 * recomputation, communication and FLOPs against hand-evaluated formulas, warnings,
 * and the text/JSON reports (the JSON is checked by a small validating parser). */
#include <ctype.h>

#include "plan_fixture.h"

static void test_params_llama3(void) {
    fixture fx;
    fixture_70b(&fx);
    plan_params p;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(plan_params_count(&fx.model, &p, &d) == BT_OK);
    CHECK_EQ_U64(p.total, 70553706496ull);
    CHECK_EQ_U64(p.active, p.total);
    CHECK_EQ_U64(p.attn_layer, 150994944ull); /* 2*8192*8192 + 2*8192*1024 */
    CHECK_EQ_U64(p.mlp_layer, 704643072ull);  /* 3*8192*28672 */
    set_model(&fx.model, 16384, 126, 128, 8, 53248, 128256);
    CHECK(plan_params_count(&fx.model, &p, &d) == BT_OK);
    CHECK_EQ_U64(p.total, 405853388800ull);
    fx.stage.seq_len = 8192;
    plan_stage ps;
    set_parallel(&fx.par, 8, 1, 4, 16, 1);
    fx.cluster.nodes = 64;
    CHECK(build(&fx, &ps) == BT_OK);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "405.85B total (405,853,388,800)");
    free(text);
}

/* d 64, hd 16: attn 64*64 + 2*64*32 + 64*64 = 12288, mlp 3*64*176 = 33792, norms 128;
 * embedding = head = 6400, final norm 64: 12864 + 2*(12288 + 33792 + 128) = 105280. */
static void test_params_small(void) {
    fixture fx;
    fixture_small(&fx);
    plan_params p;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(plan_params_count(&fx.model, &p, &d) == BT_OK);
    CHECK_EQ_U64(p.attn_layer, 12288);
    CHECK_EQ_U64(p.mlp_layer, 33792);
    CHECK_EQ_U64(p.total, 105280);
    CHECK_EQ_U64(p.n_moe_layers, 0);
    fx.model.n_kv_heads = 3; /* does not divide 4 heads */
    CHECK(plan_params_count(&fx.model, &p, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "n_kv_heads 3");
}

/* d 32, kv = heads: attn 4*32*32 = 4096, mlp 3*32*64 = 6144, norms 64; MoE layer:
 * router 32*4 = 128 + experts 4*3*32*16 = 6144 + shared 3*32*16 = 1536 = 7808.
 * total = 1600 + 1600 + 32 + 4*(4096 + 64) + 2*6144 + 2*7808 = 47776;
 * active drops 2 idle experts per MoE layer: 47776 - 2*2*1536 = 41632. */
static void test_params_moe(void) {
    fixture fx;
    fixture_moe(&fx);
    plan_params p;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(plan_params_count(&fx.model, &p, &d) == BT_OK);
    CHECK_EQ_U64(p.n_moe_layers, 2);
    CHECK_EQ_U64(p.n_dense_layers, 2);
    CHECK(!plan_layer_is_moe(&p, 0) && plan_layer_is_moe(&p, 1));
    CHECK(!plan_layer_is_moe(&p, 2) && plan_layer_is_moe(&p, 3));
    CHECK_EQ_U64(p.moe_layer, 7808);
    CHECK_EQ_U64(p.total, 47776);
    CHECK_EQ_U64(p.active, 41632);
    fx.moe.top_k = 5;
    CHECK(plan_params_count(&fx.model, &p, &d) == BT_EINVAL);
}

static void test_memory_70b(void) {
    fixture fx;
    fixture_70b(&fx);
    fx.cluster.device = BATON__CLUSTER__DEVICE__CUDA;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.lay.world, 64);
    CHECK_EQ_U64(ps.microbatches, 256); /* 512 / (1 * 2) */
    /* stage 0: 20 layers + embedding, all / tp 8, norms replicated */
    CHECK_EQ_U64(ps.mem.heaviest_pp_stage, 0);
    CHECK_EQ_U64(ps.mem.params_on_rank, 20 * (855638016ull / 8 + 16384) + 1050673152ull / 8);
    /* the engine's: fp32 weights (4 B) and the GEMMs' bf16 copies of the 20 layers'
     * attention and MLP weights (2 B; not the embedding or norms); fp32 grads; Adam m, v
     * (8 B) over dp 2 */
    double p = (double)ps.mem.params_on_rank, copies = 2.0 * 20 * (855638016.0 / 8);
    CHECK_REL(ps.mem.gemm_copies, copies, 1e-12);
    CHECK_REL(ps.mem.params, 4 * p + copies, 1e-12); /* ~13.4 GB */
    CHECK_REL(ps.mem.optimizer, 8 * p / 2, 1e-12);   /* ~9.1 GB */
    CHECK_REL(ps.mem.grads, 4 * p, 1e-12);
    fx.cluster.device = BATON__CLUSTER__DEVICE__CPU; /* no copies */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.mem.params, 4 * p, 1e-12);
    fx.cluster.device = BATON__CLUSTER__DEVICE__CUDA;
    fx.prec.type = BATON__PRECISION__TYPE__FP8; /* E4M3 and its transpose: 2 B as well */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.mem.gemm_copies, copies, 1e-12);
    fx.model.ffn_dim = 28680; /* ffn / tp not a multiple of 16: 3 B, the first layer 2 B */
    CHECK(build(&fx, &ps) == BT_OK);
    double layer = (8192.0 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 28680) / 8;
    CHECK_REL(ps.mem.gemm_copies, 3.0 * 20 * layer - layer, 1e-12);
    fx.model.ffn_dim = 28672;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.mem.microbatches_in_flight, 4);
    CHECK(ps.mem.total < 50e9);
    CHECK(ps.mem.fits == 1);
    CHECK_EQ_U64(ps.comm.bytes[PLAN_COMM_CP], 0);
    CHECK(!ps.comm.crosses_nodes[PLAN_COMM_TP]);
    CHECK(ps.comm.crosses_nodes[PLAN_COMM_DP] && ps.comm.crosses_nodes[PLAN_COMM_PP]);
    CHECK(ps.compute_s > 0 && ps.step_time_s >= ps.compute_s);
    for (int i = 0; i < ps.n_warnings; i++)
        CHECK(strstr(ps.warnings[i], "crosses") == NULL);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "70.55B total (70,553,706,496)");
    CHECK_STR_CONTAINS(text, "fits (");
    CHECK_STR_CONTAINS(text, "of 80.00 GB)");
    CHECK_STR_CONTAINS(text, "within a node: tp; across nodes: pp, dp");
    CHECK_STR_CONTAINS(text, "      63     7    7    7    0    0    1    3");
    free(text);
}

static double activations_with(Baton__Stage__Recompute r, int sp) {
    fixture fx;
    fixture_70b(&fx);
    fx.stage.recompute = r;
    fx.par.sequence_parallel = sp;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    return ps.mem.activations;
}

/* Activations as worker/engine/model.c carves them, float32 whatever the precision. The
 * 70B stage 0 (20 layers, 4 micro-batches in flight), tp 8 with sequence parallelism:
 * T = N = 8192 rows, R = 1024 of the residual stream, per rank H 8 query heads, 1 kv head
 * (hd 128: q/k/v 1280 wide, the attention output 1024), F 3584. A layer's set: ln1, xmid,
 * ln2 (R C), their rstds (R), q/k/v, the log-sum-exp (H T), attention output, gate/up and
 * SwiGLU output (3 N F); no probabilities but under fp32 with recompute none (H T^2); no
 * 5as/h term (no dropout, the flash kernels keep no scores). */
static void test_activation_order(void) {
    double R = 1024, N = 8192, C = 8192, RC = R * C;
    double set = 3 * RC + 2 * R + N * 1280 + 8 * N + N * 1024 + 3 * N * 3584;
    double probs = 8 * N * N;
    /* none and selective keep every layer's input and set; full each layer's input and one
     * set per slot; every slot the chunk's output too */
    CHECK_REL(activations_with(BATON__STAGE__RECOMPUTE__NONE, 1), 4 * 4 * (21 * RC + 20 * set),
              1e-12);
    CHECK_REL(activations_with(BATON__STAGE__RECOMPUTE__SELECTIVE, 1), 4 * 4 * (21 * RC + 20 * set),
              1e-12);
    CHECK_REL(activations_with(BATON__STAGE__RECOMPUTE__FULL, 1), 4 * 4 * (21 * RC + set), 1e-12);
    /* without sequence parallelism the norms hold every row */
    double set_nosp = set + 3 * (N - R) * C + 2 * (N - R);
    CHECK_REL(activations_with(BATON__STAGE__RECOMPUTE__FULL, 0), 4 * 4 * (21 * N * C + set_nosp),
              1e-12);
    /* fp32: the same floats, and recompute none keeps the probabilities */
    fixture fx;
    fixture_70b(&fx);
    fx.prec.type = BATON__PRECISION__TYPE__FP32;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.mem.activations, 4 * 4 * (21 * RC + set), 1e-12);
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__NONE;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.mem.act_layer_set, 4 * (set + probs), 1e-12);
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__SELECTIVE;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.mem.act_layer_set, 4 * set, 1e-12);
}

/* Small config (bf16), m = 16 / (2 * 2) = 4 micro-batches, A = s*b*h*4 = 128*2*64*4 = 65536:
 * the engines send activations in float32, the gathers into bf16 products in bf16. */
static void test_comm_small(void) {
    fixture fx;
    fixture_small(&fx);
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.microbatches, 4);
    /* TP, the last stage: 1 layer x 4 mb x (4 reduce-scatters + 6 gathers in bf16, half a
     * unit each) (t-1)/t A, the head's reduce-scatter and 2 gathers in bf16, the
     * cross-entropy's all-gather (t-1) 3 s b 4 = 3072 and the three norms' gradients
     * 2 (t-1)/t h 4 = 256 each, per micro-batch */
    double ends = 4 * (3072 + 3 * 256.0);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_TP], 4 * (7 + 2) / 2 * 65536.0 + ends, 1e-12);
    /* PP: 4 mb x 1 neighbour x A/t */
    CHECK_REL(ps.comm.bytes[PLAN_COMM_PP], 131072, 1e-12);
    /* DP: last stage (12288 + 33792 + 6400) / 2 + 128 + 64 = 26432 params,
     * ZeRO-1: (n-1)/n x P x (4 + 4): the engine gathers its fp32 weights */
    CHECK_EQ_U64(ps.comm.busiest_pp_stage[PLAN_COMM_DP], 1);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 0.5 * 26432 * 8, 1e-12);
    CHECK_REL(ps.comm.seconds[PLAN_COMM_DP], 0.5 * 26432 * 8 / 100e9, 1e-12);
    /* memory: stage 0 (2 micro-batches in flight) outweighs stage 1 (1 + logits);
     * it holds 26240 + 128 = 26368 params; ZeRO-1 shards 8 B/param over dp 2 */
    CHECK_EQ_U64(ps.mem.heaviest_pp_stage, 0);
    CHECK_EQ_U64(ps.mem.params_on_rank, 26368);
    CHECK_EQ_U64(ps.mem.microbatches_in_flight, 2);
    CHECK_REL(ps.mem.optimizer, 8.0 * 26368 / 2, 1e-12);
    /* none, SP, bf16 (model.c's carving, float32): N = 256 rows, R = 128, per rank 2 heads,
     * 1 kv head (hd 16: q/k/v 64 wide, output 32), F 88: the set 3 R C + 2 R + 64 N + 2 T B
     * + 32 N + 3 N F = 117504 floats; a slot its layer's input, set and the output R C */
    CHECK_REL(ps.mem.act_layer_set, 4 * 117504.0, 1e-12);
    CHECK_REL(ps.mem.act_per_layer, 4 * (8192 + 117504.0), 1e-12);
    CHECK_REL(ps.mem.activations, 2 * 4 * (2 * 8192 + 117504.0), 1e-12);
    /* the last stage's head: final norm R C + R, logits N V/t, 2 N, tp's 3 t N */
    plan_memory last;
    plan_memory_for_pp_stage(&ps, 1, &last);
    CHECK_REL(last.act_logits, 4 * (8192 + 128 + 256 * 50 + 512 + 3 * 2 * 256.0), 1e-12);
    /* the backward's buffers: 3 N C, N max(qkv, 2F), N max(qd, F), the norms' dnorm C, RoPE
     * T hd; the CPU's op scratch the largest GEMM's bf16 copies, the MLP's gate and up:
     * N C + 2F C + N 2F */
    double scratch = 256 * 64 + 176 * 64 + 256 * 176;
    CHECK_REL(ps.mem.act_scratch, 4 * scratch, 1e-12);
    CHECK_REL(ps.mem.backward, 4 * (3 * 256 * 64 + 256 * 176 + 256 * 88 + 64 + 128 * 16 + scratch),
              1e-12);
    CHECK_REL(ps.mem.total,
              ps.mem.params + ps.mem.grads + ps.mem.optimizer + ps.mem.activations +
                  ps.mem.backward,
              1e-12);
    fx.par.zero = 0; /* all-reduce of fp32 grads: 2 (n-1)/n x P x 4 */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 2 * 0.5 * 26432 * 4, 1e-12);
    CHECK_REL(ps.mem.optimizer, 8.0 * 26368, 1e-12);
    /* full recompute repeats the forward up to the down projection: with SP + 1
     * reduce-scatter and 2 gathers (in bf16) */
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__FULL;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_TP], 4 * (9 + 2) / 2 * 65536.0 + ends, 1e-12);
    set_parallel(&fx.par, 1, 1, 2, 2, 1);
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.comm.bytes[PLAN_COMM_TP], 0);
    set_parallel(&fx.par, 1, 1, 1, 1, 1);
    CHECK(build(&fx, &ps) == BT_OK);
    for (int g = 0; g < PLAN_COMM_NGROUPS; g++)
        CHECK_EQ_U64(ps.comm.bytes[g], 0);
}

/* ZeRO-2/3 on the small config (tp 2, pp 2, dp 2, bf16, m = 4), by hand: per tp rank the
 * embedding is 6400/2 = 3200, a layer 12288/2 + 33792/2 + 128 = 23168, norm + head
 * 6400/2 + 64 = 3264. Chunks over dp 2: stage 0 1600 + 11584 = S 13184, stage 1
 * 11584 + 1632 = S 13216 (11584 of it a layer); the largest unit U = 23168 on both. */
static void test_zero_small(void) {
    fixture fx;
    fixture_small(&fx);
    fx.par.zero = 3;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    plan_memory m;
    plan_memory_for_pp_stage(&ps, 1, &m);
    CHECK_EQ_U64(m.zero_level, 3);
    CHECK_EQ_U64(m.zero_shard, 13216);
    CHECK_EQ_U64(m.zero_unit, 23168);
    /* fp32 shard + two gather buffers; the shard + two gradient buffers */
    CHECK_REL(m.params, 4.0 * (13216 + 2 * 23168), 1e-12);
    CHECK_REL(m.grads, 4.0 * (13216 + 2 * 23168), 1e-12);
    CHECK_REL(m.optimizer, 8.0 * 13216, 1e-12);
    plan_memory_for_pp_stage(&ps, 0, &m);
    CHECK_EQ_U64(m.zero_shard, 13184);
    CHECK_REL(m.optimizer, 8.0 * 13184, 1e-12);
    /* DP: a stage of two units keeps both gathered (model_zero.h): the step's first forward
     * gathers S (4 B) once, then per micro-batch 1 reduce-scatter (4 B) of (n-1) S, x m 4 */
    CHECK_EQ_U64(ps.comm.busiest_pp_stage[PLAN_COMM_DP], 1);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 13216.0 * (4 + 4 * 4), 1e-12);
    /* full recomputation's backward finds its recomputed units gathered */
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__FULL;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 13216.0 * (4 + 4 * 4), 1e-12);
    /* pp 1: units 1600 + 11584 + 11584 + 1632 = S 26400; each later forward gathers all but
     * the first two (S - 13184), each backward all but the last two (S - 13216) */
    set_parallel(&fx.par, 2, 1, 2, 1, 1);
    CHECK(build(&fx, &ps) == BT_OK);
    double gathered = 26400.0 + 3 * (26400 - 13184) + 4 * (26400 - 13216);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 4 * gathered + 4 * 4 * 26400.0, 1e-12);
    set_parallel(&fx.par, 2, 1, 2, 2, 1);
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__NONE;
    /* ZeRO-2: whole weights; grads = shard + two padded units' buffers (no whole buffer);
     * reduce-scatter per micro-batch, one all-gather of weights per step */
    fx.par.zero = 2;
    CHECK(build(&fx, &ps) == BT_OK);
    plan_memory_for_pp_stage(&ps, 1, &m);
    CHECK_REL(m.params, 4.0 * 26432, 1e-12);
    CHECK_REL(m.grads, 4.0 * (13216 + 2 * 23168), 1e-12);
    CHECK_REL(m.optimizer, 8.0 * 13216, 1e-12);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 13216.0 * (4 * 4 + 4), 1e-12);
    /* one data-parallel rank: nothing to shard, the zero 0 figures */
    set_parallel(&fx.par, 2, 1, 1, 2, 1);
    fx.cluster.gpus_per_node = 4;
    CHECK(build(&fx, &ps) == BT_OK);
    plan_memory_for_pp_stage(&ps, 1, &m);
    CHECK_EQ_U64(m.zero_level, 0);
    CHECK_REL(m.grads, 4.0 * 26432, 1e-12);
    CHECK_REL(m.optimizer, 8.0 * 26432, 1e-12);
    CHECK_EQ_U64(ps.comm.bytes[PLAN_COMM_DP], 0);
}

/* cp 2 ring, tp 1: s = 64, kv 2 heads of 16, chunk 2*64*2*2*16*4 = 32768 bytes;
 * per layer 2 passes x (cp-1) + cp = 4 chunks, x 2 layers x m 8. */
static void test_comm_cp_ep(void) {
    fixture fx;
    fixture_small(&fx);
    set_parallel(&fx.par, 1, 2, 1, 1, 1);
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.microbatches, 8);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_CP], 2 * 8 * 4 * 32768.0, 1e-12);
    /* Ulysses: 2 passes x 1/2 x s*b*hd*4 x (2*4 + 2*2) = 2 * 0.5 * 8192 * 12 per layer */
    fx.par.cp_comm = BATON__PARALLEL__CP_COMM__ULYSSES;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_CP], 2 * 8 * (2 * 0.5 * 8192 * 12), 1e-12);
    /* EP 2 over dp 2, MoE model: tokens 256, a2a = 2 * 256 * 32 * 1/2 = 8192 elements,
     * x (2 + 4) bytes (to the experts in bf16, back in float32) x 2 passes x 2 MoE layers
     * x m 4 */
    fixture_moe(&fx);
    set_parallel(&fx.par, 1, 1, 2, 1, 2);
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_EP], 8192.0 * 6 * 2 * 2 * 4, 1e-12);
    /* experts split by ep: 2 layers x 6144 / 2; dense the rest */
    CHECK_EQ_U64(ps.mem.expert_params_on_rank, 6144);
    CHECK_EQ_U64(ps.mem.params_on_rank + 6144, 47776);
    CHECK_EQ_U64(ps.mem.optim_shards_expert, 1); /* edp = dp*cp/ep = 1 */
}

/* MoE under tp 2 with sequence parallelism, ep 2 with dp 2 (bf16, m = 16 / (2 * 2) = 4,
 * A = 128*2*32*4 = 32768, a capacity): each tp rank runs the MoE block on its own rows;
 * under zero 0/1 the tp ranks fold in, so the ep group is the tp pair and edp the dp
 * pair (stages/layout.h); under ZeRO-2 ep is drawn from dp. */
static void test_comm_moe_sp(void) {
    fixture fx;
    fixture_moe(&fx);
    set_parallel(&fx.par, 2, 1, 2, 1, 2);
    fx.par.sequence_parallel = 1;
    fx.moe.capacity_factor = 1.0;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.microbatches, 4);
    /* TP: 2 dense layers x (4 + 6 gathers at half a unit: bf16) + 2 MoE layers x
     * (2 + 3 halves) + the embedding's 2 and the head's 1 + 2 halves, x 4 mb x 1/2 A; the
     * MoE block's gradients (router 128 + shared 1536 + experts 6144 / ep 2) all-reduced
     * once: 2 x 1/2 x 1664 x 4 per layer, the routed experts' (6144 / ep 2) summed with
     * their data-parallel reduction instead (zero 0/1: the tp ranks fold into it,
     * stages/layout.h); the chunk counts, (t-1) 2 b E 4 = 64 per MoE layer and
     * micro-batch; per micro-batch the cross-entropy's (t-1) 3 s b 4 = 3072 and 9 norms'
     * gradients of 2 (t-1)/t h 4 = 128 */
    double ends = 4 * (3072 + 9 * 128.0);
    double tp = 25 * 4 * 0.5 * 32768 + 2 * 1664 * 4.0 + 2 * 4 * 64 + ends;
    CHECK_REL(ps.comm.bytes[PLAN_COMM_TP], tp, 1e-12);
    /* DP: the dense parameters all-reduced over dp 2, the routed experts (2 layers x 6144
     * / ep 2) over their edp group of 2 (the dp pair) */
    double dense = (double)ps.mem.dense_params_on_rank;
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 2 * 0.5 * dense * 4 + 2 * 0.5 * 6144 * 4, 1e-12);
    fx.par.zero = 1; /* ZeRO-1: the experts' optimizer state sharded over those two ranks */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.mem.optim_shards_dense, 2);
    CHECK_EQ_U64(ps.mem.optim_shards_expert, 2);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_TP], tp, 1e-12);
    /* EP: each tp rank routes its 128 rows: a2a = 2 * 128 * 32 * 1/2 = 4096 elements,
     * x (2 + 4) bytes x 2 passes x 2 MoE layers x m 4 */
    CHECK_REL(ps.comm.bytes[PLAN_COMM_EP], 4096.0 * 6 * 2 * 2 * 4, 1e-12);
    /* MoE caches (worker/engine/moe_dev.c) of its N = 128 rows, C 32, E 4, K 2, S 1, F 16:
     * floats N C 4096 + N E 512 + N 128 + N K 256 + 2 N K C 16384 + S N 3F 6144 + room
     * for N K rows (ep: C + 3F each) 20480 = 48000, int32 4 N K + 6 E + 1 = 1049; one
     * micro-batch in flight, 2 MoE layers */
    CHECK_EQ_U64(ps.mem.moe_caches, 2);
    CHECK_REL(ps.mem.act_moe, 2 * 4 * (48000 + 1049.0), 1e-12);
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__FULL; /* one cache serves every layer */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.mem.act_moe, 4 * (48000 + 1049.0), 1e-12);
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__NONE;
    /* ZeRO-2: the block's gradient shard over edp = dp / ep = 1, the routed experts' too
     * (no folding): 2 x 1/2 x 4736 x 4 per layer; their optimizer state over edp alone */
    fx.par.zero = 2;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_TP], tp + 2 * (4736 - 1664) * 4.0, 1e-12);
    /* without sequence parallelism every tp rank runs the block on every row: the
     * attention's 4 units, nothing else; the ends 2 + 2, no norms */
    fx.par.sequence_parallel = 0, fx.par.zero = 0;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_TP], (2 * 8 + 2 * 4 + 4) * 4 * 0.5 * 32768 + 4 * 3072.0,
              1e-12);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_EP], 8192.0 * 6 * 2 * 2 * 4, 1e-12);
}

/* ep drawn from the tp ranks (the fold, stages/layout.h): tp 2 x dp 2 with ep 4, which dp
 * alone could not hold; zero 0 or 1 under sequence parallelism only. */
static void test_comm_moe_ep_over_tp(void) {
    fixture fx;
    fixture_moe(&fx);
    set_parallel(&fx.par, 2, 1, 2, 1, 4);
    fx.par.sequence_parallel = 1;
    fx.par.zero = 1;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.lay.fold_tp);
    CHECK_EQ_U64(ps.lay.size[LAYOUT_EDP], 1);
    CHECK_EQ_U64(plan_expert_holders(&ps), 1);
    CHECK_EQ_U64(ps.mem.expert_params_on_rank, 2 * 6144 / 4); /* one expert a rank */
    CHECK_EQ_U64(ps.mem.optim_shards_expert, 1);
    /* EP: each rank routes its 128 rows to 4: a2a = 2 * 128 * 32 * 3/4 = 6144 elements,
     * x (2 + 4) bytes x 2 passes x 2 MoE layers x m 4; its group is ranks 0-3, the tp
     * pair first */
    CHECK_REL(ps.comm.bytes[PLAN_COMM_EP], 6144.0 * 6 * 2 * 2 * 4, 1e-12);
    /* DP: the dense parameters only (each expert on one rank), reduced to their shards */
    double dense = (double)ps.mem.dense_params_on_rank;
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 2 * 0.5 * dense * 4, 1e-12);
    uint32_t g[4];
    CHECK_EQ_U64(layout_group(&ps.lay, LAYOUT_EP, 3, g), 4);
    for (uint32_t i = 0; i < 4; i++)
        CHECK_EQ_U64(g[i], i);
    /* ZeRO-2 keeps ep inside dp x cp: refused by the layout */
    fx.par.zero = 2;
    CHECK(build(&fx, &ps) == BT_EINVAL);
    /* tp 4 x dp 1, ep 2: each expert on two tp ranks, their gradients reduced over them */
    set_parallel(&fx.par, 4, 1, 1, 1, 2);
    fx.par.zero = 0;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(plan_expert_holders(&ps), 2);
    CHECK_REL(ps.comm.bytes[PLAN_COMM_DP], 2 * 0.5 * (2 * 6144 / 2) * 4.0, 1e-12);
    /* ZeRO-1 there shards the experts' state over their two holders, nothing else */
    fx.par.zero = 1;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(plan_zero1_active(&ps));
    CHECK_EQ_U64(ps.mem.optim_shards_dense, 1);
    CHECK_EQ_U64(ps.mem.optim_shards_expert, 2);
    CHECK_REL(ps.mem.optimizer,
              8.0 * ((double)ps.mem.dense_params_on_rank + ps.mem.expert_params_on_rank / 2.0),
              1e-12);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "only the experts sharded");
    free(text);
    /* without the fold (no sequence parallelism) one rank holds each expert: nothing */
    fx.par.sequence_parallel = 0;
    set_parallel(&fx.par, 4, 1, 1, 1, 1);
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(!plan_zero1_active(&ps));
}

/* 6 N T + 6 L h s T: N = 105280 - 6400, T = 16 * 128. */
static void test_flops(void) {
    fixture fx;
    fixture_small(&fx);
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    double t = 16.0 * 128, flops = 6.0 * 98880 * t + 6.0 * 2 * 64 * 128 * t;
    CHECK_REL(ps.flops_per_step, flops, 1e-12);
    CHECK_REL(ps.hw_flops_per_step, flops, 1e-12);
    CHECK_REL(ps.compute_s, flops / (8 * 100e12 * 0.5), 1e-12);
    CHECK(ps.bubble > 1.0 / 5); /* (pp-1)/(m+pp-1) = 1/5, and the head (test_pp_bubble) */
    CHECK(ps.tokens_per_s > 0);
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__FULL;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.hw_flops_per_step, flops * 4 / 3, 1e-12);
}

/* Under fp8 only the layers' dense GEMMs run at the fp8 rate (not the attention scores,
 * the head, the experts and router, the first and last layers with first_last_bf16, nor
 * products with a dimension on a tp rank not a multiple of 16, which the CUDA engine
 * carries in bf16): the rest takes the bf16 rate's time. */
static void test_flops_fp8(void) {
    fixture fx;
    fixture_small(&fx);
    fx.model.ffn_dim = 192; /* ffn / tp a multiple of 16: fp8 products */
    fx.prec.type = BATON__PRECISION__TYPE__FP8;
    fx.prec.first_last_bf16 = 0;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    double t = 16.0 * 128, F = ps.flops_per_step, peak = 8 * 200e12 * 0.5; /* 2 x bf16 */
    double attn = 64 * 64 * 2 + 64 * 32 * 2, mlp = 3 * 64 * 192;
    double f8 = 6.0 * t * 2 * (attn + mlp);
    CHECK_REL(ps.fp8_flops_per_step, f8, 1e-12);
    CHECK_REL(ps.compute_s, (f8 + 2 * (F - f8)) / peak, 1e-12);
    /* the layers' time weighs their fp8 GEMMs at half (pipeline balance and bubble):
     * 6 (attention, MLP, norms) + 6 d s, less half the fp8 part */
    double layer = 6 * (attn + mlp + 2 * 64) + 6.0 * 64 * 128;
    CHECK_REL(plan_pp_layer_flops(&ps, 0), layer - 6 * (attn + mlp) / 2, 1e-12);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "fp8 GEMMs");
    CHECK_STR_CONTAINS(text, "exposed comm");
    CHECK(strstr(text, "not 16-aligned") == NULL);
    free(text);
    fx.gpu.peak_tflops_fp8 = 400; /* 4 x bf16 */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.compute_s, (f8 + 4 * (F - f8)) / (8 * 400e12 * 0.5), 1e-12);
    fx.gpu.peak_tflops_fp8 = 0;
    fx.prec.first_last_bf16 = 1; /* both layers are the first or the last */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.fp8_flops_per_step == 0);
    CHECK_REL(ps.compute_s, 2 * F / peak, 1e-12);
    CHECK_REL(plan_pp_layer_flops(&ps, 0), layer, 1e-12);
    fx.prec.first_last_bf16 = 0;
    fx.model.ffn_dim = 176; /* 88 a rank: only the down projection is carried in bf16 */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.fp8_flops_per_step, 6.0 * t * 2 * (attn + 2 * 64 * 176), 1e-12);
    text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "not 16-aligned");
    free(text);
    fx.stage.seq_len = 100; /* 200 rows a product: padded to 208, still fp8 */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.fp8_flops_per_step, 6.0 * 16 * 100 * 2 * (attn + 2 * 64 * 176), 1e-12);
    /* MoE: layer 1's attention and experts (top 2 and the shared one, 3 x 32 x 16 each)
     * and layer 2's attention and MLP in fp8; layers 0 and 3 bf16 */
    fixture_moe(&fx);
    fx.prec.type = BATON__PRECISION__TYPE__FP8;
    fx.prec.first_last_bf16 = 1;
    CHECK(build(&fx, &ps) == BT_OK);
    double moe_attn = 4.0 * 32 * 32, experts = 3 * 3.0 * 32 * 16; /* q, k, v, o: 4 kv heads */
    t = 16.0 * 128;
    CHECK_REL(ps.fp8_flops_per_step, 6.0 * t * (moe_attn + experts + moe_attn + 3 * 32 * 64),
              1e-12);
    fx.moe.expert_ffn_dim = 24; /* w13 (2F = 48) fp8, w2 (F = 24) carried */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.fp8_flops_per_step,
              6.0 * t * (moe_attn + 3 * 2.0 * 32 * 24 + moe_attn + 3 * 32 * 64), 1e-12);
    fx.moe.expert_ffn_dim = 16;
    /* fp32 and bf16: one rate */
    fx.prec.type = BATON__PRECISION__TYPE__BF16;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.fp8_flops_per_step == 0);
    CHECK_REL(ps.compute_s, ps.flops_per_step / (8 * 100e12 * 0.5), 1e-12);
}

static void test_warnings_and_fit(void) {
    fixture fx;
    fixture_70b(&fx);
    fx.cluster.gpus_per_node = 4;
    fx.cluster.nodes = 16;
    fx.mem.bytes = 20000000000ull;
    fx.stage.global_batch = 16; /* m = 8 */
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.comm.crosses_nodes[PLAN_COMM_TP]);
    CHECK(has_warning(&ps,
                      "TP group of 8 ranks spans 8 consecutive ranks, more than gpus_per_node 4"));
    CHECK(ps.mem.fits == 0);
    CHECK(has_warning(&ps, "DOES NOT FIT"));
    CHECK(has_warning(&ps, "pipeline bubble 29%")); /* 3/11 were the stages equal: the head */
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "DOES NOT FIT");
    free(text);
    fx.mem.bytes = 0;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.mem.fits == -1);
    text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "capacity not given");
    free(text);
}

/* The step time counts the pipeline bubble: compute / (1 - bubble) + the exposed
 * communication; the end-to-end MFU is the model FLOPs over the devices' peak for the whole
 * step, as the workers log it. Fewer idle stages (virtual stages) give a shorter step. */
static void test_step_time(void) {
    fixture fx;
    fixture_70b(&fx);
    fx.stage.global_batch = 16; /* m = 8 over pp 4: a large bubble */
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.bubble > 0.2);
    CHECK_REL(ps.bubble_s, ps.compute_s * ps.bubble / (1 - ps.bubble), 1e-12);
    CHECK_REL(ps.step_time_s, ps.compute_s / (1 - ps.bubble) + ps.exposed_comm_s, 1e-12);
    CHECK_REL(ps.tokens_per_s, 16 * 8192 / ps.step_time_s, 1e-12);
    CHECK_REL(ps.mfu_e2e, ps.flops_per_step / (64 * 989e12 * ps.step_time_s), 1e-12);
    CHECK(ps.mfu_e2e < 0.4 * (1 - ps.bubble));
    char *text = report_text(&fx, &ps);
    char want[160];
    snprintf(want, sizeof want, "step %.3f s = compute + bubble + exposed comm", ps.step_time_s);
    CHECK_STR_CONTAINS(text, want);
    snprintf(want, sizeof want, "MFU %.3f end to end = model flops / (64 devices x 989 TFLOP/s",
             ps.mfu_e2e);
    CHECK_STR_CONTAINS(text, want);
    free(text);
    double step = ps.step_time_s, bubble = ps.bubble;
    fx.par.virtual_stages = 2; /* 80 layers over pp 4 x v 2 */
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.bubble < bubble - 0.05);
    CHECK(ps.step_time_s < step - 0.05 * ps.compute_s);
    /* no pipeline: no bubble, step = compute + exposed comm */
    set_parallel(&fx.par, 8, 1, 8, 1, 1);
    fx.par.virtual_stages = 0;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.bubble == 0 && ps.bubble_s == 0);
    CHECK_REL(ps.step_time_s, ps.compute_s + ps.exposed_comm_s, 1e-12);
}

/* The memory report's sums read true: the headline is the sum of the terms printed after
 * "=". Above 90% of the device memory the plan warns of what it does not count; a plan
 * that does not fit names the changes that would lower it, with what they would need
 * (not micro_batch when it is 1), and the ZeRO levels where there are replicas. */
static void test_memory_report_and_advice(void) {
    fixture fx;
    fixture_70b(&fx);
    fx.cluster.device = BATON__CLUSTER__DEVICE__CUDA;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    char *text = report_text(&fx, &ps), want[200], a[32], b[32];
    snprintf(want, sizeof want, "params      %10s = %s (4 B x ",
             plan_format_memory(a, sizeof a, ps.mem.params),
             plan_format_memory(b, sizeof b, ps.mem.params - ps.mem.gemm_copies));
    CHECK_STR_CONTAINS(text, want);
    snprintf(want, sizeof want, "+ %s (the GEMMs' converted weight copies",
             plan_format_memory(a, sizeof a, ps.mem.gemm_copies));
    CHECK_STR_CONTAINS(text, want);
    char slot[32];
    snprintf(slot, sizeof slot, "%.2f GB", ps.mem.act_per_slot / 1e9);
    snprintf(want, sizeof want, "activations %10s = 4 x %s (micro-batches in flight)",
             plan_format_memory(a, sizeof a, ps.mem.activations), slot);
    CHECK_STR_CONTAINS(text, want);
    free(text);
    CHECK(ps.mem.fits == 1 && !has_warning(&ps, "above 90%"));
    fx.mem.bytes = (uint64_t)(ps.mem.total / 0.95);
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.mem.fits == 1 && has_warning(&ps, "above 90% of cluster.gpu.memory"));
    /* micro_batch 1, zero 1, full recomputation: only ZeRO-2/3 and tp/pp to offer */
    fx.mem.bytes = (uint64_t)(ps.mem.total * 0.8);
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.mem.fits == 0 && has_warning(&ps, "DOES NOT FIT"));
    CHECK(has_warning(&ps, "zero: 2 would need") && has_warning(&ps, "zero: 3 would need"));
    CHECK(has_warning(&ps, "raise tp or pp"));
    /* an alternative is "(fits)" only under the 90% the plan warns above: each one's figure
     * against the capacity */
    for (int i = 0; i < ps.n_warnings; i++)
        for (const char *w = strstr(ps.warnings[i], " would need "); w != NULL;
             w = strstr(w + 1, " would need ")) {
            double gb = strtod(w + 12, NULL) * 1e9, cap = (double)fx.mem.bytes;
            const char *end = strchr(w + 12, ',');
            const char *fits = strstr(w, " (fits");
            int said = fits != NULL && (end == NULL || fits < end);
            int tight = said && strncmp(fits, " (fits, tight)", 14) == 0;
            CHECK(said == (gb <= cap * 1.0001));
            CHECK(!said || tight == (gb > 0.9 * cap * 1.0001));
        }
    /* zero: 2's figure at 95% of a device that the stage as it is does not fit */
    double z2 = 0;
    for (int i = 0; i < ps.n_warnings && z2 == 0; i++) {
        const char *w = strstr(ps.warnings[i], "zero: 2 would need ");
        if (w != NULL) z2 = strtod(w + 19, NULL) * 1e9;
    }
    CHECK(z2 > 0 && z2 / 0.95 < ps.mem.total);
    fx.mem.bytes = (uint64_t)(z2 / 0.95);
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.mem.fits == 0 && has_warning(&ps, "(fits, tight)"));
    CHECK(!has_warning(&ps, "micro_batch") && !has_warning(&ps, "recompute"));
    /* selective, micro_batch 2: full recomputation and micro_batch 1 lower it too */
    fx.stage.recompute = BATON__STAGE__RECOMPUTE__SELECTIVE;
    fx.stage.micro_batch = 2;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(has_warning(&ps, "recompute: full would need") &&
          has_warning(&ps, "micro_batch: 1 would need"));
    /* no replicas (dp*cp 1): no ZeRO to offer */
    set_parallel(&fx.par, 8, 1, 1, 4, 1);
    fx.cluster.nodes = 4;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.mem.fits == 0 && !has_warning(&ps, "zero:"));
}

/* The CUDA backend's dk/dv slices of the tensor-core attention under grouped-query
 * attention, in its op scratch: the 1.1B benchmark model's shape (32 heads of 64, 4 kv
 * heads, seq 4K, one sequence): 64 key tiles x 4 kv heads = 256 blocks, split into 4
 * slices for 1024: 2 x 4 x 4096 x 4 x 64 floats more than without grouping (the head's
 * GEMM the largest either way); none in float32 (no tensor-core attention). */
static void test_cuda_dkdv_slices(void) {
    fixture fx;
    fixture_init(&fx);
    set_model(&fx.model, 2048, 2, 32, 4, 5632, 32000);
    fx.stage.name = "gqa";
    fx.stage.seq_len = 4096;
    fx.stage.micro_batch = 1;
    fx.stage.global_batch = 1;
    set_parallel(&fx.par, 1, 1, 1, 1, 1);
    fx.prec.type = BATON__PRECISION__TYPE__BF16;
    fx.cluster.nodes = 1;
    fx.cluster.gpus_per_node = 1;
    fx.cluster.device = BATON__CLUSTER__DEVICE__CUDA;
    fx.mem.bytes = 80000000000ull;
    fx.gpu.peak_tflops_bf16 = 989;
    plan_stage gqa, mha;
    CHECK(build(&fx, &gqa) == BT_OK);
    fx.model.n_kv_heads = 32;
    CHECK(build(&fx, &mha) == BT_OK);
    CHECK_REL(gqa.mem.act_scratch - mha.mem.act_scratch, 4 * 2.0 * 4 * 4096 * 4 * 64, 1e-12);
    fx.prec.type = BATON__PRECISION__TYPE__FP32;
    fx.model.n_kv_heads = 4;
    CHECK(build(&fx, &gqa) == BT_OK);
    fx.model.n_kv_heads = 32;
    CHECK(build(&fx, &mha) == BT_OK);
    CHECK_REL(gqa.mem.act_scratch, mha.mem.act_scratch, 1e-12);
}

/* Memory below 1 GB is printed in the unit that fits, never "0.00 GB"; from 1 GB up in
 * GB with 2 decimals, as always. */
static void test_memory_units(void) {
    char buf[80], want[96];
    CHECK(strcmp(plan_format_memory(buf, sizeof buf, 35.84e9), "35.84 GB") == 0);
    CHECK(strcmp(plan_format_memory(buf, sizeof buf, 1e9), "1.00 GB") == 0);
    CHECK(strcmp(plan_format_memory(buf, sizeof buf, 999.5e6), "999.50 MB") == 0);
    CHECK(strcmp(plan_format_memory(buf, sizeof buf, 12345678), "12.35 MB") == 0);
    CHECK(strcmp(plan_format_memory(buf, sizeof buf, 1500), "1.50 KB") == 0);
    CHECK(strcmp(plan_format_memory(buf, sizeof buf, 512), "512 B") == 0);
    CHECK(strcmp(plan_format_memory_of(buf, sizeof buf, 35.84e9, 80e9), "35.84 of 80.00 GB") == 0);
    CHECK(strcmp(plan_format_memory_of(buf, sizeof buf, 10.36e6, 2e9), "10.36 MB of 2.00 GB") == 0);
    CHECK(strcmp(plan_format_memory_of(buf, sizeof buf, 10.36e6, 1e6), "10.36 MB of 1.00 MB") == 0);
    /* a small model on a 1 MB "GPU": the report and the warning say MB */
    fixture fx;
    fixture_small(&fx);
    fx.mem.bytes = 1000000;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.mem.fits == 0 && ps.mem.total > 1e6 && ps.mem.total < 1e9);
    char *text = report_text(&fx, &ps);
    snprintf(want, sizeof want, "DOES NOT FIT (%.2f MB of 1.00 MB)", ps.mem.total / 1e6);
    CHECK_STR_CONTAINS(text, want);
    free(text);
    snprintf(want, sizeof want,
             "DOES NOT FIT: %.2f MB needed on pipeline stage 0, 1.00 MB available",
             ps.mem.total / 1e6);
    CHECK(has_warning(&ps, want));
}

/* Absent submessages take the proto defaults; bad stages fail with a message. */
static void test_defensive(void) {
    fixture fx;
    fixture_small(&fx);
    fx.spec.cluster = NULL;
    fx.stage.parallel = NULL;
    fx.stage.precision = NULL;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK); /* dp 0 resolves to 1 GPU / (1*1*1) */
    CHECK_EQ_U64(ps.lay.world, 1);
    CHECK(ps.mem.fits == -1);
    CHECK_REL(ps.mem.params, 4.0 * 105280, 1e-12); /* fp32 weights */
    CHECK(ps.step_time_s == 0);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "time        unknown");
    free(text);
    bt_diag d;
    bt_diag_init(&d);
    fx.spec.model = NULL;
    CHECK(plan_stage_build(&fx.spec, &ps, &d) == BT_EINVAL);
    fixture_small(&fx);
    fx.par.pp = 3;
    bt_diag_init(&d);
    CHECK(plan_stage_build(&fx.spec, &ps, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "pp 3 exceeds model.n_layers 2");
    fixture_small(&fx);
    fx.par.order = "tp-dp-zz-pp";
    bt_diag_init(&d);
    CHECK(plan_stage_build(&fx.spec, &ps, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "unknown token \"zz\"");
}

/* ---- a small validating JSON parser (RFC 8259 grammar, no semantics) ---- */

static const char *json_value(const char *p);

static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p) {
    if (*p++ != '"') return NULL;
    while (*p && *p != '"') {
        if ((unsigned char)*p < 0x20) return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)p[i])) return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                return NULL;
            }
        }
        p++;
    }
    return *p == '"' ? p + 1 : NULL;
}

static const char *json_number(const char *p) {
    if (*p == '-') p++;
    if (!isdigit((unsigned char)*p)) return NULL;
    if (*p == '0')
        p++;
    else
        while (isdigit((unsigned char)*p))
            p++;
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p)) return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    return p;
}

static const char *json_members(const char *p, char close, int keyed) {
    p = json_ws(p + 1);
    if (*p == close) return p + 1;
    for (;;) {
        if (keyed) {
            p = json_string(json_ws(p));
            if (p == NULL || *(p = json_ws(p)) != ':') return NULL;
            p++;
        }
        p = json_value(p);
        if (p == NULL) return NULL;
        p = json_ws(p);
        if (*p == close) return p + 1;
        if (*p++ != ',') return NULL;
    }
}

static const char *json_value(const char *p) {
    p = json_ws(p);
    if (*p == '{') return json_members(p, '}', 1);
    if (*p == '[') return json_members(p, ']', 0);
    if (*p == '"') return json_string(p);
    for (const char *const *w = (const char *const[]){"true", "false", "null", NULL}; *w; w++)
        if (strncmp(p, *w, strlen(*w)) == 0) return p + strlen(*w);
    return json_number(p);
}

static int json_valid(const char *s) {
    const char *end = json_value(s);
    return end != NULL && *json_ws(end) == '\0';
}

/* The text report's setup line says "1 micro-batch", and its rank table keeps its columns
 * under their heads for a million ranks (7 digits) over 131072 nodes (6). */
static void test_report_widths(void) {
    fixture fx;
    fixture_small(&fx);
    set_parallel(&fx.par, 2, 1, 524288, 1, 1);
    fx.cluster.nodes = 131072, fx.stage.micro_batch = 1, fx.stage.global_batch = 524288;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "(1 micro-batch per step)");
    CHECK_STR_CONTAINS(text, "\n     rank   node  gpu   tp   cp   ep     dp   pp\n");
    CHECK_STR_CONTAINS(text, "\n  1048575 131071    7    1    0    0 524287    0\n");
    free(text);
    fixture_small(&fx); /* the usual widths */
    CHECK(build(&fx, &ps) == BT_OK);
    text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "(4 micro-batches per step)");
    CHECK_STR_CONTAINS(text, "\n    rank  node  gpu   tp   cp   ep   dp   pp\n");
    CHECK_STR_CONTAINS(text, "\n       7     0    7    1    0    0    1    1\n");
    free(text);
}

static void test_json(void) {
    CHECK(json_valid("{\"a\": [1, -2.5e3, true, null, \"x\\\"y\"]}"));
    CHECK(!json_valid("{\"a\": [1,]}"));
    CHECK(!json_valid("{\"a\": 1"));
    fixture a, b;
    fixture_70b(&a);
    fixture_moe(&b);
    b.stage.name = "moe \"quoted\"\n";
    set_parallel(&b.par, 1, 1, 2, 1, 2);
    plan_stage st[2];
    CHECK(build(&a, &st[0]) == BT_OK);
    CHECK(build(&b, &st[1]) == BT_OK);
    Baton__StageSpec *specs[2] = {&a.spec, &b.spec};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    plan_report_json(f, specs, st, 2);
    fclose(f);
    CHECK(json_valid(text));
    CHECK_STR_CONTAINS(text, "{\"stages\": [");
    CHECK_STR_CONTAINS(text, "\"name\": \"pretrain-8k\"");
    CHECK_STR_CONTAINS(text, "\"params_total\": 70553706496");
    CHECK_STR_CONTAINS(text, "\"world\": 64");
    CHECK_STR_CONTAINS(text, "\"layout\": {\"tp\": 8, \"cp\": 1, \"dp\": 2, \"pp\": 4, \"ep\": 1, "
                             "\"order\": \"tp-cp-ep-dp-pp\", \"nodes\": 8, \"gpus_per_node\": 8, "
                             "\"edp\": 2, \"experts_over_tp\": false}");
    CHECK_STR_CONTAINS(text, "\"memory_per_gpu\": {\"params\": ");
    CHECK_STR_CONTAINS(text, "\"fits\": true");
    CHECK_STR_CONTAINS(text, "\"comm_bytes_per_step\": {\"tp\": ");
    CHECK_STR_CONTAINS(text, "\"flops_per_step\": ");
    CHECK_STR_CONTAINS(text, "\"warnings\": [");
    CHECK_STR_CONTAINS(text, "\"name\": \"moe \\\"quoted\\\"\\u000a\"");
    free(text);
    /* the capacity as given, exact: a double would print 2^64 - 1 as 2^64 */
    a.mem.bytes = UINT64_MAX;
    CHECK(build(&a, &st[0]) == BT_OK);
    text = NULL;
    f = open_memstream(&text, &len);
    plan_report_json(f, specs, st, 1);
    fclose(f);
    CHECK_STR_CONTAINS(text, "\"capacity\": 18446744073709551615, \"fits\": true");
    free(text);
    text = NULL;
    f = open_memstream(&text, &len);
    plan_report_json(f, NULL, NULL, 0);
    fclose(f);
    CHECK(json_valid(text));
    free(text);
}

int main(void) {
    test_params_llama3();
    test_params_small();
    test_params_moe();
    test_comm_moe_sp();
    test_comm_moe_ep_over_tp();
    test_memory_70b();
    test_activation_order();
    test_comm_small();
    test_zero_small();
    test_comm_cp_ep();
    test_flops();
    test_flops_fp8();
    test_step_time();
    test_memory_report_and_advice();
    test_warnings_and_fit();
    test_memory_units();
    test_cuda_dkdv_slices();
    test_defensive();
    test_report_widths();
    test_json();
    return check_status();
}
