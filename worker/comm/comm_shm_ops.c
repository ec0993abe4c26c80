/* The collectives of the shared-memory group, as rounds (comm_shm_impl.h): each round
 * moves at most one slot per member, larger buffers take several. Every member reduces
 * the members' parts in rank order, so all get the same bits. */
#include <string.h>

#include "comm_shm_impl.h"

typedef unsigned char byte;

static size_t min_sz(size_t a, size_t b) {
    return a < b ? a : b;
}

/* o[i] = o[i] op x[i] over n elements of type T: one loop per op, so that gcc vectorizes
 * each (this file is built with BATON_CPU_MATH_FLAGS, worker/CMakeLists.txt); every
 * element's result is what the scalar expression gives. */
#define FOLD(T, out, part, n, op)                                                                  \
    do {                                                                                           \
        T *restrict o_ = (out);                                                                    \
        const T *restrict x_ = (part);                                                             \
        if ((op) == COMM_SUM)                                                                      \
            for (size_t i = 0; i < (n); i++)                                                       \
                o_[i] = o_[i] + x_[i];                                                             \
        else                                                                                       \
            for (size_t i = 0; i < (n); i++)                                                       \
                o_[i] = x_[i] > o_[i] ? x_[i] : o_[i];                                             \
    } while (0)

static void fold_parts(void *out, const void *part, size_t n, comm_dtype dtype, comm_redop op) {
    if (dtype == COMM_F32)
        FOLD(float, out, part, n, op);
    else
        FOLD(double, out, part, n, op);
}

/* out[i] = part 0 op part 1 op ... in member order, over the parts' elements
 * [off, off + n) of the round just completed. */
static void shm_reduce_parts(comm *c, void *out, size_t off, size_t n, comm_dtype dtype,
                             comm_redop op) {
    const size_t es = comm_dtype_size(dtype);
    memcpy(out, shm_slot_done(c, 0) + off * es, n * es);
    for (int p = 1; p < c->size; p++)
        fold_parts(out, shm_slot_done(c, p) + off * es, n, dtype, op);
}

/* Writes bytes of src into this member's slot, then enters the round: all-reduce, reduce
 * and all-gather move rounds of a slot's worth of each member's buffer. */
static int shm_own_round(comm *c, const void *src, size_t bytes, const char *op) {
    memcpy(shm_slot_next(c, c->rank), src, bytes);
    return shm_round(c, op);
}

/* Bytes of an all-reduce the ring would have this rank send: 2 (size-1) times its
 * element-aligned share of the buffer. */
static uint64_t ring_allreduce_share(const comm *c, size_t count, size_t es) {
    size_t w = (size_t)c->size, r = (size_t)c->rank;
    size_t first = count * r / w, last = count * (r + 1) / w;
    return 2 * (uint64_t)(w - 1) * (last - first) * es;
}

/* Member r's block of n elements: [n r / size, n (r + 1) / size). */
static size_t shm_block_lo(const comm *c, size_t n, int r) {
    return n * (size_t)r / (size_t)c->size;
}

/* A large all-reduce round in two: every member reduces its block of the parts (in
 * member order, as shm_reduce_parts) into its slot of the next round, then, that round
 * entered, copies every member's reduced block. Each member reads 2n elements instead
 * of size n and adds n (size - 1) / size instead of n (size - 1); the bits are the same. */
static int shm_allreduce_split(comm *c, byte *out, size_t n, comm_dtype dtype, comm_redop op) {
    const size_t es = comm_dtype_size(dtype);
    size_t lo = shm_block_lo(c, n, c->rank), hi = shm_block_lo(c, n, c->rank + 1);
    shm_reduce_parts(c, shm_slot_next(c, c->rank), lo, hi - lo, dtype, op);
    int rc = shm_round(c, "allreduce");
    if (rc != 0) return rc;
    for (int p = 0; p < c->size; p++) {
        lo = shm_block_lo(c, n, p), hi = shm_block_lo(c, n, p + 1);
        memcpy(out + lo * es, shm_slot_done(c, p), (hi - lo) * es);
    }
    return 0;
}

