/* The data-parallel reduction overlapped with the backward (train_dp_overlap.h) on its
 * side queue, checked without a GPU. A real model runs forward and backward on the CPU
 * backend, as rank 0 of a recording data-parallel group of 2 (comm.h's backend side with
 * streams: each collective only records its buffers' accesses on the queue it is given,
 * as NCCL would enqueue it, and comm_wait that the host waited for that queue); the
 * backend's side queue and stream_wait record too, and so do the ops that touch the
 * gradients and weights (the weight-gradient products, embedding and norm backward,
 * zeroing, copies, scaling, sums of squares, AdamW). The race detector (race.h) then
 * requires, for zero 0 (all-reduce per layer) and ZeRO-1 (reduce to the shards' ranks),
 * two micro-batches and the update after them (ZeRO-2 and 3 reduce through model_zero.h,
 * checked by test_model_zero_queues): every conflicting pair of accesses ordered by the events and
 * host waits, the group's collectives in issue order, the ops' queue waiting for the side queue
 * only after the host has. No data moves between ranks: the numbers of this test are the orderings.
 * Removing the event before a reduction, or the host's wait before the ops' queue waits for the
 * side queue, is caught, and so is a model that reports a layer's gradients complete before its
 * backward has written them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "cpu_backend.h"
#include "model.h"
#include "optim.h"
#include "race.h"
#include "tiny_model.h"
#include "train_dp.h"
#include "train_dp_overlap.h"

#define B 2
#define T 16

static race X;
static backend orig;

/* ---- the recording group ---- */

/* A collective on stream's queue reading in (n_in floats) and writing out (n_out). */
static int record(const void *in, size_t n_in, void *out, size_t n_out, void *stream) {
    int q = race_qid(stream);
    race_collective(&X, q);
    if (in != NULL && in != out) race_touch(&X, q, in, n_in, 0);
    race_touch(&X, q, out, n_out, 1);
    if (stream == NULL) race_host_wait(&X, 0); /* NULL: complete on return */
    return 0;
}

static int rec_allreduce(comm *c, const void *in, void *out, size_t n, comm_dtype t, comm_redop op,
                         void *stream) {
    (void)c, (void)t, (void)op;
    return record(in, n, out, n, stream);
}

static int rec_reduce(comm *c, const void *in, void *out, size_t n, comm_dtype t, comm_redop op,
                      int root, void *stream) {
    (void)c, (void)t, (void)op, (void)root;
    return record(in, n, out, n, stream);
}

static int rec_reduce_scatter(comm *c, const void *in, void *out, size_t n, comm_dtype t,
                              comm_redop op, void *stream) {
    (void)t, (void)op;
    return record(in, n * (size_t)comm_size(c), out, n, stream);
}

static int rec_allgather(comm *c, const void *in, void *out, size_t n, comm_dtype t, void *stream) {
    (void)t;
    return record(in, n, out, n * (size_t)comm_size(c), stream);
}

static int rec_broadcast(comm *c, void *buf, size_t n, comm_dtype t, int root, void *stream) {
    (void)c, (void)t, (void)root;
    return record(NULL, 0, buf, n, stream);
}

static const comm_ops recorder = {.name = "recorder",
                                  .streams = 1,
                                  .allreduce = rec_allreduce,
                                  .reduce = rec_reduce,
                                  .reduce_scatter = rec_reduce_scatter,
                                  .allgather = rec_allgather,
                                  .broadcast = rec_broadcast,
                                  .wait = race_comm_wait,
                                  .abort = race_comm_nothing,
                                  .destroy = race_comm_nothing};

/* ---- the backend: a recording side queue and the ops that touch weights, gradients ---- */

static void rec_zero(backend *be, float *x, size_t n) {
    race_touch(&X, 0, x, n, 1);
    orig.zero(be, x, n);
}

static void rec_add(backend *be, float *out, const float *a, const float *b, size_t n) {
    race_touch(&X, 0, a, n, 0), race_touch(&X, 0, b, n, 0), race_touch(&X, 0, out, n, 1);
    orig.add(be, out, a, b, n);
}

static void rec_copy(backend *be, float *dst, const float *src, size_t n) {
    race_touch(&X, 0, src, n, 0), race_touch(&X, 0, dst, n, 1);
    orig.copy(be, dst, src, n);
}

static void rec_scale(backend *be, float *x, float s, size_t n) {
    race_touch(&X, 0, x, n, 1);
    orig.scale(be, x, s, n);
}

static double rec_sumsq_segs(backend *be, const float *x, const backend_seg *segs, size_t nseg) {
    for (size_t i = 0; i < nseg; i++)
        race_touch(&X, 0, x + segs[i].offset, segs[i].n, 0);
    return orig.sumsq_segs(be, x, segs, nseg);
}

static void rec_adamw(backend *be, float *param, float *grad, float *m, float *v,
                      const backend_seg *segs, size_t nseg, const backend_adamw *a) {
    for (size_t i = 0; i < nseg; i++) {
        race_touch(&X, 0, grad + segs[i].offset, segs[i].n, 0);
        race_touch(&X, 0, param + segs[i].offset, segs[i].n, 1);
    }
    orig.adamw(be, param, grad, m, v, segs, nseg, a);
}

