/* The NCCL backend: the communication interface over non-blocking NCCL communicators.
 *
 * Rules this file keeps:
 *  - No wait for a peer lacks a deadline. Communicators are created with
 *    ncclConfig_t.blocking = 0, so every NCCL call returns at once, possibly with
 *    ncclInProgress; settle() then polls ncclCommGetAsyncError until the call is done or
 *    the group's timeout passes. comm_wait polls cudaStreamQuery and the async error the
 *    same way, and with them the watchdog (comm_watch.h): every collective enqueued is
 *    followed from an event recorded just before it to one just after, and its deadline
 *    runs from when the first is seen reached by a poll, i.e. from when the work queued
 *    ahead of it on its stream has finished, not from its enqueue (this rank's queued
 *    compute is no peer's fault; a peer's still counts, comm_watch.h); every wait polls
 *    every collective of the process's groups (at most once a millisecond), and each
 *    one's group for an asynchronous NCCL error, so that a hung or failed earlier
 *    collective is reported even where the wait is for a later one queued behind it.
 *    When a deadline passes, or a group has an asynchronous error, the waiting group and
 *    the collective's own group are aborted (ncclCommAbort stops that communicator's
 *    kernels only, so aborting the waiting group alone would leave the culprit running
 *    and its stream blocked) and both comms fail, with BT_EIO for a deadline.
 *  - Every CUDA or NCCL error becomes a negative BT_ code and a message that names the
 *    API call and its error string (plus ncclGetLastError's detail); the comm is then
 *    aborted and the failure sticky, as comm.h requires. Nothing here exits.
 *  - Streams. An operation given a stream only enqueues on it and returns; completion
 *    is comm_wait's (a barrier is complete, as a barrier, only after it). That is what
 *    a non-NULL stream is for: overlapping communication with compute, the caller
 *    waiting later. An operation given NULL enqueues on the group's default stream
 *    (comm_set_stream; inherited by splits) and waits for it before returning, under
 *    the same watchdog as comm_wait, so that with NULL this backend is synchronous like
 *    Gloo and the engine's calls work unchanged.
 *  - Host buffers. NCCL needs device memory, but the engine also reduces host scalars
 *    (a loss sum, a flag). A buffer that cudaPointerGetAttributes calls host memory
 *    (pageable or pinned) is staged: copied by the CPU into the group's pinned bounce
 *    buffer, from there on the stream into its device staging buffer, and back the same
 *    way; the call then completes before returning whatever the stream. Only pinned
 *    memory takes part in the stream's copies, because a copy to or from pageable
 *    memory may block the host on the stream with no deadline, and every wait here has
 *    one. Both buffers are allocated at the first staged call and grown (doubling) for
 *    a larger one; every staged call has completed before the next starts, so growing
 *    never frees memory in use. Device memory of another device is a usage error;
 *    managed memory is used as it is.
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

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm_watch.h"

/* What a process's groups share. */
typedef struct nccl_root {
    comm_store store;
    atomic_int refs;
    int device;
    pthread_mutex_t watch_mu; /* guards watch: groups may be used from different threads */
    comm_watch watch;         /* every group's collectives in flight (comm_watch.h) */
} nccl_root;

/* How many groups were split from one member list (keyed by its hash). */
typedef struct split_count {
    uint64_t hash;
    uint32_t n;
} split_count;

typedef struct nccl_group {
    nccl_root *root;
    comm *self;    /* the comm whose impl this is; NULL until it is made */
    ncclComm_t nc; /* NULL once aborted */
    char *prefix;
    float *zero; /* (1) device scratch of the barrier; stays 0 (0 + 0 = 0) */
    split_count *splits;
    int nsplits;
    unsigned pending;    /* operations enqueued since the last successful comm_wait */
    char last_op[96];    /* the last of them, for the timeout message */
    cudaStream_t stream; /* the default stream: what stream NULL means */
    char *stage;         /* (stage_cap) device staging of host buffers; NULL until used */
    char *bounce;        /* (stage_cap) pinned host mirror of stage */
    size_t stage_cap;
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
        return ncclUint8;
    }
    return ncclUint8; /* unreachable: comm.c rejects unknown dtypes */
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

/* Aborts g's communicator; its collectives in flight are no longer watched (their
 * kernels exit, and the group's failure is already the one reported). */
