/* The communication interface over NCCL, on device buffers. Like test_comm, the binary
 * forks one child per rank and re-executes itself as that child
 * (`test_nccl --child SCENARIO RANK DIR`); the parent supervises them with a deadline
 * and removes the scenario's rendezvous directory.
 *
 * NCCL allows one rank per device in a communicator, so rank r uses device r and a
 * scenario needs as many devices as it starts ranks. Without them the parent prints
 * "SKIPPED: ..." with the reason and exits 77 (ctest's SKIP_RETURN_CODE): on a machine
 * without a GPU (no /dev/nvidia* node) or driver, cudaGetDeviceCount fails and names why.
 * A driver that is installed, with a device node, but fails (too old for the runtime)
 * fails the test instead.
 *
 * collectives-*, timeout-w2 and nopeer-w2 pass device buffers and streams; host-* and
 * timeout-host-w2 the engine's way of calling: host buffers (staged) and stream NULL
 * (complete on return, on the comm's default stream); host-* also check that a wait's polls
 * of a busy stream leave no cudaErrorNotReady as the thread's last error. host-w1 needs one
 * GPU.
 * queued-w1 checks that work queued ahead of a collective does not count against its
 * timeout, timeout-behind-w2 that a hung collective is still reported by a wait for a
 * later one queued behind it (the watchdog, comm_watch.h), timeout-other-w2 the same
 * with the hung one in another group, which is then failed and aborted too.
 * side-queue-* is the trainer's overlapped gradient all-reduce (train_dp_overlap.h) with
 * the CUDA backend's side queue (built where the CUDA compute backend is: not in the
 * sanitizer builds).
 *
 * Usage: test_nccl SCENARIO        run one scenario (what ctest calls)
 *        test_nccl --list          print the scenario names
 * Exit status: 0 pass, 1 fail, 2 usage, 77 skipped. */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "comm_nccl.h"
#ifdef BATON_TEST_NCCL_CUDA_BACKEND
#include "backend.h"
#include "cuda_backend.h"
#endif

enum { EXIT_SKIP = 77, MAX_RANKS = 8, N = 1000 };

typedef struct child {
    int rank, world;
    const char *dir;
    cudaStream_t stream;
    int fails;
} child;

typedef struct scenario {
    const char *name;
    int world;   /* ranks of the group */
    int started; /* ranks actually started (the rest never join) */
    int (*run)(child *ch);
} scenario;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHECK(ch, cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", (ch)->rank, __FILE__, __LINE__,  \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            (ch)->fails++;                                                                         \
        }                                                                                          \
    } while (0)

/* A comm call that must succeed. */
#define OK(ch, c, call) CHECK(ch, (call) == 0, "%s", comm_error(c))

static void *dev_alloc(child *ch, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    CHECK(ch, e == cudaSuccess, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
    return e == cudaSuccess ? p : NULL;
}

static void put(child *ch, void *dev, const void *host, size_t bytes) {
    cudaError_t e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    CHECK(ch, e == cudaSuccess, "cudaMemcpy H2D: %s", cudaGetErrorString(e));
}

static void get(child *ch, void *host, const void *dev, size_t bytes) {
    cudaError_t e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    CHECK(ch, e == cudaSuccess, "cudaMemcpy D2H: %s", cudaGetErrorString(e));
}

/* Compares n doubles exactly; reports the first mismatch. */
static void expect(child *ch, const char *what, const double *got, const double *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            CHECK(ch, got[i] == want[i], "%s[%zu] = %.17g, expected %.17g", what, i, got[i],
                  want[i]);
            return;
        }
}

/* Reads n f32 values of dev into out as doubles. */
static void get_f32(child *ch, double *out, const void *dev, size_t n) {
    float *h = malloc(n * sizeof *h);
    get(ch, h, dev, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        out[i] = h[i];
    free(h);
}

static void put_f32(child *ch, void *dev, const double *in, size_t n) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)in[i];
    put(ch, dev, h, n * sizeof *h);
    free(h);
}

static int init(child *ch, int timeout_ms, comm **c) {
    comm_bootstrap bs = {0};
    bs.rank = ch->rank;
    bs.size = ch->world;
    bs.store_dir = ch->dir;
    bs.prefix = "attempt-1";
    bs.timeout_ms = timeout_ms;
    bt_diag d;
    bt_diag_init(&d);
    int rc = comm_nccl_init(c, &bs, ch->rank, &d);
    CHECK(ch, rc == 0, "comm_nccl_init: %s", d.msg);
    return rc;
}