static void rec_matmul_backward(backend *be, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC,
                                backend_gemm *p, float *scratch) {
    race_touch(&X, 0, w, (size_t)OC * C, 0), race_touch(&X, 0, dw, (size_t)OC * C, 1);
    orig.matmul_backward(be, dinp, dw, dout, inp, w, N, C, OC, p, scratch);
}

static void rec_embedding_backward(backend *be, float *dwte, const float *dout,
                                   const int32_t *tokens, int N, int C) {
    race_touch(&X, 0, dwte, (size_t)C, 1);
    orig.embedding_backward(be, dwte, dout, tokens, N, C);
}

static void rec_rmsnorm_backward(backend *be, float *dinp, float *dw, const float *dout,
                                 const float *inp, const float *w, const float *rstd, int N,
                                 int C) {
    race_touch(&X, 0, w, (size_t)C, 0), race_touch(&X, 0, dw, (size_t)C, 1);
    orig.rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, N, C);
}

static void record_backend(backend *be) {
    cpu_backend_init(be);
    orig = *be;
    race_side_queue_on(be, &X);
    be->zero = rec_zero, be->add = rec_add, be->copy = rec_copy, be->scale = rec_scale;
    be->sumsq_segs = rec_sumsq_segs, be->adamw = rec_adamw;
    be->matmul_backward = rec_matmul_backward;
    be->embedding_backward = rec_embedding_backward;
    be->rmsnorm_backward = rec_rmsnorm_backward;
}

/* ---- one step under each level ---- */

static optim_segment *segments(const model *m, size_t *n) {
    *n = (size_t)model_n_tensors(m);
    optim_segment *s = calloc(*n, sizeof *s);
    for (size_t i = 0; s != NULL && i < *n; i++) {
        model_tensor mt;
        model_tensor_info(m, (int)i, &mt);
        s[i] = (optim_segment){.offset = mt.offset, .n = mt.count, .decay = !mt.no_decay};
    }
    return s;
}

static void batch(int32_t *tokens, int32_t *targets, int mb) {
    for (int i = 0; i < B * T; i++)
        tokens[i] = (i * 7 + mb * 13) % 96, targets[i] = (i * 5 + mb * 3 + 1) % 96;
}

/* Two micro-batches, the reduction, the update. */
static int step(model *m, train_dp *dp, train_dp_overlap *o, optim_adamw *opt,
                const optim_segment *segs, size_t n_segs, bt_diag *d) {
    int32_t tokens[B * T], targets[B * T];
    optim_hparams hp;
    optim_hparams_default(&hp);
    model_zero_grad(m);
    int rc = 0;
    for (int mb = 0; rc == 0 && mb < 2; mb++) {
        float loss = 0;
        batch(tokens, targets, mb);
        rc = model_forward(m, tokens, targets, B, T, &loss);
        train_dp_overlap_arm(o, mb == 1);
        rc = rc ? rc : model_backward(m, 0.5f);
    }
    rc = rc ? rc : train_dp_overlap_finish(o, 0, d);
    double norm = 0;
    if (rc == 0)
        rc = train_dp_update(dp, m->params_mem, m->grads_mem, segs, n_segs, opt, &hp, 1e-3, &norm,
                             d);
    return rc;
}

static void run(int zero) {
    backend be;
    record_backend(&be);
    race_reset(&X);
    comm *g = NULL;
    CHECK(comm_create(&recorder, NULL, 0, 2, NULL, "dp", 1000, &g) == 0);
    model_config cfg = tiny_model_config();
    cfg.param_pad = 2; /* ZeRO-1 in place over the 2 ranks */
    model m;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(model_init(&m, &cfg, &be, B, T, &d) == 0);
    CHECK(model_init_weights(&m, 5) == 0);
    size_t n_segs;
    optim_segment *segs = segments(&m, &n_segs);
    train_dp dp;
    train_dp_overlap o;
    optim_adamw opt;
    size_t P = m.sizes.param_floats;
    CHECK(train_dp_init(&dp, &be, g, zero, P, m.param_alloc, segs, n_segs, &d) == 0);
    CHECK(train_dp_overlap_init(&o, &dp, &m, zero, &d) == 0);
    CHECK(o.on && o.stream == &race_side_queue); /* overlapped, on the side queue */
    CHECK(optim_adamw_init_on(&opt, &be, train_dp_optim_floats(&dp)) == 0);
    CHECK(race_region(&X, m.grads_mem, m.param_alloc) == 0);
    CHECK(race_region(&X, m.params_mem, m.param_alloc) == 0);
    for (int k = 0; k < 2; k++) /* a second step: the first one's state left behind */
        CHECK(step(&m, &dp, &o, &opt, segs, n_segs, &d) == 0);
    CHECK(X.races == 0);
    CHECK(X.disorders == 0);
    CHECK(X.unbounded == 0);
    CHECK(X.accesses > 100);
    printf("zero %d (%s): %d accesses, %d races, %d collectives out of order, %d waits without "
           "a deadline\n",
           zero, train_dp_overlap_describe(&o), X.accesses, X.races, X.disorders, X.unbounded);
    optim_adamw_free(&opt);
    train_dp_overlap_free(&o);
    train_dp_free(&dp);
    free(segs);
    model_free(&m);
    comm_destroy(g);
}

int main(void) {
    for (int zero = 0; zero <= 1; zero++)
        run(zero);
    return check_status();
}