static void group_abort(nccl_group *g) {
    if (g->nc != NULL) {
        ncclCommAbort(g->nc);
        g->nc = NULL;
    }
    pthread_mutex_lock(&g->root->watch_mu);
    comm_watch_drop_owner(&g->root->watch, g);
    pthread_mutex_unlock(&g->root->watch_mu);
}

static void event_release(void *ev) {
    cudaEventDestroy((cudaEvent_t)ev);
}

static void root_release(nccl_root *root) {
    if (root == NULL || atomic_fetch_sub(&root->refs, 1) != 1) return;
    if (root->store.close) root->store.close(root->store.ctx);
    comm_watch_free(&root->watch, event_release);
    pthread_mutex_destroy(&root->watch_mu);
    free(root);
}

static void stage_release(nccl_group *g) {
    if (g->stage) cudaFree(g->stage);
    if (g->bounce) cudaFreeHost(g->bounce);
    g->stage = g->bounce = NULL;
    g->stage_cap = 0;
}

static void group_free(nccl_group *g) {
    if (g == NULL) return;
    group_abort(g);
    if (g->zero) cudaFree(g->zero);
    stage_release(g);
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
    pthread_mutex_init(&root->watch_mu, NULL);
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
    if (rc == 0) g->self = *out;
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

int comm_nccl_device_count(int *count, bt_diag *diag) {
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess || *count <= 0) {
        bt_diag_set(diag, "NCCL needs a CUDA device: cudaGetDeviceCount: %s",
                    e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
        *count = 0;
        return BT_EUNSUPPORTED;
    }
    return 0;
}

/* ---- the watchdog (comm_watch.h) --------------------------------------------------- */

static cudaError_t event_make(void **ev) {
    return cudaEventCreateWithFlags((cudaEvent_t *)ev, cudaEventDisableTiming);
}

/* A stream or event query's answer e, the not-ready it gives for unfinished work taken
 * back out of the CUDA runtime's last error of this thread, where the runtime leaves it
 * (it does for every failing call): else the next kernel launch of the compute backend on
 * this thread, which checks cudaGetLastError(), would report it as that launch's failure
 * ("device not ready"). */
static cudaError_t query_answer(cudaError_t e) {
    if (e == cudaErrorNotReady) (void)cudaGetLastError();
    return e;
}

/* A collective a poll found expired or failed, copied out of the list for the message;
 * also the probe's context. */
typedef struct watch_find {
    nccl_group *owner;
    char what[128];
    int timeout_ms;
    cudaError_t ce;  /* an event query's failure, else cudaSuccess */
    ncclResult_t ae; /* the owner's asynchronous NCCL error, else ncclSuccess */
} watch_find;

static void find_set(watch_find *f, const comm_watch_op *op) {
    f->owner = (nccl_group *)op->owner;
    f->timeout_ms = op->timeout_ms;
    snprintf(f->what, sizeof f->what, "%s", op->what);
}

/* What a collective's events say: done reached, else ready reached, else neither. A
 * collective not done whose group has an asynchronous NCCL error fails the poll. */
static int event_probe(void *ctx, const comm_watch_op *op, comm_watch_state *seen) {
    watch_find *f = ctx;
    const nccl_group *h = op->owner;
    cudaError_t e = query_answer(cudaEventQuery((cudaEvent_t)op->done));
    if (e == cudaSuccess) {
        *seen = COMM_WATCH_DONE;
        return 0;
    }
    ncclResult_t ae = ncclSuccess;
    if (e == cudaErrorNotReady && h->nc != NULL &&
        ncclCommGetAsyncError(h->nc, &ae) == ncclSuccess && ae != ncclSuccess &&
        ae != ncclInProgress) {
        find_set(f, op);
        f->ae = ae;
        return BT_EIO;
    }
    if (e == cudaErrorNotReady) e = query_answer(cudaEventQuery((cudaEvent_t)op->ready));
    if (e == cudaSuccess || e == cudaErrorNotReady) {
        *seen = e == cudaSuccess ? COMM_WATCH_RUNNING : COMM_WATCH_QUEUED;
        return 0;
    }
    find_set(f, op);
    f->ce = e;
    return BT_EIO;
}

/* Fails c, whose wait found f's collective expired (f->ae: failed) in c's own group. */
static int watch_fail_own(comm *c, const char *op, const watch_find *f) {
    nccl_group *g = c->impl;
    if (f->ae != ncclSuccess) return fail_nccl(c, op, "asynchronous NCCL error", f->ae);
    const unsigned pending = g->pending;
    group_abort(g);
    return comm_fail(c, BT_EIO, COMM_FAULT_TIMEOUT, op,
                     "%s not complete %d ms after the work queued ahead of it finished (a peer "
                     "is hung or dead; %u operation%s enqueued since the last wait, the last "
                     "%s); communicator aborted",
                     f->what, f->timeout_ms, pending, pending == 1 ? "" : "s", g->last_op);
}

/* Fails c, whose wait found f's collective expired or failed, and aborts c's group; when
 * the collective is another group's, that group is failed and aborted too: its kernels
 * are what blocks, and its slot would otherwise fail every later wait. */
static int watch_fail(comm *c, const char *op, const watch_find *f) {
    nccl_group *g = c->impl, *h = f->owner;
    if (h == g) return watch_fail_own(c, op, f);
    char why[256];
    if (f->ae != ncclSuccess)
        snprintf(why, sizeof why, "failed (asynchronous NCCL error: %s)",
                 ncclGetErrorString(f->ae));
    else
        snprintf(why, sizeof why,
                 "expired (not complete %d ms after the work queued ahead of it finished: a "
                 "peer is hung or dead)",
                 f->timeout_ms);
    const int code = f->ae != ncclSuccess ? nccl_code(f->ae) : BT_EIO;
    const comm_fault fault = f->ae != ncclSuccess ? nccl_fault(f->ae) : COMM_FAULT_TIMEOUT;
    if (h->self != NULL)
        comm_fail(h->self, code, fault, "watchdog",
                  "%s %s, found by a wait of group '%s'; communicator aborted", f->what, why,
                  comm_name(c));
    group_abort(h);
    group_abort(g);
    return comm_fail(c, code, fault, op,
                     "while waiting, %s %s; this communicator and that of group '%s' aborted",
                     f->what, why, h->self != NULL ? comm_name(h->self) : "?");
}

/* One poll of the process's collectives, when one is due (comm_watch_due): 0 when none
 * has expired or failed, else the failure (recorded on c, and on the collective's group). */
static int watch_poll(comm *c, const char *op) {
    nccl_root *r = ((nccl_group *)c->impl)->root;
    watch_find f = {.owner = NULL, .ce = cudaSuccess, .ae = ncclSuccess};
    int k = -1, rc = 0;
    pthread_mutex_lock(&r->watch_mu);
    if (comm_watch_due(&r->watch, now_ms())) {
        rc = comm_watch_poll(&r->watch, now_ms(), event_probe, &f, &k);
        if (k >= 0) find_set(&f, &r->watch.ops[k]);
    }
    pthread_mutex_unlock(&r->watch_mu);
    if (rc < 0 && f.ce != cudaSuccess) return fail_cuda(c, op, "cudaEventQuery (watchdog)", f.ce);
    return rc < 0 || k >= 0 ? watch_fail(c, op, &f) : 0;
}

/* Waits until stream s is done, or an asynchronous NCCL error, or a collective of this
 * process past its deadline (then this communicator is aborted). Work on s that is not
 * a collective has no deadline (comm_watch.h). op names the caller in messages. */
static int wait_stream(comm *c, const char *op, cudaStream_t s) {
    nccl_group *g = c->impl;
    unsigned spins = 0;
    for (;;) {
        cudaError_t e = query_answer(cudaStreamQuery(s));
        ncclResult_t ae = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(g->nc, &ae);
        if (q != ncclSuccess) return fail_nccl(c, op, "ncclCommGetAsyncError", q);
        if (ae != ncclSuccess && ae != ncclInProgress)
            return fail_nccl(c, op, "asynchronous NCCL error", ae);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) return fail_cuda(c, op, "cudaStreamQuery", e);
        int rc = watch_poll(c, op);
        if (rc < 0) return rc;
        poll_pause(&spins);
    }
    g->pending = 0;
    return 0;
}

