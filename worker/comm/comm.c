/* The backend-independent half of the communication interface: argument checks, the
 * sticky error state and its messages, and dispatch to the backend's table. Backends
 * see only valid arguments: buffers present, ranks in range, and count > 0 for the
 * collectives that move data (a zero count returns at once on every rank, which all
 * agree on since they pass the same count). */
#include "comm.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t comm_dtype_size(comm_dtype dtype) {
    switch (dtype) {
    case COMM_F32:
        return 4;
    case COMM_F64:
        return 8;
    case COMM_BYTE:
        return 1;
    }
    return 0;
}

const char *comm_dtype_name(comm_dtype dtype) {
    switch (dtype) {
    case COMM_F32:
        return "f32";
    case COMM_F64:
        return "f64";
    case COMM_BYTE:
        return "byte";
    }
    return "unknown dtype";
}

const char *comm_fault_name(comm_fault fault) {
    switch (fault) {
    case COMM_FAULT_NONE:
        return "none";
    case COMM_FAULT_TIMEOUT:
        return "timeout";
    case COMM_FAULT_PEER_LOST:
        return "peer lost";
    case COMM_FAULT_STORE:
        return "rendezvous store";
    case COMM_FAULT_USAGE:
        return "usage";
    case COMM_FAULT_INTERNAL:
        return "internal";
    }
    return "unknown fault";
}

int comm_create(const comm_ops *ops, void *impl, int rank, int size, const int *members,
                const char *name, int timeout_ms, comm **out) {
    *out = NULL;
    comm *c = calloc(1, sizeof *c);
    int *m = calloc((size_t)size, sizeof *m);
    if (c == NULL || m == NULL) {
        free(c);
        free(m);
        return BT_ENOMEM;
    }
    for (int i = 0; i < size; i++)
        m[i] = members ? members[i] : i;
    c->ops = ops;
    c->impl = impl;
    c->rank = rank;
    c->size = size;
    c->members = m;
    c->timeout_ms = timeout_ms;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "world");
    *out = c;
    return 0;
}

/* The kind of this process's first communication failure (comm_first_fault). */
static _Atomic int comm_first = COMM_FAULT_NONE;

comm_fault comm_first_fault(void) {
    return (comm_fault)atomic_load(&comm_first);
}

static void comm_note_first(comm_fault fault) {
    int none = COMM_FAULT_NONE;
    if (fault != COMM_FAULT_NONE && fault != COMM_FAULT_USAGE)
        atomic_compare_exchange_strong(&comm_first, &none, (int)fault);
}

static int comm_failv(comm *c, int code, comm_fault fault, const char *op, const char *fmt,
                      va_list ap) __attribute__((format(printf, 5, 0)));
static int comm_failv(comm *c, int code, comm_fault fault, const char *op, const char *fmt,
                      va_list ap) {
    if (c->err != 0) return c->err; /* the first failure is the one reported */
    int n = snprintf(c->msg, sizeof c->msg, "comm '%s' rank %d/%d (global %d): %s: ", c->name,
                     c->rank, c->size, c->members[c->rank], op);
    if (n < 0 || (size_t)n >= sizeof c->msg) n = 0;
    vsnprintf(c->msg + n, sizeof c->msg - (size_t)n, fmt, ap);
    c->fault = fault;
    if (fault != COMM_FAULT_USAGE) c->err = code;
    return code;
}

int comm_fail(comm *c, int code, comm_fault fault, const char *op, const char *fmt, ...) {
    if (c->err == 0) comm_note_first(fault);
    va_list ap;
    va_start(ap, fmt);
    int rc = comm_failv(c, code, fault, op, fmt, ap);
    va_end(ap);
    return rc;
}

