/* The Gloo backend of the communication interface (CPU, TCP).
 *
 * comm_gloo_init joins the world group of a job attempt: it opens the rendezvous store
 * (bs->store_dir, or takes ownership of bs->store, closing it in every case), binds a
 * TCP device to bs->host and connects a full mesh, all within bs->timeout_ms. Sub-groups
 * made with comm_split share that device and rendezvous under the parent's prefix.
 * A process that has SIGPIPE at its default disposition gets it ignored here: a write
 * to a peer that died must become an error return, not the death of this process.
 * On failure *out is NULL and diag names the rank, the prefix and the cause (a peer
 * that did not join names that peer). */
#ifndef BATON_COMM_GLOO_H
#define BATON_COMM_GLOO_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

int comm_gloo_init(comm **out, const comm_bootstrap *bs, bt_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
