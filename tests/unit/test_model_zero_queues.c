/* ZeRO-3's side queues (model_zero.h), checked without a GPU. A real model runs its
 * passes on the CPU backend with ZeRO-3's gather and gradient buffers; the backend's
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
 * may be used. Without recomputation and with full recomputation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_backend.h"
#include "model.h"
#include "model_zero.h"

#define SEED 5u
#define B    2
#define T    16
enum { NQ = 1 + MODEL_ZERO_QUEUES, MAX_RECS = 1 << 14 };

typedef struct buf_access {
    int q, write;
    uint32_t at;       /* the access's event on its queue */
    uint32_t seen[NQ]; /* the events of each queue it is ordered after */
} buf_access;

static struct {
    backend orig; /* the CPU backend's ops */
    char token[MODEL_ZERO_QUEUES];
    uint32_t vc[NQ][NQ]; /* vc[q][r]: events of r that q's next event follows */
    float *buf[4];       /* P0, P1, G0, G1 */
    size_t cap;
    buf_access recs[4][MAX_RECS];
    int n_recs[4];
    buf_access last_collective;
    uint32_t host_waited[NQ]; /* each side queue's events the host has waited for */
    int races, disorders, unbounded;
    const float *whole; /* the parameters (the "shard" of one rank) */
    float *acc;         /* the gradients accumulated */
    model *m;
} R;

static int qid(const void *s) {
    for (int q = 0; q < MODEL_ZERO_QUEUES; q++)
        if (s == &R.token[q]) return 1 + q;
    return 0;
}

static int buf_of(const float *p) {
    for (int b = 0; b < 4; b++)
        if (p >= R.buf[b] && p < R.buf[b] + R.cap) return b;
    return -1;
}

static buf_access event_on(int q, int write) {
    buf_access a = {.q = q, .write = write, .at = ++R.vc[q][q]};
    memcpy(a.seen, R.vc[q], sizeof a.seen);
    return a;
}

/* An buf_access to whatever buffer p lies in (none: not checked). */
static void touch(int q, const float *p, int write) {
    int b = buf_of(p);
    if (b < 0) return;
    buf_access a = event_on(q, write);
    for (int i = 0; i < R.n_recs[b]; i++) {
        const buf_access *e = &R.recs[b][i];
        if (e->q == q || !(write || e->write) || a.seen[e->q] >= e->at) continue;
        if (R.races++ < 5)
            fprintf(stderr, "race on buffer %d: queue %d %s after queue %d %s, unordered\n", b, q,
                    write ? "writes" : "reads", e->q, e->write ? "wrote" : "read");
    }
    if (R.n_recs[b] < MAX_RECS) R.recs[b][R.n_recs[b]++] = a;
}

/* A collective on queue q: after the group's previous one. */
static void collective(int q) {
    buf_access a = event_on(q, 1);
    const buf_access *e = &R.last_collective;
    if (e->at > 0 && e->q != q && a.seen[e->q] < e->at && R.disorders++ < 5)
        fprintf(stderr, "collective on queue %d not ordered after the one on queue %d\n", q, e->q);
    R.last_collective = a;
}

static void rec_wait(backend *be, void *waiter, void *waitee) {
    (void)be;
    int w = qid(waiter), e = qid(waitee);
    if (w == 0 && e != 0 && R.host_waited[e] < R.vc[e][e] && R.unbounded++ < 5)
        fprintf(stderr, "the ops' queue waits for side queue %d before the host did\n", e);
    for (int r = 0; r < NQ; r++)
        R.vc[w][r] = R.vc[w][r] > R.vc[e][r] ? R.vc[w][r] : R.vc[e][r];
}

static void rec_zero(backend *be, float *x, size_t n) {
    touch(0, x, 1);
    R.orig.zero(be, x, n);
}

static void rec_matmul_forward(backend *be, float *out, const float *inp, const float *w, int N,
                               int C, int OC, backend_gemm *p, float *scratch) {
    touch(0, w, 0);
    R.orig.matmul_forward(be, out, inp, w, N, C, OC, p, scratch);
}

static void rec_matmul_backward(backend *be, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC,
                                backend_gemm *p, float *scratch) {
    touch(0, w, 0), touch(0, dw, 1);
    R.orig.matmul_backward(be, dinp, dw, dout, inp, w, N, C, OC, p, scratch);
}

static void rec_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                                  int N, int C) {
    touch(0, wte, 0);
    R.orig.embedding_forward(be, out, tokens, wte, N, C);
}