/* comm_fail without noting the failure as the process's: the caller's own abort. */
static int comm_fail_own(comm *c, int code, comm_fault fault, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int comm_fail_own(comm *c, int code, comm_fault fault, const char *op, const char *fmt,
                         ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = comm_failv(c, code, fault, op, fmt, ap);
    va_end(ap);
    return rc;
}

void comm_destroy(comm *c) {
    if (c == NULL) return;
    c->ops->destroy(c);
    free(c->members);
    free(c);
}

void comm_abort(comm *c) {
    if (c == NULL) return;
    c->ops->abort(c);
    if (c->err == 0)
        comm_fail_own(c, BT_EIO, COMM_FAULT_PEER_LOST, "abort", "aborted by the caller");
}

int comm_rank(const comm *c) {
    return c->rank;
}

int comm_size(const comm *c) {
    return c->size;
}

int comm_global_rank(const comm *c, int r) {
    return r >= 0 && r < c->size ? c->members[r] : -1;
}

const char *comm_name(const comm *c) {
    return c->name;
}

const char *comm_backend(const comm *c) {
    return c->ops->name;
}

int comm_has_streams(const comm *c) {
    return c->ops->streams;
}

int comm_timeout_ms(const comm *c) {
    return c->timeout_ms;
}

void comm_set_timeout_ms(comm *c, int timeout_ms) {
    if (timeout_ms > 0) c->timeout_ms = timeout_ms;
}

uint64_t comm_bytes_sent(const comm *c) {
    return c->bytes_sent;
}

const char *comm_error(const comm *c) {
    return c->msg;
}

comm_fault comm_fault_of(const comm *c) {
    return c->fault;
}

/* Common checks: a healthy comm, a known dtype (a reducible one for reductions), and
 * count * size elements addressable. Returns 0 or the error already recorded. */
static int check_common(comm *c, const char *op, comm_dtype dtype, size_t count, int reduce,
                        void *stream) {
    if (c->err != 0) return c->err;
    size_t es = comm_dtype_size(dtype);
    if (es == 0)
        return comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, op, "unknown dtype %d", (int)dtype);
    if (reduce && dtype == COMM_BYTE)
        return comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, op,
                         "dtype byte cannot be reduced (use f32 or f64)");
    if (count > SIZE_MAX / es / (size_t)c->size)
        return comm_fail(c, BT_ERANGE, COMM_FAULT_USAGE, op, "count %zu overflows", count);
    if (stream != NULL && !c->ops->streams)
        return comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, op,
                         "the %s backend takes no stream (pass NULL)", c->ops->name);
    return 0;
}

static int check_buffers(comm *c, const char *op, const void *in, const void *out, size_t count) {
    if (count > 0 && (in == NULL || out == NULL))
        return comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, op, "NULL buffer for %zu elements", count);
    return 0;
}

static int check_op(comm *c, const char *op, comm_redop redop) {
    if (redop != COMM_SUM && redop != COMM_MAX)
        return comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, op,
                         "unknown reduction %d (valid: sum, max)", (int)redop);
    return 0;
}

int comm_allreduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                   comm_redop op, void *stream) {
    int rc = check_common(c, "allreduce", dtype, count, 1, stream);
    if (rc == 0) rc = check_op(c, "allreduce", op);
    if (rc == 0) rc = check_buffers(c, "allreduce", in, out, count);
    if (rc < 0 || count == 0) return rc;
    return c->ops->allreduce(c, in, out, count, dtype, op, stream);
}

int comm_reduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
                int root, void *stream) {
    int rc = check_common(c, "reduce", dtype, count, 1, stream);
    if (rc == 0) rc = check_op(c, "reduce", op);
    if (rc == 0) rc = check_buffers(c, "reduce", in, out, count);
    if (rc == 0 && (root < 0 || root >= c->size))
        rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "reduce", "root %d outside [0, %d)", root,
                       c->size);
    if (rc < 0 || count == 0) return rc;
    return c->ops->reduce(c, in, out, count, dtype, op, root, stream);
}

int comm_reduce_scatter(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                        comm_redop op, void *stream) {
    int rc = check_common(c, "reduce-scatter", dtype, count, 1, stream);
    if (rc == 0) rc = check_op(c, "reduce-scatter", op);
    if (rc == 0) rc = check_buffers(c, "reduce-scatter", in, out, count);
    if (rc < 0 || count == 0) return rc;
    return c->ops->reduce_scatter(c, in, out, count, dtype, op, stream);
}

int comm_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                   void *stream) {
    int rc = check_common(c, "allgather", dtype, count, 0, stream);
    if (rc == 0) rc = check_buffers(c, "allgather", in, out, count);
    if (rc < 0 || count == 0) return rc;
    return c->ops->allgather(c, in, out, count, dtype, stream);
}

