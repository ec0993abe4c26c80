/* Data parallelism for the training loop: gradients are reduced across the dp group once,
 * after the last micro-batch of a step (the accumulation contract), by plain sums: each
 * rank's backward already scaled its loss gradients by 1 / (dp x its micro-batches), the
 * whole global batch's mean (train.c). Then
 *  - zero 0: all-reduce (sum) of every gradient, and the same full AdamW update on every
 *    rank;
 *  - zero 1: reduce-scatter of the gradient buffer into equal shards (in place: the model
 *    pads its parameter and gradient buffers to a multiple of dp), each rank clipping with the
 * global norm (the shards' sums of squares all-reduced) and updating only its shard of the fp32
 * master weights and Adam moments (1/dp of the optimizer memory), then an all-gather of the
 * parameters. The loss and the fp8 amaxes are reduced too, so every rank reports and scales alike.
 * Under tensor parallelism each tp rank runs this over its own parameter buffer with the
 * dp group of its tp slice; the gradient norm then also sums over the tp group
 * (train_dp_set_norm), each replicated tensor counted by one tp rank only (but the routed
 * experts' ZeRO-1 shards under fold_tp, below, by every tp rank: each its own). Under pipeline
 * parallelism likewise each stage over its own buffer, the norm also summing over the
 * pipeline group. */
#ifndef BATON_TRAIN_DP_H
#define BATON_TRAIN_DP_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "optim.h"

/* Sharding in equal chunks (rank r's: [r chunk, (r + 1) chunk), the last one cut at n):
 * rank r's length, and the piece of [lo, end) that one shard holds (its rank in *owner;
 * returns where the piece ends). */
static inline size_t train_dp_chunk_len(size_t n, size_t chunk, size_t r) {
    size_t begin = r * chunk;
    return begin >= n ? 0 : (n - begin < chunk ? n - begin : chunk);
}

static inline size_t train_dp_piece_end(size_t lo, size_t end, size_t chunk, int *owner) {
    size_t r = lo / chunk, hi = (r + 1) * chunk;
    *owner = (int)r;
    return hi < end ? hi : end;
}

/* ZeRO-1 under expert parallelism (train_dp_ep.c): the dense tensors are numbered one
 * after the other ("packed") and sharded over the dp group, the routed experts' (which
 * differ from one ep rank to the next) packed and sharded over the edp group, the ranks
 * that hold the same experts (not sharded without one; with the tp ranks folded in,
 * fold_tp, drawn from tp x cp x dp; there also with dp x cp = 1, the dense pack then
 * whole on every rank). Nothing is copied: each part of
 * a shard is reduced to its rank and broadcast from it in place in the gradient and
 * weight buffers; the optimizer state holds the rank's dense shard, then its expert one. */
typedef struct train_dp_pack {
    comm *group; /* NULL: one rank holds all of it */
    int rank, size;
    size_t n;       /* floats packed */
    size_t chunk;   /* ceil(n / size): one rank's shard, padding included */
    size_t shard_n; /* this rank's (the chunk less padding) */
    size_t state;   /* the shard's first float in the optimizer state */
} train_dp_pack;

/* One collective of the update: floats [offset, + n) of the full buffers, of one shard of
 * pack `pack` (whose rank is root); adjacent tensors of a pack merged. */
typedef struct train_dp_piece {
    size_t offset, n;
    int pack, root;
} train_dp_piece;

/* A tensor's place in a pack, and the part of it in this rank's shard. */
typedef struct train_dp_run {
    size_t offset, n; /* in the flat parameter buffer */
    size_t packed;    /* its first float in the pack */
    int pack;         /* 0 dense, 1 routed experts */
    int decay;
    size_t part_a, part_b; /* its elements [part_a, part_b) in this rank's shard... */
    size_t part_at;        /* ...at this index of the optimizer state (part_a == part_b: none) */
    int counted;           /* in the gradient norm (train_dp_set_norm) */
} train_dp_run;

