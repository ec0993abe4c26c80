/* Expert parallelism for the MoE layer (moe.h): the routed experts are split evenly over
 * the ranks of an ep group (rank r holds experts [r El, (r + 1) El), El = E / ep), the
 * ranks of the group hold different tokens (they come from the data- and context-parallel
 * ranks, stages/layout.h), and every rank routes its own tokens. Forward: each rank's
 * kept (token, expert) rows, already grouped by expert in token order, go to the expert's
 * owner (all-to-all of the per-expert counts, then all-to-allv of the rows); the owner
 * runs each of its experts over the rows of each source in turn and sends the outputs
 * back the same way; the combine is then local. Backward mirrors it: the rows' output
 * gradients (combine weight times dy) go to the owners, which accumulate their experts'
 * weight gradients and return the input gradients. Capacity dropping and the aux loss
 * stay per rank, over its own tokens, as in one process per micro-batch. Host memory,
 * like moe.c; the exchanges go through the communication interface (comm.h). */
#ifndef BATON_MOE_EP_H
#define BATON_MOE_EP_H

#include "comm.h"
#include "moe.h"

typedef struct moe_ep {
    comm *group; /* borrowed */
    int size, rank;
    int max_rows;      /* rows this rank can receive: size x max_tokens x top_k */
    int *cnt_send;     /* (E) kept pairs this rank routes to each expert */
    int *cnt_recv;     /* (size, El) pairs each source routed to each of this rank's experts */
    size_t *scount;    /* (size) floats per peer, this rank's rows out */
    size_t *rcount;    /* (size) floats per peer, rows in */
    float *fbuf;       /* the one float allocation below */
    float *xr, *outr;  /* (max_rows, C) received rows, their expert outputs */
    float *h13r, *hsr; /* (max_rows, 2F), (max_rows, F) saved expert activations */
    float *dr, *dxr;   /* (max_rows, C) received output gradients, input gradients */
    float *dhs, *dh13; /* (max_rows, F), (max_rows, 2F) scratch */
    float *dg, *dxg;   /* (max_tokens top_k, C) this rank's grouped rows' dy and dx */
} moe_ep;

/* Sets cache up for expert parallelism over group (its size must divide the experts, and
 * c->expert0, c->n_local must be this rank's share). 0, BT_EINVAL or BT_ENOMEM. */
int moe_ep_init(moe_cache *cache, const moe_config *c, comm *group);
void moe_ep_free(moe_ep *ep);

/* From the cache's grouped rows (xg, offset) into its per-row expert outputs (out). */
int moe_ep_forward(const moe_config *c, const moe_weights *w, moe_cache *m);
/* The routed experts' backward: dgate of every kept pair, weight gradients of the
 * experts held here, dx += the rows' input gradients (dx zeroed by the caller). */
int moe_ep_backward(const moe_config *c, const moe_weights *w, moe_cache *m, const float *dy,
                    float *dx, moe_weights *gr);

#endif
