/* The communication interface: collectives, point-to-point and sub-groups over one group
 * of ranks (a `comm`), independent of the backend. The engine calls only these
 * functions; a backend (comm_gloo.cc for CPU, an NCCL file for GPU) fills the table of
 * operations in `comm_ops`, the way worker/engine/backend.h does for compute.
 *
 * Rules every backend keeps:
 *  - Every operation returns 0 or a negative BT_ code (stages/util/err.h) and never
 *    hangs or aborts the process: each wait is bounded by the group's timeout
 *    (comm_timeout_ms), and a peer that dies fails the operation at once. On failure
 *    comm_error() holds a message naming the group, the operation and, where known, the
 *    peers whose connection broke (which may include survivors that aborted after the
 *    first failure; the launcher knows which process died); comm_fault_of() classifies
 *    it. Transport failures are BT_EIO, invalid arguments BT_EINVAL.
 *  - A failure is sticky: the comm is aborted (its connections are closed, so peers
 *    blocked on this rank get an error promptly instead of waiting for their timeout),
 *    and every later call returns the same error. After a failure the caller destroys
 *    its comms and exits; the orchestrator restarts the job attempt. Output buffers of a
 *    failed operation hold unspecified values.
 *  - Buffers are *device* pointers of the compute backend in use (worker/engine/
 *    backend.h): host memory for the CPU backend and Gloo, cudaMalloc'd memory for CUDA
 *    and NCCL (which also accepts host memory, staged; see below). Counts are elements
 *    of the given dtype.
 *  - Every member of a group calls a collective with the same count, dtype, op and root,
 *    in the same order. Operations on one comm are issued by one thread at a time;
 *    different comms (say a TP and a DP group) may be used from different threads
 *    concurrently.
 *  - Results are deterministic: the same inputs on the same group give bitwise-identical
 *    outputs, and a reduction leaves bitwise-identical results on every member.
 *  - comm_bytes_sent() counts the payload bytes this rank's algorithm put on the wire for
 *    the group (not protocol headers), for comparison with `baton plan`'s estimates.
 *
 * Streams, and how NCCL fits. Every operation takes an opaque `stream` last. For Gloo it
 * must be NULL and an operation completes before it returns. For NCCL it is the
 * cudaStream_t the operation is enqueued on: the call returns once enqueued (enqueue
 * errors are returned), and comm_wait(c, stream) is where completion is awaited and the
 * timeout enforced (poll cudaStreamQuery and ncclCommGetAsyncError until done or the
 * deadline, then ncclCommAbort and report BT_EIO with COMM_FAULT_TIMEOUT or _PEER_LOST).
 * With stream NULL an NCCL operation runs on the comm's default stream (comm_set_stream)
 * and is complete when it returns, as with Gloo, so the engine's calls work unchanged
 * on either backend; a non-NULL stream is for overlapping communication with compute.
 * NCCL also takes host buffers (say a double on the caller's stack): they are staged
 * through device memory and the operation is complete when it returns, whatever the
 * stream. For Gloo comm_wait returns the sticky state. The rest maps one to one:
 * allreduce/allgather/reduce-scatter/broadcast are ncclAllReduce/ncclAllGather/
 * ncclReduceScatter/ncclBroadcast (same in-place conventions as here); comm_p2p is
 * ncclGroupStart + ncclSend/ncclRecv + ncclGroupEnd, and alltoall(v) is the same group
 * over all peers. NCCL has no tags: it matches point-to-point messages by order per peer,
 * so callers must post them in matching order on both sides (correct pipelines do);
 * Gloo additionally keeps different tags apart. The NCCL unique id of a group is
 * published by its rank 0 through the same comm_store (a PMIx-backed store for real
 * runs) under the group's key, and comm_split becomes ncclCommInitRank on that id (or
 * ncclCommSplit). Byte counters there follow NCCL's ring algorithm model.
 *
 * Rendezvous. A job attempt rendezvouses through a key-value store under a prefix that
 * must be fresh for every attempt (the launcher gives each attempt its own); a reused
 * prefix is detected (a key that already exists) and reported, never silently joined.
 * The store is a small table of functions (comm_store), so a PMIx-backed store can be
 * added beside the directory-backed one (comm_store_file) without changing callers. */
