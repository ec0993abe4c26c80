/* One rank's training loop for a resolved stage: draws its samples by global sample
 * index, runs forward/backward over the micro-batches of a step (gradients summed with
 * loss scale 1/K), keeps the fp8 delayed-scaling state, clips and applies AdamW with the
 * stage's schedule, and reports metrics. Everything is allocated in train_init.
 *
 * Layouts: one process (tp = pp = cp = dp = 1), tensor parallelism over a tp group
 * (model_tp.h, train_tp.h), pipeline parallelism over a pp group (1F1B, pipeline.h,
 * train_pp.h), data parallelism over a dp group (train_dp.h, with or without ZeRO-1), or
 * context parallelism over a cp group (each sequence split over its ranks, model_cp.h;
 * gradients reduced over the dp x cp block), or any product of them. Each dp rank takes
 * global_batch / dp samples per step, reached through K = global_batch / (micro_batch dp)
 * micro-batches; the tp ranks and pipeline stages of one dp rank take the same samples. */
#ifndef BATON_TRAIN_H
#define BATON_TRAIN_H

#include <stdint.h>

#include "backend.h"
#include "loader.h"
#include "model.h"
#include "model_moe.h"
#include "optim.h"
#include "precision.h"
#include "stage_spec.pb-c.h"
#include "train_dp.h"
#include "train_dp_overlap.h"
#include "train_pp.h"
#include "train_scaler.h"
#include "train_spike.h"
#include "train_tp.h"
#include "train_zero.h"
#include "util/err.h"

typedef struct train_metrics {
    uint64_t step; /* optimizer steps taken, after this one */
    double loss;   /* mean over the step's micro-batches */
    double lr;
    double grad_norm;    /* before clipping */
    int skipped;         /* no update was applied this step: the norm was not finite
                          * (fp16: overflow), or a loss spike (spike) */
    int spike;           /* the loss-spike guard skipped this step (train_spike.h) */
    double spike_z;      /* its z-score */
    int rollback;        /* TRAIN_SPIKE_ROLLBACK_AFTER spikes in a row: stop, roll back */
    int overflow;        /* fp16: Inf/NaN gradients on some rank, update skipped */
    int scaled;          /* fp16: loss_scale and overflow hold the scaler's state */
    double loss_scale;   /* fp16: the dynamic loss scale after this step; 0 otherwise */
    uint64_t n_skipped;  /* the stage's skipped steps so far, this one included */
    double tokens_per_s; /* of the whole job */
    double gflops_per_s; /* model FLOPs (6 N T + attention) achieved by this rank */
    double step_s;
    model_moe_step moe; /* MoE: loads, dropped pairs, aux loss (model_moe.h) */
    double mfu;         /* gflops_per_s over the recipe's peak for the precision; 0: none given */
    uint64_t memory_bytes; /* this rank's parameters, gradients, optimizer state, activations
                            * and backward buffers as allocated */
} train_metrics;

/* The groups whose traffic train_step counts: tensor, pipeline, data parallel (the dp x cp
 * block under context parallelism, as `baton plan` names it; the expert-data-parallel
 * group counted with it) and context parallel. */
enum {
    TRAIN_COMM_TP = 0,
    TRAIN_COMM_PP,
    TRAIN_COMM_DP,
    TRAIN_COMM_CP,
    TRAIN_COMM_EP,
    TRAIN_COMM_GROUPS
};

typedef struct train_fp8 {
    prec_fp8_meta meta[BACKEND_FP8_SLOTS]; /* per operand slot of one GEMM */
    float amax_step[BACKEND_FP8_SLOTS];    /* max over this step's micro-batches */
    int routed; /* a routed expert's weight (model_xgemm_info): held by its holders alone */
    int fresh;  /* its state is train_fp8_reset's, not loaded (train_fp8_calibrate's to set) */
} train_fp8;

