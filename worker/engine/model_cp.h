/* Context parallelism: each sequence is split over the cp ranks of a group with the
 * load-balanced ("zigzag") split: the sequence of T*cp tokens is cut into 2 cp chunks
 * and rank i holds chunks i and 2 cp - 1 - i, so every rank does the same causal
 * attention work. A rank's rows are those two chunks, in that order (T local rows per
 * sequence). Everything but attention is per token and runs on the local rows as it is;
 * RoPE uses the rows' global positions (model_cp_init rebuilds the tables); the loss is
 * the mean over the whole sequence (the valid-target count and the loss sum are summed
 * over the group), so each rank's parameter gradients are its share of the one-process
 * gradient and the data-parallel reduction sums them over cp (train_dp.h).
 *
 * Attention, two ways (parallel.cp_comm):
 *  - ring: K/V blocks travel around the ring (send right, receive left) while each rank
 *    attends its queries to the visiting block, merging the partial results through
 *    their log-sum-exp (online softmax). Backward sends K/V round again, the gradients
 *    dK/dV travelling with their block; after cp - 1 hops each block's gradient is
 *    complete one rank short of home, and a last hop brings it back. Per layer and
 *    micro-batch a rank sends cp - 1 K/V blocks forward and cp - 1 K/V blocks plus cp
 *    dK/dV blocks backward (stages/plan_comm.c counts the same).
 *  - Ulysses: an all-to-all turns the rank's rows of every head into every row of its
 *    cp-th of the heads; ordinary causal attention runs on the whole sequence; a second
 *    all-to-all brings the output back to the rows. Backward mirrors it. Needs cp to
 *    divide the query and kv heads of a tensor-parallel rank.
 * Collective failures are recorded in m->comm_err, as tensor parallelism does. */
#ifndef BATON_MODEL_CP_H
#define BATON_MODEL_CP_H

#include <stdint.h>

#include "model.h"

typedef struct model_cp {
    int size, rank, ulysses;
    int T;            /* local rows per sequence */
    int32_t *pos;     /* device (size, T): the global position of each rank's local rows */
    int32_t *pos_mem; /* the allocation behind pos */
    float *mem;       /* one device allocation for the buffers below */
    /* ring */
    float *ring[2];  /* (N, 4 KV hd) each: K|V forward, K|V|dK|dV backward, in flight */
    float *dkv[2];   /* (N, 2 KV hd) each: the last hop of dK|dV */
    float *out_p;    /* (N, H hd) a block's partial output */
    float *lse_p;    /* (B, H, T) its log-sum-exp */
    float *delta;    /* (B, H, T) backward's row term */
    float *pscratch; /* attention_part_scratch_floats(T, T) */
    /* Ulysses */
    float *send, *recv; /* (N (H + 2 KV) hd) each: all-to-all blocks */
    float *du;          /* (N cp, (H + 2 KV) hd / cp) gradient of uqkv */
    float *duo;         /* (N cp, H hd / cp) gradient of uout */
    float *uscratch;    /* attention_scratch_floats(T cp) */
} model_cp;

/* The global position of local row t (of T per sequence) of rank `rank` of cp. */
int model_cp_position(int cp, int rank, int T, int t);

/* Sets up context parallelism on a model made by model_init_tp with cfg.cp, cfg.cp_rank
 * and cfg.cp_ulysses set and max_T the local rows (even): checks cp_group (size cfg.cp,
 * this rank cfg.cp_rank; borrowed, it must outlive the model), allocates the buffers and
 * rebuilds the RoPE tables for the rows' global positions. Nothing to do when cfg.cp is
 * 1. Forward and backward then take batches of exactly max_T local rows. */
int model_cp_init(model *m, comm *cp_group, bt_diag *diag);
void model_cp_free(model *m);

/* Attention of layer acts a (q, k, v in a->qkv after RoPE) into a->atty and a->lse
 * (and, under Ulysses, a->uqkv, uout, ulse). */
void model_cp_attention_forward(model *m, model_layer_acts *a);
/* From dout (N, H hd), writes dq, dk, dv into dqkv (the layout of a->qkv). */
void model_cp_attention_backward(model *m, const model_layer_acts *a, const float *dout,
                                 float *dqkv);

/* Sums over the group: the valid-target count, the loss sum. */
void model_cp_sum_int(model *m, int *x);
void model_cp_sum_double(model *m, double *x);

#endif
