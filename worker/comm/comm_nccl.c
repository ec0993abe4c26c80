/* The NCCL backend: the communication interface over non-blocking NCCL communicators.
 *
 * Rules this file keeps:
 *  - Nothing waits without a deadline. Communicators are created with
 *    ncclConfig_t.blocking = 0, so every NCCL call returns at once, possibly with
 *    ncclInProgress; settle() then polls ncclCommGetAsyncError until the call is done or
 *    the group's timeout passes. comm_wait polls cudaStreamQuery and the async error the
 *    same way. When a deadline passes the communicator is aborted (ncclCommAbort makes
 *    NCCL's kernels on every stream of this rank exit) and the comm fails with BT_EIO.
 *  - Every CUDA or NCCL error becomes a negative BT_ code and a message that names the
 *    API call and its error string (plus ncclGetLastError's detail); the comm is then
 *    aborted and the failure sticky, as comm.h requires. Nothing here exits.
 *  - Operations only enqueue on the caller's stream; completion is comm_wait's. A
 *    barrier is therefore complete, as a barrier, only after comm_wait.
 *  - A process's groups share one root (the rendezvous store and the device); each
 *    group has its own NCCL communicator, rendezvoused under its own prefix: the
 *    group's rank 0 creates the ncclUniqueId and publishes it as "<prefix>/nccl-id".
 *    comm.h lets only the members of a sub-group call comm_split, while ncclCommSplit
 *    needs every rank of the parent, so a split makes a fresh id under the parent's
 *    prefix plus the hash of the member list and a per-list counter (as Gloo does).
 *  - NCCL has no tags: point-to-point messages between one pair are matched in the
 *    order they are posted; tags are ignored.
 *  - Byte counters follow NCCL's ring model, payload only: all-reduce 2(n-1)/n of the
 *    buffer, reduce-scatter, all-gather and all-to-all (n-1) blocks, broadcast one copy
 *    from every rank but the last of the chain, point-to-point what is sent. */
#include "comm_nccl.h"

#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

/* What a process's groups share. */
typedef struct nccl_root {
    comm_store store;
    atomic_int refs;
    int device;
} nccl_root;

/* How many groups were split from one member list (keyed by its hash). */
typedef struct split_count {
    uint64_t hash;
    uint32_t n;
} split_count;

typedef struct nccl_group {
    nccl_root *root;
    ncclComm_t nc; /* NULL once aborted */
    char *prefix;
    float *zero; /* (1) device scratch of the barrier; stays 0 (0 + 0 = 0) */
    split_count *splits;
    int nsplits;
    unsigned pending; /* operations enqueued since the last successful comm_wait */
    char last_op[96]; /* the last of them, for the timeout message */
} nccl_group;

/* A failure outside an operation (init, split), before there is a comm to record it. */
typedef struct nccl_err {
    int code;
    comm_fault fault;
    char msg[768];
} nccl_err;

static const comm_ops *nccl_ops(void);

/* ---- helpers ---------------------------------------------------------------------- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls spin briefly (short collectives finish in microseconds), then sleep 100 us so
 * that a long wait does not take a core. */
