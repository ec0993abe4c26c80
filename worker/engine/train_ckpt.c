#include "train_ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "train_spike.h"
#include "util/clock.h"

struct train_ckpt_piece {
    char key[112];
    int fp8;    /* a delayed-scaling state: data is the history (n floats) */
    int device; /* data is the backend's memory (not host memory): read through to_host */
    int ndim;
    uint64_t gshape[2];
    ckpt_box box;
    const float *data;
    uint64_t n;
    float scale;
    uint32_t pos;
};

static const char *const ckpt_moment[2] = {"optim.exp_avg.", "optim.exp_avg_sq."};

/* Tensor mt's global shape and this rank's box of it (a 1-D tensor is one row). */
void train_ckpt_tensor_box(const model_tensor *mt, int *ndim, uint64_t gshape[2], ckpt_box *b) {
    *ndim = mt->ndim;
    memset(b, 0, sizeof *b);
    if (mt->ndim == 1) {
        gshape[0] = (uint64_t)mt->global_shape[0], gshape[1] = 0;
        b->off[1] = (uint64_t)mt->row0;
        b->shape[0] = 1, b->shape[1] = (uint64_t)mt->shape[0];
    } else {
        gshape[0] = (uint64_t)mt->global_shape[0], gshape[1] = (uint64_t)mt->global_shape[1];
        b->off[0] = (uint64_t)mt->row0, b->off[1] = (uint64_t)mt->col0;
        b->shape[0] = (uint64_t)mt->shape[0], b->shape[1] = (uint64_t)mt->shape[1];
    }
}

/* The part of tensor mt (local offsets [off, off + count)) inside this rank's optimizer
 * state: [*a, *b) of the tensor's elements and the state's index of *a. Returns 0 when
 * they do not meet. Under zero 0 the state covers every tensor. */
int train_ckpt_moment_part(const trainer *t, const model_tensor *mt, uint64_t *a, uint64_t *b,
                           size_t *at) {
    if (t->zero.level) return train_zero_part(&t->zero, mt->offset, mt->count, a, b, at);
    return train_dp_part(&t->dp, mt->offset, mt->count, a, b, at);
}

void train_ckpt_fp8_name(const trainer *t, int g, int slot, char *out, size_t cap) {
    static const char *const name[BACKEND_FP8_SLOTS] = {"x", "w", "dy"};
    if (g >= t->m.n_gemm) { /* an expert's, named by its global index */
        model_xgemm x;
        model_xgemm_info(&t->m, g - t->m.n_gemm, &x);
        snprintf(out, cap, "layers.%d.%s%d.%s.%s", x.layer, x.routed ? "expert" : "shared",
                 x.expert, x.w2 ? "w2" : "w13", name[slot]);
    } else if (g / MODEL_GEMMS_PER_LAYER < t->m.n_layers)
        snprintf(out, cap, "layers.%d.gemm%d.%s",
                 model_stage_layer(&t->m.cfg, g / MODEL_GEMMS_PER_LAYER), g % MODEL_GEMMS_PER_LAYER,
                 name[slot]);
    else
        snprintf(out, cap, "head.%s", name[slot]);
}

static int ckpt_push(train_ckpt *c, const train_ckpt_piece *p) {
    if ((c->n_pieces & (c->n_pieces + 1)) == 0) { /* grow at 0, 1, 3, 7, ... */
        train_ckpt_piece *v = realloc(c->pieces, (c->n_pieces * 2 + 2) * sizeof *v);
        if (v == NULL) return BT_ENOMEM;
        c->pieces = v;
    }
    c->pieces[c->n_pieces++] = *p;
    return 0;
}

/* One writer per tensor (and per fp8 state, its weight's): data-parallel rank 0 of the
 * tensor's replica 0 (model_tensor.replica), or for a routed expert under expert
 * parallelism (held by one rank of each ep group) the first of its holders (its edp rank
 * and, under the fold, its replica are its place among them). Without ep every dp x cp
 * rank holds every expert, as a dense tensor. */
static int ckpt_writes(const trainer *t, int routed_expert, int replica) {
    return (routed_expert && t->m.ep_group != NULL ? t->edp_rank : t->dp.rank) == 0 && replica == 0;
}