/* Every collective on the group c (size w, rank r) with exact expected values. */
static void run_collectives(child *ch, comm *c) {
    const int w = comm_size(c), r = comm_rank(c);
    const size_t n = N;
    void *s = ch->stream;
    double *in = calloc((size_t)w * n, sizeof *in), *want = calloc((size_t)w * n, sizeof *want);
    double *got = calloc((size_t)w * n, sizeof *got);
    void *din = dev_alloc(ch, (size_t)w * n * 8), *dout = dev_alloc(ch, (size_t)w * n * 8);
    if (!in || !want || !got || !din || !dout) goto done;

    /* all-reduce sum, f32: in[i] = r + 1 + i. */
    for (size_t i = 0; i < n; i++) {
        in[i] = r + 1 + (double)i;
        want[i] = w * (w + 1) / 2 + (double)w * (double)i;
    }
    put_f32(ch, din, in, n);
    uint64_t b0 = comm_bytes_sent(c);
    OK(ch, c, comm_allreduce(c, din, dout, n, COMM_F32, COMM_SUM, s));
    OK(ch, c, comm_wait(c, s));
    CHECK(ch, comm_bytes_sent(c) - b0 == (w == 1 ? 0 : 2 * (uint64_t)(w - 1) * n * 4 / (uint64_t)w),
          "allreduce bytes %llu", (unsigned long long)(comm_bytes_sent(c) - b0));
    get_f32(ch, got, dout, n);
    expect(ch, "allreduce sum f32", got, want, n);

    /* The same in place. */
    OK(ch, c, comm_allreduce(c, din, din, n, COMM_F32, COMM_SUM, s));
    OK(ch, c, comm_wait(c, s));
    get_f32(ch, got, din, n);
    expect(ch, "allreduce sum f32 in place", got, want, n);

    /* all-reduce max, f64: element i is large on rank i % w only. */
    for (size_t i = 0; i < n; i++) {
        in[i] = (size_t)r == i % (size_t)w ? 1000.25 + (double)i : -(double)i * 0.5;
        want[i] = 1000.25 + (double)i;
    }
    put(ch, din, in, n * 8);
    OK(ch, c, comm_allreduce(c, din, dout, n, COMM_F64, COMM_MAX, s));
    OK(ch, c, comm_wait(c, s));
    get(ch, got, dout, n * 8);
    expect(ch, "allreduce max f64", got, want, n);

    /* all-reduce sum, f64: integers, so the sum is exact in any order. */
    for (size_t i = 0; i < n; i++) {
        in[i] = (double)(r + 1) * 4096.0 + (double)i;
        want[i] = 4096.0 * w * (w + 1) / 2 + (double)w * (double)i;
    }
    put(ch, din, in, n * 8);
    OK(ch, c, comm_allreduce(c, din, dout, n, COMM_F64, COMM_SUM, s));
    OK(ch, c, comm_wait(c, s));
    get(ch, got, dout, n * 8);
    expect(ch, "allreduce sum f64", got, want, n);

    /* reduce-scatter sum, f32: in[j] = r * 1000 + j over w*n; out = block r. */
    for (size_t j = 0; j < (size_t)w * n; j++)
        in[j] = r * 1000.0 + (double)j;
    for (size_t i = 0; i < n; i++)
        want[i] = 1000.0 * w * (w - 1) / 2 + (double)w * (double)((size_t)r * n + i);
    put_f32(ch, din, in, (size_t)w * n);
    OK(ch, c, comm_reduce_scatter(c, din, dout, n, COMM_F32, COMM_SUM, s));
    OK(ch, c, comm_wait(c, s));
    get_f32(ch, got, dout, n);
    expect(ch, "reduce-scatter sum f32", got, want, n);

    /* In place (out = in + r*n), max: in[j] = (r + 1) * j. */
    for (size_t j = 0; j < (size_t)w * n; j++)
        in[j] = (double)(r + 1) * (double)j;
    for (size_t i = 0; i < n; i++)
        want[i] = (double)w * (double)((size_t)r * n + i);
    put_f32(ch, din, in, (size_t)w * n);
    OK(ch, c, comm_reduce_scatter(c, din, (float *)din + (size_t)r * n, n, COMM_F32, COMM_MAX, s));
    OK(ch, c, comm_wait(c, s));
    get_f32(ch, got, (float *)din + (size_t)r * n, n);
    expect(ch, "reduce-scatter max f32 in place", got, want, n);

    /* reduce sum f32 to the last rank, out of place; then max in place to rank 0. */
    for (size_t i = 0; i < n; i++) {
        in[i] = r * 1000.0 + (double)i;
        want[i] = 1000.0 * w * (w - 1) / 2 + (double)w * (double)i;
    }
    put_f32(ch, din, in, n);
    OK(ch, c, comm_reduce(c, din, dout, n, COMM_F32, COMM_SUM, w - 1, s));
    OK(ch, c, comm_wait(c, s));
    get_f32(ch, got, dout, n);
    if (r == w - 1) expect(ch, "reduce sum f32", got, want, n);
    for (size_t i = 0; i < n; i++) {
        in[i] = (double)(r + 1) * (double)i;
        want[i] = (double)w * (double)i;
    }
    put_f32(ch, din, in, n);
    OK(ch, c, comm_reduce(c, din, din, n, COMM_F32, COMM_MAX, 0, s));
    OK(ch, c, comm_wait(c, s));
    get_f32(ch, got, din, n);
    if (r == 0) expect(ch, "reduce max f32 in place", got, want, n);

    /* all-gather, f64: in[i] = r * 100000 + i. */
    for (size_t i = 0; i < n; i++)
        in[i] = r * 100000.0 + (double)i;
    for (int q = 0; q < w; q++)
        for (size_t i = 0; i < n; i++)
            want[(size_t)q * n + i] = q * 100000.0 + (double)i;
    put(ch, din, in, n * 8);
    OK(ch, c, comm_allgather(c, din, dout, n, COMM_F64, s));
    OK(ch, c, comm_wait(c, s));
    get(ch, got, dout, (size_t)w * n * 8);
    expect(ch, "allgather f64", got, want, (size_t)w * n);

    /* In place: in is block r of out. */
    put(ch, (double *)dout + (size_t)r * n, in, n * 8);
    OK(ch, c, comm_allgather(c, (double *)dout + (size_t)r * n, dout, n, COMM_F64, s));
    OK(ch, c, comm_wait(c, s));
    get(ch, got, dout, (size_t)w * n * 8);
    expect(ch, "allgather f64 in place", got, want, (size_t)w * n);

    /* all-to-all, f32: block p of rank r holds r * 10000 + p * 1000 + i. */
    for (int p = 0; p < w; p++)
        for (size_t i = 0; i < n; i++) {
            in[(size_t)p * n + i] = r * 10000.0 + p * 1000.0 + (double)(i % 1000);
            want[(size_t)p * n + i] = p * 10000.0 + r * 1000.0 + (double)(i % 1000);
        }
    put_f32(ch, din, in, (size_t)w * n);
    OK(ch, c, comm_alltoall(c, din, dout, n, COMM_F32, s));
    OK(ch, c, comm_wait(c, s));
    get_f32(ch, got, dout, (size_t)w * n);
    expect(ch, "alltoall f32", got, want, (size_t)w * n);

    /* all-to-all(v), bytes: rank r sends 1 + r + p bytes to p, byte i = r*31 + p*7 + i. */
    {
        size_t sc[MAX_RANKS], rcnt[MAX_RANKS], no = 0, ni = 0;
        unsigned char hin[512], hout[512], hwant[512];
        for (int p = 0; p < w; p++) {
            sc[p] = (size_t)(1 + r + p);
            rcnt[p] = (size_t)(1 + p + r);
            for (size_t i = 0; i < sc[p]; i++)
                hin[ni++] = (unsigned char)(r * 31 + p * 7 + (int)i);
            for (size_t i = 0; i < rcnt[p]; i++)
                hwant[no++] = (unsigned char)(p * 31 + r * 7 + (int)i);
        }
        put(ch, din, hin, ni);
        cudaMemset(dout, 0xee, no);
        OK(ch, c, comm_alltoallv(c, din, sc, dout, rcnt, COMM_BYTE, s));
        OK(ch, c, comm_wait(c, s));
        get(ch, hout, dout, no);
        CHECK(ch, memcmp(hout, hwant, no) == 0, "alltoallv bytes differ");
    }

    /* broadcast from the last rank, f32. */
    const int root = w - 1;
    for (size_t i = 0; i < n; i++) {
        in[i] = r == root ? 42.0 + (double)i : -1.0;
        want[i] = 42.0 + (double)i;
    }
    put_f32(ch, din, in, n);
    OK(ch, c, comm_broadcast(c, din, n, COMM_F32, root, s));
    OK(ch, c, comm_wait(c, s));
    get_f32(ch, got, din, n);
    expect(ch, "broadcast f32", got, want, n);

    OK(ch, c, comm_barrier(c, s));
    OK(ch, c, comm_wait(c, s));

    /* Point to point (w >= 2): a ring exchange in one batch, then a plain send/recv. */
    if (w >= 2) {
        const int right = (r + 1) % w, left = (r + w - 1) % w;
        for (size_t i = 0; i < n; i++) {
            in[i] = r * 1000.0 + (double)i;
            want[i] = left * 1000.0 + (double)i;
        }
        put_f32(ch, din, in, n);
        OK(ch, c, comm_sendrecv(c, din, right, dout, left, n, COMM_F32, 7, s));
        OK(ch, c, comm_wait(c, s));
        get_f32(ch, got, dout, n);
        expect(ch, "sendrecv ring f32", got, want, n);

        if (r == 0) OK(ch, c, comm_send(c, din, n, COMM_F32, 1, 0, s));
        if (r == 1) OK(ch, c, comm_recv(c, dout, n, COMM_F32, 0, 0, s));
        OK(ch, c, comm_wait(c, s));
        if (r == 1) {
            for (size_t i = 0; i < n; i++)
                want[i] = (double)i;
            get_f32(ch, got, dout, n);
            expect(ch, "send/recv 0 -> 1", got, want, n);
        }
    }

    /* The default stream (NULL) works too. */
    for (size_t i = 0; i < n; i++) {
        in[i] = 1.0;
        want[i] = w;
    }
    put_f32(ch, din, in, n);
    OK(ch, c, comm_allreduce(c, din, dout, n, COMM_F32, COMM_SUM, NULL));
    OK(ch, c, comm_wait(c, NULL));
    get_f32(ch, got, dout, n);
    expect(ch, "allreduce on the default stream", got, want, n);

    /* A usage error is reported and leaves the comm usable. */
    CHECK(ch, comm_allreduce(c, din, dout, n, COMM_BYTE, COMM_SUM, s) == BT_EINVAL,
          "byte reduction accepted");
    CHECK(ch, comm_fault_of(c) == COMM_FAULT_USAGE, "fault %s", comm_fault_name(comm_fault_of(c)));
    OK(ch, c, comm_barrier(c, s));
    /* Waiting again on completed work is fine. */
    OK(ch, c, comm_wait(c, s));
    OK(ch, c, comm_wait(c, s));
done:
    cudaFree(din);
    cudaFree(dout);
    free(in);
    free(want);
    free(got);
}

