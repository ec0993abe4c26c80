/* A mixture-of-experts feed-forward layer: its definitions, its configuration and weights,
 * and its reference implementation (moe.c), checked against PyTorch (unit.test_moe). The
 * model runs the same layer through the backend's ops (moe_dev.h, expert parallelism
 * included), which unit.test_moe_dev checks against this reference.
 *
 * Implementation: host memory, float32, cblas_sgemm for every product (as worker/cpu
 * does), the CPU backend's routing ops (cpu_moe.c) and libm's expf in the SwiGLU; one
 * process, all experts (n_local 0). Deterministic: the same inputs give bitwise-identical
 * outputs and gradients (fixed loop orders, one thread).
 *
 * Definitions, for N tokens x_n (rows of x), E routed experts, k = top_k, S shared:
 *  - Router: logits l_n = Wr x_n (E); scores s_n = softmax(l_n) or sigmoid(l_n).
 *  - Selection: the k experts with the largest s_n,e + bias_e (ties to the lower index).
 *    The bias (aux-loss-free balancing, DeepSeek-V3) changes only the selection.
 *  - Combine weights: g_n,e = s_n,e for the selected e; with norm_topk divided by the
 *    sum of s_n over the selected experts. Computed before any dropping.
 *  - Capacity: with capacity_factor > 0 each expert keeps at most
 *    cap = ceil(capacity_factor * N * k / E) (token, expert) pairs, first come first
 *    served in token order (the cap lowest token indices that selected it). A dropped
 *    pair contributes nothing; its weight is not given to the token's other experts.
 *  - Expert: SwiGLU, expert(x) = W2 (silu(W1 x) * (W3 x)), W1 and W3 (F, C), W2 (C, F),
 *    W1 and W3 stacked as the dense model's w13 (gate rows, then up rows).
 *  - Output: y_n = sum over kept selected e of g_n,e expert_e(x_n) + sum_s shared_s(x_n)
 *    (shared experts always, weight 1).
 *  - Aux loss (Switch Transformer): aux = coef * E * sum_e f_e * P_e, where
 *    f_e = (pairs selected for e, before dropping) / (N k), a constant (no gradient),
 *    and P_e = (1/N) sum_n p_n,e with p_n = s_n / sum_e s_n,e the router probabilities
 *    (for softmax p = s; for sigmoid the scores normalised to sum 1, as DeepSeek-V3's
 *    balance loss does). Its gradient reaches the router through P_e only.
 *  - Backward computes the gradients of L = sum_n dy_n . y_n + aux: for x, the router,
 *    every routed and shared expert, through the combine weights (and the
 *    renormalisation) into the scores and logits.
 *  - Bias update (after a step): bias_e += bias_rate * sign(N k / E - routed_e), routed_e
 *    the pairs selected for e (before dropping); sign(0) = 0.
 *
 * Rules as in backend.h: backward accumulates (+=) into the weight gradients and writes
 * (=) dx. moe_forward and moe_backward do not allocate: the cache, sized once by
 * moe_cache_init for up to max_tokens tokens, holds the saved activations and the
 * backward scratch. */
#ifndef BATON_MOE_H
#define BATON_MOE_H

#include <stddef.h>

#define MOE_MAX_EXPERTS 512
/* moe_score_mean's chunks of consecutive tokens (backend.h): at most MOE_MEAN_CHUNKS, each
 * of moe_mean_chunk(N) tokens but the last; the chunks' sums are added in chunk order. */
#define MOE_MEAN_CHUNKS    256
#define MOE_MEAN_CHUNK_MIN 256

static inline size_t moe_mean_chunk(size_t N) {
    size_t ch = (N + MOE_MEAN_CHUNKS - 1) / MOE_MEAN_CHUNKS;
    return ch < MOE_MEAN_CHUNK_MIN ? MOE_MEAN_CHUNK_MIN : ch;
}

typedef struct moe_config {
    int dim;                /* C */
    int ffn_dim;            /* F, per expert (routed and shared) */
    int n_experts;          /* E, 1..MOE_MAX_EXPERTS */
    int top_k;              /* k, 1..E */
    int n_shared;           /* S >= 0 shared experts */
    int score;              /* MOE_SCORE_SOFTMAX or MOE_SCORE_SIGMOID */
    int norm_topk;          /* renormalise the top-k weights to sum 1 */
    double capacity_factor; /* 0: no dropping */
    double aux_loss_coef;   /* 0: no aux loss */
    double bias_rate;       /* moe_bias_update's step; 0: off */
    /* Expert parallelism: the routed experts [expert0, expert0 + n_local) are held here
     * (their weights are the only ones in moe_weights); n_local 0: all of them. */
    int expert0, n_local;
} moe_config;