/* ---- calls: the stream, host staging, completion ----------------------------------- */

enum { STAGE_ALIGN = 256, STAGE_MIN = 64 << 10 };

/* One copy between the caller's host memory and the group's staging buffers. */
typedef struct stage_copy {
    char *host;
    size_t off; /* in g->stage and g->bounce alike */
    size_t bytes;
    int to_host; /* 0: to the device before the operation; 1: back to host after it */
} stage_copy;

/* One call of an operation: the stream it runs on, whether it completes before
 * returning, and the host memory it stages. */
typedef struct xfer {
    comm *c;
    const char *op;
    cudaStream_t s;
    int sync;
    size_t need; /* staging bytes */
    int n;
    stage_copy *copies; /* (at most the max_copies of xfer_begin) */
    stage_copy few[4];
    int slot;     /* the collective's slot in the watchdog's list; -1 none */
    uint64_t gen; /* and that slot's generation (comm_watch.h) */
} xfer;

/* max_copies: how many host buffers the call may stage. */
static int xfer_begin(xfer *x, comm *c, const char *op, void *stream, int max_copies) {
    nccl_group *g = c->impl;
    x->c = c;
    x->op = op;
    x->s = stream != NULL ? stream_of(stream) : g->stream;
    x->sync = stream == NULL;
    x->need = 0;
    x->n = 0;
    x->copies = x->few;
    x->slot = -1;
    if (max_copies > (int)(sizeof x->few / sizeof x->few[0])) {
        x->copies = malloc((size_t)max_copies * sizeof *x->copies);
        if (x->copies == NULL) {
            x->copies = x->few;
            return comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, op, "out of memory");
        }
    }
    return 0;
}

