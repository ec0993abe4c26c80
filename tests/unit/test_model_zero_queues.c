/* ZeRO-2's and ZeRO-3's side queues (model_zero.h), checked without a GPU. A real model
 * runs its passes on the CPU backend with ZeRO-3's gather and gradient buffers (ZeRO-2:
 * its whole parameters and the gradient buffers, and no gather may happen); the backend's
 * stream_wait and the trainer's collectives are replaced by recorders that keep a vector
 * clock per queue (the ops' queue and the three side queues, ordered only by the waits,
 * as CUDA events order streams). Every access to the four buffers is checked against the
 * earlier ones: the gathers (writing a parameter buffer) and reductions (a gradient
 * buffer) on their side queue; the ops' queue reading weights (matmuls, embedding,
 * norms), writing weight gradients, zeroing and accumulating. Two accesses to a buffer
 * from different queues, one of them a write, must be ordered by the waits; and every
 * collective must be ordered after the group's earlier ones (NCCL runs one communicator's
 * operations in the order they were issued), and the ops' queue may wait for a side
 * queue only after the host has (under the comm's timeout: else a host sync on the ops'
 * queue could hang on a collective that never ends). This rank's collectives are a single rank's
 * (a gather copies the whole unit, a reduction leaves it), so the losses must equal an
 * ordinary model's bit for bit and the gradients accumulated its up to the order of the
 * micro-batches' additions (1e-6 relative), and after the weights change no stale unit
 * may be used; the update's use of a gradient buffer as scratch (model_zero_spare) must be
 * ordered before the next backward's reductions. Without recomputation and with full recomputation,
 * for both levels. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_backend.h"
#include "model.h"
#include "model_zero.h"
#include "race.h"
#include "tiny_model.h"

#define SEED 5u
#define B    2
#define T    16

static struct {
    backend orig; /* the CPU backend's ops */
    char token[MODEL_ZERO_QUEUES];
    size_t cap;
    const float *whole; /* the parameters (the "shard" of one rank) */
    float *acc;         /* the gradients accumulated */
    model *m;
    int zero2; /* ZeRO-2: nothing is gathered */
} R;
static race X;

static int qid(const void *s) {
    for (int q = 0; q < MODEL_ZERO_QUEUES; q++)
        if (s == &R.token[q]) return 1 + q;
    return 0;
}

static void rec_wait(backend *be, void *waiter, void *waitee) {
    (void)be;
    race_wait(&X, qid(waiter), qid(waitee));
}

static void rec_zero(backend *be, float *x, size_t n) {
    race_touch(&X, 0, x, n, 1);
    R.orig.zero(be, x, n);
}

static void rec_matmul_forward(backend *be, float *out, const float *inp, const float *w, int N,
                               int C, int OC, backend_gemm *p, float *scratch) {
    race_touch(&X, 0, w, (size_t)OC * C, 0);
    R.orig.matmul_forward(be, out, inp, w, N, C, OC, p, scratch);
}

static void rec_matmul_backward(backend *be, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC,
                                backend_gemm *p, float *scratch) {
    race_touch(&X, 0, w, (size_t)OC * C, 0), race_touch(&X, 0, dw, (size_t)OC * C, 1);
    R.orig.matmul_backward(be, dinp, dw, dout, inp, w, N, C, OC, p, scratch);
}

static void rec_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                                  int N, int C) {
    race_touch(&X, 0, wte, (size_t)C, 0);
    R.orig.embedding_forward(be, out, tokens, wte, N, C);
}

static void rec_embedding_backward(backend *be, float *dwte, const float *dout,
                                   const int32_t *tokens, int N, int C) {
    race_touch(&X, 0, dwte, (size_t)C, 1);
    R.orig.embedding_backward(be, dwte, dout, tokens, N, C);
}

static void rec_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                                const float *w, int N, int C, float eps) {
    race_touch(&X, 0, w, (size_t)C, 0);
    R.orig.rmsnorm_forward(be, out, rstd, inp, w, N, C, eps);
}

static void rec_rmsnorm_backward(backend *be, float *dinp, float *dw, const float *dout,
                                 const float *inp, const float *w, const float *rstd, int N,
                                 int C) {
    race_touch(&X, 0, w, (size_t)C, 0), race_touch(&X, 0, dw, (size_t)C, 1);
    R.orig.rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, N, C);
}

/* The single rank's collectives (model_zero_ops). */
static int one_gather(void *ctx, int u, float *params, void *stream) {
    (void)ctx;
    size_t off, n;
    CHECK(!R.zero2);
    model_unit_range(R.m, u, &off, &n);
    race_collective(&X, qid(stream));
    race_touch(&X, qid(stream), params, R.cap, 1);
    memcpy(params, R.whole + off, n * sizeof(float));
    return 0;
}

static int one_reduce(void *ctx, int u, float *grads, void *stream) {
    (void)ctx, (void)u;
    race_collective(&X, qid(stream));
    race_touch(&X, qid(stream), grads, R.cap, 1);
    return 0;
}

static void one_accumulate(void *ctx, int u, const float *grads) {
    (void)ctx;
    size_t off, n;
    model_unit_range(R.m, u, &off, &n);
    race_touch(&X, 0, grads, n, 0);
    for (size_t i = 0; i < n; i++)
        R.acc[off + i] += grads[i];
}

static int one_wait(void *ctx, void *stream) {
    (void)ctx;
    race_host_wait(&X, qid(stream));
    return 0;
}

static void record_backend(backend *be) {
    cpu_backend_init(be);
    R.orig = *be;
    be->stream_wait = rec_wait;
    be->zero = rec_zero;
    be->matmul_forward = rec_matmul_forward;
    be->matmul_backward = rec_matmul_backward;
    be->embedding_forward = rec_embedding_forward;
    be->embedding_backward = rec_embedding_backward;
    be->rmsnorm_forward = rec_rmsnorm_forward;
    be->rmsnorm_backward = rec_rmsnorm_backward;
}

