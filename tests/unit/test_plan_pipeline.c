/* The planner's pipeline: parallel.stage_layers, the balance of the stages and the best
 * split (against every split of small models), the interleaved schedule's activation
 * slots, the replayed bubble and the best chunk lengths (split from test_plan.c). */
#include "plan_fixture.h"

/* parallel.stage_layers: the 70B model's 80 layers as 19 + 21 + 21 + 19 (the stages with
 * the embedding and the head lighter). */
static void test_stage_layers(void) {
    fixture fx;
    fixture_70b(&fx);
    uint32_t split[4] = {19, 21, 21, 19};
    fx.par.stage_layers = split, fx.par.n_stage_layers = 4;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    static const uint32_t first[4] = {0, 19, 40, 61};
    for (uint32_t s = 0; s < 4; s++) {
        uint32_t f, n, moe;
        plan_pp_stage_layers(&ps.params, 4, 1, s, &f, &n, &moe);
        CHECK_EQ_U64(f, first[s]);
        CHECK_EQ_U64(n, split[s]);
        CHECK_EQ_U64(plan_pp_stage_layer(&ps.params, 4, 1, s, n - 1), first[s] + n - 1);
    }
    plan_memory m;
    plan_memory_for_pp_stage(&ps, 1, &m);
    CHECK_EQ_U64(m.params_on_rank, 21 * (855638016ull / 8 + 16384));
    for (int i = 0; i < ps.n_warnings; i++) /* no "not a multiple of pp" warning */
        CHECK(strstr(ps.warnings[i], "hold one layer more") == NULL);
    split[3] = 18; /* 79 layers */
    CHECK(build(&fx, &ps) == BT_EINVAL);
    split[3] = 19, fx.par.n_stage_layers = 3;
    CHECK(build(&fx, &ps) == BT_EINVAL);
    /* interleaved: 5 layers as chunks 2 + 1 + 1 + 1 over pp 2 x v 2, stage 0 holding the
     * model's chunks 0 and 2 (layers 0 1 | 3), stage 1 chunks 1 and 3 (2 | 4) */
    fixture small;
    fixture_small(&small);
    set_model(&small.model, 64, 5, 4, 2, 176, 100);
    small.par.virtual_stages = 2;
    uint32_t chunks[4] = {2, 1, 1, 1};
    small.par.stage_layers = chunks, small.par.n_stage_layers = 4;
    CHECK(build(&small, &ps) == BT_OK);
    static const uint32_t layers[2][3] = {{0, 1, 3}, {2, 4, 0}};
    for (uint32_t s = 0; s < 2; s++) {
        uint32_t f, n, moe, c0, len;
        plan_pp_stage_layers(&ps.params, 2, 2, s, &f, &n, &moe);
        CHECK_EQ_U64(n, 3 - s);
        for (uint32_t i = 0; i < n; i++)
            CHECK_EQ_U64(plan_pp_stage_layer(&ps.params, 2, 2, s, i), layers[s][i]);
        plan_pp_chunk_span(&ps.params, 2, 2, s, 1, &c0, &len);
        CHECK_EQ_U64(c0, 2 - s);
        CHECK_EQ_U64(len, 1);
    }
    small.par.n_stage_layers = 2; /* two entries for four chunks */
    CHECK(build(&small, &ps) == BT_EINVAL);
}

/* Every split of L layers over pp stages into out (count of them); recursion over the
 * first stage's layers. */
static size_t all_splits(uint32_t L, uint32_t pp, uint32_t *cur, uint32_t depth, uint32_t *out,
                         size_t n) {
    if (depth == pp - 1) {
        cur[depth] = L;
        memcpy(out + n * pp, cur, pp * sizeof *cur);
        return n + 1;
    }
    for (uint32_t k = 1; k + (pp - depth - 1) <= L; k++) {
        cur[depth] = k;
        n = all_splits(L - k, pp, cur, depth + 1, out, n);
    }
    return n;
}

/* plan_pp_balance and plan_pp_best_split against every split of 7 layers (a heavy head:
 * vocab 4096 at dim 64) over 2, 3 and 4 stages: the best split's balance is the least of
 * all, and building its split gives that balance. */