static void poll_pause(unsigned *spins) {
    if (*spins < 2000) {
        (*spins)++;
        sched_yield();
        return;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

static ncclDataType_t nccl_type(comm_dtype dtype) {
    switch (dtype) {
    case COMM_F32:
        return ncclFloat32;
    case COMM_F64:
        return ncclFloat64;
    case COMM_BYTE:
        break;
    }
    return ncclUint8;
}

static ncclRedOp_t nccl_op(comm_redop op) {
    return op == COMM_MAX ? ncclMax : ncclSum;
}

static cudaStream_t stream_of(void *stream) {
    return (cudaStream_t)stream;
}

/* A transport failure (a peer that died or closed) or something else. */
static comm_fault nccl_fault(ncclResult_t r) {
    return r == ncclRemoteError || r == ncclSystemError ? COMM_FAULT_PEER_LOST
                                                        : COMM_FAULT_INTERNAL;
}

static int nccl_code(ncclResult_t r) {
    return r == ncclInvalidArgument || r == ncclInvalidUsage ? BT_EINVAL : BT_EIO;
}

static int cuda_code(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? BT_ENOMEM : BT_EIO;
}

static void group_abort(nccl_group *g) {
    if (g->nc != NULL) {
        ncclCommAbort(g->nc);
        g->nc = NULL;
    }
}

static void root_release(nccl_root *root) {
    if (root == NULL || atomic_fetch_sub(&root->refs, 1) != 1) return;
    if (root->store.close) root->store.close(root->store.ctx);
    free(root);
}

static void group_free(nccl_group *g) {
    if (g == NULL) return;
    group_abort(g);
    if (g->zero) cudaFree(g->zero);
    root_release(g->root);
    free(g->prefix);
    free(g->splits);
    free(g);
}

static nccl_group *group_new(nccl_root *root, const char *prefix) {
    nccl_group *g = calloc(1, sizeof *g);
    size_t n = strlen(prefix) + 1;
    char *p = malloc(n);
    if (g == NULL || p == NULL) {
        free(g);
        free(p);
        return NULL;
    }
    memcpy(p, prefix, n);
    atomic_fetch_add(&root->refs, 1);
    g->root = root;
    g->prefix = p;
    return g;
}

/* Records a failed NCCL call of op on c and aborts the group. */
static int fail_nccl(comm *c, const char *op, const char *api, ncclResult_t r) {
    nccl_group *g = c->impl;
    const char *last = g->nc ? ncclGetLastError(g->nc) : NULL;
    int rc =
        comm_fail(c, nccl_code(r), nccl_fault(r), op, "%s: %s%s%s%s", api, ncclGetErrorString(r),
                  last && *last ? " (" : "", last ? last : "", last && *last ? ")" : "");
    group_abort(g);
    return rc;
}

static int fail_cuda(comm *c, const char *op, const char *api, cudaError_t e) {
    int rc = comm_fail(c, cuda_code(e), COMM_FAULT_INTERNAL, op, "%s: %s (%s)", api,
                       cudaGetErrorString(e), cudaGetErrorName(e));
    group_abort(c->impl);
    return rc;
}

/* Waits, up to the group's timeout, until an NCCL call that returned r has finished
 * on this non-blocking communicator, and reports its failure. */
static int settle(comm *c, const char *op, const char *api, ncclResult_t r) {
    nccl_group *g = c->impl;
    int64_t deadline = now_ms() + c->timeout_ms;
    unsigned spins = 0;
    while (r == ncclInProgress) {
        ncclResult_t q = ncclCommGetAsyncError(g->nc, &r);
        if (q != ncclSuccess) return fail_nccl(c, op, "ncclCommGetAsyncError", q);
        if (r != ncclInProgress) break;
        if (now_ms() > deadline) {
            group_abort(g);
            return comm_fail(c, BT_EIO, COMM_FAULT_TIMEOUT, op,
                             "%s still in progress after %d ms (a peer is hung or absent); "
                             "communicator aborted",
                             api, c->timeout_ms);
        }
        poll_pause(&spins);
    }
    return r == ncclSuccess ? 0 : fail_nccl(c, op, api, r);
}

/* Notes an enqueued operation for comm_wait's messages. */
static void note_op(comm *c, const char *op, size_t count, comm_dtype dtype) {
    nccl_group *g = c->impl;
    g->pending++;
    snprintf(g->last_op, sizeof g->last_op, "%s of %zu %s", op, count, comm_dtype_name(dtype));
}

/* ---- rendezvous -------------------------------------------------------------------- */

static void set_err(nccl_err *e, int code, comm_fault fault, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_err(nccl_err *e, int code, comm_fault fault, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    e->fault = fault;
}

/* Gets the group's ncclUniqueId: rank 0 makes and publishes it, the others wait for it
 * until deadline. */
static int exchange_id(nccl_group *g, int rank, int64_t deadline, ncclUniqueId *id, nccl_err *err) {
    comm_store *st = &g->root->store;
    char key[1024];
    if ((size_t)snprintf(key, sizeof key, "%s/nccl-id", g->prefix) >= sizeof key) {
        set_err(err, BT_EINVAL, COMM_FAULT_USAGE, "rendezvous prefix '%.100s...' too long",
                g->prefix);
        return err->code;
    }
    bt_diag d;
    bt_diag_init(&d);
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess) {
            set_err(err, nccl_code(r), nccl_fault(r), "ncclGetUniqueId: %s (%s)",
                    ncclGetErrorString(r), ncclGetLastError(NULL));
            return err->code;
        }
        int rc = st->set(st->ctx, key, id, sizeof *id, &d);
        if (rc < 0) set_err(err, rc, COMM_FAULT_STORE, "publishing the NCCL id: %s", d.msg);
        return rc;
    }
    int64_t left = deadline - now_ms();
    void *val = NULL;
    size_t len = 0;
    int rc = st->get(st->ctx, key, &val, &len, left > 0 ? (int)left : 1, &d);
    if (rc == BT_ENOENT) {
        set_err(err, BT_EIO, COMM_FAULT_TIMEOUT,
                "group rank 0 did not publish the NCCL id in time: %s", d.msg);
        return err->code;
    }
    if (rc < 0) {
        set_err(err, rc, COMM_FAULT_STORE, "reading the NCCL id: %s", d.msg);
        return rc;
    }
    if (len != sizeof *id) {
        set_err(err, BT_EIO, COMM_FAULT_STORE, "NCCL id under '%s' has %zu bytes (expected %zu)",
                key, len, sizeof *id);
        free(val);
        return err->code;
    }
    memcpy(id, val, sizeof *id);
    free(val);
    return 0;
}

/* Creates g's communicator as rank `rank` of `size` on the root's device, everything
 * within timeout_ms. */
static int group_connect(nccl_group *g, int rank, int size, int timeout_ms, const char *name,
                         nccl_err *err) {
    int64_t deadline = now_ms() + timeout_ms;
    const char *api = "cudaSetDevice";
    cudaError_t ce = cudaSetDevice(g->root->device);
    if (ce == cudaSuccess) {
        api = "cudaMalloc";
        ce = cudaMalloc((void **)&g->zero, sizeof *g->zero);
    }
    if (ce == cudaSuccess) {
        api = "cudaMemset";
        ce = cudaMemset(g->zero, 0, sizeof *g->zero);
    }
    if (ce != cudaSuccess) {
        set_err(err, cuda_code(ce), COMM_FAULT_INTERNAL, "%s (device %d): %s (%s)", api,
                g->root->device, cudaGetErrorString(ce), cudaGetErrorName(ce));
        return err->code;
    }
    ncclUniqueId id;
    int rc = exchange_id(g, rank, deadline, &id, err);
    if (rc < 0) return rc;

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = name;
    ncclComm_t nc = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&nc, size, id, rank, &cfg);
    unsigned spins = 0;
    while (r == ncclInProgress && nc != NULL) {
        ncclResult_t q = ncclCommGetAsyncError(nc, &r);
        if (q != ncclSuccess) r = q;
        if (r != ncclInProgress) break;
        if (now_ms() > deadline) {
            ncclCommAbort(nc);
            set_err(err, BT_EIO, COMM_FAULT_TIMEOUT,
                    "ncclCommInitRankConfig: not complete after %d ms (a member did not join); "
                    "communicator aborted",
                    timeout_ms);
            return err->code;
        }
        poll_pause(&spins);
    }
    if (r != ncclSuccess) {
        set_err(err, nccl_code(r), nccl_fault(r), "ncclCommInitRankConfig: %s (%s)",
                ncclGetErrorString(r), ncclGetLastError(nc));
        if (nc != NULL) ncclCommAbort(nc);
        return err->code;
    }
    g->nc = nc;
    return 0;
}