/* *host: whether the bytes at p are host memory, to be staged. Nothing (bytes 0) is
 * not. Device memory must be the group's device's. */
static int xfer_is_host(xfer *x, const void *p, size_t bytes, int *host) {
    nccl_group *g = x->c->impl;
    *host = 0;
    if (bytes == 0) return 0;
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) return fail_cuda(x->c, x->op, "cudaPointerGetAttributes", e);
    if (a.type == cudaMemoryTypeDevice && a.device != g->root->device)
        return comm_fail(x->c, BT_EINVAL, COMM_FAULT_USAGE, x->op,
                         "buffer %p is memory of CUDA device %d (this group's device is %d)", p,
                         a.device, g->root->device);
    *host = a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeUnregistered;
    return 0;
}

/* Reserves bytes of staging; returns their offset. */
static size_t xfer_region(xfer *x, size_t bytes) {
    size_t off = (x->need + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
    x->need = off + bytes;
    return off;
}

static void xfer_copy(xfer *x, const void *host, size_t off, size_t bytes, int to_host) {
    x->copies[x->n++] = (stage_copy){(char *)host, off, bytes, to_host};
}

/* The device address of staging offset off (valid after xfer_stage_in). */
static void *xfer_dev(const xfer *x, size_t off) {
    const nccl_group *g = x->c->impl;
    return g->stage + off;
}

/* Makes the staging buffers hold need bytes. */
static int stage_grow(comm *c, const char *op, size_t need) {
    nccl_group *g = c->impl;
    size_t cap = g->stage_cap > 0 ? g->stage_cap : STAGE_MIN;
    while (cap < need && cap <= SIZE_MAX / 2)
        cap *= 2;
    if (cap < need) cap = need;
    stage_release(g);
    const char *api = "cudaMalloc";
    cudaError_t e = cudaMalloc((void **)&g->stage, cap);
    if (e == cudaSuccess) {
        api = "cudaMallocHost";
        e = cudaMallocHost((void **)&g->bounce, cap);
    }
    if (e != cudaSuccess) {
        stage_release(g);
        return comm_fail(c, cuda_code(e), COMM_FAULT_INTERNAL, op,
                         "%s of %zu bytes to stage host buffers: %s (%s)", api, cap,
                         cudaGetErrorString(e), cudaGetErrorName(e));
    }
    g->stage_cap = cap;
    return 0;
}

/* Copies the staged inputs to the device, on the stream. */
static int xfer_stage_in(xfer *x) {
    comm *c = x->c;
    nccl_group *g = c->impl;
    if (x->n == 0) return 0;
    if (x->need > g->stage_cap) {
        int rc = stage_grow(c, x->op, x->need);
        if (rc < 0) return rc;
    }
    for (int i = 0; i < x->n; i++) {
        const stage_copy *k = &x->copies[i];
        if (k->to_host) continue;
        memcpy(g->bounce + k->off, k->host, k->bytes);
        cudaError_t e = cudaMemcpyAsync(g->stage + k->off, g->bounce + k->off, k->bytes,
                                        cudaMemcpyHostToDevice, x->s);
        if (e != cudaSuccess) return fail_cuda(c, x->op, "cudaMemcpyAsync (host to device)", e);
    }
    return 0;
}

/* Maps an input (in_bytes at in) and an output to device pointers, staging host
 * memory. Overlapping host buffers (the in-place forms) share one region, so that the
 * operation sees the caller's aliasing. */
static int xfer_pair(xfer *x, const void *in, size_t in_bytes, void *out, size_t out_bytes,
                     const void **din, void **dout) {
    int hin = 0, hout = 0;
    int rc = xfer_is_host(x, in, in_bytes, &hin);
    if (rc == 0) rc = xfer_is_host(x, out, out_bytes, &hout);
    if (rc < 0) return rc;
    /* Addresses, not pointers: in and out may be unrelated objects. */
    const uintptr_t ci = (uintptr_t)in, co = (uintptr_t)out;
    size_t oin = 0, oout = 0;
    if (hin && hout && ci < co + out_bytes && co < ci + in_bytes) {
        const uintptr_t lo = ci < co ? ci : co;
        const uintptr_t end = ci + in_bytes > co + out_bytes ? ci + in_bytes : co + out_bytes;
        size_t base = xfer_region(x, (size_t)(end - lo));
        oin = base + (size_t)(ci - lo);
        oout = base + (size_t)(co - lo);
    } else {
        if (hin) oin = xfer_region(x, in_bytes);
        if (hout) oout = xfer_region(x, out_bytes);
    }
    if (hin) xfer_copy(x, in, oin, in_bytes, 0);
    if (hout) xfer_copy(x, out, oout, out_bytes, 1);
    rc = xfer_stage_in(x);
    if (rc < 0) return rc;
    *din = hin ? xfer_dev(x, oin) : in;
    *dout = hout ? xfer_dev(x, oout) : out;
    return 0;
}

/* Files the collective about to be enqueued on x->s with the watchdog and records its
 * ready event (the slot's events made at its first use, then reused). Called after the
 * staged inputs' copies, just before the NCCL call(s); xfer_end arms or frees it. When
 * every slot is taken, a poll first frees those of finished collectives: a wait may find
 * its stream done at once and poll nothing (overlapped reductions waited for long after),
 * so without it the list would grow by a slot per collective. Its expiries are left to
 * the waits. */
static int xfer_watch(xfer *x) {
    comm *c = x->c;
    nccl_group *g = c->impl;
    nccl_root *r = g->root;
    char what[128];
    snprintf(what, sizeof what, "%s (group '%s')", g->last_op, comm_name(c));
    const char *api = "cudaEventCreateWithFlags";
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&r->watch_mu);
    if (!comm_watch_has_free(&r->watch)) {
        int expired = -1;
        watch_find f = {.owner = NULL, .ce = cudaSuccess, .ae = ncclSuccess};
        (void)comm_watch_poll(&r->watch, now_ms(), event_probe, &f, &expired);
    }
    uint64_t gen = 0;
    int i = comm_watch_add(&r->watch, g, c->timeout_ms, what, &gen);
    if (i >= 0) {
        comm_watch_op *w = &r->watch.ops[i];
        if (w->ready == NULL) e = event_make(&w->ready);
        if (e == cudaSuccess && w->done == NULL) e = event_make(&w->done);
        if (e == cudaSuccess) {
            api = "cudaEventRecord";
            e = cudaEventRecord((cudaEvent_t)w->ready, x->s);
        }
        if (e != cudaSuccess) comm_watch_drop(&r->watch, i, gen);
    }
    pthread_mutex_unlock(&r->watch_mu);
    if (i < 0) return comm_fail(c, i, COMM_FAULT_INTERNAL, x->op, "out of memory");
    if (e != cudaSuccess) return fail_cuda(c, x->op, api, e);
    x->slot = i;
    x->gen = gen;
    return 0;
}