static void test_pp_balance(void) {
    for (uint32_t pp = 2; pp <= 4; pp++) {
        fixture fx;
        fixture_small(&fx);
        set_model(&fx.model, 64, 7, 4, 2, 176, 4096);
        set_parallel(&fx.par, 1, 1, 1, pp, 1);
        fx.cluster.gpus_per_node = pp;
        plan_stage ps;
        CHECK(build(&fx, &ps) == BT_OK);
        CHECK(ps.pp_balance > 1);
        CHECK_EQ_U64(ps.pp_slowest, pp - 1); /* the head's stage */
        uint32_t best[4], cur[4], *splits = malloc(100 * 4 * sizeof *splits);
        double got = plan_pp_best_split(&ps, best), least = 1e9;
        size_t n = all_splits(7, pp, cur, 0, splits, 0);
        for (size_t i = 0; i < n; i++) {
            fx.par.stage_layers = splits + i * pp, fx.par.n_stage_layers = pp;
            CHECK(build(&fx, &ps) == BT_OK);
            least = ps.pp_balance < least ? ps.pp_balance : least;
        }
        CHECK_REL(got, least, 1e-12);
        fx.par.stage_layers = best, fx.par.n_stage_layers = pp;
        CHECK(build(&fx, &ps) == BT_OK);
        CHECK_REL(ps.pp_balance, got, 1e-12);
        free(splits);
    }
    /* the even split of the 7 layers over 2 stages: the warning names a better one */
    fixture fx;
    fixture_small(&fx);
    set_model(&fx.model, 64, 7, 4, 2, 176, 4096);
    set_parallel(&fx.par, 1, 1, 1, 2, 1);
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    uint32_t best[2];
    CHECK_REL(ps.pp_best_balance, plan_pp_best_split(&ps, best), 1e-12);
    CHECK(ps.pp_best_balance < ps.pp_balance);
    CHECK_EQ_U64(ps.pp_best_split[0], best[0]);
    CHECK_EQ_U64(ps.pp_best_split[1], best[1]);
    int named = 0;
    for (int i = 0; i < ps.n_warnings; i++)
        named |= strstr(ps.warnings[i], "pipeline_best_split") != NULL;
    CHECK(named);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "evened out by parallel.stage_layers: [");
    free(text);
    /* a split that would not fit in memory is not offered */
    fx.mem.bytes = 1000000;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.pp_best_balance == 0);
    named = 0;
    for (int i = 0; i < ps.n_warnings; i++)
        named |= strstr(ps.warnings[i], "more than there is") != NULL;
    CHECK(named);
}

/* Interleaved stages (the small config, 4 layers, pp 2, v 2, dp 2): the activation slots
 * are those of the schedule the worker runs (pipe_schedule.h). m = 4, a multiple of pp:
 * Megatron's 2 (pp - 1 - s) + (v - 1) pp + 1 = 5 on stage 0, 3 + the head's own on stage
 * 1; m = 5 (groups of 2 and 3): 7 and 6, two head slots; m = 3 (one group): 6 and 4. */

static void test_interleaved_slots(void) {
    fixture fx;
    fixture_small(&fx);
    set_model(&fx.model, 64, 4, 4, 2, 176, 100);
    fx.par.virtual_stages = 2;
    static const uint32_t m[3] = {4, 5, 3}, want[3][2] = {{5, 4}, {7, 6}, {6, 4}};
    for (int i = 0; i < 3; i++) {
        fx.stage.global_batch = m[i] * 2 * 2;
        plan_stage ps;
        CHECK(build(&fx, &ps) == BT_OK);
        CHECK_EQ_U64(ps.microbatches, m[i]);
        for (uint32_t st = 0; st < 2; st++) {
            plan_memory mem;
            plan_memory_for_pp_stage(&ps, st, &mem);
            CHECK_EQ_U64(mem.microbatches_in_flight, want[i][st]);
        }
        CHECK(has_warning(&ps, "the last group of 3") == (m[i] != 4)); /* 3: one group */
    }
}

/* plan_pp_replay: equal stages give (pp-1)/(v m + pp-1) for every pp, v, m and forward to
 * backward ratio (m not a multiple of pp too); two pipelines worked by hand. */