/* All-reduces of at least this many elements, among 3 or more members, take
 * shm_allreduce_split. Below, on a host with fewer cores than ranks, its second round
 * costs more than the reads it saves (4 ranks on 2 cores, bench_comm: 4096 to 65536
 * floats 20-40% slower split, 2^18 even, 2^20 1.7x faster). */
#define SHM_SPLIT_MIN_COUNT ((size_t)1 << 18)

int shm_allreduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
                  void *stream) {
    (void)stream;
    const size_t es = comm_dtype_size(dtype), per = shm_of(c)->slot / es;
    const int split = c->size >= 3 && count >= SHM_SPLIT_MIN_COUNT;
    for (size_t done = 0; done < count;) {
        size_t n = min_sz(per, count - done);
        int rc = shm_own_round(c, (const byte *)in + done * es, n * es, "allreduce");
        if (rc == 0 && split)
            rc = shm_allreduce_split(c, (byte *)out + done * es, n, dtype, op);
        else if (rc == 0)
            shm_reduce_parts(c, (byte *)out + done * es, 0, n, dtype, op);
        if (rc != 0) return rc;
        done += n;
    }
    c->bytes_sent += ring_allreduce_share(c, count, es);
    return 0;
}

int shm_reduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
               int root, void *stream) {
    (void)stream;
    const size_t es = comm_dtype_size(dtype), per = shm_of(c)->slot / es;
    for (size_t done = 0; done < count;) {
        size_t n = min_sz(per, count - done);
        int rc = shm_own_round(c, (const byte *)in + done * es, n * es, "reduce");
        if (rc != 0) return rc;
        if (c->rank == root) shm_reduce_parts(c, (byte *)out + done * es, 0, n, dtype, op);
        done += n;
    }
    if (c->rank != root) c->bytes_sent += count * es;
    return 0;
}

/* Writes elements [done, done + n) of each of the size blocks of count in `in` into this
 * member's slot (block d's at d * n), then enters the round: reduce-scatter and
 * all-to-all move rounds of `per` elements of every block. */
static int shm_blocks_round(comm *c, const void *in, size_t count, size_t done, size_t n, size_t es,
                            const char *op) {
    unsigned char *mine = shm_slot_next(c, c->rank);
    for (size_t d = 0; d < (size_t)c->size; d++)
        memcpy(mine + d * n * es, (const byte *)in + (d * count + done) * es, n * es);
    return shm_round(c, op);
}

int shm_reduce_scatter(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                       comm_redop op, void *stream) {
    (void)stream;
    const size_t es = comm_dtype_size(dtype), w = (size_t)c->size;
    const size_t per = shm_of(c)->slot / es / w;
    for (size_t done = 0; done < count;) {
        size_t n = min_sz(per, count - done);
        int rc = shm_blocks_round(c, in, count, done, n, es, "reduce-scatter");
        if (rc != 0) return rc;
        shm_reduce_parts(c, (byte *)out + done * es, (size_t)c->rank * n, n, dtype, op);
        done += n;
    }
    c->bytes_sent += (uint64_t)(w - 1) * count * es;
    return 0;
}

int shm_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                  void *stream) {
    (void)stream;
    const size_t es = comm_dtype_size(dtype), per = shm_of(c)->slot / es;
    for (size_t done = 0; done < count;) {
        size_t n = min_sz(per, count - done);
        int rc = shm_own_round(c, (const byte *)in + done * es, n * es, "allgather");
        if (rc != 0) return rc;
        for (int p = 0; p < c->size; p++)
            memcpy((byte *)out + ((size_t)p * count + done) * es, shm_slot_done(c, p), n * es);
        done += n;
    }
    c->bytes_sent += (uint64_t)(c->size - 1) * count * es;
    return 0;
}