static int check_bootstrap(const comm_bootstrap *bs, int device, bt_diag *diag) {
    int rc = comm_bootstrap_check(bs, diag);
    if (rc == 0 && device < 0) {
        bt_diag_set(diag, "comm bootstrap: CUDA device %d invalid (need >= 0)", device);
        rc = BT_EINVAL;
    }
    return rc;
}

int comm_nccl_init(comm **out, const comm_bootstrap *bs, int device, bt_diag *diag) {
    *out = NULL;
    comm_store store = bs->store;
    int rc = check_bootstrap(bs, device, diag);
    if (rc == 0 && bs->store_dir != NULL) {
        if (store.close) store.close(store.ctx);
        rc = comm_store_file(&store, bs->store_dir, diag);
    }
    if (rc < 0) {
        if (store.close) store.close(store.ctx);
        return rc;
    }
    const char *name = bs->name ? bs->name : "world";
    nccl_err err = {0, COMM_FAULT_NONE, "out of memory"};
    nccl_group *g = NULL;
    nccl_root *root = calloc(1, sizeof *root);
    if (root == NULL) {
        if (store.close) store.close(store.ctx);
        rc = BT_ENOMEM;
        goto error;
    }
    root->store = store;
    root->device = device;
    atomic_init(&root->refs, 1); /* the init's own reference, dropped below */
    g = group_new(root, bs->prefix);
    root_release(root);
    if (g == NULL) {
        rc = BT_ENOMEM;
        goto error;
    }
    rc = group_connect(g, bs->rank, bs->size, bs->timeout_ms, name, &err);
    if (rc < 0) goto error;
    rc = comm_create(nccl_ops(), g, bs->rank, bs->size, NULL, name, bs->timeout_ms, out);
    if (rc < 0) {
        snprintf(err.msg, sizeof err.msg, "out of memory");
        goto error;
    }
    return 0;
error:
    group_free(g);
    bt_diag_set(diag, "comm '%s' rank %d/%d: NCCL init (prefix '%s', device %d, timeout %d ms): %s",
                name, bs->rank, bs->size, bs->prefix, device, bs->timeout_ms, err.msg);
    return rc;
}

