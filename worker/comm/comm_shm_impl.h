/* What comm_shm.c (the segment, its rounds and failures), comm_shm_ops.c (the
 * collectives over rounds) and comm_shm_p2p.c (point to point over channels) share. Not
 * for callers: they use comm.h and comm_shm.h.
 *
 * A round: every member writes its part into its slot of the round's parity (rounds
 * alternate between two sets of slots), then enters the round (shm_round), which returns
 * once every member has entered it; then every member reads the slots. A member can
 * write round k+2's slots only after all members entered round k+1, which each does only
 * after it has read round k's: two sets suffice. */
#ifndef BATON_COMM_SHM_IMPL_H
#define BATON_COMM_SHM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "comm.h"

/* Larger groups stay on the transport. */
enum { SHM_MAX_MEMBERS = 64 };

/* A slot's bytes for a group of size members: the two sets of slots hold 4 MiB, each slot
 * 16 KiB to 256 KiB. Small groups move large buffers in few rounds, and no group reserves
 * much more than 4 MiB of /dev/shm (a container's is often 64 MiB). The tests set
 * BATON_COMM_SHM_SLOT=BYTES (at least 8 per member) to run every collective in many
 * rounds. */
size_t shm_slot_bytes(int size);

/* The ring of a point-to-point channel (comm_shm_p2p.c), a power of two: at most 1 MiB
 * over the size (size - 1) channels of a group, each 4 KiB (16 members) to 512 KiB (2);
 * 0 (point to point over the transport) for groups of more than 16 members. Most groups
 * never send point to point (only pipeline and context-parallel groups do), and a host's
 * /dev/shm is often 64 MiB, hence the small budget. The tests set
 * BATON_COMM_SHM_RING=BYTES (rounded down to a power of two, 64 to 512 KiB) to send every
 * message in many pieces; BATON_COMM_SHM_RING=0 keeps point to point on the transport. */
size_t shm_ring_bytes(int size);

typedef struct shm_member {
    pthread_mutex_t alive;  /* robust; locked by the member for the group's life */
    _Atomic uint32_t round; /* the last round it entered */
    _Atomic uint32_t left;  /* 1 once it destroyed the group */
    char pad0[64];
    _Atomic uint32_t bell;     /* futex word: bumped by whoever may have unblocked its p2p */
    _Atomic uint32_t sleeping; /* 1 while it waits on bell (a bump must then wake it) */
    char pad1[56];
} shm_member;

typedef struct shm_head {
    _Atomic uint32_t arrived; /* futex word: rounds entered, summed over members (mod 2^32) */
    _Atomic uint32_t aborted; /* 0, or 1 + the group rank that aborted the segment */
    uint32_t size;
    uint32_t slot_bytes;
    uint32_t ring_bytes;
    char pad[44];
    shm_member member[]; /* size of them */
} shm_head;

/* A point-to-point channel from one member to another: a byte stream through a ring of
 * shm_ring_bytes that follows this header. The sender alone advances tail (bytes
 * written), the receiver alone head (bytes taken); both count from 0 and never wrap. */
typedef struct shm_chan {
    _Atomic uint64_t head;
    char pad0[56];
    _Atomic uint64_t tail;
    char pad1[56];
} shm_chan;

struct shm_rx;

typedef struct shm_impl {
    comm *inner; /* the transport: splits (and point to point where ring is 0) */
    shm_head *head;
    unsigned char *data;  /* 2 * size slots of slot bytes */
    size_t slot;          /* shm_slot_bytes(size) */
    unsigned char *chans; /* size (size - 1) channels, each a header and ring bytes */
    size_t ring;          /* shm_ring_bytes(size) */
    struct shm_rx *rx;    /* (size) this member's receiving side of each channel, or NULL */
    size_t map_len;
    uint32_t round; /* rounds this member entered */
    int holds_alive;
} shm_impl;

static inline shm_impl *shm_of(const comm *c) {
    return (shm_impl *)c->impl;
}

static inline unsigned char *shm_slot_of(const comm *c, uint32_t round, int r) {
    const shm_impl *s = shm_of(c);
    return s->data + ((size_t)(round & 1) * (size_t)c->size + (size_t)r) * s->slot;
}

/* Where group rank r writes for the round it enters next. */
static inline unsigned char *shm_slot_next(const comm *c, int r) {
    return shm_slot_of(c, shm_of(c)->round + 1, r);
}

/* What group rank r wrote for the round just completed. */
static inline const unsigned char *shm_slot_done(const comm *c, int r) {
    return shm_slot_of(c, shm_of(c)->round, r);
}

/* Enters the next round and waits until every member has: 0, or the (sticky) error. */
int shm_round(comm *c, const char *op);

static inline double shm_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* FUTEX_WAIT on w while it holds v, at most ms; FUTEX_WAKE of every waiter on w. */
void shm_futex_wait(_Atomic uint32_t *w, uint32_t v, int ms);
void shm_futex_wake(_Atomic uint32_t *w);

/* Aborts the segment: every member waiting in a round or on its bell fails at once. */
void shm_abort_segment(comm *c);
/* What became of member p: NULL while it lives (or when that cannot be told), else why
 * it will never take part again (it left, or it died). */
const char *shm_member_gone(comm *c, int p);

/* Point to point through the channels (comm_shm_p2p.c); shm_p2p_free releases what a
 * member keeps of messages received ahead of their receives. */
int shm_p2p_channels(comm *c, const comm_p2p_op *ops, int n);
void shm_p2p_free(comm *c);

/* The collectives (comm_shm_ops.c), for comm_shm.c's table. */
int shm_allreduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
                  void *stream);
int shm_reduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
               int root, void *stream);
int shm_reduce_scatter(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                       comm_redop op, void *stream);
int shm_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, void *stream);
int shm_alltoall(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, void *stream);
int shm_alltoallv(comm *c, const void *in, const size_t *send_counts, void *out,
                  const size_t *recv_counts, comm_dtype dtype, void *stream);
int shm_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, void *stream);
int shm_barrier(comm *c, void *stream);

#endif
