/* moe.h's mixture-of-experts layer through the backend table: what the model runs, on the
 * CPU and the CUDA engine alike. The definitions are moe.h's; the
 * pieces are backend ops: the router's GEMMs in float32 and the experts' in the model's
 * precision (matmul_forward and matmul_backward; under fp8 each expert weight's product
 * with its own scales and running amaxes: the cache's kept records), SwiGLU (swiglu_*),
 * routing, capacity, permutation and the router's backward (moe_route ...
 * moe_router_backward). One host
 * synchronization per forward (two when the micro-batch is split over cp or tp and there
 * is a capacity or an aux loss, below): the per-expert row counts decide the shapes of the expert
 * GEMMs (and fill the load figures).
 *
 * Expert parallelism: the routed experts are split evenly over the ranks of an ep group
 * (rank r holds experts [r El, (r + 1) El), El = E / ep), the ranks of the group hold
 * different tokens (they come from the data- and context-parallel ranks,
 * stages/layout.h), and every rank routes its own tokens. Forward: each rank's kept
 * (token, expert) rows, already grouped by expert in token order, go to the expert's
 * owner (all-to-all of the per-expert counts, then all-to-allv of the rows, device
 * buffers through the communication interface on the backend's stream); the owner runs
 * each of its experts over the rows of each source in turn and sends the outputs back the
 * same way; the combine is then local. Backward mirrors it: the rows' output gradients
 * (combine weight times dy) go to the owners, which accumulate their experts' weight
 * gradients and return the input gradients. The rows to the owners may travel in bf16
 * (moe_dev_scratch_set_bf16). Capacity dropping and the aux loss are each
 * rank's, over its own micro-batch's tokens (the ep ranks' micro-batches are different
 * data-parallel ones, as one process runs them one after the other), except when a
 * micro-batch is split over cp or tp ranks, below.
 *
 * Split micro-batches (moe_dev_scratch_set_split): under context parallelism a rank's
 * tokens are two chunks of each of its micro-batch's sequences (model_cp.h's zigzag
 * split), under sequence parallelism each tp rank routes its own contiguous run of its cp
 * rank's rows (model_sp.h), yet the capacity and the aux loss count the whole sequences,
 * as one process does. With a capacity or an aux loss, the forward reads the selections
 * back (a second host synchronization), counts its pairs per expert in each chunk and
 * all-gathers those counts over tp, then over cp; from them every rank knows how many
 * pairs of each expert come before each of its pieces in the one-process order, hence
 * how many of its own pairs are kept (a prefix of them, in token order: moe_assign's
 * limit), and the whole sequences' routed counts that the aux loss's f_e and its
 * gradient use. Each rank's aux loss is its tokens' share (its P_e sums over the whole
 * sequences' token count), so the shares add up to the one-process value over the
 * group, as the language-model loss does. The stats' capacity is then the whole
 * sequences' (their n_tokens, routed and kept stay this rank's). If a rank finds its
 * selections out of range (a failed device) it still takes part in the all-gathers,
 * with counts of -1, so that every rank fails with BT_EIO together.
 *
 * Results equal moe.c's within float rounding (the GEMMs' summation order differs); on
 * the CPU backend the routing is moe.c's bit for bit. Deterministic like every backend
 * op. Every float and int32 pointer below is the backend's device memory unless said. */
#ifndef BATON_MOE_DEV_H
#define BATON_MOE_DEV_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "moe.h"

/* Scratch shared by every cache of a model (one forward or backward runs at a time).
 * Rx: the rows the experts here have room for, rx_cap. Without expert parallelism that is
 * max_tokens top_k, all they can see; with it they may see up to ep times that (every
 * rank's tokens routed here), but on average they see max_tokens top_k: that much is
 * reserved at first, and a forward that receives more grows the room (reserve_rows in
 * moe_dev.c: a quarter more than it received, never shrunk), so the memory follows the
 * worst imbalance met instead of the worst possible one. The buffers outgrown (the
 * caches' too) are kept in retired until moe_dev_scratch_release: freeing them mid-step
 * would wait for the whole GPU, collectives queued on other streams included. */