static int child_collectives(child *ch) {
    comm *c = NULL;
    if (init(ch, 30000, &c) < 0) return 1;
    run_collectives(ch, c);

    /* Sub-groups: the world reversed (group rank w-1-r), twice from the same list, and
     * each rank alone. */
    const int w = ch->world, r = ch->rank;
    uint32_t rev[MAX_RANKS], self = (uint32_t)r;
    for (int i = 0; i < w; i++)
        rev[i] = (uint32_t)(w - 1 - i);
    comm *sub = NULL, *again = NULL, *alone = NULL;
    OK(ch, c, comm_split(c, rev, (uint32_t)w, "reversed", &sub));
    OK(ch, c, comm_split(c, rev, (uint32_t)w, "reversed-again", &again));
    OK(ch, c, comm_split(c, &self, 1, "alone", &alone));
    if (sub && again && alone) {
        CHECK(ch, comm_rank(sub) == w - 1 - r, "split rank %d", comm_rank(sub));
        CHECK(ch, comm_global_rank(sub, 0) == w - 1, "global rank of 0: %d",
              comm_global_rank(sub, 0));
        run_collectives(ch, sub);
        run_collectives(ch, again);
        run_collectives(ch, alone);
    }
    comm_destroy(alone);
    comm_destroy(again);
    comm_destroy(sub);
    comm_destroy(c);
    return ch->fails ? 1 : 0;
}