int comm_alltoall(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                  void *stream) {
    int rc = check_common(c, "alltoall", dtype, count, 0, stream);
    if (rc == 0) rc = check_buffers(c, "alltoall", in, out, count);
    if (rc == 0 && count > 0 && in == out)
        rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "alltoall", "in and out must differ");
    if (rc < 0 || count == 0) return rc;
    return c->ops->alltoall(c, in, out, count, dtype, stream);
}

/* Sums counts[0..n) into *total, refusing overflow. */
static int sum_counts(comm *c, const char *what, const size_t *counts, int n, size_t es,
                      size_t *total) {
    size_t t = 0;
    for (int i = 0; i < n; i++) {
        if (counts[i] > SIZE_MAX / es - t)
            return comm_fail(c, BT_ERANGE, COMM_FAULT_USAGE, "alltoallv", "%s overflow", what);
        t += counts[i];
    }
    *total = t;
    return 0;
}

int comm_alltoallv(comm *c, const void *in, const size_t *send_counts, void *out,
                   const size_t *recv_counts, comm_dtype dtype, void *stream) {
    int rc = check_common(c, "alltoallv", dtype, 0, 0, stream);
    if (rc < 0) return rc;
    if (send_counts == NULL || recv_counts == NULL)
        return comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "alltoallv", "NULL counts");
    size_t es = comm_dtype_size(dtype), nin = 0, nout = 0;
    rc = sum_counts(c, "send counts", send_counts, c->size, es, &nin);
    if (rc == 0) rc = sum_counts(c, "receive counts", recv_counts, c->size, es, &nout);
    if (rc == 0 && send_counts[c->rank] != recv_counts[c->rank])
        rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "alltoallv",
                       "own block: send count %zu != receive count %zu", send_counts[c->rank],
                       recv_counts[c->rank]);
    if (rc == 0 && ((nin > 0 && in == NULL) || (nout > 0 && out == NULL)))
        rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "alltoallv", "NULL buffer");
    if (rc < 0) return rc;
    return c->ops->alltoallv(c, in, send_counts, out, recv_counts, dtype, stream);
}

int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, void *stream) {
    int rc = check_common(c, "broadcast", dtype, count, 0, stream);
    if (rc == 0) rc = check_buffers(c, "broadcast", buf, buf, count);
    if (rc == 0 && (root < 0 || root >= c->size))
        rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "broadcast", "root %d out of range [0, %d)",
                       root, c->size);
    if (rc < 0 || count == 0) return rc;
    return c->ops->broadcast(c, buf, count, dtype, root, stream);
}

int comm_barrier(comm *c, void *stream) {
    int rc = check_common(c, "barrier", COMM_BYTE, 0, 0, stream);
    if (rc < 0) return rc;
    return c->ops->barrier(c, stream);
}

int comm_p2p(comm *c, const comm_p2p_op *ops, int n, void *stream) {
    int rc = check_common(c, "p2p", COMM_BYTE, 0, 0, stream);
    if (rc == 0 && (n < 0 || (n > 0 && ops == NULL)))
        rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "p2p", "bad batch (%d ops)", n);
    for (int i = 0; rc == 0 && i < n; i++) {
        const comm_p2p_op *o = &ops[i];
        const char *what = o->kind == COMM_SEND ? "send" : "recv";
        if (o->kind != COMM_SEND && o->kind != COMM_RECV)
            rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, "p2p", "op %d: unknown kind %d", i,
                           (int)o->kind);
        else if (o->peer < 0 || o->peer >= c->size || o->peer == c->rank)
            rc = comm_fail(c, BT_EINVAL, COMM_FAULT_USAGE, what,
                           "peer %d invalid (valid: [0, %d) except own rank %d)", o->peer, c->size,
                           c->rank);
        else
            rc = check_common(c, what, o->dtype, o->count, 0, stream);
        if (rc == 0) rc = check_buffers(c, what, o->buf, o->buf, o->count);
    }
    if (rc < 0 || n == 0) return rc;
    return c->ops->p2p(c, ops, n, stream);
}

int comm_send(comm *c, const void *buf, size_t count, comm_dtype dtype, int peer, uint32_t tag,
              void *stream) {
    comm_p2p_op op = {COMM_SEND, peer, (void *)buf, count, dtype, tag};
    return comm_p2p(c, &op, 1, stream);
}

