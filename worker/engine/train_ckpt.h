/* A trainer's state to and from checkpoints (stages/ckpt/ckpt.h).
 *
 * Saved, by the ranks that hold the copy that counts:
 *  - every parameter tensor under its one-process name and global shape, as the box this
 *    rank holds (tp slice), by data-parallel rank 0, replica 0 only;
 *  - AdamW's moments as optim.exp_avg.<name> / optim.exp_avg_sq.<name>: the same boxes
 *    under zero 0; under zero 1 every data-parallel rank its own shard, each tensor's part
 *    of it as a flat range inside the tensor's box;
 *  - the fp8 delayed-scaling state of every GEMM (layers.<l>.gemm<g>.<slot>, head.<slot>,
 *    an MoE layer's experts' layers.<l>.expert<e>.<w13|w2>.<slot> by global expert, by
 *    the first of its holders, and layers.<l>.shared<s>.<w13|w2>.<slot>);
 *  - fp16: the dynamic loss scaler's state (manifest loss_scaler, train_scaler.h);
 *  - the loss-spike guard's window and run of spikes (manifest spike_guard,
 *    train_spike.h), the same on every rank: world rank 0's header carries it;
 *  - in the manifest: recipe, stage, step, data position (global sample index), AdamW's
 *    step count, the model (rope as trained), layout, precision and seed; the training
 *    sources with their token and document counts, and the mixture's sample order.
 * Loading reads the boxes this rank needs under its own layout, whatever layout saved
 * them. A checkpoint of the same recipe and stage resumes it (step, data position,
 * moments, fp8 state, loss scaler, spike guard's window, the mixture order it saved under:
 * bitwise the run that never stopped), unless its sources' counts differ from the files'
 * now (refused, no fall back: BT_EINVAL, the data rewritten under the same names); one of
 * another stage hands over (weights, and the moments unless the stage's optimizer says reset;
 * step 0).
 *
 * Async saves snapshot the state into host memory at the step boundary and write it on a
 * thread while training goes on; a save waits for the one before it. The host copy's
 * buffer (this rank's share of the weights and moments) is kept from the first save to
 * train_ckpt_free, reused by every save. */
#ifndef BATON_TRAIN_CKPT_H
#define BATON_TRAIN_CKPT_H

#include <pthread.h>

#include "ckpt/ckpt.h"
#include "comm.h"
#include "manifest.pb-c.h"
#include "train.h"

typedef struct train_ckpt_piece train_ckpt_piece;

#define TRAIN_CKPT_MAX_SOURCES 16 /* data.mix's limit (recipe validation) */

typedef struct train_ckpt {
    const char *root; /* checkpoint root (RUN_DIR/checkpoints); NULL: saving is off */
    comm *world;      /* NULL for one process */
    int world_rank, world_size;
    uint32_t keep;           /* retention: newest `keep` plus every stage's final one */
    int async;               /* write on a thread */
    double commit_timeout_s; /* how long rank 0 waits for the others' shards */
    /* the save in flight (async) */
    pthread_t thread;
    int busy;
    int status;
    bt_diag diag;
    char name[64];
    train_ckpt_piece *pieces;
    size_t n_pieces;
    float *arena;     /* the host copy (async, or a device's): kept from save to save */
    size_t arena_cap; /* its size in floats */
    Baton__Manifest header;
    uint8_t rng[8];
    Baton__LossScalerState scaler; /* the header's loss_scaler (fp16) */
    Baton__SpikeGuardState spike;  /* the header's spike_guard, its lists in: */
    double spike_loss[TRAIN_SPIKE_WINDOW], spike_norm[TRAIN_SPIKE_WINDOW];
    Baton__DataCounts data[TRAIN_CKPT_MAX_SOURCES], *data_ptr[TRAIN_CKPT_MAX_SOURCES];
    double stall_s;     /* time training stood still for the last save */
    double stall_cpu_s; /* the process's CPU time meanwhile (every thread's) */
    /* rank 0, once a save is committed (the async writer's thread calls it too); NULL: none */
    void (*on_commit)(void *arg, const char *name, uint64_t step);
    void *commit_arg;
} train_ckpt;

/* Saves the trainer's state as checkpoint s<stage>-step<step> under c->root; final marks
 * the stage's last step. Collective over c->world. Waits for an earlier async save. */
int train_ckpt_save(train_ckpt *c, trainer *t, int final, bt_diag *diag);
/* Waits for an async save in flight; its error, if any. */
int train_ckpt_wait(train_ckpt *c, bt_diag *diag);

/* Waits for a save in flight and frees what the saves kept. */
void train_ckpt_free(train_ckpt *c);
/* c->arena of at least floats floats: the one there when it is large enough (its contents
 * kept), else a new one (the old freed; BT_ENOMEM with diag set). Not while a save is in
 * flight (train_ckpt_wait first). */
int train_ckpt_arena(train_ckpt *c, size_t floats, bt_diag *diag);

/* Loads path into the trainer; every rank reads what it needs. path is a checkpoint
 * directory (taken as is) or a run directory / checkpoint root: its newest complete
 * checkpoint, or when a rank refuses that one (damaged, truncated) the newest one every
 * rank can load, each refusal printed; except that in the stage's own run directory
 * (run_dir, where this worker saves: --run-dir or spec->run_dir) it never falls back from
 * a refused checkpoint of this stage to an earlier stage's, whose hand-off would train
 * the stage again from step 0: "no usable checkpoint of this stage" then, and a
 * checkpoint of this stage recorded over other training data than the stage's now is
 * refused (checked on the one about to be loaded); one init or --init names elsewhere is
 * only warned about. Collective over world (NULL: one process). */
int train_ckpt_load(trainer *t, const char *path, const char *run_dir, comm *world, bt_diag *diag);
/* Parameters (and, when t runs fp8, the delayed-scaling state, which m must hold) without
 * optimizer state or position, e.g. for evaluation; m's keys sorted
 * (ckpt_manifest_sort_keys). Then train_gemms_begin before a forward. */
int train_ckpt_load_params(trainer *t, const char *dir, const Baton__Manifest *m, bt_diag *diag);

/* Shared by saving and loading. Tensor mt's global shape and this rank's box of it (a
 * 1-D tensor is one row). */
void train_ckpt_tensor_box(const model_tensor *mt, int *ndim, uint64_t gshape[2], ckpt_box *b);
/* The part of tensor mt inside this rank's optimizer state: its elements [*a, *b), at
 * index *at of the state; 0 when they do not meet (zero 1), 1 otherwise. */
int train_ckpt_moment_part(const trainer *t, const model_tensor *mt, uint64_t *a, uint64_t *b,
                           size_t *at);
/* The name of GEMM g's fp8 state for operand slot (layers.<l>.gemm<i>.<x|w|dy>, head.*). */
void train_ckpt_fp8_name(const trainer *t, int g, int slot, char *out, size_t cap);

#endif