static void test_pp_replay(void) {
    double f[15], b[15];
    for (int ratio = 1; ratio <= 3; ratio++) {
        for (int i = 0; i < 15; i++)
            f[i] = 1.5, b[i] = 1.5 * ratio;
        for (uint32_t pp = 2; pp <= 5; pp++)
            for (uint32_t v = 1; v <= 3; v++)
                for (uint32_t K = v > 1 ? pp : 1; K <= 3 * pp; K++)
                    CHECK_REL(plan_pp_replay(pp, v, K, f, b), (pp - 1.0) / (v * K + pp - 1.0),
                              1e-12);
    }
    /* pp 2, one micro-batch, stage 1 twice as slow: 1 + 2 + 4 + 2 = 9 long, 18 - 9 idle */
    double f1[2] = {1, 2}, b1[2] = {2, 4};
    CHECK_REL(plan_pp_replay(2, 1, 1, f1, b1), 0.5, 1e-12);
    /* pp 2, two: stage 0 F0 [0,1] F1 [1,2] B0 [5,6] B1 [9,10]; stage 1 F0 [1,2] B0 [2,5]
     * F1 [5,6] B1 [6,9]: busy 4 + 8 of 2 x 10 */
    double f2[2] = {1, 1}, b2[2] = {1, 3};
    CHECK_REL(plan_pp_replay(2, 1, 2, f2, b2), 0.4, 1e-12);
    CHECK(plan_pp_replay(4, 2, 3, f, b) < 0); /* interleaved needs m >= pp */
    /* Interleaved, pp 2 x v 2, chunks of stage 0 taking 2 and 1, of stage 1 1 and 1 (and
     * 1.3), backward twice the forward: the figures a separate simulator of the action
     * lists gave (written for a review; a stage's batch of transfers completes whole, so
     * the next forward can wait for a gradient: a replay of data dependencies alone gave
     * 16.7% and 12.8%) */
    double f3[4] = {2, 1, 1, 1}, b3[4] = {4, 2, 2, 2}, f4[4] = {2, 1, 1, 1.3},
           b4[4] = {4, 2, 2, 2.6};
    CHECK_REL(plan_pp_replay(2, 2, 8, f3, b3), 0.2, 1e-12);
    CHECK_REL(plan_pp_replay(2, 2, 4, f3, b3), 3.0 / 13, 1e-12);
    CHECK_REL(plan_pp_replay(2, 2, 8, f4, b4), 11.0 / 64, 1e-12);
    /* pp 3 x v 2, where a send also waits for its receive (a batch completes whole): a
     * second simulator's figures (the first, with sends that never wait, gave 24.3% for
     * both) */
    double f5[6] = {1, 2, 1, 1, 1, 1}, b5[6] = {2, 4, 2, 2, 2, 2};
    double f6[6] = {1, 2, 2, 1, 1, 1}, b6[6] = {2, 4, 4, 2, 2, 2};
    CHECK_REL(plan_pp_replay(3, 2, 4, f5, b5), 5.0 / 19, 1e-12);
    CHECK_REL(plan_pp_replay(3, 2, 7, f6, b6), 3.0 / 11, 1e-12);
}

/* plan_pp_bubble on a planned stage: two 1-layer stages, the head on the last, m = 4. The
 * last stage is the slower, so it runs its 4 passes back to back after stage 0's first
 * forward, and stage 0 ends one backward after it: f0 + m (f1 + b1) + b0. A split that
 * evens 7 layers with a heavy head lowers the bubble; uneven interleaved chunks raise it
 * above the equal-stage figure. */
static void test_pp_bubble(void) {
    fixture fx;
    fixture_small(&fx);
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    double f0, b0, f1, b1, m = 4;
    plan_pp_chunk_flops(&ps, 0, 0, &f0, &b0);
    plan_pp_chunk_flops(&ps, 1, 0, &f1, &b1);
    CHECK(f1 + b1 > f0 + b0);
    CHECK_REL(b0, 2 * f0, 1e-12);
    double end = f0 + m * (f1 + b1) + b0;
    CHECK_REL(ps.bubble, 1 - m * (f0 + b0 + f1 + b1) / (2 * end), 1e-12);
    CHECK(ps.bubble > 1.0 / 5);
    CHECK_REL((f1 + b1) * 2 / (f0 + b0 + f1 + b1), ps.pp_balance, 1e-12);
    char *text = report_text(&fx, &ps);
    CHECK_STR_CONTAINS(text, "(equal stages: (pp-1)/(v*m+pp-1) = 20.0%)");
    free(text);
    set_model(&fx.model, 64, 7, 4, 2, 176, 4096);
    set_parallel(&fx.par, 1, 1, 1, 2, 1);
    CHECK(build(&fx, &ps) == BT_OK);
    double even = ps.bubble;
    uint32_t best[2];
    plan_pp_best_split(&ps, best);
    /* too many passes to replay (m > 2^21 over pp 2): the slowest stage's pace */
    fx.stage.micro_batch = 1, fx.stage.global_batch = (1u << 21) + 1;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_REL(ps.bubble, 1 - 1 / ps.pp_balance, 1e-5);
    fx.stage.micro_batch = 2, fx.stage.global_batch = 16;
    fx.par.stage_layers = best, fx.par.n_stage_layers = 2;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.bubble < even);
    /* 5 layers over pp 2 x v 2, the chunks 2, 1, 1, 1: above m = 8's equal figure */
    static uint32_t chunks[4] = {2, 1, 1, 1};
    set_model(&fx.model, 64, 5, 4, 2, 176, 100);
    set_parallel(&fx.par, 1, 1, 1, 2, 1);
    fx.par.virtual_stages = 2, fx.par.stage_layers = chunks, fx.par.n_stage_layers = 4;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK_EQ_U64(ps.microbatches, 8);
    CHECK(ps.bubble > 1.0 / 17);
    for (int i = 0; i < ps.n_warnings; i++)
        CHECK(strstr(ps.warnings[i], "assume equal") == NULL);
}