typedef struct moe_dev_scratch {
    backend *be;
    int ep_size;       /* the ep group size it was sized for */
    int max_tokens;    /* N at most */
    backend_prec prec; /* the experts' GEMMs (routed and shared); the router's: float32 */
    backend_gemm gp;   /* {prec}, for the backend's matmuls without records (not fp8) */
    float *fbuf;       /* one allocation: dout .. dgate */
    float *dout;       /* (N K, C) grouped rows' output gradients */
    float *dxg;        /* (N K, C) grouped rows' input gradients */
    float *tmp;        /* (N, C) a shared expert's output; the router's and shared dx */
    float *dl;         /* (N, E) router logit gradients */
    float *dgate;      /* (N K) */
    size_t rx_cap;     /* Rx */
    size_t rx_most;    /* the most rows a forward has received here */
    float *rbuf;       /* one allocation: dhs .. gemm */
    float *dhs, *dh13; /* (Rx, F), (Rx, 2F) */
    float *outr, *dr;  /* (Rx, C) under ep: expert outputs, received output gradients */
    float *dxr;        /* (Rx, C) under ep: expert input gradients */
    float *gemm;       /* matmul scratch (float32: none on either backend) */
    /* Rows to the experts in bf16 (moe_dev_scratch_set_bf16); NULL: float32. */
    uint16_t *x16; /* (NK + Rx, C): the rows sent, then the rows received */
    size_t *cnt16; /* (2 ep) host: the bytes to and from each peer */
    /* A micro-batch split over cp and tp (moe_dev_scratch_set_split); split 0: none. */
    int split;
    comm *cp, *tp;     /* the groups (borrowed; NULL: not split over it) */
    int sp_T;          /* under cp: its rank's rows per sequence (two chunks of sp_T / 2) */
    int32_t *sp_topk;  /* (max_tokens K) the selections read back (host) */
    int32_t *sp_count; /* (cp tp, 2 B, E) every rank's pairs per chunk and expert, B the
                        * cp rank's sequences (host) */
    int32_t *sp_limit; /* (2E) the limit and routed counts copied to a cache's limit (host) */
    void **retired;    /* (n_retired) outgrown backend buffers, freed by the release */
    int n_retired, cap_retired;
} moe_dev_scratch;

/* One layer's experts' GEMM records (borrowed: model.h's xgemm), one per weight, (local
 * expert, w13 | w2) then (shared expert, w13 | w2): each product's precision (bf16, fp16
 * or fp8), fp8 scales and running amaxes, and, where kept, its weight's conversions from
 * one micro-batch to the next (backend.h: backend_gemm.wcache). */
typedef struct moe_dev_kept {
    backend *be;
    backend_gemm *wg;
    int n_wg, n_local; /* records; local experts among them */
    float *mem;        /* every record's cache; NULL: none kept */
    size_t floats;
} moe_dev_kept;

/* One MoE layer's saved activations (for up to max_tokens tokens): a cache serves one
 * layer of one activation slot, or under full recompute every layer in turn. */
typedef struct moe_dev_cache {
    backend *be;
    moe_dev_scratch *scratch; /* borrowed */
    comm *ep;                 /* the expert-parallel group (borrowed); NULL: none */
    int ep_size;
    int max_tokens, n; /* capacity; N of the last forward */
    float *fbuf;       /* float allocation: x .. shs */
    int32_t *ibuf;     /* 4-byte allocation: topk .. pmean */
    float *x, *scores, *ssum, *gate, *xg, *out, *sh13, *shs;
    size_t rx_cap;   /* its Rx (grown like the scratch's, each by what it received) */
    size_t bytes;    /* its device memory: fbuf, ibuf, rbuf */
    float *rbuf;     /* one allocation: xr .. hs */
    float *xr;       /* (Rx, C) under ep: the rows received for the experts here */
    float *h13, *hs; /* (Rx, 2F), (Rx, F) expert activations, in the experts' rows */
    int32_t *topk, *row, *tok, *slot;
    int32_t *counts;           /* (3E + 1) moe_assign's routed, kept, offset */
    float *pmean;              /* (E) moe_score_mean, right after counts (one copy to the host) */
    int32_t *limit;            /* (E) when split: the pairs of each expert kept here, then (E) the
                                * whole sequences' routed counts (one copy from the host) */
    const int32_t *aux_routed; /* the routed counts of the aux loss: counts, or limit + E */
    int n_aux;                 /* the tokens they count: n, or the whole sequences' */
    /* Host memory: */
    int32_t *host;           /* (4E + 1) copy of counts and pmean */
    int *cnt_recv;           /* (E) under ep: rows each source sends each expert here */
    size_t *scount, *rcount; /* (ep) under ep: floats to and from each peer */
    int nblk;                /* the experts' row blocks, in the experts' row order: */
    int *blk_e, *blk_m;      /* (E) local expert index and rows of each block */
    moe_dev_kept *kept;      /* the layer's kept weight conversions (borrowed, set by the caller
                              * before each pass: one cache may serve several layers); NULL:
                              * every product converts its weight */
} moe_dev_cache;