typedef struct train_dp {
    backend *be; /* whose memory params and grads are (the model's) */
    comm *group; /* NULL: one data-parallel rank */
    int rank, size, zero;
    size_t n_params;     /* P */
    size_t chunk;        /* ceil(P / size): one rank's shard, padding included */
    size_t shard_begin;  /* rank * chunk */
    size_t shard_n;      /* parameters in this rank's shard (chunk, less padding) */
    int sharded;         /* zero >= 1 over more than one rank: the collectives run in place
                          * in params and grads (size * chunk floats each); or the packs
                          * (runs) shard the experts alone (the optimizer state a shard) */
    optim_segment *segs; /* this rank's segments, shard-relative (zero >= 1) */
    size_t n_segs;
    comm *norm_groups[2]; /* the norm's sum of squares also adds over these (tp, pp) */
    int n_norm_groups;
    optim_segment *norm_segs; /* the gradients this rank counts in the norm (shard-relative
                               * under zero 1); used only with norm_groups */
    size_t n_norm_segs;
    /* Expert parallelism (train_dp_set_ep): the routed experts' gradients are reduced over
     * the expert-data-parallel group instead (the dp ranks that hold the same experts, or
     * with fold_tp those and their tp ranks, each of which ran the experts on its own
     * rows), and their share of the norm adds over the ep group (which holds the other
     * experts). ep is NULL when it is 1 (fold_tp alone). */
    comm *ep, *edp;
    int fold_tp;           /* the tp ranks fold into the experts' parallelism (edp is drawn from
                            * tp x cp x dp): under ZeRO-1 each tp rank holds its own part of the
                            * experts' shards and counts it in the norm */
    int expert_norm_skip;  /* zero 0: after the sum over ep every rank of an ep group has the
                            * stage's whole expert part of the norm; only tp rank 0 adds it */
    optim_segment *expert; /* the experts' segments, in offset order */
    size_t n_expert;
    train_dp_pack packs[2]; /* ZeRO-1 with experts (above): dense, routed experts */
    train_dp_run *runs;     /* (n_runs) every tensor, in offset order; NULL: not in use */
    size_t n_runs;
    train_dp_piece *pieces; /* (n_pieces) the update's collectives, in order */
    size_t n_pieces;
    train_dp_piece *zruns; /* (n_zruns) zero 0 (or ZeRO-1 over one rank): the update's
                            * all-reduces, pack 1 the experts' over edp */
    size_t n_zruns;
    int grads_reduced; /* this step's reduction is done already (train_dp_overlap.h): the
                        * next update skips it (ZeRO-1: this rank's shard of the buffer
                        * holds the sums) */
} train_dp;

/* Sets up for params of n_params floats (be's memory) cut into the given segments, in
 * buffers of n_alloc floats (zero >= 1: at least n_params rounded up to a multiple of the
 * group's size, the padding zero: model_config.param_pad); the shard's segments when
 * zero >= 1. The optimizer state the caller must allocate is train_dp_optim_floats(), on
 * be. */
int train_dp_init(train_dp *d, backend *be, comm *group, int zero, size_t n_params, size_t n_alloc,
                  const optim_segment *segs, size_t n_segs, bt_diag *diag);
void train_dp_free(train_dp *d);
/* Expert parallelism: segs (of n) are the routed experts' tensors, all (of n_all) every
 * tensor; ep and edp the groups (edp NULL when every holder of an expert is in the ep
 * group; with fold_tp the edp group drawn from tp x cp x dp, stages/layout.h). Under
 * ZeRO-1 it packs the tensors (above): the optimizer state
 * train_dp_optim_floats() gives changes. 0 or BT_ENOMEM. */
int train_dp_set_ep(train_dp *d, comm *ep, comm *edp, int fold_tp, const optim_segment *segs,
                    size_t n, const optim_segment *all, size_t n_all, bt_diag *diag);
/* The rank's optimizer state is a shard (ZeRO-1). */
int train_dp_sharded(const train_dp *d);
/* The part of the parameters [off, off + count) (one tensor) in this rank's optimizer
 * state: its elements [*a, *b) at state index *at; 0 when they do not meet. Everything
 * when the state is not sharded. */
int train_dp_part(const train_dp *d, size_t off, size_t count, uint64_t *a, uint64_t *b,
                  size_t *at);

/* Extends the gradient norm over groups (the tensor- and pipeline-parallel groups, NULL
 * entries skipped, at most 2): this rank counts only the gradients in segs (full-buffer
 * offsets), the other ranks of the groups the rest; under fold_tp with ZeRO-1 also its own
 * part of the routed experts' shards (call after train_dp_set_ep). */
int train_dp_set_norm(train_dp *d, comm *const *groups, int n_groups, const optim_segment *segs,
                      size_t n_segs, bt_diag *diag);
size_t train_dp_optim_floats(const train_dp *d);
/* Adds a partial sum of squares over the norm groups (nothing without them): the
 * ZeRO-2/3 update's (train_zero.h). */
int train_dp_norm_add(train_dp *d, double *sumsq, bt_diag *diag);

/* Reduces grads across the group, clips with the global norm and applies AdamW at lr,
 * leaving every rank with the same updated params. *norm gets the global norm before
 * clipping. o's state covers train_dp_optim_floats() floats. */
int train_dp_update(train_dp *d, float *params, float *grads, const optim_segment *segs,
                    size_t n_segs, optim_adamw *o, const optim_hparams *hp, double lr, double *norm,
                    bt_diag *diag);

/* train_dp_ep.c's, for train_dp.c: the packs' share of train_dp_free, train_dp_set_norm
 * (segs: full-buffer offsets), train_dp_part, and the update under expert parallelism. */
void train_dp_ep_free(train_dp *d);
int train_dp_ep_set_norm(train_dp *d, const optim_segment *segs, size_t n_segs);
int train_dp_ep_part(const train_dp *d, size_t off, uint64_t *a, uint64_t *b, size_t *at);
int train_dp_update_ep(train_dp *d, float *params, float *grads, const optim_segment *segs,
                       size_t n_segs, optim_adamw *o, const optim_hparams *hp, double lr,
                       double *norm, bt_diag *diag);

/* Mean of x over the group (x is this rank's value). */
int train_dp_mean(train_dp *d, double *x, bt_diag *diag);
/* Element-wise maximum over the group, in place. */
int train_dp_max(train_dp *d, float *x, size_t n, bt_diag *diag);

#endif