/* plan_pp_best_chunks against every list of chunk lengths of small interleaved pipelines
 * (a heavy head: vocab 4096 at dim 64; and MoE layers every other one): the local search
 * finds the least slowest stage of all, and planning its list gives that balance; what
 * the plan offers (plan_pp_best_chunks_step) idles about as little as any list. */
static void test_pp_best_chunks(void) {
    static const uint32_t cases[][3] = {{7, 2, 2}, {10, 2, 2}, {9, 2, 3}, {8, 3, 2}, {11, 3, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t L = cases[i][0], pp = cases[i][1], v = cases[i][2], K = pp * v;
        for (int moe = 0; moe <= 1; moe++) {
            fixture fx;
            if (moe) {
                fixture_moe(&fx);
                fx.moe.every = 2, fx.moe.first_dense_layers = 0;
                fx.model.n_layers = L, fx.model.vocab_size = 4096;
            } else {
                fixture_small(&fx);
                set_model(&fx.model, 64, L, 4, 2, 176, 4096);
            }
            set_parallel(&fx.par, 1, 1, 1, pp, 1);
            fx.par.virtual_stages = v, fx.stage.global_batch = 4 * pp * fx.stage.micro_batch;
            fx.cluster.gpus_per_node = pp;
            uint32_t best[8], cur[8], *lists = malloc(300 * K * sizeof *lists);
            size_t n = all_splits(L, K, cur, 0, lists, 0);
            double least = 1e9, got = -1, idle = 1;
            for (size_t j = 0; j < n; j++) {
                plan_stage ps;
                fx.par.stage_layers = lists + j * K, fx.par.n_stage_layers = K;
                CHECK(build(&fx, &ps) == BT_OK);
                least = ps.pp_balance < least ? ps.pp_balance : least;
                idle = ps.bubble < idle ? ps.bubble : idle;
                if (j == 0) got = plan_pp_best_chunks(&ps, best); /* from the first list */
            }
            CHECK_REL(got, least, 1e-12);
            plan_stage ps;
            fx.par.stage_layers = best;
            CHECK(build(&fx, &ps) == BT_OK);
            CHECK_REL(ps.pp_balance, got, 1e-12);
            /* from the recipe's first list (the heaviest first chunk) the plan offers one */
            fx.par.stage_layers = lists;
            CHECK(build(&fx, &ps) == BT_OK);
            /* from the recipe's first list (the heaviest first chunk) the plan offers the
             * lengths its replayed schedule idles least with: the least of all lists, or
             * within 0.1 point of it (measured: 8 of these 10 the least, 2 within 0.05) */
            uint32_t offer[8];
            CHECK_EQ_U64(ps.pp_best_split_n, K);
            memcpy(offer, ps.pp_best_split, K * sizeof *offer);
            fx.par.stage_layers = offer;
            CHECK(build(&fx, &ps) == BT_OK);
            CHECK(ps.bubble >= idle - 1e-12 && ps.bubble <= idle + 0.001);
            free(lists);
        }
    }
}

/* Evening the stages' totals can lengthen an interleaved step: 24 layers over pp 2 x v 2
 * with a heavy head (vocab 32000 at dim 64), m 8. The lengths that even the totals best,
 * [11, 1, 11, 1] (1.61x to 1.29x), idle more than the even chunks' 38.8% (each stage
 * has one long and one short chunk); the plan offers lengths that idle less instead. */
static void test_pp_chunks_not_slower(void) {
    fixture fx;
    fixture_small(&fx);
    set_model(&fx.model, 64, 24, 4, 2, 176, 32000);
    set_parallel(&fx.par, 1, 1, 1, 2, 1);
    fx.par.virtual_stages = 2, fx.stage.micro_batch = 2, fx.stage.global_batch = 16;
    plan_stage ps;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.bubble_replayed);
    CHECK(ps.pp_balance > 1.4);
    uint32_t best[4];
    double got = plan_pp_best_chunks(&ps, best);
    CHECK(got < ps.pp_balance - 0.02); /* better by the stages' totals */
    CHECK_EQ_U64(ps.pp_best_split_n, 4);
    uint32_t offer[4];
    memcpy(offer, ps.pp_best_split, sizeof offer);
    double even = ps.bubble;
    fx.par.stage_layers = best, fx.par.n_stage_layers = 4;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.bubble > even);
    fx.par.stage_layers = offer;
    CHECK(build(&fx, &ps) == BT_OK);
    CHECK(ps.bubble < even - 0.01);
}

