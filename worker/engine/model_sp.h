/* Sequence parallelism inside the model's passes (Megatron-LM's, Korthikanti et al. 2022):
 * under tensor parallelism with cfg.sp, rank r of the tp group holds rows [r R, (r + 1) R)
 * of the N rows of a micro-batch (R = N / tp, rows in the (B, T) order) of everything
 * between the tensor-parallel regions: the residual stream, the norms' inputs, rstds and
 * the gradients that reach them. The f/g operator pairs of model_tp.h become
 *   gather  (before a column-parallel GEMM): forward all-gather of the rows, backward
 *           reduce-scatter of the gradient;
 *   scatter (after a row-parallel GEMM and the vocabulary-parallel embedding): forward
 *           reduce-scatter (the ranks' partial products summed, each keeping its rows),
 *           backward all-gather;
 * the same bytes as the all-reduces they replace, the per-token work between them done
 * once instead of tp times, and the residual stream's activations a tp-th. A norm
 * weight's gradient is then each rank's share of the rows: summed over the group for
 * every pass (model_sp_norm_grad). An MoE layer's block, whole on every tp rank, runs on
 * the rank's rows alone: no collective around it, a tp-th of its work, and its weight
 * gradients summed over the group once a step (model_moe.h).
 * Failures are recorded in m->comm_err, as model_tp.h's. */
#ifndef BATON_MODEL_SP_H
#define BATON_MODEL_SP_H

#include <stddef.h>

#include "model.h"

/* 1 when the model runs sequence parallel. */
static inline int model_sp_on(const model *m) {
    return m->cfg.sp && m->tp_group != NULL;
}

/* The rows this rank holds of n (n / tp, or n) and the first of them. */
int model_sp_rows(const model *m, int n);
int model_sp_row0(const model *m, int n);

/* The bf16 staging of gathers (cfg.comm_bf16; where the backend packs bf16 and some GEMM
 * of the stage runs in bf16: under bf16, or under fp8 the head, the first and last
 * layers). After the GEMMs' set-up. 0 or BT_ENOMEM. */
int model_sp_init(model *m);

/* full (n, C) gets every rank's rows, this rank's from local (R, C; may be full + row0 C).
 * prec: the precision of the products that alone read full; under bf16 the rows travel
 * in bf16 (model.h: comm_bf16), which those products round them to anyway. */
void model_sp_gather(model *m, float *full, const float *local, int n, backend_prec prec);
/* local (R, C) = this rank's rows of the sum over the group of full (n, C); local may be
 * full + row0 C. */
void model_sp_scatter(model *m, const float *full, float *local, int n);
/* dw (C) += the sum over the group of g->dnorm (this pass's share of the norm weight's
 * gradient, which the caller computed into a zeroed g->dnorm). */
void model_sp_norm_grad(model *m, float *dw);

#endif
