/* moe.h's mixture-of-experts layer through the backend table: the path the model takes
 * on a backend whose memory is not host memory (CUDA). The definitions are moe.h's; the
 * pieces are backend ops: the router and expert GEMMs in float32 (matmul_forward and
 * matmul_backward, as moe.c's cblas products), SwiGLU (swiglu_*), routing, capacity,
 * permutation and the router's backward (moe_route ... moe_router_backward). One host
 * synchronization per forward: the per-expert row counts decide the shapes of the
 * expert GEMMs (and fill the load figures). No expert parallelism (moe_ep.h is host
 * code): the model refuses ep > 1 on such a backend.
 *
 * Results equal moe.c's within float rounding (the GEMMs' summation order differs); on
 * the CPU backend the routing is moe.c's bit for bit. Deterministic like every backend
 * op. Every pointer below is the backend's device memory. */
#ifndef BATON_MOE_DEV_H
#define BATON_MOE_DEV_H

#include <stdint.h>

#include "backend.h"
#include "moe.h"

/* Backward scratch, shared by every cache of a model (one backward runs at a time). */
typedef struct moe_dev_scratch {
    backend *be;
    float *fbuf;  /* the one allocation below */
    float *dout;  /* (N K, C) expert output gradients, grouped rows */
    float *dhs;   /* (N K, F) */
    float *dh13;  /* (N K, 2F) */
    float *dxg;   /* (N K, C) expert input gradients, grouped rows */
    float *tmp;   /* (N, C) a shared expert's output; the router's and shared dx */
    float *dl;    /* (N, E) router logit gradients */
    float *dgate; /* (N K) */
    float *gemm;  /* matmul scratch (float32: none on either backend) */
} moe_dev_scratch;

/* One layer's saved activations (for up to max_tokens tokens). */
typedef struct moe_dev_cache {
    backend *be;
    moe_dev_scratch *scratch; /* borrowed */
    int max_tokens, n;        /* capacity; N of the last forward */
    float *fbuf;              /* float allocation: x .. shs */
    int32_t *ibuf;            /* 4-byte allocation: topk .. pmean */
    float *x, *scores, *ssum, *gate, *xg, *h13, *hs, *out, *sh13, *shs;
    int32_t *topk, *row, *tok, *slot;
    int32_t *counts; /* (3E + 1) moe_assign's routed, kept, offset */
    float *pmean;    /* (E) moe_score_mean, right after counts (one copy to the host) */
    int32_t *host;   /* host copy of counts and pmean (4E + 1) */
} moe_dev_cache;

/* 0, BT_EINVAL or BT_ENOMEM. */
int moe_dev_scratch_init(moe_dev_scratch *s, backend *be, const moe_config *c, int max_tokens);
void moe_dev_scratch_free(moe_dev_scratch *s);
int moe_dev_cache_init(moe_dev_cache *m, backend *be, const moe_config *c, int max_tokens,
                       moe_dev_scratch *s);
void moe_dev_cache_free(moe_dev_cache *m);

/* moe_forward and moe_backward of moe.h on device memory (expert parallelism: none).
 * 0, BT_EINVAL for bad arguments, BT_EIO when the counts read back from the backend are
 * inconsistent (a failed device: its error is reported by the backend's sync). */
int moe_dev_forward(const moe_config *c, const moe_weights *w, const float *bias, const float *x,
                    float *y, int N, moe_dev_cache *m, moe_stats *stats);
int moe_dev_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m, const float *dy,
                     float *dx, moe_weights *grads);

#endif