/* ---- operations -------------------------------------------------------------------- */

static uint64_t ring_allreduce_bytes(int n, size_t bytes) {
    return n == 1 ? 0 : 2 * (uint64_t)(n - 1) * bytes / (uint64_t)n;
}

static int op_allreduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                        comm_redop op, void *stream) {
    nccl_group *g = c->impl;
    note_op(c, "allreduce", count, dtype);
    int rc = settle(
        c, "allreduce", "ncclAllReduce",
        ncclAllReduce(in, out, count, nccl_type(dtype), nccl_op(op), g->nc, stream_of(stream)));
    if (rc == 0) c->bytes_sent += ring_allreduce_bytes(c->size, count * comm_dtype_size(dtype));
    return rc;
}

static int op_reduce_scatter(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                             comm_redop op, void *stream) {
    nccl_group *g = c->impl;
    note_op(c, "reduce-scatter", count, dtype);
    int rc = settle(
        c, "reduce-scatter", "ncclReduceScatter",
        ncclReduceScatter(in, out, count, nccl_type(dtype), nccl_op(op), g->nc, stream_of(stream)));
    if (rc == 0) c->bytes_sent += (uint64_t)(c->size - 1) * count * comm_dtype_size(dtype);
    return rc;
}

static int op_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                        void *stream) {
    nccl_group *g = c->impl;
    note_op(c, "allgather", count, dtype);
    int rc = settle(c, "allgather", "ncclAllGather",
                    ncclAllGather(in, out, count, nccl_type(dtype), g->nc, stream_of(stream)));
    if (rc == 0) c->bytes_sent += (uint64_t)(c->size - 1) * count * comm_dtype_size(dtype);
    return rc;
}

/* Ends a group of sends and receives. A call inside it that failed (first, from api)
 * is the error reported; the group is still closed so that NCCL's state is consistent
 * before the abort. sent: the bytes the group sends, counted on success. */
static int close_group(comm *c, const char *op, ncclResult_t first, const char *api,
                       uint64_t sent) {
    ncclResult_t end = ncclGroupEnd();
    if (first != ncclSuccess) return fail_nccl(c, op, api, first);
    int rc = settle(c, op, "ncclGroupEnd", end);
    if (rc == 0) c->bytes_sent += sent;
    return rc;
}

/* The own block of an all-to-all is a device copy on the stream; the rest is one
 * group of sends and receives. in_off/out_off and counts are in elements. */
static int exchange_blocks(comm *c, const char *op, const void *in, const size_t *in_off,
                           const size_t *send_counts, void *out, const size_t *out_off,
                           const size_t *recv_counts, comm_dtype dtype, void *stream) {
    nccl_group *g = c->impl;
    const size_t es = comm_dtype_size(dtype);
    const ncclDataType_t t = nccl_type(dtype);
    const cudaStream_t s = stream_of(stream);
    const int me = c->rank;
    if (send_counts[me] > 0) {
        cudaError_t e =
            cudaMemcpyAsync((char *)out + out_off[me] * es, (const char *)in + in_off[me] * es,
                            send_counts[me] * es, cudaMemcpyDeviceToDevice, s);
        if (e != cudaSuccess) return fail_cuda(c, op, "cudaMemcpyAsync", e);
    }
    ncclResult_t first = ncclGroupStart();
    if (first != ncclSuccess) return fail_nccl(c, op, "ncclGroupStart", first);
    const char *api = "ncclSend";
    uint64_t sent = 0;
    for (int p = 0; first == ncclSuccess && p < c->size; p++) {
        if (p == me) continue;
        if (send_counts[p] > 0) {
            api = "ncclSend";
            first = ncclSend((const char *)in + in_off[p] * es, send_counts[p], t, p, g->nc, s);
            sent += send_counts[p] * es;
        }
        if (first == ncclSuccess && recv_counts[p] > 0) {
            api = "ncclRecv";
            first = ncclRecv((char *)out + out_off[p] * es, recv_counts[p], t, p, g->nc, s);
        }
    }
    return close_group(c, op, first, api, sent);
}

