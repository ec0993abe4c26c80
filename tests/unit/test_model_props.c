/* Properties of the model that need no reference: recomputation (none, selective,
 * full) changes memory, never a bit of the gradients; K micro-batches with loss scale
 * 1/K equal one batch of K times the size; the bf16 and fp8 GEMM paths round their
 * inputs and report the amax they saw; configuration and argument errors come back as
 * codes with messages. Also prints the activation memory of each recompute mode. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_backend.h"
#include "model.h"
#include "precision.h"

#define SEED 7u

static model_config base_config(void) {
    model_config cfg = {
        .vocab = 256,
        .dim = 64,
        .n_layers = 2,
        .n_heads = 4,
        .n_kv_heads = 2,
        .head_dim = 16,
        .ffn_dim = 176,
        .norm_eps = 1e-5f,
    };
    rope_config_default(&cfg.rope);
    cfg.rope.type = ROPE_YARN;
    cfg.rope.factor = 4.0;
    cfg.rope.original_max_position = 16;
    return cfg;
}

static void make_batch(int32_t *tokens, int32_t *targets, size_t n, int V, uint64_t seed,
                       int ignore_some) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t)((s >> 33) % (uint64_t)V);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        targets[i] = (ignore_some && i % 9 == 4) ? -1 : (int32_t)((s >> 33) % (uint64_t)V);
    }
}

static int setup(model *m, backend *be, const model_config *cfg, int B, int T) {
    bt_diag d;
    bt_diag_init(&d);
    int rc = model_init(m, cfg, be, B, T, &d);
    if (rc) {
        fprintf(stderr, "model_init: %s\n", d.msg);
        return rc;
    }
    return model_init_weights(m, SEED);
}

/* Two accumulated micro-batches (so stale state would show), sequences of 80 tokens
 * (two attention row blocks). Gradients and losses must match bit for bit. */
static void test_recompute_bitwise(backend *be) {
    enum { B = 2, T = 80 };
    int32_t tokens[2][B * T], targets[2][B * T];
    model m[3];
    float losses[3][2];
    for (int k = 0; k < 2; k++)
        make_batch(tokens[k], targets[k], B * T, 256, 100 + k, 1);
    for (int mode = 0; mode < 3; mode++) {
        model_config cfg = base_config();
        cfg.recompute = (model_recompute)mode;
        CHECK(setup(&m[mode], be, &cfg, B, T) == 0);
        model_zero_grad(&m[mode]);
        for (int k = 0; k < 2; k++) {
            CHECK(model_forward(&m[mode], tokens[k], targets[k], B, T, &losses[mode][k]) == 0);
            CHECK(model_backward(&m[mode], 0.5f) == 0);
        }
    }
    size_t bytes = m[0].sizes.param_floats * sizeof(float);
    for (int mode = 1; mode < 3; mode++) {
        CHECK(memcmp(m[0].grads_mem, m[mode].grads_mem, bytes) == 0);
        CHECK(memcmp(losses[0], losses[mode], sizeof losses[0]) == 0);
    }
    CHECK(m[0].act_bytes > m[1].act_bytes && m[1].act_bytes > m[2].act_bytes);
    for (int mode = 0; mode < 3; mode++)
        model_free(&m[mode]);
}

/* A forward-only model (baton eval's) gives the stored-everything model's logits and loss
 * bit for bit, over 3 layers (its two residual buffers alternate) and 80-token sequences
 * (two attention row blocks), keeps activations linear in T (the other's attention
 * probabilities grow with T^2) and refuses a backward. */
static void test_forward_only(backend *be) {
    enum { B = 2, T = 80 };
    int32_t tokens[B * T], targets[B * T];
    make_batch(tokens, targets, B * T, 256, 42, 1);
    model m[2];
    float loss[2];
    for (int k = 0; k < 2; k++) {
        model_config cfg = base_config();
        cfg.n_layers = 3, cfg.forward_only = k;
        CHECK(setup(&m[k], be, &cfg, B, T) == 0);
        CHECK(model_forward(&m[k], tokens, targets, B, T, &loss[k]) == 0);
    }
    CHECK(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0);
    CHECK(memcmp(m[0].acts.logits, m[1].acts.logits, (size_t)B * T * 256 * sizeof(float)) == 0);
    CHECK(model_backward(&m[1], 1.0f) == BT_EINVAL);
    CHECK(m[1].act_bytes < m[0].act_bytes / 2 && m[1].work_bytes < m[0].work_bytes);
    model_free(&m[0]);
    model_free(&m[1]);
    /* activations at T = 1024 against T = 512: twice as many with forward_only */
    model_config cfg = base_config();
    cfg.forward_only = 1;
    model big, half;
    CHECK(setup(&half, be, &cfg, 1, 512) == 0 && setup(&big, be, &cfg, 1, 1024) == 0);
    CHECK(big.act_bytes <= 2 * half.act_bytes);
    model_free(&big);
    model_free(&half);
    /* one pipeline stage only */
    cfg.pp = 2, cfg.pp_rank = 0;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(model_init(&big, &cfg, be, 1, 8, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "forward-only passes run one pipeline stage");
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        num = d > num ? d : num;
        den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
    }
    return den > 0 ? num / den : num;
}

