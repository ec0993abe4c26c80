/* The NCCL backend of the communication interface (GPU).
 *
 * comm_nccl_init joins the world group of a job attempt on CUDA device `device`: it
 * opens the rendezvous store (bs->store_dir, or takes ownership of bs->store, closing it
 * in every case), makes this thread's current device `device`, and creates a
 * non-blocking NCCL communicator. Rank 0 generates the ncclUniqueId and publishes it
 * under "<prefix>/nccl-id"; the others wait for it. The whole init (waiting for the id
 * and NCCL's own connection setup) is bounded by bs->timeout_ms: a member that never
 * joins becomes an error, not a hang. bs->host is not used (NCCL picks its interfaces).
 *
 * Operations given a stream (a cudaStream_t passed as void *) enqueue on it and return;
 * comm_wait(c, stream) waits for the stream, bounded by the group's timeout, and aborts
 * the group when it passes. Operations given NULL run on the group's default stream
 * (comm_set_stream; initially the device's legacy default stream) and are complete when
 * they return, under the same bound, as with Gloo. Buffers are device memory of
 * `device`, or host memory, which is staged through a device buffer of the group and
 * makes the operation complete when it returns whatever the stream. A thread that calls
 * the operations has `device` as its current CUDA device (init sets it for the calling
 * thread). NCCL forbids two ranks of one communicator on one device, so every member of
 * a group needs a device of its own.
 *
 * On failure *out is NULL and diag names the rank, the prefix, the device and the cause
 * (the CUDA or NCCL call and its error string). */
#ifndef BATON_COMM_NCCL_H
#define BATON_COMM_NCCL_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

int comm_nccl_init(comm **out, const comm_bootstrap *bs, int device, bt_diag *diag);

/* The number of CUDA devices this process sees, in *count (> 0); BT_EUNSUPPORTED with
 * the reason in diag when there are none or no usable driver. A worker picks its
 * device as its rank on the node modulo this. */
int comm_nccl_device_count(int *count, bt_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