/* ep_size: the expert-parallel group's size (1 without); prec: the experts' GEMM inputs
 * (float32, bf16, fp16 or fp8; under fp8 the products need the records of a kept, with
 * their scales, and may also run bf16). 0, BT_EINVAL or BT_ENOMEM. */
int moe_dev_scratch_init(moe_dev_scratch *s, backend *be, const moe_config *c, int max_tokens,
                         int ep_size, backend_prec prec);
void moe_dev_scratch_free(moe_dev_scratch *s);
/* Frees the buffers the scratch and its caches outgrew (queued work must no longer read
 * them: call it where the device may be waited for, between steps). */
void moe_dev_scratch_release(moe_dev_scratch *s);
/* A micro-batch split over cp and tp (borrowed; NULL or size 1: not over it): each
 * forward's N rows are tp rank qt's run [qt N, (qt + 1) N) of its cp rank's N tp rows,
 * under cp T of them per sequence (even; N tp a multiple of T; without cp T is not
 * used), max_tokens the most rows of a forward here. 0, BT_EINVAL or BT_ENOMEM. */
int moe_dev_scratch_set_split(moe_dev_scratch *s, const moe_config *c, comm *cp, comm *tp, int T,
                              int max_tokens);
/* Under expert parallelism with the experts' products in bf16 (and a backend that packs
 * bf16: backend.h), the rows dispatched to the experts and their output gradients travel
 * in bf16, which those products round them to anyway: half those bytes, the same
 * results. Under fp8 only to the layers whose experts run bf16 (their records': the
 * first and last layers with fp8_first_last_bf16); the caller calls it only where there
 * are some. Nothing to do otherwise. 0 or BT_ENOMEM. */
int moe_dev_scratch_set_bf16(moe_dev_scratch *s, const moe_config *c, int max_tokens);
/* ep: the expert-parallel group (NULL without; with it the experts must split evenly over
 * it and c->expert0, c->n_local be this rank's share). s must have been sized for its
 * size. */
int moe_dev_cache_init(moe_dev_cache *m, backend *be, const moe_config *c, int max_tokens,
                       moe_dev_scratch *s, comm *ep);
void moe_dev_cache_free(moe_dev_cache *m);

/* A layer's records wg (2 (El + S), their precisions set; borrowed) and, with keep, the
 * caches of their conversions where the backend keeps any. 0 or BT_ENOMEM. */
int moe_dev_kept_init(moe_dev_kept *k, backend *be, const moe_config *c, backend_gemm *wg,
                      int keep);
void moe_dev_kept_free(moe_dev_kept *k);
/* The weights may have changed: every kept conversion dropped. */
void moe_dev_kept_clear(moe_dev_kept *k);

/* moe_forward and moe_backward of moe.h on device memory; under expert parallelism
 * collectives over the ep group. 0, BT_EINVAL for bad arguments, BT_EIO when an exchange
 * failed or the counts read back are inconsistent (a failed device: its error is reported
 * by the backend's sync), BT_ERANGE when more rows arrive than every rank's tokens can
 * bring, BT_ENOMEM when the room for the rows received could not grow. */
int moe_dev_forward(const moe_config *c, const moe_weights *w, const float *bias, const float *x,
                    float *y, int N, moe_dev_cache *m, moe_stats *stats);
int moe_dev_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m, const float *dy,
                     float *dx, moe_weights *grads);

#endif