typedef struct trainer {
    const Baton__StageSpec *spec; /* borrowed */
    backend be;
    int be_opened;      /* be needs backend_close (the CUDA backend) */
    comm *on_stream[8]; /* the groups put on be's stream (comm_set_stream), reset at free */
    model m;
    optim_hparams hp;
    optim_adamw opt;
    optim_segment *segs;
    size_t n_segs;
    loader ld;
    int32_t *tokens, *targets; /* (micro_batch, seq_len) host; under cp the model's input is
                                * their first micro_batch x Tl entries (this rank's rows) */
    train_fp8 *fp8;            /* (model.n_gemm + n_xgemm) when precision is fp8 */
    uint32_t fp8_fresh;        /* expert states the loaded checkpoint lacked: started afresh */
    uint32_t load_files;       /* shard files the last checkpoint load opened */
    float *fp8_history;        /* backing store of every meta's history */
    train_fp8 *fp8_saved;      /* the spike guard's copy of fp8 and fp8_history before an */
    float *fp8_history_saved;  /* armed step's amaxes went in (spike guard on, fp8 only) */
    train_dp dp;
    train_dp_overlap dpo; /* the dp reduction overlapped with the backward (zero 0-2) */
    train_zero zero;      /* ZeRO-2/3 (zero.level 0: not in use; train_dp does zero 0 and 1) */
    train_tp tp;
    train_pp pp;
    double mb_loss; /* the step's loss so far (last stage), for the pipeline callbacks */
    uint32_t B, T, accum;
    uint32_t Tl;          /* rows per sequence on this rank: T / cp (model_cp.h) */
    int dp_rank, dp_size; /* this rank's data-parallel coordinate (the samples it takes) */
    int edp_rank;         /* this rank's place among the holders of its experts (MoE) */
    comm *x_holders;      /* every holder of this rank's routed experts but its tp peers (the
                           * fold's xdp, else edp under ep, else the dp x cp block); NULL: one */
    int x_over_tp;        /* the tp peers hold the same experts (no fold) */
    uint64_t comm_bytes[TRAIN_COMM_GROUPS]; /* sent by train_step on each group, in total */
    uint64_t comm_steps;                    /* the train_step calls they cover */
    uint64_t step, total_steps;
    uint64_t skipped_steps;       /* steps whose update was skipped (non-finite gradients
                                   * or a loss spike); the LR schedule is at step - this */
    train_spike spike;            /* the loss-spike guard */
    train_scaler scaler;          /* fp16 dynamic loss scaling (off otherwise) */
    uint64_t step0, first_sample; /* the stage resumed at step0 with global sample first_sample */
    /* the step whose loss (or fp16 gradients at the smallest scale) was not finite, which
     * train_step failed on with BT_ERANGE; 0: none. Training is deterministic, so an
     * attempt from the same checkpoint meets it again (baton run's retry judges by it). */
    uint64_t nonfinite_step;
    int nonfinite_floor;   /* ... and it was the fp16 gradients at the scale's floor */
    double flops_per_step; /* this rank's share of the model FLOPs of one step */
    int forward_only;      /* train_init_forward's: evaluation only (model.h) */
} trainer;

/* The groups a rank trains in, from the stage's layout (stages/layout.h). Borrowed: they
 * must outlive the trainer. NULL: that degree is 1. */
typedef struct train_groups {
    comm *tp;       /* tensor-parallel group: size the spec's tp */
    comm *dp;       /* data-parallel group: size the spec's dp */
    comm *pp;       /* pipeline group: size the spec's pp, rank = stage */
    comm *cp;       /* context-parallel group: size the spec's cp */
    comm *dpcp;     /* the dp x cp block (every rank with this rank's tp and pp coordinates);
                     * needed when cp > 1: gradients are reduced over it (model_cp.h) */
    comm *ep;       /* expert-parallel group (model_moe.h): size the spec's ep */
    comm *edp;      /* expert-data-parallel group: the ranks that hold the same experts */
    comm *xdp;      /* with train_folds_experts: every holder of a copy of this rank's routed
                     * experts (the edp group drawn from tp x cp x dp, stages/layout.h), the
                     * edp group too when ep > 1; NULL: one holder, or no fold */
    int local_rank; /* this process's rank among those on its node: with cluster.device cuda
                     * it uses device local_rank % (devices on the node) */
} train_groups;