int comm_recv(comm *c, void *buf, size_t count, comm_dtype dtype, int peer, uint32_t tag,
              void *stream) {
    comm_p2p_op op = {COMM_RECV, peer, buf, count, dtype, tag};
    return comm_p2p(c, &op, 1, stream);
}

int comm_sendrecv(comm *c, const void *sendbuf, int dst, void *recvbuf, int src, size_t count,
                  comm_dtype dtype, uint32_t tag, void *stream) {
    comm_p2p_op ops[2] = {
        {COMM_RECV, src, recvbuf, count, dtype, tag},
        {COMM_SEND, dst, (void *)sendbuf, count, dtype, tag},
    };
    return comm_p2p(c, ops, 2, stream);
}

int comm_wait(comm *c, void *stream) {
    if (c->err != 0) return c->err;
    return c->ops->wait(c, stream);
}

void comm_set_stream(comm *c, void *stream) {
    if (c->ops->set_stream != NULL) c->ops->set_stream(c, stream);
}

/* Members must be distinct global ranks of parent and include the caller; they are
 * translated to parent ranks for the backend. */
int comm_split(comm *parent, const uint32_t *ranks, uint32_t n, const char *name, comm **out) {
    *out = NULL;
    if (parent->err != 0) return parent->err;
    if (ranks == NULL || n == 0 || n > (uint32_t)parent->size)
        return comm_fail(parent, BT_EINVAL, COMM_FAULT_USAGE, "split",
                         "group of %u ranks (valid: 1..%d)", n, parent->size);
    int *pr = malloc(n * sizeof *pr);
    if (pr == NULL) return BT_ENOMEM;
    int rc = 0, self = 0;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        pr[i] = -1;
        for (int r = 0; r < parent->size; r++)
            if ((uint32_t)parent->members[r] == ranks[i]) pr[i] = r;
        for (uint32_t j = 0; j < i; j++)
            if (ranks[j] == ranks[i]) pr[i] = -2;
        if (pr[i] < 0)
            rc = comm_fail(parent, BT_EINVAL, COMM_FAULT_USAGE, "split",
                           "group '%s': global rank %u is %s", name ? name : "?", ranks[i],
                           pr[i] == -2 ? "listed twice" : "not a member of the parent");
        self |= pr[i] == parent->rank;
    }
    if (rc == 0 && !self)
        rc = comm_fail(parent, BT_EINVAL, COMM_FAULT_USAGE, "split",
                       "group '%s' does not contain this rank (only members call comm_split)",
                       name ? name : "?");
    if (rc == 0) rc = parent->ops->split(parent, pr, (int)n, name, out);
    free(pr);
    return rc;
}

int comm_bootstrap_check(const comm_bootstrap *bs, bt_diag *diag) {
    if (bs->size < 1 || bs->rank < 0 || bs->rank >= bs->size) {
        bt_diag_set(diag, "comm bootstrap: rank %d / size %d invalid (need 0 <= rank < size)",
                    bs->rank, bs->size);
        return BT_EINVAL;
    }
    if (bs->timeout_ms <= 0) {
        bt_diag_set(diag, "comm bootstrap: timeout %d ms invalid (need > 0)", bs->timeout_ms);
        return BT_EINVAL;
    }
    if (bs->prefix == NULL || bs->prefix[0] == '\0') {
        bt_diag_set(diag, "comm bootstrap: empty rendezvous prefix (need a fresh one per "
                          "job attempt)");
        return BT_EINVAL;
    }
    if (bs->store_dir == NULL && (bs->store.set == NULL || bs->store.get == NULL)) {
        bt_diag_set(diag, "comm bootstrap: no rendezvous store (set store_dir or store)");
        return BT_EINVAL;
    }
    return 0;
}

int comm_split_members(const comm *c, const int *parent_ranks, int n, int *global) {
    int me = -1;
    for (int i = 0; i < n; i++) {
        global[i] = c->members[parent_ranks[i]];
        if (parent_ranks[i] == c->rank) me = i;
    }
    return me;
}

uint64_t comm_members_hash(const int *global, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        uint32_t x = (uint32_t)global[i];
        for (int b = 0; b < 4; b++) {
            h ^= (x >> (8 * b)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    return h;
}