int shm_alltoall(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, void *stream) {
    (void)stream;
    const size_t es = comm_dtype_size(dtype), w = (size_t)c->size;
    const size_t per = shm_of(c)->slot / es / w;
    for (size_t done = 0; done < count;) {
        size_t n = min_sz(per, count - done);
        int rc = shm_blocks_round(c, in, count, done, n, es, "alltoall");
        if (rc != 0) return rc;
        for (size_t p = 0; p < w; p++)
            memcpy((byte *)out + (p * count + done) * es,
                   shm_slot_done(c, (int)p) + (size_t)c->rank * n * es, n * es);
        done += n;
    }
    c->bytes_sent += (uint64_t)(w - 1) * count * es;
    return 0;
}

/* The largest block any member sends to any other, so that all run the same rounds. */
static int shm_max_block(comm *c, const size_t *send_counts, size_t *max) {
    uint64_t mine = 0;
    for (int d = 0; d < c->size; d++)
        if (send_counts[d] > mine) mine = send_counts[d];
    memcpy(shm_slot_next(c, c->rank), &mine, sizeof mine);
    int rc = shm_round(c, "alltoallv");
    if (rc != 0) return rc;
    *max = 0;
    for (int p = 0; p < c->size; p++) {
        uint64_t v;
        memcpy(&v, shm_slot_done(c, p), sizeof v);
        if (v > *max) *max = (size_t)v;
    }
    return 0;
}

static size_t prefix_sum(const size_t *counts, int i) {
    size_t s = 0;
    for (int j = 0; j < i; j++)
        s += counts[j];
    return s;
}

/* Round j carries elements [j per, (j+1) per) of every block, at d * per in the slot. */
int shm_alltoallv(comm *c, const void *in, const size_t *send_counts, void *out,
                  const size_t *recv_counts, comm_dtype dtype, void *stream) {
    (void)stream;
    const size_t es = comm_dtype_size(dtype), w = (size_t)c->size;
    const size_t per = shm_of(c)->slot / es / w;
    size_t max = 0;
    int rc = shm_max_block(c, send_counts, &max);
    for (size_t done = 0; rc == 0 && done < max; done += per) {
        byte *mine = shm_slot_next(c, c->rank);
        for (size_t d = 0; d < w; d++) {
            size_t n = send_counts[d] > done ? min_sz(per, send_counts[d] - done) : 0;
            memcpy(mine + d * per * es,
                   (const byte *)in + (prefix_sum(send_counts, (int)d) + done) * es, n * es);
        }
        if ((rc = shm_round(c, "alltoallv")) != 0) break;
        for (size_t p = 0; p < w; p++) {
            size_t n = recv_counts[p] > done ? min_sz(per, recv_counts[p] - done) : 0;
            memcpy((byte *)out + (prefix_sum(recv_counts, (int)p) + done) * es,
                   shm_slot_done(c, (int)p) + (size_t)c->rank * per * es, n * es);
        }
    }
    if (rc != 0) return rc;
    for (int d = 0; d < c->size; d++)
        if (d != c->rank) c->bytes_sent += send_counts[d] * es;
    return 0;
}

int shm_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, void *stream) {
    (void)stream;
    const size_t es = comm_dtype_size(dtype), per = shm_of(c)->slot / es;
    for (size_t done = 0; done < count;) {
        size_t n = min_sz(per, count - done);
        if (c->rank == root) memcpy(shm_slot_next(c, root), (const byte *)buf + done * es, n * es);
        int rc = shm_round(c, "broadcast");
        if (rc != 0) return rc;
        if (c->rank != root) memcpy((byte *)buf + done * es, shm_slot_done(c, root), n * es);
        done += n;
    }
    if (c->rank == root) c->bytes_sent += (uint64_t)(c->size - 1) * count * es;
    return 0;
}

int shm_barrier(comm *c, void *stream) {
    (void)stream;
    return shm_round(c, "barrier");
}