/* Whether the tp ranks fold into spec's experts' parallelism (layout_fold_tp_experts):
 * experts spread over tp x cp x dp, reduced and (ZeRO-1) sharded over xdp. */
int train_folds_experts(const Baton__StageSpec *spec);

/* Builds the model from spec (weights from spec->seed; under tp this rank's slices of the
 * one-process weights), the optimizer and the loader over spec->data. groups may be NULL
 * (one process). Collective over the groups. Returns 0 or a negative BT_ code with diag
 * set. */
int train_init(trainer *t, const Baton__StageSpec *spec, const train_groups *groups, bt_diag *diag);
/* train_init of one process whose model runs forward passes only (model_config
 * forward_only: activation memory linear in seq_len, no backward buffers), for evaluation
 * (train_eval, model_forward); train_step and train_fp8_calibrate must not be called. */
int train_init_forward(trainer *t, const Baton__StageSpec *spec, bt_diag *diag);
void train_free(trainer *t);
/* After a failure on a device backend, before train_free: aborts the groups the trainer
 * made itself (the tp-kv group, ZeRO's dense ep group), so that no collective still
 * queued on them can block the release of streams and memory. */
void train_abort_comms(trainer *t);

/* What this rank has allocated for its model state, in bytes: parameters (ZeRO-3: the
 * shard and two gather buffers), gradients (ZeRO-2: the whole micro-batch buffer, the
 * shard and the padded reduce-scatter buffer; ZeRO-3: the shard and two units' buffers)
 * and the optimizer's moments. Not the weight cache
 * (model.h), which the step's memory line adds. */
void train_state_bytes(const trainer *t, double *params, double *grads, double *optim);

/* One optimizer step. out->rollback set: the spike guard asks for a rollback over
 * t->spike's run of spikes (the step was taken but not applied). */
int train_step(trainer *t, train_metrics *out, bt_diag *diag);

/* The fp8 calibration of a fresh start or a precision hand-off: when the stage runs in fp8
 * and some GEMM's delayed-scaling state was not loaded from the stage's own checkpoint
 * (train_fp8.fresh on any rank: started from scratch, took another stage's weights, or
 * an expert's state the checkpoint lacked), that state is fresh (scale 1, under which
 * the loss gradients of a large global batch are mostly below E5M2's smallest value).
 * Runs forward and backward of the micro-batches of the next step without any update
 * (the gradients and the MoE layers' counts are discarded), reduces every GEMM's amaxes
 * over tp and dp as train_step does and records them in the fresh states' histories (the
 * loaded ones are put back as they were), so that the first step runs with scales from
 * real amaxes. *n_micro gets the number of micro-batches (0: nothing to do); *lo, *hi
 * the smallest and largest scale of this rank's fp8 GEMMs, both 0 when none of its GEMMs
 * runs in fp8 (the head and, with fp8_first_last_bf16, the first and last layers' run in
 * bf16). Collective. */
int train_fp8_calibrate(trainer *t, uint32_t *n_micro, float *lo, float *hi, bt_diag *diag);
/* Every GEMM's delayed-scaling state back to scale 1 and an empty history, fresh. */
void train_fp8_reset(trainer *t);

/* Before a step or a forward outside one (evaluation, after weights were loaded): the
 * GEMMs' cached weight conversions dropped (the weights changed), scales from the
 * delayed-scaling state into the GEMMs, and the GEMMs' running amaxes (model.h: amax_acc,
 * in backend memory) zeroed. */
void train_gemms_begin(trainer *t);

/* Mean next-token loss over the first *n windows of the dataset prefix in file order (no
 * update; loader_get_window: what `baton eval` reads), at
 * most the windows it holds (more would count some twice): *n gets how many were
 * evaluated, 0 when it holds not one (loss 0; not an error: a small validation split). */
int train_eval(trainer *t, const char *prefix, uint32_t *n, double *loss, bt_diag *diag);

#endif