static model_config config(int recompute, int zero) {
    model_config cfg = tiny_model_config();
    cfg.recompute = recompute, cfg.zero2 = zero == 2, cfg.zero3 = zero == 3;
    return cfg;
}

static void batch(int32_t *tokens, int32_t *targets, int mb) {
    for (int i = 0; i < B * T; i++)
        tokens[i] = (i * 7 + mb * 13) % 96, targets[i] = (i * 5 + mb * 3 + 1) % 96;
}

static size_t largest_unit(const model *m) {
    size_t cap = 0;
    for (int u = 0; u < model_n_units(m); u++) {
        size_t off, n;
        model_unit_range(m, u, &off, &n);
        cap = n > cap ? n : cap;
    }
    return cap;
}

static int setup_zero(model *zm, backend *be, const model_config *cfg) {
    bt_diag d;
    bt_diag_init(&d);
    int rc = model_init(zm, cfg, be, B, T, &d);
    rc = rc ? rc : cfg->zero2 ? model_init_weights(zm, SEED) : 0;
    R.m = zm, R.cap = largest_unit(zm), R.zero2 = cfg->zero2;
    model_zero_ops ops = {
        .gather = one_gather, .reduce = one_reduce, .accumulate = one_accumulate, .wait = one_wait};
    for (int q = R.zero2 ? MODEL_ZERO_GATHER_Q + 1 : 0; q < MODEL_ZERO_QUEUES; q++)
        ops.queue[q] = &R.token[q];
    rc = rc ? rc : model_zero_init(zm, R.cap, &ops, &d);
    if (rc != 0) {
        fprintf(stderr, "setup: %s\n", d.msg);
        return rc;
    }
    CHECK(zm->grads_mem == NULL && (zm->params_mem != NULL) == R.zero2);
    for (int i = 0; i < 2; i++) {
        CHECK((zm->zw->buf[i].params == NULL) == R.zero2);
        if (!R.zero2) CHECK(race_region(&X, zm->zw->buf[i].params, R.cap) == 0);
        CHECK(race_region(&X, zm->zw->buf[i].grads, R.cap) == 0);
    }
    return 0;
}

/* max |a - b| / max |b| */
static double max_rel(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i], f = b[i] < 0 ? -b[i] : b[i];
        d = e > d ? e : d, m = f > m ? f : m;
    }
    return m > 0 ? d / m : d;
}

/* Two micro-batches' forward and backward on both models, the gradients compared; then
 * the weights halved (as an update would change them) and one more forward each. */
static void run(int recompute, int zero) {
    backend be, plain;
    record_backend(&be);
    cpu_backend_init(&plain);
    race_reset(&X);
    model_config zc = config(recompute, zero), rc = config(recompute, 0);
    model zm, ref;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(model_init(&ref, &rc, &plain, B, T, &d) == 0);
    CHECK(model_init_weights(&ref, SEED) == 0);
    CHECK(setup_zero(&zm, &be, &zc) == 0);
    size_t P = ref.sizes.param_floats;
    R.whole = ref.params_mem;
    R.acc = calloc(P, sizeof(float));
    model_zero_grad(&ref);
    int32_t tokens[B * T], targets[B * T];
    for (int mb = 0; mb < 2; mb++) {
        float lz = 0, lr = 0;
        batch(tokens, targets, mb);
        CHECK(model_forward(&zm, tokens, targets, B, T, &lz) == 0);
        CHECK(model_backward(&zm, 0.5f) == 0);
        CHECK(model_forward(&ref, tokens, targets, B, T, &lr) == 0);
        CHECK(model_backward(&ref, 0.5f) == 0);
        CHECK(bits_of(lz) == bits_of(lr));
    }
    double worst = max_rel(R.acc, ref.grads_mem, P);
    CHECK(worst <= 1e-6);
    float *spare = model_zero_spare(&zm); /* the ZeRO-2 update's all-gather scratch */
    CHECK(spare != NULL);
    if (spare != NULL) race_touch(&X, 0, spare, R.cap, 1);
    for (size_t i = 0; i < P; i++) /* the "update" (ZeRO-2's in its whole parameters) */
        ref.params_mem[i] *= 0.5f;
    for (size_t i = 0; zm.params_mem != NULL && i < P; i++)
        zm.params_mem[i] *= 0.5f;
    model_weights_changed(&zm);
    float lz = 0, lr = 0;
    CHECK(model_forward(&zm, tokens, targets, B, T, &lz) == 0);
    CHECK(model_forward(&ref, tokens, targets, B, T, &lr) == 0);
    CHECK(bits_of(lz) == bits_of(lr));
    CHECK(model_backward(&zm, 0.5f) == 0); /* its reductions after the scratch's use */
    CHECK(X.races == 0);
    CHECK(X.disorders == 0);
    CHECK(X.unbounded == 0);
    CHECK(X.accesses > (zero == 2 ? 50 : 100)); /* the recorders saw the passes */
    printf("ZeRO-%d, recompute %d: %d buffer accesses, %d races, %d collectives out of order, %d "
           "waits "
           "without a deadline; after the update loss %.9g (plain model %.9g), gradients within "
           "%.3g\n",
           zero, recompute, X.accesses, X.races, X.disorders, X.unbounded, lz, lr, worst);
    free(R.acc);
    model_free(&zm);
    model_free(&ref);
}

int main(void) {
    for (int zero = 2; zero <= 3; zero++) {
        run(MODEL_RECOMPUTE_NONE, zero);
        run(MODEL_RECOMPUTE_FULL, zero);
    }
    return check_status();
}