static int ckpt_collect_tensor(train_ckpt *c, const trainer *t, const model_tensor *mt) {
    train_ckpt_piece p = {0};
    train_ckpt_tensor_box(mt, &p.ndim, p.gshape, &p.box);
    int rc = 0;
    int writer = ckpt_writes(t, mt->expert, mt->replica);
    int sharded = t->zero.level == 3; /* ZeRO-3: the weights are written as the moments are */
    p.device = !t->be.host_memory;
    if (writer && !sharded) {
        snprintf(p.key, sizeof p.key, "%s", mt->name);
        p.data = mt->data, p.n = mt->count;
        rc = ckpt_push(c, &p);
    }
    uint64_t a, b;
    size_t at;
    int own_shard = train_dp_sharded(&t->dp) || t->zero.level;
    /* ZeRO-2/3 under ep: an MoE layer's dense part is sharded alike on every ep rank */
    if (own_shard && t->zero.level && !train_zero_counts(&t->zero, mt->offset)) return rc;
    if (rc != 0 || (!own_shard && !writer) || !train_ckpt_moment_part(t, mt, &a, &b, &at))
        return rc;
    if (a > 0 || b < mt->count) p.box.flat_begin = a, p.box.flat_end = b;
    p.n = b - a;
    if (sharded) {
        snprintf(p.key, sizeof p.key, "%s", mt->name);
        p.data = t->zero.params + at;
        rc = ckpt_push(c, &p);
    }
    for (int k = 0; rc == 0 && k < 2; k++) {
        snprintf(p.key, sizeof p.key, "%s%s", ckpt_moment[k], mt->name);
        p.data = (k == 0 ? t->opt.m : t->opt.v) + at;
        rc = ckpt_push(c, &p);
    }
    return rc;
}

/* Each GEMM's delayed-scaling state, by the writer of its weight (ckpt_writes: a dense
 * or shared weight's replicas are the tp ranks, a routed expert's under the fold its
 * holders; model.c's replica rule). */
static int ckpt_collect_fp8(train_ckpt *c, const trainer *t) {
    if (t->fp8 == NULL) return 0;
    int tp_rank = t->tp.group ? comm_rank(t->tp.group) : 0;
    int dense = ckpt_writes(t, 0, tp_rank);
    int experts = ckpt_writes(t, 1, t->m.cfg.expert_fold ? t->m.cfg.expert_holder : tp_rank);
    for (int g = 0; g < t->m.n_gemm + t->m.n_xgemm; g++) {
        if (!(t->fp8[g].routed ? experts : dense)) continue;
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++) {
            train_ckpt_piece p = {.fp8 = 1};
            const prec_fp8_meta *meta = &t->fp8[g].meta[k];
            train_ckpt_fp8_name(t, g, k, p.key, sizeof p.key);
            p.data = meta->history, p.n = meta->len, p.scale = meta->scale, p.pos = meta->pos;
            int rc = ckpt_push(c, &p);
            if (rc != 0) return rc;
        }
    }
    return 0;
}

static int ckpt_collect(train_ckpt *c, const trainer *t) {
    c->n_pieces = 0;
    for (int i = 0; i < model_n_tensors(&t->m); i++) {
        model_tensor mt;
        model_tensor_info(&t->m, i, &mt);
        /* a replica's moments: its tp rank's part of the experts' shards (train_dp.h) */
        if (mt.replica != 0 && !(mt.expert && t->dp.fold_tp)) continue;
        int rc = ckpt_collect_tensor(c, t, &mt);
        if (rc != 0) return rc;
    }
    return ckpt_collect_fp8(c, t);
}