#ifndef BATON_COMM_H
#define BATON_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* err.h declares C functions without a guard of its own */
#endif

#include "util/err.h"

typedef struct comm comm;

typedef enum comm_dtype {
    COMM_F32 = 0,
    COMM_F64 = 1,  /* grad-norm partial sums and other double reductions */
    COMM_BYTE = 2, /* raw bytes: data movement only, not reductions */
} comm_dtype;

typedef enum comm_redop {
    COMM_SUM = 0,
    COMM_MAX = 1,
} comm_redop;

/* What kind of failure the last error was (the BT_ code says BT_EIO for all of the
 * transport ones). */
typedef enum comm_fault {
    COMM_FAULT_NONE = 0,
    COMM_FAULT_TIMEOUT,   /* a peer did not respond within the timeout (hung or absent) */
    COMM_FAULT_PEER_LOST, /* a connection was closed or reset: a peer died or aborted */
    COMM_FAULT_STORE,     /* rendezvous store: reused prefix, I/O error */
    COMM_FAULT_USAGE,     /* invalid arguments (the comm stays usable) */
    COMM_FAULT_INTERNAL,  /* anything else the backend reported */
} comm_fault;

/* A rendezvous key-value store. Keys are printable ASCII; values are opaque bytes. */
typedef struct comm_store {
    void *ctx;
    /* Publishes key once: BT_EINVAL with a message if key already exists. */
    int (*set)(void *ctx, const char *key, const void *val, size_t len, bt_diag *diag);
    /* Waits up to timeout_ms for key, then returns its value in *val (malloc'd; the
     * caller frees it) and its length in *len. BT_ENOENT with a message when the key
     * did not appear in time, BT_EIO on other failures. */
    int (*get)(void *ctx, const char *key, void **val, size_t *len, int timeout_ms, bt_diag *diag);
    /* Releases ctx; may be NULL. */
    void (*close)(void *ctx);
} comm_store;

/* The directory-backed store (one file per key, written atomically, never replaced).
 * dir must exist and be shared by all ranks (one host, or a shared filesystem); keys
 * are never removed, the launcher removes the directory after the attempt. get polls,
 * so its timeout is kept to the millisecond (Gloo's own FileStore rounds it up to whole
 * seconds and more). */
int comm_store_file(comm_store *st, const char *dir, bt_diag *diag);

/* The store `baton run` serves over TCP at address ("host:port") for ranks on hosts that
 * share no filesystem (comm_store_tcp.c; wire format in stages/util/kv_wire.h); token is
 * the run's secret. local_host (cap bytes, may be NULL) receives this host's numeric
 * address on the route to the store: the address the TCP transport should bind. */
int comm_store_tcp(comm_store *st, const char *address, const char *token, char *local_host,
                   size_t cap, bt_diag *diag);

/* What a rank needs to join the world group of a job attempt. */
typedef struct comm_bootstrap {
    int rank;              /* this process, in [0, size) */
    int size;              /* number of processes */
    const char *store_dir; /* a directory for comm_store_file, or NULL to use `store` */
    comm_store store;      /* used when store_dir is NULL; init takes ownership */
    const char *prefix;    /* the attempt's rendezvous namespace: fresh per attempt */
    const char *host;      /* address the TCP transport binds; NULL: "127.0.0.1" */
    int timeout_ms;        /* bound on init and on every operation; > 0 */
    const char *name;      /* the group's name in messages; NULL: "world" */
} comm_bootstrap;

/* One point-to-point transfer of a comm_p2p batch. */
typedef enum comm_p2p_kind { COMM_SEND = 0, COMM_RECV = 1 } comm_p2p_kind;
typedef struct comm_p2p_op {
    comm_p2p_kind kind;
    int peer;     /* group rank, not this rank */
    void *buf;    /* read for COMM_SEND, written for COMM_RECV */
    size_t count; /* elements; sender and receiver agree */
    comm_dtype dtype;
    uint32_t tag; /* keeps independent message streams between one pair apart */
} comm_p2p_op;

/* ---- Group --------------------------------------------------------------------- */