/* The timeout scenarios' world: rank 1 joins and then never takes part (returns 1 for it,
 * after leaving), rank 0 gets a 2 s timeout (0). -1: init failed. */
static int join_with_idle_peer(child *ch, comm **c) {
    if (init(ch, 30000, c) < 0) return -1;
    if (ch->rank == 1) {
        sleep(8);
        comm_abort(*c);
        comm_destroy(*c);
        return 1;
    }
    comm_set_timeout_ms(*c, 2000);
    return 0;
}

/* Rank 0's all-reduce that could not complete, rc after dt seconds: BT_EIO / timeout
 * within the 2 s timeout, named, and sticky (a barrier on stream fails too). */
static void check_timed_out(child *ch, comm *c, int rc, double dt, void *stream) {
    printf("rank 0: after %.2f s: %d (%s): %s\n", dt, rc, comm_fault_name(comm_fault_of(c)),
           comm_error(c));
    CHECK(ch, rc == BT_EIO, "rc %d", rc);
    CHECK(ch, comm_fault_of(c) == COMM_FAULT_TIMEOUT, "fault %s",
          comm_fault_name(comm_fault_of(c)));
    CHECK(ch, strstr(comm_error(c), "allreduce") && strstr(comm_error(c), "'world'"),
          "message names neither op nor group: %s", comm_error(c));
    CHECK(ch, dt >= 1.9 && dt < 6.0, "took %.2f s for a 2 s timeout", dt);
    CHECK(ch, comm_barrier(c, stream) == BT_EIO, "not sticky");
}

/* Rank 0's all-reduce cannot complete, and comm_wait must turn that into BT_EIO /
 * timeout within the group's timeout. */
static int child_timeout(child *ch) {
    comm *c = NULL;
    int role = join_with_idle_peer(ch, &c);
    if (role != 0) return role < 0;
    void *buf = dev_alloc(ch, N * 4);
    double t0 = now_s();
    int rc = comm_allreduce(c, buf, buf, N, COMM_F32, COMM_SUM, ch->stream);
    if (rc == 0) rc = comm_wait(c, ch->stream);
    check_timed_out(ch, c, rc, now_s() - t0, ch->stream);
    cudaFree(buf);
    comm_destroy(c);
    return ch->fails ? 1 : 0;
}

/* Queues about 8 GiB of device copies on stream s: milliseconds of work, so that a call
 * that returns while its stream is still busy is seen to. a and b: big bytes each. */