static int op_alltoallv(comm *c, const void *in, const size_t *send_counts, void *out,
                        const size_t *recv_counts, comm_dtype dtype, void *stream) {
    size_t *off = malloc(2 * (size_t)c->size * sizeof *off);
    if (off == NULL)
        return comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, "alltoallv", "out of memory");
    size_t *in_off = off, *out_off = off + c->size, ni = 0, no = 0, total = 0;
    for (int p = 0; p < c->size; p++) {
        in_off[p] = ni;
        out_off[p] = no;
        ni += send_counts[p];
        no += recv_counts[p];
        if (p != c->rank) total += send_counts[p];
    }
    note_op(c, "alltoallv", total, dtype);
    int rc = exchange_blocks(c, "alltoallv", in, in_off, send_counts, out, out_off, recv_counts,
                             dtype, stream);
    free(off);
    return rc;
}

static int op_alltoall(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                       void *stream) {
    size_t *v = malloc(2 * (size_t)c->size * sizeof *v);
    if (v == NULL) return comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, "alltoall", "out of memory");
    size_t *counts = v, *off = v + c->size;
    for (int p = 0; p < c->size; p++) {
        counts[p] = count;
        off[p] = (size_t)p * count;
    }
    note_op(c, "alltoall", count, dtype);
    int rc = exchange_blocks(c, "alltoall", in, off, counts, out, off, counts, dtype, stream);
    free(v);
    return rc;
}

static int op_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root,
                        void *stream) {
    nccl_group *g = c->impl;
    char op[32];
    snprintf(op, sizeof op, "broadcast (root %d)", root);
    note_op(c, op, count, dtype);
    int rc =
        settle(c, op, "ncclBroadcast",
               ncclBroadcast(buf, buf, count, nccl_type(dtype), root, g->nc, stream_of(stream)));
    /* The chain root -> root+1 -> ...: every rank but the last forwards the buffer. */
    if (rc == 0 && c->rank != (root + c->size - 1) % c->size)
        c->bytes_sent += count * comm_dtype_size(dtype);
    return rc;
}

static int op_barrier(comm *c, void *stream) {
    nccl_group *g = c->impl;
    note_op(c, "barrier", 1, COMM_F32);
    int rc =
        settle(c, "barrier", "ncclAllReduce",
               ncclAllReduce(g->zero, g->zero, 1, ncclFloat32, ncclSum, g->nc, stream_of(stream)));
    if (rc == 0) c->bytes_sent += ring_allreduce_bytes(c->size, sizeof(float));
    return rc;
}

static int op_p2p(comm *c, const comm_p2p_op *ops, int n, void *stream) {
    nccl_group *g = c->impl;
    const char *op = n == 1 ? (ops[0].kind == COMM_SEND ? "send" : "recv") : "p2p";
    const cudaStream_t s = stream_of(stream);
    note_op(c, op, ops[0].count, ops[0].dtype);
    ncclResult_t first = ncclGroupStart();
    if (first != ncclSuccess) return fail_nccl(c, op, "ncclGroupStart", first);
    const char *api = "ncclSend";
    uint64_t sent = 0;
    for (int i = 0; first == ncclSuccess && i < n; i++) {
        const comm_p2p_op *o = &ops[i];
        if (o->count == 0) continue;
        if (o->kind == COMM_SEND) {
            api = "ncclSend";
            first = ncclSend(o->buf, o->count, nccl_type(o->dtype), o->peer, g->nc, s);
            sent += o->count * comm_dtype_size(o->dtype);
        } else {
            api = "ncclRecv";
            first = ncclRecv(o->buf, o->count, nccl_type(o->dtype), o->peer, g->nc, s);
        }
    }
    return close_group(c, op, first, api, sent);
}