/* A sub-group of parent made of the listed ranks (global ranks, i.e. ranks of the
 * world group; each must be a member of parent), in that order: group rank i is
 * ranks[i]. Only members call it, every member with the same list and name; a list may
 * be split more than once (each call makes a new group). Non-members do not call it.
 * Lists come from stages/layout.h's layout_group. Costs one rendezvous (bounded by the
 * parent's timeout); the new comm inherits the timeout. A split that fails (a member
 * that never calls it times out) fails the parent too. */
int comm_split(comm *parent, const uint32_t *ranks, uint32_t n, const char *name, comm **out);

/* Leaves the group and frees it. A healthy member first tells its peers it leaves in
 * order (so that the closed connections are not taken for its death by a peer still
 * finishing the last operation); that waits at most a second. Groups may be destroyed
 * in any order and at different times on different members; a sub-group keeps the
 * shared transport alive. NULL is a no-op. */
void comm_destroy(comm *c);

/* Aborts the group: closes its connections so that every peer blocked on this rank gets
 * an error now. Every later operation fails. */
void comm_abort(comm *c);

int comm_rank(const comm *c);
int comm_size(const comm *c);
/* Global (world) rank of group rank r. */
int comm_global_rank(const comm *c, int r);
const char *comm_name(const comm *c);
/* The backend the group's collectives run on: "gloo", "shm" (comm_shm.h) or "nccl". */
const char *comm_backend(const comm *c);
int comm_timeout_ms(const comm *c);
/* 1 when operations take a stream (NCCL): comm_wait then awaits them; 0 (Gloo): every
 * operation completes before it returns and the stream must be NULL. */
int comm_has_streams(const comm *c);
void comm_set_timeout_ms(comm *c, int timeout_ms);
uint64_t comm_bytes_sent(const comm *c);
/* The message of the last error ("" if none) and its kind. */
const char *comm_error(const comm *c);
comm_fault comm_fault_of(const comm *c);
/* The kind of the first failure any comm of this process met (not an abort of its own, nor
 * a usage fault); COMM_FAULT_NONE before one. A rank whose first is COMM_FAULT_PEER_LOST
 * failed after a peer's loss: likely a reaction to another rank's failure. */
comm_fault comm_first_fault(void);

/* ---- Collectives ------------------------------------------------------------------- */

/* out[i] = op over ranks of in[i], i < count. in == out is in place. */
int comm_allreduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                   comm_redop op, void *stream);
/* in: size*count elements; out (count) = op over ranks of in[rank*count + i]. out may be
 * in + rank*count (in place). */
int comm_reduce_scatter(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                        comm_redop op, void *stream);
/* On root: out[i] = op over ranks of in[i], i < count (in == out is in place). Every rank
 * passes an out of count elements: on the others it is working space, its contents (and
 * in's, when in place) unspecified afterwards. The data-parallel gradients of ZeRO-1 are
 * reduced unit by unit to the ranks whose shards hold them (train_dp_overlap.h). */
int comm_reduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
                int root, void *stream);
/* out: size*count elements; out[r*count + i] = in of rank r. in may be out + rank*count. */
int comm_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                   void *stream);
/* in and out: size*count; block r of in goes to rank r, block r of out comes from rank r.
 * in and out must not overlap. */
int comm_alltoall(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, void *stream);
/* As alltoall with per-peer counts: in holds send_counts[0] elements for rank 0, then
 * send_counts[1] for rank 1, ...; out receives recv_counts[r] elements from rank r,
 * packed the same way. send_counts[j] of rank i equals recv_counts[i] of rank j. */
int comm_alltoallv(comm *c, const void *in, const size_t *send_counts, void *out,
                   const size_t *recv_counts, comm_dtype dtype, void *stream);
/* buf of root is copied into buf of every rank. */
int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, void *stream);
int comm_barrier(comm *c, void *stream);

/* ---- Point to point ---------------------------------------------------------------- */

/* Posts every transfer of ops, then waits for all of them (so a ring exchange, where
 * each rank sends right and receives left, cannot deadlock). Messages between one pair
 * with one tag are matched in order. */
int comm_p2p(comm *c, const comm_p2p_op *ops, int n, void *stream);
int comm_send(comm *c, const void *buf, size_t count, comm_dtype dtype, int peer, uint32_t tag,
              void *stream);