/* The training sources with their counts, and the mixture's sample order (manifest.proto). */
static void ckpt_header_data(train_ckpt *c, const trainer *t) {
    Baton__Manifest *h = &c->header;
    loader_source src[TRAIN_CKPT_MAX_SOURCES];
    size_t n = loader_sources_from_data(t->spec->data, src, TRAIN_CKPT_MAX_SOURCES);
    n = n < t->ld.n_src ? n : t->ld.n_src;
    n = n < TRAIN_CKPT_MAX_SOURCES ? n : TRAIN_CKPT_MAX_SOURCES;
    for (size_t i = 0; i < n; i++) {
        const indexed_dataset *ds = &t->ld.src[i].ds;
        Baton__DataCounts *d = &c->data[i];
        baton__data_counts__init(d);
        d->path = (char *)src[i].prefix; /* the spec's: lives as long as the trainer */
        d->has_tokens = 1, d->tokens = ds->n_tokens;
        d->has_documents = 1, d->documents = ds->n_documents;
        /* a mixture's: its interleaving (ckpt_resume.h) */
        if (t->spec->data->n_mix > 0) d->has_weight = 1, d->weight = src[i].weight;
        c->data_ptr[i] = d;
    }
    h->n_data = n, h->data = c->data_ptr;
    h->has_sample_order = 1, h->sample_order = t->ld.cfg.mix_by_slot ? 0 : 1;
}

static void ckpt_header(train_ckpt *c, const trainer *t, int final) {
    const Baton__StageSpec *s = t->spec;
    Baton__Manifest *h = &c->header;
    baton__manifest__init(h);
    h->recipe_name = s->recipe_name;
    h->run_id = s->run_id && s->run_id[0] ? s->run_id : NULL; /* none: no run wrote the spec */
    h->has_stage_index = 1, h->stage_index = s->stage_index;
    h->stage_name = s->stage->name;
    h->has_step = 1, h->step = t->step;
    h->has_data_position = 1;
    h->data_position = t->first_sample + (t->step - t->step0) * s->stage->global_batch;
    h->model = s->model, h->layout = s->stage->parallel, h->precision = s->stage->precision;
    for (int i = 0; i < 8; i++)
        c->rng[i] = (uint8_t)(s->seed >> (8 * i));
    h->has_rng_state = 1, h->rng_state.data = c->rng, h->rng_state.len = 8;
    h->has_wall_time = 1, h->wall_time = (double)time(NULL);
    h->has_optim_step = 1, h->optim_step = t->opt.step;
    h->has_stage_final = 1, h->stage_final = final != 0;
    h->has_block_bytes = 1, h->block_bytes = CKPT_DEFAULT_BLOCK;
    h->has_stage_steps = 1, h->stage_steps = t->total_steps;
    h->has_seq_len = 1, h->seq_len = s->stage->seq_len;
    h->has_skipped_samples = 1;
    h->skipped_samples = train_spike_map_sample(s, h->data_position) - h->data_position;
    h->has_skipped_steps = 1, h->skipped_steps = t->skipped_steps;
    ckpt_header_data(c, t);
    if (t->scaler.on) train_scaler_to_pb(&t->scaler, &c->scaler), h->loss_scaler = &c->scaler;
    if (train_spike_to_pb(&t->spike, &c->spike, c->spike_loss, c->spike_norm))
        h->spike_guard = &c->spike;
}

/* Test hook for fault injection: BATON_FAULT_SAVE_EXIT=RANK:STEP makes world rank RANK
 * die (as by SIGKILL) halfway through writing its shard of step STEP's checkpoint. */
static int ckpt_fault_here(const train_ckpt *c) {
    const char *f = getenv("BATON_FAULT_SAVE_EXIT");
    int rank = -1;
    unsigned long long step = 0;
    char want[64];
    if (f == NULL || sscanf(f, "%d:%llu", &rank, &step) != 2 || rank != c->world_rank) return 0;
    snprintf(want, sizeof want, "-step%08llu", step);
    return strstr(c->name, want) != NULL;
}

/* Test hook: BATON_FAULT_SAVE_ENOSPC=RANK:STEP makes world rank RANK's write of its shard
 * of step STEP's checkpoint fail halfway as on a full disk (ENOSPC), in every attempt, as
 * a disk that stays full would (tests/run/check-run.sh disk-full). */