enum { MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID = 1 };

/* Parameters (or their gradients), carved from one buffer of moe_weights_floats() by
 * moe_weights_carve in the order below. El = n_local (or E). */
typedef struct moe_weights {
    float *router;     /* (E, C) */
    float *w13;        /* (El, 2F, C): expert e's gate_proj rows [0, F), up_proj [F, 2F) */
    float *w2;         /* (El, C, F) down_proj */
    float *shared_w13; /* (S, 2F, C) */
    float *shared_w2;  /* (S, C, F) */
} moe_weights;

typedef struct moe_stats {
    int n_tokens;                 /* N of the forward */
    int capacity;                 /* pairs per expert, 0: unlimited */
    long routed[MOE_MAX_EXPERTS]; /* pairs selected per expert, before dropping */
    long kept[MOE_MAX_EXPERTS];   /* pairs computed per expert, after dropping */
    long dropped;                 /* sum of routed - kept */
    double aux_loss;              /* 0 when aux_loss_coef is 0 */
} moe_stats;

/* Saved activations and scratch. Fields are internal to moe.c; shapes for max_tokens. */
typedef struct moe_cache {
    int max_tokens, n; /* capacity in tokens; N of the last forward */
    float *fbuf;       /* the one float allocation below */
    int *ibuf;         /* the one int allocation below */
    float *x;          /* (N, C) copy of the input */
    float *scores;     /* (N, E) s */
    float *ssum;       /* (N) sum_e s_n,e */
    float *frac;       /* (E) f_e */
    float *gate;       /* (N, k) combine weights */
    int *topk;         /* (N, k) selected experts, by decreasing s + bias */
    int *row;          /* (N, k) row of the pair in the grouped buffers, -1: dropped */
    int *counts;       /* (3E + 1) cpu_moe_assign's routed, kept and offset per expert */
    int *offset;       /* = counts + 2E: (E + 1) first grouped row of each expert */
    int *tok;          /* (N k) token of each grouped row */
    int *slot;         /* (N k) index j in topk of each grouped row */
    float *xg;         /* (N k, C) inputs gathered by expert */
    float *h13;        /* (N k, 2F) gate and up projections */
    float *hs;         /* (N k, F) silu(gate) * up */
    float *out;        /* (N k, C) expert outputs, before the combine weight */
    float *sh13;       /* (S, N, 2F) shared experts' projections */
    float *shs;        /* (S, N, F) */
    /* backward scratch */
    float *dout;  /* (N, C) */
    float *dhs;   /* (N, F) */
    float *dh13;  /* (N, 2F) */
    float *dxe;   /* (N, C) */
    float *dgate; /* (N, k) */
    float *dl;    /* (N, E) */
} moe_cache;

/* 0 or BT_EINVAL for a configuration outside the ranges above. */
int moe_config_check(const moe_config *c);

size_t moe_weights_floats(const moe_config *c);
void moe_weights_carve(const moe_config *c, moe_weights *w, float *base);

/* Experts held here (n_local, or all). */
int moe_local_experts(const moe_config *c);

/* 0, BT_EINVAL (bad configuration or max_tokens < 1) or BT_ENOMEM. */
int moe_cache_init(moe_cache *cache, const moe_config *c, int max_tokens);
void moe_cache_free(moe_cache *cache);

/* y (N, C) from x (N, C); bias (E) may be NULL (all zero). stats may be NULL.
 * 0 or BT_EINVAL (bad configuration, N outside [1, max_tokens], NULL pointers); with
 * expert parallelism a collective over the ep group (every member calls it with its own
 * tokens), and BT_EIO when the exchange failed. */
int moe_forward(const moe_config *c, const moe_weights *w, const float *bias, const float *x,
                float *y, int N, moe_cache *cache, moe_stats *stats);

/* From dy (N, C) of the last moe_forward on this cache: writes dx (N, C), accumulates
 * grads. Overwrites the cache's scratch, not its saved activations, so backward may run
 * again. 0 or BT_EINVAL. */
int moe_backward(const moe_config *c, const moe_weights *w, moe_cache *cache, const float *dy,
                 float *dx, moe_weights *grads);

/* bias (E) += bias_rate * sign(mean load - routed_e), from the stats of a forward. */
void moe_bias_update(const moe_config *c, float *bias, const moe_stats *stats);

#endif