/* After the enqueue returned rc: records the collective's done event and arms its slot,
 * or (the enqueue failed) frees it. */
static int xfer_arm(xfer *x, int rc) {
    nccl_root *r = ((nccl_group *)x->c->impl)->root;
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&r->watch_mu);
    const comm_watch_op *w = &r->watch.ops[x->slot];
    const int mine = w->owner != NULL && w->gen == x->gen; /* not freed meanwhile */
    if (rc == 0 && mine) e = cudaEventRecord((cudaEvent_t)w->done, x->s);
    if (rc == 0 && e == cudaSuccess)
        comm_watch_arm(&r->watch, x->slot, x->gen);
    else
        comm_watch_drop(&r->watch, x->slot, x->gen);
    pthread_mutex_unlock(&r->watch_mu);
    x->slot = -1;
    return e != cudaSuccess ? fail_cuda(x->c, x->op, "cudaEventRecord", e) : rc;
}

/* Ends a call whose enqueue returned rc: arms the watchdog's slot, then a synchronous or
 * staged call copies its staged outputs back, waits for the stream under the watchdog,
 * and hands the outputs to the caller. */
static int xfer_end(xfer *x, int rc) {
    comm *c = x->c;
    nccl_group *g = c->impl;
    if (x->slot >= 0) rc = xfer_arm(x, rc);
    for (int i = 0; rc == 0 && i < x->n; i++) {
        const stage_copy *k = &x->copies[i];
        if (!k->to_host) continue;
        cudaError_t e = cudaMemcpyAsync(g->bounce + k->off, g->stage + k->off, k->bytes,
                                        cudaMemcpyDeviceToHost, x->s);
        if (e != cudaSuccess) rc = fail_cuda(c, x->op, "cudaMemcpyAsync (device to host)", e);
    }
    if (rc == 0 && (x->sync || x->n > 0)) rc = wait_stream(c, x->op, x->s);
    for (int i = 0; rc == 0 && i < x->n; i++)
        if (x->copies[i].to_host)
            memcpy(x->copies[i].host, g->bounce + x->copies[i].off, x->copies[i].bytes);
    if (x->copies != x->few) free(x->copies);
    return rc;
}