static double worst_tensor_err(const model *a, const model *b) {
    double worst = 0.0;
    for (int i = 0; i < model_n_tensors(a); i++) {
        model_tensor ta, tb;
        model_tensor_info(a, i, &ta);
        model_tensor_info(b, i, &tb);
        double e = rel_err(ta.grad, tb.grad, ta.count);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* One batch of 8 (scale 1) against 4 micro-batches of 2 (scale 1/4), every target
 * counted so each micro-batch's mean has the same weight. */
static void test_accumulation(backend *be) {
    enum { B = 8, T = 32, K = 4 };
    int32_t tokens[B * T], targets[B * T];
    model whole, micro;
    model_config cfg = base_config();
    make_batch(tokens, targets, B * T, 256, 55, 0);
    CHECK(setup(&whole, be, &cfg, B, T) == 0);
    CHECK(setup(&micro, be, &cfg, B / K, T) == 0);
    float loss = 0.0f, part;
    double mean = 0.0;
    model_zero_grad(&whole);
    CHECK(model_forward(&whole, tokens, targets, B, T, &loss) == 0);
    CHECK(model_backward(&whole, 1.0f) == 0);
    model_zero_grad(&micro);
    for (int k = 0; k < K; k++) {
        size_t off = (size_t)k * (B / K) * T;
        CHECK(model_forward(&micro, tokens + off, targets + off, B / K, T, &part) == 0);
        CHECK(model_backward(&micro, 1.0f / K) == 0);
        mean += part / (double)K;
    }
    double err = worst_tensor_err(&micro, &whole);
    printf("accumulation 4x2 vs 8: worst gradient rel err %.2e, loss %.9g vs %.9g\n", err, mean,
           (double)loss);
    CHECK(err <= 1e-6);
    CHECK_REL(mean, loss, 1e-6);
    model_free(&whole);
    model_free(&micro);
}

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static double fp8_rescaled_error(model *low, const model *ref, const int32_t *tokens,
                                 const int32_t *targets, int B, int T) {
    for (int i = 0; i < low->n_gemm; i++) {
        backend_gemm *g = &low->gemm[i];
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++)
            if (g->amax_acc[k] > 0) /* the running amaxes (host memory on the CPU) */
                g->scale[k] =
                    (k == BACKEND_FP8_DY ? PREC_E5M2_MAX : PREC_E4M3_MAX) / g->amax_acc[k];
    }
    float loss;
    model_zero_grad(low);
    CHECK(model_forward(low, tokens, targets, B, T, &loss) == 0);
    CHECK(model_backward(low, 1.0f) == 0);
    return worst_tensor_err(low, ref);
}

/* bf16 and fp8 GEMMs: close to float32, not equal to it, and fp8 reports amaxes. */
static void test_precision_paths(backend *be) {
    enum { B = 2, T = 32 };
    int32_t tokens[B * T], targets[B * T];
    make_batch(tokens, targets, B * T, 256, 9, 1);
    model ref, low;
    model_config cfg = base_config();
    CHECK(setup(&ref, be, &cfg, B, T) == 0);
    float loss_ref, loss;
    model_zero_grad(&ref);
    CHECK(model_forward(&ref, tokens, targets, B, T, &loss_ref) == 0);
    CHECK(model_backward(&ref, 1.0f) == 0);
    for (int p = BACKEND_PREC_BF16; p <= BACKEND_PREC_FP8; p++) {
        cfg.prec = (backend_prec)p;
        cfg.fp8_hybrid = 1;
        cfg.fp8_first_last_bf16 = 0;
        CHECK(setup(&low, be, &cfg, B, T) == 0);
        model_zero_grad(&low);
        CHECK(model_forward(&low, tokens, targets, B, T, &loss) == 0);
        CHECK(model_backward(&low, 1.0f) == 0);
        double err = worst_tensor_err(&low, &ref);
        printf("%s GEMMs: loss %.6f (fp32 %.6f), worst gradient rel err %.2e\n",
               p == BACKEND_PREC_BF16 ? "bf16" : "fp8", loss, loss_ref, err);
        CHECK(err > 0 && err < (p == BACKEND_PREC_BF16 ? 0.05 : 0.5));
        CHECK(loss != loss_ref);
        CHECK_REL(loss, loss_ref, p == BACKEND_PREC_BF16 ? 1e-2 : 5e-2);
        if (p == BACKEND_PREC_FP8) {
            const backend_gemm *g = &low.gemm[MODEL_GEMM_QKV];
            size_t wq = (size_t)(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim * cfg.dim;
            CHECK(g->prec == BACKEND_PREC_FP8 && g->dy_e5m2 == 1);
            CHECK(g->amax_acc != NULL && g->amax_acc == low.amax_acc); /* layer 0's QKV */
            CHECK(g->amax_acc[BACKEND_FP8_W] == max_abs(low.params.layers[0].wqkv, wq));
            CHECK(g->amax_acc[BACKEND_FP8_X] == max_abs(low.acts.layer[0].ln1, (size_t)B * T * 64));
            CHECK(g->amax_acc[BACKEND_FP8_DY] > 0);
            CHECK(low.gemm[MODEL_GEMMS_PER_LAYER * cfg.n_layers].prec == BACKEND_PREC_BF16);
            /* Scales from the amaxes just seen (delayed scaling, margin 0) use the fp8
             * range and must bring the result closer to float32 (E5M2 gradients keep it near
             * 10-20% of each tensor's scale in this small model). */
            double scaled = fp8_rescaled_error(&low, &ref, tokens, targets, B, T);
            printf("fp8 GEMMs with amax scaling: worst gradient rel err %.2e\n", scaled);
            CHECK(scaled < err && scaled < 0.25);
        }
        model_free(&low);
    }
    model_free(&ref);
}

static void test_errors(backend *be) {
    model m;
    model_config cfg = base_config();
    int32_t tokens[2 * 16], targets[2 * 16];
    float loss;
    make_batch(tokens, targets, 32, 256, 3, 0);
    CHECK(setup(&m, be, &cfg, 2, 16) == 0);
    CHECK(model_forward(&m, tokens, targets, 3, 16, &loss) == BT_ERANGE);
    CHECK(model_forward(&m, tokens, targets, 2, 17, &loss) == BT_ERANGE);
    tokens[5] = 256;
    CHECK(model_forward(&m, tokens, targets, 2, 16, &loss) == BT_ERANGE);
    tokens[5] = 1;
    CHECK(model_forward(&m, tokens, NULL, 2, 16, &loss) == 0);
    CHECK(model_backward(&m, 1.0f) == BT_EINVAL);
    /* Every target ignored: loss 0 and no gradient. */
    for (int i = 0; i < 32; i++)
        targets[i] = MODEL_IGNORE_INDEX;
    model_zero_grad(&m);
    CHECK(model_forward(&m, tokens, targets, 2, 16, &loss) == 0);
    CHECK(loss == 0.0f);
    CHECK(model_backward(&m, 1.0f) == 0);
    CHECK(max_abs(m.grads_mem, m.sizes.param_floats) == 0.0f);
    model_free(&m);
}

static void test_config_from_pb(void) {
    Baton__Model pb = BATON__MODEL__INIT;
    Baton__Rope rope = BATON__ROPE__INIT;
    Baton__RopeScaling sc = BATON__ROPE_SCALING__INIT;
    model_config cfg;
    bt_diag d;
    pb.dim = 64, pb.n_layers = 2, pb.n_heads = 4, pb.n_kv_heads = 0, pb.ffn_dim = 176;
    pb.vocab_size = 256;
    bt_diag_init(&d);
    CHECK(model_config_from_pb(&cfg, &pb, &d) == 0);
    CHECK(cfg.n_kv_heads == 4 && cfg.head_dim == 16 && cfg.rope.type == ROPE_NONE);
    CHECK(cfg.rope.theta == 10000.0 && cfg.norm_eps == 1e-5f);
    sc.type = BATON__ROPE_SCALING__TYPE__LLAMA3, sc.factor = 8, sc.original_max_position = 8192;
    rope.theta = 500000, rope.scaling = &sc, pb.rope = &rope;
    CHECK(model_config_from_pb(&cfg, &pb, &d) == 0);
    CHECK(cfg.rope.type == ROPE_LLAMA3 && cfg.rope.factor == 8 && cfg.rope.theta == 500000);
    CHECK(cfg.rope.high_freq_factor == 4 && cfg.rope.original_max_position == 8192);
    sc.original_max_position = 0;
    bt_diag_init(&d);
    CHECK(model_config_from_pb(&cfg, &pb, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "original_max_position");
    pb.rope = NULL, pb.n_kv_heads = 3;
    bt_diag_init(&d);
    CHECK(model_config_from_pb(&cfg, &pb, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "n_kv_heads (3) must divide model.n_heads (4)");
    pb.n_kv_heads = 2, pb.arch = BATON__MODEL__ARCH__MOE;
    bt_diag_init(&d);
    CHECK(model_config_from_pb(&cfg, &pb, &d) == BT_EUNSUPPORTED);
    Baton__Stage st = BATON__STAGE__INIT;
    Baton__Precision prec = BATON__PRECISION__INIT;
    prec.type = BATON__PRECISION__TYPE__FP8, prec.format = BATON__PRECISION__FORMAT__E4M3;
    st.precision = &prec, st.has_recompute = 1, st.recompute = BATON__STAGE__RECOMPUTE__FULL;
    model_config_apply_stage(&cfg, &st);
    CHECK(cfg.prec == BACKEND_PREC_FP8 && !cfg.fp8_hybrid && cfg.fp8_first_last_bf16);
    CHECK(cfg.recompute == MODEL_RECOMPUTE_FULL);
}

/* The parameter list: memory order, no gaps, HF names, norms flagged. */
static void test_tensors(backend *be) {
    model m;
    model_config cfg = base_config();
    CHECK(setup(&m, be, &cfg, 1, 8) == 0);
    size_t next = 0;
    int norms = 0;
    for (int i = 0; i < model_n_tensors(&m); i++) {
        model_tensor t;
        CHECK(model_tensor_info(&m, i, &t) == 0);
        CHECK_EQ_U64(t.offset, next);
        next += t.count;
        norms += t.no_decay;
        if (t.no_decay) CHECK(t.data[0] == 1.0f && t.ndim == 1);
    }
    CHECK_EQ_U64(next, m.sizes.param_floats);
    CHECK_EQ_U64(norms, 2 * cfg.n_layers + 1);
    model_tensor t;
    CHECK(model_tensor_info(&m, 3, &t) == 0);
    CHECK(strcmp(t.name, "model.layers.0.self_attn.k_proj.weight") == 0);
    CHECK(t.shape[0] == 32 && t.shape[1] == 64);
    CHECK(t.data == m.params.layers[0].wqkv + 64 * 64 &&
          t.grad == m.grads.layers[0].wqkv + 64 * 64);
    CHECK(model_tensor_info(&m, 1 + 9 + 7, &t) == 0); /* layer 1 up_proj */
    CHECK(strcmp(t.name, "model.layers.1.mlp.up_proj.weight") == 0);
    CHECK(t.data == m.params.layers[1].w13 + 176 * 64);
    CHECK(model_tensor_info(&m, model_n_tensors(&m), &t) == BT_ERANGE);
    model_free(&m);
}

static void report_memory(backend *be) {
    model_config cfg = base_config();
    model_sizes s;
    CHECK(model_sizes_compute(&cfg, be, 2, 32, &s) == 0);
    printf("dim 64, 2 layers, B=2, T=32: %zu parameters; activations none %zu B, "
           "selective %zu B, full %zu B; backward buffers %zu B, scratch %zu B\n",
           s.param_floats, s.act_floats[0] * 4, s.act_floats[1] * 4, s.act_floats[2] * 4,
           s.grad_act_floats * 4, s.scratch_floats * 4);
    CHECK(s.act_floats[0] > s.act_floats[1] && s.act_floats[1] > s.act_floats[2]);
}

int main(void) {
    backend be;
    cpu_backend_init(&be);
    test_recompute_bitwise(&be);
    test_forward_only(&be);
    test_accumulation(&be);
    test_precision_paths(&be);
    test_errors(&be);
    test_config_from_pb();
    test_tensors(&be);
    report_memory(&be);
    return check_status();
}