int comm_recv(comm *c, void *buf, size_t count, comm_dtype dtype, int peer, uint32_t tag,
              void *stream);
int comm_sendrecv(comm *c, const void *sendbuf, int dst, void *recvbuf, int src, size_t count,
                  comm_dtype dtype, uint32_t tag, void *stream);

/* Waits for the operations enqueued on stream (NCCL; NULL: the comm's default stream,
 * see comm_set_stream); returns the sticky state (Gloo). */
int comm_wait(comm *c, void *stream);

/* The stream an operation called with stream NULL uses (NCCL: a cudaStream_t as void *,
 * normally the compute backend's, so that communication is ordered after the kernels
 * that produced its input; NULL, the initial value, is the device's legacy default
 * stream). Groups split from c afterwards inherit it. Backends without streams (Gloo)
 * ignore it. */
void comm_set_stream(comm *c, void *stream);

size_t comm_dtype_size(comm_dtype dtype);
const char *comm_dtype_name(comm_dtype dtype);
const char *comm_fault_name(comm_fault fault);

/* ---- Backend side ------------------------------------------------------------------
 * What a backend implements and the state comm.c keeps for it. Callers use only the
 * functions above. comm.c checks arguments (so backends see valid ones, count > 0 for
 * the data collectives) and a backend op reports a failure through comm_fail. */
/* The checks every backend's init makes of its bootstrap: rank within size, a positive
 * timeout, a non-empty prefix and a store. 0 or BT_EINVAL with the reason in diag. */
int comm_bootstrap_check(const comm_bootstrap *bs, bt_diag *diag);

/* For a backend's split: fills global[i] with the global rank of c's member
 * parent_ranks[i] and returns this rank's position in the new group. */
int comm_split_members(const comm *c, const int *parent_ranks, int n, int *global);
/* FNV-1a of a member list: with a per-list counter it names each split's rendezvous
 * keys, so different lists and repeated splits of one list never share keys. */
uint64_t comm_members_hash(const int *global, int n);

typedef struct comm_ops {
    const char *name;
    int streams; /* 1: operations are enqueued on a stream; 0: the stream must be NULL */
    int (*allreduce)(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                     comm_redop op, void *stream);
    int (*reduce)(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
                  int root, void *stream);
    int (*reduce_scatter)(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                          comm_redop op, void *stream);
    int (*allgather)(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                     void *stream);
    int (*alltoall)(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                    void *stream);
    int (*alltoallv)(comm *c, const void *in, const size_t *send_counts, void *out,
                     const size_t *recv_counts, comm_dtype dtype, void *stream);
    int (*broadcast)(comm *c, void *buf, size_t count, comm_dtype dtype, int root, void *stream);
    int (*barrier)(comm *c, void *stream);
    int (*p2p)(comm *c, const comm_p2p_op *ops, int n, void *stream);
    int (*wait)(comm *c, void *stream);
    /* comm_set_stream; NULL where the backend has no streams (the call is ignored). */
    void (*set_stream)(comm *c, void *stream);
    /* parent_ranks: the members as ranks of c, in group order; includes c's rank. */
    int (*split)(comm *c, const int *parent_ranks, int n, const char *name, comm **out);
    void (*abort)(comm *c);
    void (*destroy)(comm *c); /* frees impl; comm.c frees the rest */
} comm_ops;

struct comm {
    const comm_ops *ops;
    void *impl; /* the backend's state */
    int rank;
    int size;
    int *members; /* (size) global rank of each group rank */
    int timeout_ms;
    uint64_t bytes_sent;
    int err;          /* sticky error code, 0 while healthy */
    comm_fault fault; /* kind of the last error */
    char name[64];
    char msg[1024]; /* message of the last error */
};

/* Allocates a comm for a backend: members NULL means the identity (a world group). */
int comm_create(const comm_ops *ops, void *impl, int rank, int size, const int *members,
                const char *name, int timeout_ms, comm **out);
/* Records a failure of op on c (sticky unless fault is COMM_FAULT_USAGE) with a message
 * prefixed by the group and rank, and returns code. */
int comm_fail(comm *c, int code, comm_fault fault, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#ifdef __cplusplus
}
#endif

#endif
