/* Collectives through shared memory for a group whose members share a host.
 *
 * Over Gloo's TCP loopback every message of a collective passes through Gloo's event-loop
 * thread: a small all-reduce among 4 ranks on 2 CPUs took 3-12 ms. Here each member
 * writes its part into its slot of a segment all members map, one atomic counter tells
 * when every member has written (a futex wakes the waiters), and each member reads the
 * others' slots: the same all-reduce takes about 0.1 ms.
 *
 * comm_shm_wrap(&c) replaces a transport comm c (Gloo) by a comm whose collectives go
 * through such a segment and that owns c: point-to-point transfers, sub-group
 * rendezvous and the segment's own setup still go through c. Splits of the wrapped comm
 * are wrapped too. c stays as it is (and the call returns 0) when the group has one
 * member or more than 64, when BATON_COMM_SHM=0, or when the members do not all see the
 * segment rank 0 created (other hosts, no /dev/shm, no space in it): it then works over
 * c alone. A segment takes about 4 MiB of /dev/shm (comm_shm_impl.h).
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
 *    for each non-root of a reduce.
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

/* The CPU engine's world group: comm_gloo_init (comm_gloo.h), then comm_shm_wrap. On
 * failure *out is NULL and diag says why. */
int comm_cpu_init(comm **out, const comm_bootstrap *bs, bt_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