/* The watchdog: the stream is done, or an asynchronous NCCL error, or the deadline. */
static int op_wait(comm *c, void *stream) {
    nccl_group *g = c->impl;
    const cudaStream_t s = stream_of(stream);
    const int64_t deadline = now_ms() + c->timeout_ms;
    unsigned spins = 0;
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        ncclResult_t ae = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(g->nc, &ae);
        if (q != ncclSuccess) return fail_nccl(c, "wait", "ncclCommGetAsyncError", q);
        if (ae != ncclSuccess && ae != ncclInProgress)
            return fail_nccl(c, "wait", "asynchronous NCCL error", ae);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) return fail_cuda(c, "wait", "cudaStreamQuery", e);
        if (now_ms() > deadline) {
            unsigned pending = g->pending;
            group_abort(g);
            return comm_fail(c, BT_EIO, COMM_FAULT_TIMEOUT, "wait",
                             "%u operation%s enqueued since the last wait (last: %s) not "
                             "complete after %d ms (a peer is hung or dead); communicator "
                             "aborted",
                             pending, pending == 1 ? "" : "s", g->last_op, c->timeout_ms);
        }
        poll_pause(&spins);
    }
    g->pending = 0;
    return 0;
}

/* The sub-group's prefix is the parent's plus the hash of its global member list and
 * the number of groups already made from that list by this parent. */
static int op_split(comm *c, const int *parent_ranks, int n, const char *name, comm **out) {
    nccl_group *g = c->impl;
    const char *label = name ? name : "?";
    int *global = malloc((size_t)n * sizeof *global);
    split_count *sc = realloc(g->splits, ((size_t)g->nsplits + 1) * sizeof *sc);
    if (sc != NULL) g->splits = sc;
    if (global == NULL || sc == NULL) {
        free(global);
        return comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, "split", "out of memory");
    }
    const int me = comm_split_members(c, parent_ranks, n, global);
    const uint64_t h = comm_members_hash(global, n);
    int k = 0;
    while (k < g->nsplits && g->splits[k].hash != h)
        k++;
    if (k == g->nsplits) g->splits[g->nsplits++] = (split_count){h, 0};
    const uint32_t seq = g->splits[k].n++;

    nccl_err err = {BT_ENOMEM, COMM_FAULT_INTERNAL, "out of memory"};
    char *prefix = malloc(strlen(g->prefix) + 64);
    nccl_group *sub = NULL;
    int rc = BT_ENOMEM;
    if (prefix != NULL) {
        snprintf(prefix, strlen(g->prefix) + 64, "%s/g%016llx.%d.%u", g->prefix,
                 (unsigned long long)h, n, seq);
        sub = group_new(g->root, prefix);
    }
    if (sub != NULL) rc = group_connect(sub, me, n, c->timeout_ms, label, &err);
    if (rc == 0) rc = comm_create(nccl_ops(), sub, me, n, global, name, c->timeout_ms, out);
    free(prefix);
    free(global);
    if (rc == 0) return 0;
    group_free(sub);
    /* comm.h: a failed split fails the parent (sticky, so never a usage fault here). */
    comm_fault fault = err.fault == COMM_FAULT_USAGE ? COMM_FAULT_INTERNAL : err.fault;
    rc = comm_fail(c, rc, fault, "split", "group '%s': %s", label, err.msg);
    group_abort(g);
    return rc;
}

static void op_abort(comm *c) {
    group_abort(c->impl);
}

/* A healthy communicator is finalized (its outstanding work flushed) within the
 * timeout, then destroyed; otherwise, or when that does not finish, aborted. */
static void op_destroy(comm *c) {
    nccl_group *g = c->impl;
    if (g->nc != NULL && c->err == 0) {
        ncclResult_t r = ncclCommFinalize(g->nc);
        int64_t deadline = now_ms() + c->timeout_ms;
        unsigned spins = 0;
        while (r == ncclInProgress && now_ms() <= deadline) {
            if (ncclCommGetAsyncError(g->nc, &r) != ncclSuccess) break;
            if (r == ncclInProgress) poll_pause(&spins);
        }
        if (r == ncclSuccess) {
            ncclCommDestroy(g->nc); /* frees the communicator whatever it returns */
            g->nc = NULL;
        }
    }
    group_free(g); /* aborts what is left */
    c->impl = NULL;
}

static const comm_ops kNcclOps = {
    .name = "nccl",
    .streams = 1,
    .allreduce = op_allreduce,
    .reduce_scatter = op_reduce_scatter,
    .allgather = op_allgather,
    .alltoall = op_alltoall,
    .alltoallv = op_alltoallv,
    .broadcast = op_broadcast,
    .barrier = op_barrier,
    .p2p = op_p2p,
    .wait = op_wait,
    .split = op_split,
    .abort = op_abort,
    .destroy = op_destroy,
};

static const comm_ops *nccl_ops(void) {
    return &kNcclOps;
}