static int ckpt_fault_full(train_ckpt *c, const char *part, const char *key) {
    const char *f = getenv("BATON_FAULT_SAVE_ENOSPC");
    int rank = -1;
    unsigned long long step = 0;
    char want[64];
    if (f == NULL || sscanf(f, "%d:%llu", &rank, &step) != 2 || rank != c->world_rank) return 0;
    snprintf(want, sizeof want, "-step%08llu", step);
    if (strstr(c->name, want) == NULL) return 0;
    bt_diag_set_errno(&c->diag, ENOSPC, "%s/rank-%05d.bin: cannot write tensor %s: %s", part,
                      c->world_rank, key, strerror(ENOSPC));
    return BT_EIO;
}

/* Test hooks: BATON_FAULT_SAVE_SLEEP=SECONDS makes every rank's write of a checkpoint that
 * long (a slow filesystem), to check that a long save is not taken for a hang;
 * BATON_FAULT_SAVE_WAIT_FILE=PATH makes it last while PATH exists (at most 10 minutes), so
 * that a test acts during a save however loaded the machine is, and ends it by removing
 * PATH. */
static void ckpt_fault_slow(void) {
    const char *f = getenv("BATON_FAULT_SAVE_SLEEP");
    const char *w = getenv("BATON_FAULT_SAVE_WAIT_FILE");
    double s = f ? atof(f) : 0;
    if (s > 0)
        nanosleep(&(struct timespec){(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}, NULL);
    for (int i = 0; w != NULL && w[0] != '\0' && access(w, F_OK) == 0 && i < 12000; i++)
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
}

static int ckpt_write(train_ckpt *c) {
    char part[CKPT_PATH_MAX];
    ckpt_partial_dir(c->root, c->name, part, sizeof part);
    ckpt_writer w;
    int rc = ckpt_writer_open(&w, part, c->world_rank, CKPT_DEFAULT_BLOCK, &c->diag);
    ckpt_fault_slow();
    for (size_t i = 0; rc == 0 && i < c->n_pieces; i++) {
        const train_ckpt_piece *p = &c->pieces[i];
        if (p->fp8)
            rc = ckpt_writer_add_fp8(&w, p->key, p->scale, p->data, (uint32_t)p->n, p->pos,
                                     &c->diag);
        else
            rc = ckpt_writer_add(&w, p->key, p->ndim, p->gshape, &p->box, BATON__DTYPE__F32,
                                 p->data, &c->diag);
        if (i == c->n_pieces / 2 && ckpt_fault_here(c)) _exit(137);
        if (rc == 0 && i == c->n_pieces / 2) rc = ckpt_fault_full(c, part, p->key);
    }
    if (rc != 0) {
        if (w.index) ckpt_writer_abort(&w);
        return rc;
    }
    rc = ckpt_writer_finish(&w, &c->diag);
    if (rc == 0 && c->world_rank == 0)
        rc = ckpt_commit(c->root, c->name, &c->header, (uint32_t)c->world_size, c->commit_timeout_s,
                         c->keep, &c->diag);
    if (rc == 0 && c->world_rank == 0 && c->async) {
        printf("checkpoint %s: committed\n", c->name);
        fflush(stdout);
    }
    /* what a supervisor journals: told over its control channel, not by this line */
    if (rc == 0 && c->world_rank == 0 && c->on_commit)
        c->on_commit(c->commit_arg, c->name, c->header.step);
    return rc;
}

static void *ckpt_thread(void *arg) {
    train_ckpt *c = arg;
    c->status = ckpt_write(c);
    return NULL;
}

/* The host copy's buffer: at least floats floats, kept from save to save. The next save
 * needs as much again, and a fresh buffer costs a page fault per page touched (most of an
 * async save's stall: a 604 MB snapshot took 0.36-0.64 s fresh, 0.06-0.12 s reused). A
 * save in flight still reads it: train_ckpt_save waits for that save before the next
 * snapshot; train_ckpt_free frees it. */
int train_ckpt_arena(train_ckpt *c, size_t floats, bt_diag *diag) {
    if (c->arena != NULL && c->arena_cap >= floats) return 0;
    free(c->arena);
    c->arena = malloc((floats ? floats : 1) * sizeof(float));
    c->arena_cap = c->arena ? floats : 0;
    if (c->arena == NULL) {
        bt_diag_set(diag, "out of memory for the host copy (%zu floats)", floats);
        return BT_ENOMEM;
    }
    return 0;
}

/* Copies every piece's data into one arena (the async snapshot, and the host copy of a
 * device's tensors). */
static int ckpt_snapshot(train_ckpt *c, backend *be) {
    size_t total = 0;
    for (size_t i = 0; i < c->n_pieces; i++)
        total += c->pieces[i].n;
    int rc = train_ckpt_arena(c, total, &c->diag);
    if (rc != 0) return rc;
    float *at = c->arena;
    for (size_t i = 0; i < c->n_pieces; i++) {
        if (c->pieces[i].device)
            be->to_host(be, at, c->pieces[i].data, c->pieces[i].n * sizeof(float));
        else
            memcpy(at, c->pieces[i].data, c->pieces[i].n * sizeof(float));
        c->pieces[i].data = at;
        at += c->pieces[i].n;
    }
    if (be->sync(be) != 0) { /* a failed copy out of device memory: nothing is written */
        bt_diag_set(&c->diag, "copying from %s memory failed: %s", be->name,
                    be->error ? be->error(be) : "(no message)");
        return BT_EIO;
    }
    return 0;
}

void train_ckpt_free(train_ckpt *c) {
    bt_diag d;
    bt_diag_init(&d);
    train_ckpt_wait(c, &d);
    free(c->pieces);
    c->pieces = NULL, c->n_pieces = 0;
    free(c->arena);
    c->arena = NULL, c->arena_cap = 0;
}

int train_ckpt_wait(train_ckpt *c, bt_diag *diag) {
    if (!c->busy) return 0;
    pthread_join(c->thread, NULL);
    c->busy = 0;
    if (c->status != 0) bt_diag_forward(diag, &c->diag, "checkpoint %s", c->name);
    return c->status;
}

/* Rank 0 sets aside an incomplete checkpoint of this name (ckpt_commit would too, but
 * silently) and makes the .partial directory. */
static int ckpt_begin_all(train_ckpt *c, bt_diag *diag) {
    char aside[CKPT_PATH_MAX];
    int rc = c->world_rank == 0
                 ? ckpt_set_aside_incomplete(c->root, c->name, aside, sizeof aside, diag)
                 : 0;
    if (rc == 0 && c->world_rank == 0 && aside[0]) {
        printf("checkpoint %s: %s/%s has no %s (an incomplete checkpoint): set aside as %s\n",
               c->name, c->root, c->name, CKPT_MANIFEST, aside);
        fflush(stdout);
    }
    rc = rc ? rc : c->world_rank == 0 ? ckpt_begin(c->root, c->name, diag) : 0;
    if (c->world && comm_barrier(c->world, NULL) != 0) {
        bt_diag_set(diag, "checkpoint %s: %s", c->name, comm_error(c->world));
        return BT_EIO;
    }
    return rc;
}

int train_ckpt_save(train_ckpt *c, trainer *t, int final, bt_diag *diag) {
    if (c->root == NULL) return 0;
    int rc = train_ckpt_wait(c, diag);
    if (rc != 0) return rc;
    double t0 = bt_clock_now(), cpu0 = bt_clock_cpu();
    ckpt_name(t->spec->stage_index, t->step, c->name, sizeof c->name);
    bt_diag_init(&c->diag);
    rc = ckpt_begin_all(c, diag);
    rc = rc ? rc : ckpt_collect(c, t);
    if (rc != 0) return rc;
    ckpt_header(c, t, final);
    int copy = c->async || !t->be.host_memory;
    if (copy && (rc = ckpt_snapshot(c, &t->be)) != 0)
        bt_diag_forward(diag, &c->diag, "checkpoint %s", c->name);
    else if (copy && c->async) {
        c->status = 0;
        rc = pthread_create(&c->thread, NULL, ckpt_thread, c) == 0 ? 0 : BT_EINTERNAL;
        c->busy = rc == 0;
    } else if (rc == 0) {
        rc = ckpt_write(c); /* a device's host copy, if any, kept for the next save */
        if (rc != 0) bt_diag_forward(diag, &c->diag, "checkpoint %s", c->name);
    }
    c->stall_s = bt_clock_now() - t0;
    c->stall_cpu_s = bt_clock_cpu() - cpu0;
    return rc;
}