/* ---- operations -------------------------------------------------------------------- */

static uint64_t ring_allreduce_bytes(int n, size_t bytes) {
    return n == 1 ? 0 : 2 * (uint64_t)(n - 1) * bytes / (uint64_t)n;
}

/* All-reduce (root < 0) or reduce to root: one buffer in, one out, of count elements.
 * NCCL's reduce is a pipelined chain: every rank but the root sends the whole buffer. */
static int reduction(comm *c, const char *name, const void *in, void *out, size_t count,
                     comm_dtype dtype, comm_redop op, int root, void *stream) {
    nccl_group *g = c->impl;
    const size_t bytes = count * comm_dtype_size(dtype);
    xfer x;
    int rc = xfer_begin(&x, c, name, stream, 2);
    if (rc < 0) return rc;
    note_op(c, name, count, dtype);
    rc = xfer_pair(&x, in, bytes, out, bytes, &in, &out);
    if (rc == 0) rc = xfer_watch(&x);
    ncclDataType_t t = nccl_type(dtype);
    if (rc == 0 && root < 0)
        rc = settle(c, name, "ncclAllReduce",
                    ncclAllReduce(in, out, count, t, nccl_op(op), g->nc, x.s));
    else if (rc == 0)
        rc = settle(c, name, "ncclReduce",
                    ncclReduce(in, out, count, t, nccl_op(op), root, g->nc, x.s));
    if (rc == 0)
        c->bytes_sent += root < 0          ? ring_allreduce_bytes(c->size, bytes)
                         : c->rank != root ? bytes
                                           : 0;
    return xfer_end(&x, rc);
}

static int op_allreduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                        comm_redop op, void *stream) {
    return reduction(c, "allreduce", in, out, count, dtype, op, -1, stream);
}

static int op_reduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                     comm_redop op, int root, void *stream) {
    return reduction(c, "reduce", in, out, count, dtype, op, root, stream);
}

