/* Collectives and point to point through shared memory for a group whose members share
 * a host.
 *
 * Over Gloo's TCP loopback every message of a collective passes through Gloo's event-loop
 * thread: a small all-reduce among 4 ranks on 2 CPUs took 3-12 ms. Here each member
 * writes its part into its slot of a segment all members map, one atomic counter tells
 * when every member has written (a futex wakes the waiters), and each member reads the
 * others' slots: the same all-reduce takes about 0.1 ms. Point-to-point transfers (ring
 * attention's, the pipeline's) go through a channel per ordered pair of members in the
 * same segment, a ring buffer the sender writes and the receiver reads, with a futex
 * per member to sleep on (comm_shm_p2p.c): over Gloo they had taken a third of the
 * long-context stage's CPU time in the kernel (epoll, TCP, futexes).
 *
 * comm_shm_wrap(&c) replaces a transport comm c (Gloo) by a comm whose collectives and
 * point to point go through such a segment and that owns c: sub-group rendezvous and the
 * segment's own setup still go through c, and so does point to point in groups of more
 * than 16 members (whose channels would take too much memory) or when
 * BATON_COMM_SHM_RING=0. Splits of the wrapped comm are wrapped too. c stays as it is
 * (and the call returns 0) when the group has one member or more than 64, when
 * BATON_COMM_SHM=0, or when the members do not all see the segment rank 0 created
 * (other hosts, no /dev/shm, no space in it): it then works over c alone. A segment
 * takes about 4 MiB of /dev/shm for the collectives (1 MiB for 2 members) and at most 1
 * MiB for the channels (comm_shm_impl.h).
 *
 * The rules of comm.h hold:
 *  - Results are deterministic and bitwise identical on every member: each reduces the
 *    members' contributions in rank order.
 *  - Every wait is bounded by the group's timeout (COMM_FAULT_TIMEOUT, naming the members
 *    that did not arrive). A member that dies is noticed within about 20 ms: each member
 *    holds a robust mutex in the segment from the thread that created the group, and the
 *    kernel hands it over as "owner died" when that thread ends (COMM_FAULT_PEER_LOST,
 *    naming it). A member that destroyed the group is told apart from one that died.
 *  - A failure aborts the segment (a flag every waiter sees at once) and the transport.
 *  - comm_bytes_sent counts what the textbook ring algorithms would send (the numbers
 *    `baton plan` estimates), as the Gloo backend does: (size-1) blocks per rank for
 *    reduce-scatter, all-gather and all-to-all, 2 (size-1)/size of the buffer for
 *    all-reduce, the whole buffer to each other rank for a broadcast root, the buffer
 *    for each non-root of a reduce, the payload of each send.
 *  - A send completes once its message is in the channel, which may be before the peer
 *    posts its receive (Gloo waits for the receive): callers must not count on either.
 *
 * The segment is a POSIX shared-memory object that rank 0 creates under a random name
 * and unlinks as soon as every member has mapped it, so nothing is left in /dev/shm
 * after the setup, whatever happens later. */
#ifndef BATON_COMM_SHM_H
#define BATON_COMM_SHM_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over c's members. 0 (with *c wrapped or left as it was) or the error of a
 * failed operation on c (c stays owned by the caller, its error sticky). */
int comm_shm_wrap(comm **c);

/* Removes the segments a process killed while its group formed left behind (between
 * rank 0's shm_open and its unlink; named "baton-comm-PID-RANDOM" after their creator):
 * those in /dev/shm of this user whose creator's PID does not exist (kill(PID, 0) fails
 * with ESRCH) and that nobody changed for min_age_s seconds. A live PID's are kept, even
 * if the PID was reused; the age keeps those whose creator is alive in another PID
 * namespace sharing /dev/shm (a group forms within its timeout). Returns how many were
 * removed. Rank 0 of the first group a process creates calls it with
 * COMM_SHM_SWEEP_AGE_S, or twice the group's timeout where that is longer. */
#define COMM_SHM_SWEEP_AGE_S 600.0
int comm_shm_sweep(double min_age_s);

/* Why the last group this process was rank 0 of could not get its segment (the file
 * under /dev/shm, what failed, the size, the error and, for ENOSPC, the space free; for
 * EFBIG the file-size limit): 1 with it in out, once, or 0 when none is left to say. */
int comm_shm_fallback_take(char *out, size_t cap);

/* 1 when c's point-to-point transfers go through shared memory (c wrapped, at most 16
 * members, BATON_COMM_SHM_RING not 0). */
int comm_shm_p2p(const comm *c);

/* The CPU engine's world group: comm_gloo_init (comm_gloo.h), then comm_shm_wrap. On
 * failure *out is NULL and diag says why. */
int comm_cpu_init(comm **out, const comm_bootstrap *bs, bt_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