static void keep_busy(child *ch, cudaStream_t s, void *a, void *b, size_t big) {
    for (int k = 0; k < 8; k++) {
        cudaError_t e =
            cudaMemcpyAsync(k % 2 ? a : b, k % 2 ? b : a, big, cudaMemcpyDeviceToDevice, s);
        CHECK(ch, e == cudaSuccess, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
    }
}

/* Host buffers (staged through the group's device buffer) and stream NULL (complete on
 * return) on the group c, whose default stream is ns, a non-blocking stream: work on
 * it is not ordered with the legacy default stream, so an operation that ran there
 * instead would not wait for ns. */
static void run_host(child *ch, comm *c, cudaStream_t ns) {
    const int w = comm_size(c), r = comm_rank(c);
    const size_t n = 100000; /* 800 KB of doubles: more than the first staging buffer */
    const size_t big = (size_t)512 << 20;
    double *in = calloc((size_t)w * n, sizeof *in), *want = calloc((size_t)w * n, sizeof *want);
    double *got = calloc((size_t)w * n, sizeof *got);
    float *fin = calloc((size_t)w * n, sizeof *fin);
    void *din = dev_alloc(ch, n * 8), *dout = dev_alloc(ch, n * 8);
    void *ba = dev_alloc(ch, big), *bb = dev_alloc(ch, big);
    if (!in || !want || !got || !fin || !din || !dout || !ba || !bb) goto done;

    /* The engine's scalars: a double sum in place, a float flag's max; with a stream
     * given too, the host result is there when the call returns (no comm_wait). */
    double x = r + 1.5, xw = 0;
    for (int q = 0; q < w; q++)
        xw += q + 1.5;
    OK(ch, c, comm_allreduce(c, &x, &x, 1, COMM_F64, COMM_SUM, NULL));
    CHECK(ch, x == xw, "host f64 sum %.17g, expected %.17g", x, xw);
    float flag = r == w - 1 ? 3.5f : -1.0f - (float)r;
    OK(ch, c, comm_allreduce(c, &flag, &flag, 1, COMM_F32, COMM_MAX, NULL));
    CHECK(ch, flag == 3.5f, "host f32 max %g", (double)flag);
    double y = 2.0 * (r + 1);
    OK(ch, c, comm_allreduce(c, &y, &y, 1, COMM_F64, COMM_MAX, ns));
    CHECK(ch, y == 2.0 * w, "host f64 max on a stream %.17g", y);

    /* Arrays, host to host, host to device and device to host: integers, exact. */
    for (size_t i = 0; i < n; i++) {
        in[i] = (double)(r + 1) * 4096.0 + (double)i;
        want[i] = 4096.0 * w * (w + 1) / 2 + (double)w * (double)i;
    }
    OK(ch, c, comm_allreduce(c, in, got, n, COMM_F64, COMM_SUM, NULL));
    expect(ch, "host allreduce f64", got, want, n);
    OK(ch, c, comm_allreduce(c, in, dout, n, COMM_F64, COMM_SUM, NULL));
    get(ch, got, dout, n * 8);
    expect(ch, "host to device allreduce f64", got, want, n);
    put(ch, din, in, n * 8);
    memset(got, 0, n * 8);
    OK(ch, c, comm_allreduce(c, din, got, n, COMM_F64, COMM_SUM, NULL));
    expect(ch, "device to host allreduce f64", got, want, n);

    /* reduce-scatter in place (out = in + r*m), f32 sum: in[j] = r + j. */
    const size_t m = 1000;
    for (size_t j = 0; j < (size_t)w * m; j++)
        fin[j] = (float)(r + (int)j);
    OK(ch, c, comm_reduce_scatter(c, fin, fin + (size_t)r * m, m, COMM_F32, COMM_SUM, NULL));
    for (size_t i = 0; i < m; i++) {
        got[i] = fin[(size_t)r * m + i];
        want[i] = (double)w * (double)((size_t)r * m + i) + w * (w - 1) / 2.0;
    }
    expect(ch, "host reduce-scatter f32 in place", got, want, m);

    /* all-gather in place (in = out + r*m), f64. */
    for (int q = 0; q < w; q++)
        for (size_t i = 0; i < m; i++) {
            got[(size_t)q * m + i] = q == r ? r * 100000.0 + (double)i : -1.0;
            want[(size_t)q * m + i] = q * 100000.0 + (double)i;
        }
    OK(ch, c, comm_allgather(c, got + (size_t)r * m, got, m, COMM_F64, NULL));
    expect(ch, "host allgather f64 in place", got, want, (size_t)w * m);

    /* broadcast from the last rank, f64. */
    for (size_t i = 0; i < m; i++) {
        got[i] = r == w - 1 ? 42.0 + (double)i : -1.0;
        want[i] = 42.0 + (double)i;
    }
    OK(ch, c, comm_broadcast(c, got, m, COMM_F64, w - 1, NULL));
    expect(ch, "host broadcast f64", got, want, m);

    /* all-to-all of per-peer int counts as bytes (what moe_dev.c exchanges), then an
     * all-to-allv of f32: rank r sends 1 + r + p elements r*1000 + p*10 + i to p. */
    {
        int cs[MAX_RANKS], cr[MAX_RANKS];
        float vs[256], vr[256], vw[256];
        size_t sc[MAX_RANKS], rc[MAX_RANKS], ni = 0, no = 0;
        for (int p = 0; p < w; p++) {
            cs[p] = 100 * r + p;
            cr[p] = -1;
            sc[p] = (size_t)(1 + r + p);
            rc[p] = (size_t)(1 + p + r);
            for (size_t i = 0; i < sc[p]; i++)
                vs[ni++] = (float)(r * 1000 + p * 10 + (int)i);
            for (size_t i = 0; i < rc[p]; i++)
                vw[no++] = (float)(p * 1000 + r * 10 + (int)i);
        }
        OK(ch, c, comm_alltoall(c, cs, cr, sizeof(int), COMM_BYTE, NULL));
        for (int p = 0; p < w; p++)
            CHECK(ch, cr[p] == 100 * p + r, "host alltoall count from %d: %d", p, cr[p]);
        memset(vr, 0, sizeof vr);
        OK(ch, c, comm_alltoallv(c, vs, sc, vr, rc, COMM_F32, NULL));
        CHECK(ch, memcmp(vr, vw, no * sizeof *vr) == 0, "host alltoallv f32 differs");
    }

    /* Point to point: a ring of host buffers, then host send to a device receive. */
    if (w >= 2) {
        const int right = (r + 1) % w, left = (r + w - 1) % w;
        for (size_t i = 0; i < m; i++) {
            in[i] = r * 1000.0 + (double)i;
            want[i] = left * 1000.0 + (double)i;
        }
        OK(ch, c, comm_sendrecv(c, in, right, got, left, m, COMM_F64, 7, NULL));
        expect(ch, "host sendrecv ring f64", got, want, m);
        if (r == 0) OK(ch, c, comm_send(c, in, m, COMM_F64, 1, 0, NULL));
        if (r == 1) {
            OK(ch, c, comm_recv(c, dout, m, COMM_F64, 0, 0, NULL));
            for (size_t i = 0; i < m; i++)
                want[i] = (double)i;
            get(ch, got, dout, m * 8);
            expect(ch, "host send to device recv 0 -> 1", got, want, m);
        }
    }
    OK(ch, c, comm_barrier(c, NULL));

    /* Stream NULL on device buffers is complete on return: with the default stream
     * busy for milliseconds first, it is idle when the call returns. The control: the
     * same call given ns explicitly returns with ns still busy (so this can tell). */
    for (size_t i = 0; i < m; i++) {
        in[i] = 1.0;
        want[i] = w;
    }
    put_f32(ch, din, in, m);
    (void)cudaGetLastError();
    keep_busy(ch, ns, ba, bb, big);
    OK(ch, c, comm_allreduce(c, din, dout, m, COMM_F32, COMM_SUM, NULL));
    /* Its wait polled ns busy: the not-ready answers must not stay the thread's last error,
     * which the CUDA backend's next launch check would take for its own failure. */
    cudaError_t q = cudaPeekAtLastError();
    CHECK(ch, q == cudaSuccess, "a stream-NULL allreduce left %s as the thread's last error",
          cudaGetErrorName(q));
    q = cudaStreamQuery(ns);
    CHECK(ch, q == cudaSuccess, "default stream busy after a stream-NULL allreduce returned: %s",
          cudaGetErrorName(q));
    get_f32(ch, got, dout, m);
    expect(ch, "stream-NULL allreduce f32", got, want, m);
    keep_busy(ch, ns, ba, bb, big);
    OK(ch, c, comm_allreduce(c, din, din, m, COMM_F32, COMM_SUM, ns));
    q = cudaStreamQuery(ns);
    CHECK(ch, q == cudaErrorNotReady,
          "control: an allreduce on a given stream returned with it idle (%s), so the "
          "stream-NULL check above cannot tell",
          cudaGetErrorName(q));
    OK(ch, c, comm_wait(c, NULL)); /* NULL: the default stream, ns */
    CHECK(ch, cudaStreamQuery(ns) == cudaSuccess, "comm_wait(NULL) left the default stream busy");
done:
    cudaFree(ba);
    cudaFree(bb);
    cudaFree(din);
    cudaFree(dout);
    free(in);
    free(want);
    free(got);
    free(fin);
}

static int child_host(child *ch) {
    comm *c = NULL;
    if (init(ch, 30000, &c) < 0) return 1;
    cudaStream_t ns = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&ns, cudaStreamNonBlocking);
    CHECK(ch, e == cudaSuccess, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
    if (e != cudaSuccess) {
        comm_destroy(c);
        return 1;
    }
    /* Before comm_set_stream the default stream is the legacy one. */
    double x = 1.0;
    OK(ch, c, comm_allreduce(c, &x, &x, 1, COMM_F64, COMM_SUM, NULL));
    CHECK(ch, x == ch->world, "host f64 sum on the legacy stream %.17g", x);

    comm_set_stream(c, ns);
    run_host(ch, c, ns);
    /* A group split afterwards inherits the default stream (run_host's check fails if
     * it ran on the legacy stream instead). */
    const int w = ch->world;
    uint32_t rev[MAX_RANKS];
    for (int i = 0; i < w; i++)
        rev[i] = (uint32_t)(w - 1 - i);
    comm *sub = NULL;
    OK(ch, c, comm_split(c, rev, (uint32_t)w, "reversed", &sub));
    if (sub) run_host(ch, sub, ns);
    comm_destroy(sub);
    comm_destroy(c);
    cudaStreamDestroy(ns);
    return ch->fails ? 1 : 0;
}

/* As timeout-w2 with a host buffer and stream NULL: the call itself must turn the hang
 * into BT_EIO / timeout within the group's timeout. */
static int child_timeout_host(child *ch) {
    comm *c = NULL;
    int role = join_with_idle_peer(ch, &c);
    if (role != 0) return role < 0;
    double x = 1.0;
    double t0 = now_s();
    int rc = comm_allreduce(c, &x, &x, 1, COMM_F64, COMM_SUM, NULL);
    check_timed_out(ch, c, rc, now_s() - t0, NULL);
    comm_destroy(c);
    return ch->fails ? 1 : 0;
}

/* A host function on a stream: holds the stream for 1.5 s, as long queued compute would. */
static void CUDART_CB hold_stream(void *arg) {
    (void)arg;
    struct timespec ts = {1, 500000000};
    nanosleep(&ts, NULL);
}

/* Work queued ahead of a collective for three times the group's timeout (0.5 s) is not
 * the collective's: its deadline starts when that work is done (comm_watch.h). On the
 * stream, then with stream NULL and a host buffer (the comm's default stream). */
static int child_queued(child *ch) {
    comm *c = NULL;
    if (init(ch, 30000, &c) < 0) return 1;
    comm_set_timeout_ms(c, 500);
    void *buf = dev_alloc(ch, N * 4);
    double in[N], got[N];
    for (int i = 0; i < N; i++)
        in[i] = i + 0.5;
    put_f32(ch, buf, in, N);
    CHECK(ch, cudaLaunchHostFunc(ch->stream, hold_stream, NULL) == cudaSuccess, "host function");
    double t0 = now_s();
    OK(ch, c, comm_allreduce(c, buf, buf, N, COMM_F32, COMM_SUM, ch->stream));
    OK(ch, c, comm_wait(c, ch->stream));
    double dt = now_s() - t0;
    CHECK(ch, dt >= 1.4, "the wait took %.2f s behind 1.5 s of queued work", dt);
    get_f32(ch, got, buf, N);
    expect(ch, "allreduce behind queued work", got, in, N);
    comm_set_stream(c, ch->stream);
    double x = 2.5;
    CHECK(ch, cudaLaunchHostFunc(ch->stream, hold_stream, NULL) == cudaSuccess, "host function");
    OK(ch, c, comm_allreduce(c, &x, &x, 1, COMM_F64, COMM_SUM, NULL));
    CHECK(ch, x == 2.5, "host all-reduce behind queued work: %g", x);
    cudaFree(buf);
    comm_destroy(c);
    return ch->fails ? 1 : 0;
}

/* Two buffers, a second stream and an event for an all-reduce made to wait for another. */
typedef struct behind {
    void *a, *b;
    cudaStream_t s2;
    cudaEvent_t ev;
} behind;

static void behind_open(child *ch, behind *w) {
    *w = (behind){.a = dev_alloc(ch, N * 4), .b = dev_alloc(ch, N * 4)};
    CHECK(ch, cudaStreamCreateWithFlags(&w->s2, cudaStreamNonBlocking) == cudaSuccess, "stream");
    CHECK(ch, cudaEventCreateWithFlags(&w->ev, cudaEventDisableTiming) == cudaSuccess, "event");
}

static void behind_close(behind *w) {
    cudaFree(w->a), cudaFree(w->b);
    cudaEventDestroy(w->ev);
    cudaStreamDestroy(w->s2);
}

/* An all-reduce of w->a on ca (the test's stream), then one of w->b on cb on w->s2, made
 * to wait for the first through w->ev; then comm_wait on w->s2. Its status. */
static int allreduce_behind(child *ch, comm *ca, comm *cb, behind *w) {
    int rc = comm_allreduce(ca, w->a, w->a, N, COMM_F32, COMM_SUM, ch->stream);
    if (rc == 0) {
        cudaEventRecord(w->ev, ch->stream);
        cudaStreamWaitEvent(w->s2, w->ev, 0);
        rc = comm_allreduce(cb, w->b, w->b, N, COMM_F32, COMM_SUM, w->s2);
    }
    return rc == 0 ? comm_wait(cb, w->s2) : rc;
}

/* A hung all-reduce A, and a second one B on another stream made to wait for A: B's
 * deadline never starts, but comm_wait on B's stream must still fail within A's. */
static int child_timeout_behind(child *ch) {
    comm *c = NULL;
    int role = join_with_idle_peer(ch, &c);
    if (role != 0) return role < 0;
    behind w;
    behind_open(ch, &w);
    double t0 = now_s();
    int rc = allreduce_behind(ch, c, c, &w);
    check_timed_out(ch, c, rc, now_s() - t0, w.s2);
    comm_destroy(c);
    behind_close(&w);
    return ch->fails ? 1 : 0;
}

/* A hung all-reduce A of another group ("other", the world's members split off) and
 * B of the world on another stream made to wait for A: comm_wait on B's stream fails
 * within A's deadline naming A, and "other" is failed and aborted as well (its kernels
 * are what blocks; left armed, A's slot would fail every later wait of the process). */
static int child_timeout_other(child *ch) {
    comm *c = NULL, *o = NULL;
    if (init(ch, 30000, &c) < 0) return 1;
    const uint32_t all[2] = {0, 1};
    OK(ch, c, comm_split(c, all, 2, "other", &o));
    if (o == NULL || ch->rank == 1) {
        if (o != NULL) sleep(8);
        comm_abort(o), comm_abort(c);
        comm_destroy(o), comm_destroy(c);
        return o != NULL && !ch->fails ? 0 : 1;
    }
    comm_set_timeout_ms(o, 2000);
    comm_set_timeout_ms(c, 2000);
    behind w;
    behind_open(ch, &w);
    double t0 = now_s();
    int rc = allreduce_behind(ch, o, c, &w);
    double dt = now_s() - t0;
    printf("rank 0: after %.2f s: %d: %s | other: %s\n", dt, rc, comm_error(c), comm_error(o));
    CHECK(ch, rc == BT_EIO && comm_fault_of(c) == COMM_FAULT_TIMEOUT, "rc %d", rc);
    CHECK(ch, strstr(comm_error(c), "while waiting") && strstr(comm_error(c), "'other'"),
          "world's message: %s", comm_error(c));
    CHECK(ch, comm_fault_of(o) == COMM_FAULT_TIMEOUT && strstr(comm_error(o), "'world'"),
          "other's message: %s", comm_error(o));
    CHECK(ch, dt >= 1.9 && dt < 6.0, "took %.2f s for a 2 s timeout", dt);
    CHECK(ch, comm_barrier(o, NULL) == BT_EIO, "other not failed");
    comm_destroy(o), comm_destroy(c);
    behind_close(&w);
    return ch->fails ? 1 : 0;
}

#ifdef BATON_TEST_NCCL_CUDA_BACKEND
/* The trainer's overlapped all-reduce (train_dp_overlap.h) as it drives the CUDA backend
 * and NCCL: "gradients" written by an op on the backend's stream after milliseconds of
 * other ops there, a side queue of the backend (stream_new) made to wait for them
 * (stream_wait), the all-reduce put on it, comm_wait, the ops' stream made to wait for the
 * side queue, one more op: the result must be exactly that op applied to the sum. Without
 * the first wait the all-reduce would read the buffer before the copy lands (zeros). */
static int child_side_queue(child *ch) {
    comm *c = NULL;
    if (init(ch, 30000, &c) < 0) return 1;
    backend be;
    bt_diag d;
    bt_diag_init(&d);
    int rc = cuda_backend_init(&be, ch->rank, &d);
    CHECK(ch, rc == 0, "cuda_backend_init: %s", d.msg);
    if (rc != 0) {
        comm_destroy(c);
        return 1;
    }
    comm_set_stream(c, be.stream);
    const size_t big = (size_t)64 << 20, n = (size_t)1 << 20;
    float *busy = be.alloc(&be, big * 4), *src = be.alloc(&be, n * 4), *g = be.alloc(&be, n * 4);
    float *h = malloc(n * sizeof *h);
    void *side = be.stream_new(&be);
    CHECK(ch, busy && src && g && h && side, "allocation");
    if (busy && src && g && h && side) {
        for (size_t i = 0; i < n; i++)
            h[i] = (float)(ch->rank + 1 + (int)(i % 7));
        be.from_host(&be, src, h, n * 4);
        for (int k = 0; k < 16; k++)
            be.scale(&be, busy, 1.0f, big);
        be.copy(&be, g, src, n);
        be.stream_wait(&be, side, NULL);
        OK(ch, c, comm_allreduce(c, g, g, n, COMM_F32, COMM_SUM, side));
        OK(ch, c, comm_wait(c, side));
        be.stream_wait(&be, NULL, side);
        be.scale(&be, g, 0.5f, n);
        be.to_host(&be, h, g, n * 4);
        int w = ch->world;
        for (size_t i = 0; i < n; i++) {
            float want = 0.5f * (float)(w * (w + 1) / 2 + w * (int)(i % 7));
            if (h[i] != want) {
                CHECK(ch, h[i] == want, "side-queue all-reduce [%zu] = %g, expected %g", i,
                      (double)h[i], (double)want);
                break;
            }
        }
        CHECK(ch, be.sync(&be) == 0, "backend: %s", cuda_backend_error(&be));
    }
    if (side) be.stream_free(&be, side);
    free(h);
    be.free(&be, busy), be.free(&be, src), be.free(&be, g);
    cuda_backend_free(&be);
    comm_destroy(c);
    return ch->fails ? 1 : 0;
}

#endif

/* World 2 with only rank 0 started: init must fail within its timeout, naming why. */
static int child_nopeer(child *ch) {
    comm_bootstrap bs = {0};
    bs.rank = ch->rank;
    bs.size = ch->world;
    bs.store_dir = ch->dir;
    bs.prefix = "attempt-1";
    bs.timeout_ms = 3000;
    bt_diag d;
    bt_diag_init(&d);
    comm *c = NULL;
    double t0 = now_s();
    int rc = comm_nccl_init(&c, &bs, 0, &d);
    double dt = now_s() - t0;
    printf("rank 0: init after %.2f s: %d: %s\n", dt, rc, d.msg);
    CHECK(ch, rc == BT_EIO && c == NULL, "rc %d", rc);
    CHECK(ch, strstr(d.msg, "did not join") != NULL, "message: %s", d.msg);
    CHECK(ch, dt >= 2.9 && dt < 8.0, "took %.2f s for a 3 s timeout", dt);
    comm_destroy(c);
    return ch->fails ? 1 : 0;
}

static const scenario scenarios[] = {
    {"collectives-w1", 1, 1, child_collectives},
    {"collectives-w2", 2, 2, child_collectives},
    {"timeout-w2", 2, 2, child_timeout},
    {"nopeer-w2", 2, 1, child_nopeer},
    {"host-w1", 1, 1, child_host},
    {"host-w2", 2, 2, child_host},
    {"timeout-host-w2", 2, 2, child_timeout_host},
    {"queued-w1", 1, 1, child_queued},
    {"timeout-behind-w2", 2, 2, child_timeout_behind},
    {"timeout-other-w2", 2, 2, child_timeout_other},
#ifdef BATON_TEST_NCCL_CUDA_BACKEND
    {"side-queue-w1", 1, 1, child_side_queue},
    {"side-queue-w2", 2, 2, child_side_queue},
#endif
    {NULL, 0, 0, NULL},
};

static const scenario *find_scenario(const char *name) {
    for (const scenario *sc = scenarios; sc->name; sc++)
        if (strcmp(sc->name, name) == 0) return sc;
    return NULL;
}

static int run_child(const scenario *sc, int rank, const char *dir) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    child ch = {rank, sc->world, dir, NULL, 0};
    cudaError_t e = cudaSetDevice(rank);
    if (e == cudaSuccess) e = cudaStreamCreate(&ch.stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "rank %d: device %d: %s\n", rank, rank, cudaGetErrorString(e));
        return 1;
    }
    int rc = sc->run(&ch);
    cudaStreamDestroy(ch.stream);
    return rc;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int run_parent(const scenario *sc) {
    /* Skip, out loud, where the scenario cannot run: no driver, or too few devices. */
    int ndev = 0, driver = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess) {
        (void)cudaDriverGetVersion(&driver);
        int nodes = access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
        if (e != cudaErrorNoDevice && driver != 0 && nodes) {
            fprintf(stderr, "FAIL: the CUDA driver (CUDA %d.%d) fails: cudaGetDeviceCount: %s\n",
                    driver / 1000, driver % 1000 / 10, cudaGetErrorString(e));
            return 1;
        }
        printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s)\n", cudaGetErrorString(e));
        return EXIT_SKIP;
    }
    if (ndev < sc->started) {
        printf("SKIPPED: %s needs %d CUDA devices (one per rank: NCCL allows no two ranks of "
               "a communicator on one device), found %d\n",
               sc->name, sc->started, ndev);
        return EXIT_SKIP;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/baton-nccl-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    pid_t pids[MAX_RANKS] = {0};
    int status[MAX_RANKS] = {0}, fail = 0;
    for (int r = 0; r < sc->started; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            char rank[16];
            snprintf(rank, sizeof rank, "%d", r);
            char *argv[] = {"test_nccl", "--child", (char *)sc->name, rank, dir, NULL};
            execv("/proc/self/exe", argv);
            perror("execv /proc/self/exe");
            _exit(127);
        }
    }
    const double deadline = now_s() + 90;
    for (int left = sc->started; left > 0;) {
        for (int r = 0; r < sc->started; r++)
            if (pids[r] > 0 && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
                pids[r] = 0;
                left--;
                if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)) {
                    fprintf(stderr, "%s: rank %d %s %d\n", sc->name, r,
                            WIFSIGNALED(status[r]) ? "killed by signal" : "exited with",
                            WIFSIGNALED(status[r]) ? WTERMSIG(status[r]) : WEXITSTATUS(status[r]));
                    fail = 1;
                }
            }
        if (left > 0 && now_s() > deadline) {
            fprintf(stderr, "%s: deadline of 90 s passed; killing every rank\n", sc->name);
            for (int r = 0; r < sc->started; r++)
                if (pids[r] > 0) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], &status[r], 0);
                    pids[r] = 0;
                }
            fail = 1;
            break;
        }
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "cannot remove %s: %s\n", dir, strerror(errno));
    printf("%s: %s\n", sc->name, fail ? "FAILED" : "passed");
    return fail;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (const scenario *sc = scenarios; sc->name; sc++)
            printf("%s\n", sc->name);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "--child") == 0) {
        const scenario *sc = find_scenario(argv[2]);
        return sc ? run_child(sc, atoi(argv[3]), argv[4]) : 2;
    }
    const scenario *sc = argc == 2 ? find_scenario(argv[1]) : NULL;
    if (sc == NULL) {
        fprintf(stderr, "usage: %s SCENARIO (see --list)\n", argv[0]);
        return 2;
    }
    return run_parent(sc);
}