static int op_reduce_scatter(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                             comm_redop op, void *stream) {
    nccl_group *g = c->impl;
    const size_t bytes = count * comm_dtype_size(dtype);
    xfer x;
    int rc = xfer_begin(&x, c, "reduce-scatter", stream, 2);
    if (rc < 0) return rc;
    note_op(c, "reduce-scatter", count, dtype);
    rc = xfer_pair(&x, in, (size_t)c->size * bytes, out, bytes, &in, &out);
    if (rc == 0) rc = xfer_watch(&x);
    if (rc == 0)
        rc = settle(c, "reduce-scatter", "ncclReduceScatter",
                    ncclReduceScatter(in, out, count, nccl_type(dtype), nccl_op(op), g->nc, x.s));
    if (rc == 0) c->bytes_sent += (uint64_t)(c->size - 1) * bytes;
    return xfer_end(&x, rc);
}

static int op_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                        void *stream) {
    nccl_group *g = c->impl;
    const size_t bytes = count * comm_dtype_size(dtype);
    xfer x;
    int rc = xfer_begin(&x, c, "allgather", stream, 2);
    if (rc < 0) return rc;
    note_op(c, "allgather", count, dtype);
    rc = xfer_pair(&x, in, bytes, out, (size_t)c->size * bytes, &in, &out);
    if (rc == 0) rc = xfer_watch(&x);
    if (rc == 0)
        rc = settle(c, "allgather", "ncclAllGather",
                    ncclAllGather(in, out, count, nccl_type(dtype), g->nc, x.s));
    if (rc == 0) c->bytes_sent += (uint64_t)(c->size - 1) * bytes;
    return xfer_end(&x, rc);
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
 * group of sends and receives. in_off/out_off and counts are in elements; in and out
 * are device memory (staged by the caller). */
static int exchange_blocks(comm *c, const char *op, const void *in, const size_t *in_off,
                           const size_t *send_counts, void *out, const size_t *out_off,
                           const size_t *recv_counts, comm_dtype dtype, cudaStream_t s) {
    nccl_group *g = c->impl;
    const size_t es = comm_dtype_size(dtype);
    const ncclDataType_t t = nccl_type(dtype);
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

/* All-to-all(v) of send_counts/recv_counts elements per peer, packed at the offsets
 * in_off/out_off; n_in and n_out are the totals. */
static int alltoall_blocks(comm *c, const char *op, const void *in, const size_t *in_off,
                           const size_t *send_counts, size_t n_in, void *out, const size_t *out_off,
                           const size_t *recv_counts, size_t n_out, size_t noted, comm_dtype dtype,
                           void *stream) {
    const size_t es = comm_dtype_size(dtype);
    xfer x;
    int rc = xfer_begin(&x, c, op, stream, 2);
    if (rc < 0) return rc;
    note_op(c, op, noted, dtype);
    rc = xfer_pair(&x, in, n_in * es, out, n_out * es, &in, &out);
    if (rc == 0) rc = xfer_watch(&x);
    if (rc == 0)
        rc = exchange_blocks(c, op, in, in_off, send_counts, out, out_off, recv_counts, dtype, x.s);
    return xfer_end(&x, rc);
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
    int rc = alltoall_blocks(c, "alltoallv", in, in_off, send_counts, ni, out, out_off, recv_counts,
                             no, total, dtype, stream);
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
    const size_t total = (size_t)c->size * count;
    int rc = alltoall_blocks(c, "alltoall", in, off, counts, total, out, off, counts, total, count,
                             dtype, stream);
    free(v);
    return rc;
}

static int op_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root,
                        void *stream) {
    nccl_group *g = c->impl;
    const size_t bytes = count * comm_dtype_size(dtype);
    char op[32];
    snprintf(op, sizeof op, "broadcast (root %d)", root);
    xfer x;
    int rc = xfer_begin(&x, c, op, stream, 2);
    if (rc < 0) return rc;
    note_op(c, op, count, dtype);
    const void *in = buf;
    rc = xfer_pair(&x, buf, bytes, buf, bytes, &in, &buf);
    if (rc == 0) rc = xfer_watch(&x);
    if (rc == 0)
        rc = settle(c, op, "ncclBroadcast",
                    ncclBroadcast(in, buf, count, nccl_type(dtype), root, g->nc, x.s));
    /* The chain root -> root+1 -> ...: every rank but the last forwards the buffer. */
    if (rc == 0 && c->rank != (root + c->size - 1) % c->size) c->bytes_sent += bytes;
    return xfer_end(&x, rc);
}

static int op_barrier(comm *c, void *stream) {
    nccl_group *g = c->impl;
    xfer x;
    int rc = xfer_begin(&x, c, "barrier", stream, 0);
    if (rc < 0) return rc;
    note_op(c, "barrier", 1, COMM_F32);
    rc = xfer_watch(&x);
    if (rc == 0)
        rc = settle(c, "barrier", "ncclAllReduce",
                    ncclAllReduce(g->zero, g->zero, 1, ncclFloat32, ncclSum, g->nc, x.s));
    if (rc == 0) c->bytes_sent += ring_allreduce_bytes(c->size, sizeof(float));
    return xfer_end(&x, rc);
}

/* Where a point-to-point transfer's data is: the caller's buffer, or staging at off. */
typedef struct p2p_buf {
    int host;
    size_t off;
} p2p_buf;

static int op_p2p(comm *c, const comm_p2p_op *ops, int n, void *stream) {
    nccl_group *g = c->impl;
    const char *op = n == 1 ? (ops[0].kind == COMM_SEND ? "send" : "recv") : "p2p";
    p2p_buf few[4], *b = few;
    if (n > (int)(sizeof few / sizeof few[0]) && (b = malloc((size_t)n * sizeof *b)) == NULL)
        return comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, op, "out of memory");
    xfer x;
    int rc = xfer_begin(&x, c, op, stream, n);
    if (rc < 0) {
        if (b != few) free(b);
        return rc;
    }
    note_op(c, op, ops[0].count, ops[0].dtype);
    for (int i = 0; rc == 0 && i < n; i++) {
        const comm_p2p_op *o = &ops[i];
        const size_t bytes = o->count * comm_dtype_size(o->dtype);
        rc = xfer_is_host(&x, o->buf, bytes, &b[i].host);
        if (rc == 0 && b[i].host) {
            b[i].off = xfer_region(&x, bytes);
            xfer_copy(&x, o->buf, b[i].off, bytes, o->kind == COMM_RECV);
        }
    }
    if (rc == 0) rc = xfer_stage_in(&x);
    if (rc == 0) rc = xfer_watch(&x);
    ncclResult_t first = rc == 0 ? ncclGroupStart() : ncclSuccess;
    if (rc == 0 && first != ncclSuccess) rc = fail_nccl(c, op, "ncclGroupStart", first);
    if (rc == 0) {
        const char *api = "ncclSend";
        uint64_t sent = 0;
        for (int i = 0; first == ncclSuccess && i < n; i++) {
            const comm_p2p_op *o = &ops[i];
            void *buf = b[i].host ? xfer_dev(&x, b[i].off) : o->buf;
            if (o->count == 0) continue;
            if (o->kind == COMM_SEND) {
                api = "ncclSend";
                first = ncclSend(buf, o->count, nccl_type(o->dtype), o->peer, g->nc, x.s);
                sent += o->count * comm_dtype_size(o->dtype);
            } else {
                api = "ncclRecv";
                first = ncclRecv(buf, o->count, nccl_type(o->dtype), o->peer, g->nc, x.s);
            }
        }
        rc = close_group(c, op, first, api, sent);
    }
    if (b != few) free(b);
    return xfer_end(&x, rc);
}

/* comm_wait: NULL is the default stream. */
static int op_wait(comm *c, void *stream) {
    nccl_group *g = c->impl;
    return wait_stream(c, "wait", stream != NULL ? stream_of(stream) : g->stream);
}

static void op_set_stream(comm *c, void *stream) {
    nccl_group *g = c->impl;
    g->stream = stream_of(stream);
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
    if (sub != NULL) {
        sub->stream = g->stream; /* comm_set_stream: inherited */
        rc = group_connect(sub, me, n, c->timeout_ms, label, &err);
    }
    if (rc == 0) rc = comm_create(nccl_ops(), sub, me, n, global, name, c->timeout_ms, out);
    if (rc == 0) sub->self = *out;
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
    .reduce = op_reduce,
    .reduce_scatter = op_reduce_scatter,
    .allgather = op_allgather,
    .alltoall = op_alltoall,
    .alltoallv = op_alltoallv,
    .broadcast = op_broadcast,
    .barrier = op_barrier,
    .p2p = op_p2p,
    .wait = op_wait,
    .set_stream = op_set_stream,
    .split = op_split,
    .abort = op_abort,
    .destroy = op_destroy,
};

static const comm_ops *nccl_ops(void) {
    return &kNcclOps;
}