static void rec_embedding_backward(backend *be, float *dwte, const float *dout,
                                   const int32_t *tokens, int N, int C) {
    touch(0, dwte, 1);
    R.orig.embedding_backward(be, dwte, dout, tokens, N, C);
}

static void rec_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                                const float *w, int N, int C, float eps) {
    touch(0, w, 0);
    R.orig.rmsnorm_forward(be, out, rstd, inp, w, N, C, eps);
}

static void rec_rmsnorm_backward(backend *be, float *dinp, float *dw, const float *dout,
                                 const float *inp, const float *w, const float *rstd, int N,
                                 int C) {
    touch(0, w, 0), touch(0, dw, 1);
    R.orig.rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, N, C);
}

/* The single rank's collectives (model_zero_ops). */
static int one_gather(void *ctx, int u, float *params, void *stream) {
    (void)ctx;
    size_t off, n;
    model_unit_range(R.m, u, &off, &n);
    collective(qid(stream));
    touch(qid(stream), params, 1);
    memcpy(params, R.whole + off, n * sizeof(float));
    return 0;
}

static int one_reduce(void *ctx, int u, float *grads, void *stream) {
    (void)ctx, (void)u;
    collective(qid(stream));
    touch(qid(stream), grads, 1);
    return 0;
}

static void one_accumulate(void *ctx, int u, const float *grads) {
    (void)ctx;
    size_t off, n;
    model_unit_range(R.m, u, &off, &n);
    touch(0, grads, 0);
    for (size_t i = 0; i < n; i++)
        R.acc[off + i] += grads[i];
}

static int one_wait(void *ctx, void *stream) {
    (void)ctx;
    int q = qid(stream);
    R.host_waited[q] = R.vc[q][q];
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

static model_config config(int recompute, int zero3) {
    model_config cfg = {.vocab = 96,
                        .dim = 32,
                        .n_layers = 3,
                        .n_heads = 4,
                        .n_kv_heads = 2,
                        .head_dim = 8,
                        .ffn_dim = 64,
                        .norm_eps = 1e-5f};
    rope_config_default(&cfg.rope);
    cfg.recompute = recompute, cfg.zero3 = zero3;
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
    R.m = zm, R.cap = largest_unit(zm);
    model_zero_ops ops = {
        .gather = one_gather, .reduce = one_reduce, .accumulate = one_accumulate, .wait = one_wait};
    for (int q = 0; q < MODEL_ZERO_QUEUES; q++)
        ops.queue[q] = &R.token[q];
    rc = rc ? rc : model_zero_init(zm, R.cap, &ops, &d);
    if (rc != 0) {
        fprintf(stderr, "setup: %s\n", d.msg);
        return rc;
    }
    for (int i = 0; i < 2; i++)
        R.buf[i] = zm->zw->buf[i].params, R.buf[2 + i] = zm->zw->buf[i].grads;
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
static void run(int recompute) {
    backend be, plain;
    record_backend(&be);
    cpu_backend_init(&plain);
    memset(&R.vc, 0, sizeof R.vc), memset(R.n_recs, 0, sizeof R.n_recs);
    R.last_collective = (buf_access){0};
    memset(R.host_waited, 0, sizeof R.host_waited);
    R.races = R.disorders = R.unbounded = 0;
    model_config zc = config(recompute, 1), rc = config(recompute, 0);
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
    for (size_t i = 0; i < P; i++) /* the "update" */
        ref.params_mem[i] *= 0.5f;
    model_weights_changed(&zm);
    float lz = 0, lr = 0;
    CHECK(model_forward(&zm, tokens, targets, B, T, &lz) == 0);
    CHECK(model_forward(&ref, tokens, targets, B, T, &lr) == 0);
    CHECK(bits_of(lz) == bits_of(lr));
    CHECK(R.races == 0);
    CHECK(R.disorders == 0);
    CHECK(R.unbounded == 0);
    int accesses = 0;
    for (int b = 0; b < 4; b++)
        accesses += R.n_recs[b];
    CHECK(accesses > 100); /* the recorders saw the passes */
    printf("recompute %d: %d buffer accesses, %d races, %d collectives out of order, %d waits "
           "without a deadline; after the update loss %.9g (plain model %.9g), gradients within "
           "%.3g\n",
           recompute, accesses, R.races, R.disorders, R.unbounded, lz, lr, worst);
    free(R.acc);
    model_free(&zm);
    model_free(&ref);
}

int main(void) {
    run(MODEL_RECOMPUTE_NONE);
    run(MODEL_RECOMPUTE_FULL);
    return check_status();
}