/* ZeRO-3's gathers past PLAN_ZERO3_REPLAY micro-batch chunks: two short replays and the
 * growth of each group of pp micro-batches give what the whole replay gives, for every
 * stage of small pipelines (interleaved, with a last group of pp to 2 pp - 1, full
 * recomputation or not). */
static void test_zero3_extended(void) {
    fixture fx;
    fixture_small(&fx);
    fx.par.zero = 3, fx.stage.micro_batch = 1;
    static const uint32_t cases[][3] = {{6, 2, 1},  {7, 3, 1}, {8, 2, 2},
                                        {12, 3, 2}, {9, 3, 3}, {6, 1, 1}};
    plan_zero_unit unit[16];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t L = cases[i][0], pp = cases[i][1], v = cases[i][2];
        set_model(&fx.model, 64, L, 4, 2, 176, 100);
        set_parallel(&fx.par, 1, 1, 2, pp, 1);
        fx.par.virtual_stages = v;
        for (int full = 0; full <= 1; full++)
            for (uint32_t K = 8 * pp + 1; K <= 11 * pp; K++) {
                fx.stage.recompute =
                    full ? BATON__STAGE__RECOMPUTE__FULL : BATON__STAGE__RECOMPUTE__NONE;
                fx.stage.global_batch = 2 * K;
                plan_stage ps;
                CHECK(build(&fx, &ps) == BT_OK);
                CHECK_EQ_U64(ps.microbatches, K);
                for (uint32_t st = 0; st < pp; st++) {
                    plan_zero_units(&ps, st, unit);
                    double all = plan_zero3_gathered(&ps, st, unit, UINT64_MAX);
                    CHECK(all > 0);
                    CHECK_REL(plan_zero3_gathered(&ps, st, unit, 0), all, 1e-12);
                }
            }
    }
    /* 2^30 micro-batches over pp 2 x v 2: 2 K v passes do not fit 32 bits (they counted
     * none); the dp bytes per micro-batch are those of 1024 (the warmup aside) */
    set_model(&fx.model, 64, 4, 4, 2, 176, 100);
    set_parallel(&fx.par, 1, 1, 2, 2, 1);
    fx.par.virtual_stages = 2, fx.stage.recompute = BATON__STAGE__RECOMPUTE__NONE;
    plan_stage small, big;
    fx.stage.global_batch = 2 * 1024;
    CHECK(build(&fx, &small) == BT_OK);
    fx.stage.global_batch = 2ull << 30;
    CHECK(build(&fx, &big) == BT_OK);
    CHECK_EQ_U64(big.microbatches, 1u << 30);
    CHECK_REL(big.comm.bytes[PLAN_COMM_DP] / (1u << 30), small.comm.bytes[PLAN_COMM_DP] / 1024,
              1e-2);
}

int main(void) {
    test_pp_best_chunks();
    test_pp_chunks_not_slower();
    test_pp_replay();
    test_pp_bubble();
    test_stage_layers();
    test_pp_balance();
    test_interleaved_slots();
    test_zero3_extended();
    return check_status();
}
