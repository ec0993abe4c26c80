/* ZeRO-2 and ZeRO-3: per-unit shards, their collectives and the sharded update
 * (train_zero.h). */
#include "train_zero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_select.h"
#include "model_sp.h"
#include "model_zero.h"
#include "moe.h"

/* The first of ZeRO's groups with an error (the dp group, edp, the dense all-reduce's). */
static comm *zero_failed_group(const train_zero *z) {
    comm *g[3] = {z->group, z->edp, z->ep_dense};
    for (int i = 0; i < 3; i++)
        if (g[i] != NULL && comm_error(g[i])[0] != '\0') return g[i];
    return z->group;
}

static int zero_fail(train_zero *z, const char *what, bt_diag *diag) {
    comm *g = zero_failed_group(z);
    bt_diag_set(diag, "ZeRO-%d %s (rank %d of %d in %s): %s", z->level, what, comm_rank(g),
                comm_size(g), comm_name(g), comm_error(g));
    return BT_EIO;
}

/* The unit's group (train_zero.h): the dp group, or the expert-data-parallel one. */
static int unit_rank(const train_zero *z, const train_zero_unit *t) {
    return t->edp ? z->erank : z->rank;
}

static size_t unit_size(const train_zero *z, const train_zero_unit *t) {
    return (size_t)(t->edp ? z->esize : z->size);
}

/* Under expert parallelism: the units that hold routed experts, and where. */
static void zero_expert_units(train_zero *z, const model *m) {
    if (z->ep == NULL) return;
    for (int i = 0, n = model_n_tensors(m); i < n; i++) {
        model_tensor mt;
        model_tensor_info(m, i, &mt);
        if (!mt.expert) continue;
        for (int u = 0; u < z->n_units; u++) {
            train_zero_unit *t = &z->units[u];
            if (mt.offset < t->offset || mt.offset >= t->offset + t->n) continue;
            if (!t->edp) t->edp = 1, t->xlo = mt.offset, t->xhi = mt.offset + mt.count;
            t->xlo = mt.offset < t->xlo ? mt.offset : t->xlo;
            t->xhi = mt.offset + mt.count > t->xhi ? mt.offset + mt.count : t->xhi;
        }
    }
}

static void zero_units(train_zero *z, const model *m) {
    size_t base = 0;
    for (int u = 0; u < z->n_units; u++)
        model_unit_range(m, u, &z->units[u].offset, &z->units[u].n);
    zero_expert_units(z, m);
    for (int u = 0; u < z->n_units; u++) {
        train_zero_unit *t = &z->units[u];
        size_t size = unit_size(z, t);
        t->chunk = (t->n + size - 1) / size;
        t->len = train_dp_chunk_len(t->n, t->chunk, (size_t)unit_rank(z, t));
        t->base = base;
        base += t->chunk;
        if (t->chunk * size > z->cap) z->cap = t->chunk * size;
    }
    z->n = base;
}

/* Segment s (a tensor) is the dense part of an expert-data-parallel unit, whose shards
 * every ep rank holds: the norm counts it on ep rank 0 only. */
static int zero_dense_copy(const train_zero *z, const train_zero_unit *t, const optim_segment *s) {
    return t->edp && z->ep_rank != 0 && (s->offset < t->xlo || s->offset >= t->xhi);
}

/* The parts of segs (full-buffer offsets) in this rank's chunks, shard-relative; a tensor
 * lies in one unit, so each segment gives at most one part. norm: leave out what another
 * ep rank counts. */
static size_t zero_map_segments(const train_zero *z, const optim_segment *segs, size_t n,
                                optim_segment *out, int *out_unit, int norm) {
    size_t k = 0;
    for (int u = 0; u < z->n_units; u++) {
        const train_zero_unit *t = &z->units[u];
        size_t lo = t->offset + (size_t)unit_rank(z, t) * t->chunk, hi = lo + t->len;
        for (size_t s = 0; s < n; s++) {
            if (norm && zero_dense_copy(z, t, &segs[s])) continue;
            size_t a = segs[s].offset > lo ? segs[s].offset : lo;
            size_t b = segs[s].offset + segs[s].n < hi ? segs[s].offset + segs[s].n : hi;
            if (a >= b) continue;
            out[k] =
                (optim_segment){.offset = t->base + (a - lo), .n = b - a, .decay = segs[s].decay};
            if (out_unit) out_unit[k] = u;
            k++;
        }
    }
    return k;
}

/* Unit t's chunks all-gathered over its group from `from` (each rank's chunk) into `to`;
 * with a group of one rank, a copy (on the ops' queue: in order, not overlapped). */
static int zero_allgather(train_zero *z, const train_zero_unit *t, const float *from, float *to,
                          void *stream) {
    comm *g = t->edp ? z->edp : z->group;
    if (g == NULL) {
        z->be->copy(z->be, to, from, t->chunk);
        return 0;
    }
    return comm_allgather(g, from, to, t->chunk, COMM_F32, stream);
}

/* ZeRO-3's collectives (model_zero_ops). */
static int zero_gather(void *ctx, int u, float *params, void *stream) {
    train_zero *z = ctx;
    const train_zero_unit *t = &z->units[u];
    return zero_allgather(z, t, z->params + t->base, params, stream);
}

/* The dense part of the rank's chunk mine of an expert-data-parallel unit summed over the
 * ep group (train_zero.h): the chunk less the experts [xlo, xhi). */
static int zero_reduce_dense(train_zero *z, const train_zero_unit *t, float *mine, void *stream) {
    size_t lo = t->offset + (size_t)z->erank * t->chunk, hi = lo + t->len;
    size_t cut[2][2] = {{lo, t->xlo < hi ? t->xlo : hi}, {t->xhi > lo ? t->xhi : lo, hi}};
    for (int i = 0; i < 2; i++) {
        if (cut[i][0] >= cut[i][1]) continue;
        float *p = mine + (cut[i][0] - lo);
        if (comm_allreduce(z->ep_dense, p, p, cut[i][1] - cut[i][0], COMM_F32, COMM_SUM, stream) !=
            0)
            return BT_EIO;
    }
    return 0;
}

/* buf holds the unit's gradients padded with zeros to size * chunk; the rank's chunk of
 * their sum over the group (and, for an expert-data-parallel unit's dense part, over the ep
 * group) is left in its place in buf. */
static int zero_reduce_chunk(void *ctx, int u, float *buf, void *stream) {
    train_zero *z = ctx;
    const train_zero_unit *t = &z->units[u];
    comm *g = t->edp ? z->edp : z->group;
    float *mine = buf + (size_t)unit_rank(z, t) * t->chunk;
    if (g != NULL && comm_reduce_scatter(g, buf, mine, t->chunk, COMM_F32, COMM_SUM, stream) != 0)
        return BT_EIO;
    return t->edp ? zero_reduce_dense(z, t, mine, stream) : 0;
}

/* The rank's chunk of a reduced unit added into the gradient shard. */
static void zero_accumulate(void *ctx, int u, const float *buf) {
    train_zero *z = ctx;
    const train_zero_unit *t = &z->units[u];
    float *acc = z->grads + t->base;
    z->be->add(z->be, acc, acc, buf + (size_t)unit_rank(z, t) * t->chunk, t->chunk);
}

static int zero_wait(void *ctx, void *stream) {
    train_zero *z = ctx;
    comm *g[3] = {z->group, z->edp, z->ep_dense};
    int rc = 0;
    for (int i = 0; i < 3; i++)
        if (g[i] != NULL && comm_wait(g[i], stream) != 0) rc = BT_EIO;
    return rc;
}

static int zero_alloc(train_zero *z, size_t n_segs) {
    z->units = calloc((size_t)z->n_units, sizeof *z->units);
    z->segs = calloc(n_segs ? n_segs : 1, sizeof *z->segs);
    z->seg_unit = calloc(n_segs ? n_segs : 1, sizeof *z->seg_unit);
    return z->units && z->segs && z->seg_unit ? 0 : BT_ENOMEM;
}

int train_zero_set_norm(train_zero *z, const optim_segment *segs, size_t n) {
    if (z->level == 0) return 0;
    free(z->norm_segs);
    z->norm_segs = calloc(n ? n : 1, sizeof *z->norm_segs);
    if (z->norm_segs == NULL) return BT_ENOMEM;
    z->n_norm_segs = zero_map_segments(z, segs, n, z->norm_segs, NULL, 1);
    return 0;
}

static float *zero_alloc_floats(train_zero *z, size_t n) {
    return z->be->alloc(z->be, (n ? n : 1) * sizeof(float));
}

/* model_zero.h's side queues, where the backend has them and the group's collectives
 * take them, unless BATON_DP_OVERLAP is 0; else none. ZeRO-2 uses only the reductions'. */
static int zero_queues(train_zero *z, void **queue, bt_diag *diag) {
    int streams = z->be->stream_new != NULL && comm_has_streams(z->group);
    if (!streams || !backend_env_switch("BATON_DP_OVERLAP", 1)) return 0;
    for (int q = z->level == 2 ? MODEL_ZERO_GATHER_Q + 1 : 0; q < MODEL_ZERO_QUEUES; q++) {
        z->queue[q] = queue[q] = backend_side_queue(z->be, "ZeRO's collectives", diag);
        if (queue[q] == NULL) return BT_EIO;
    }
    return 0;
}

static int zero_buffers(train_zero *z, model *m, bt_diag *diag) {
    z->grads = zero_alloc_floats(z, z->n);
    if (z->level == 3) z->params = zero_alloc_floats(z, z->n);
    if (z->grads == NULL || (z->level == 3 && z->params == NULL)) {
        bt_diag_set(diag, "ZeRO-%d: out of memory for the shards (%zu floats)", z->level, z->n);
        return BT_ENOMEM;
    }
    model_zero_ops ops = {.ctx = z,
                          .gather = zero_gather,
                          .reduce = zero_reduce_chunk,
                          .accumulate = zero_accumulate,
                          .wait = zero_wait};
    int rc = zero_queues(z, ops.queue, diag);
    return rc ? rc : model_zero_init(m, z->cap, &ops, diag);
}

/* The ep group's ranks again, as a communicator of ZeRO's own: the model's all-to-alls use
 * the ep group on the ops' queue while the dense all-reduces run on a side queue, and one
 * NCCL communicator must not take collectives from two queues at once. */
static int zero_split_ep(train_zero *z, comm *ep, bt_diag *diag) {
    int n = comm_size(ep);
    uint32_t *ranks = malloc((size_t)n * sizeof *ranks);
    if (ranks == NULL) return BT_ENOMEM;
    for (int i = 0; i < n; i++)
        ranks[i] = (uint32_t)comm_global_rank(ep, i);
    int rc = comm_split(ep, ranks, (uint32_t)n, "zero-ep", &z->ep_dense);
    free(ranks);
    if (rc == 0) return 0;
    const char *why = comm_error(ep);
    bt_diag_set(diag, "ZeRO-%d: the ep group's split for the dense all-reduces: %s", z->level,
                why[0] ? why : bt_strerror(rc));
    return rc;
}

/* Expert parallelism: the ep group's members must hold the same chunks of an expert-data-
 * parallel unit (the same place in their edp groups), which the all-reduce of its dense
 * part assumes. */
static int zero_set_ep(train_zero *z, comm *ep, comm *edp, bt_diag *diag) {
    z->esize = 1;
    if (ep == NULL) return 0;
    z->ep = ep, z->edp = edp, z->ep_rank = comm_rank(ep);
    z->erank = edp ? comm_rank(edp) : 0, z->esize = edp ? comm_size(edp) : 1;
    int rc = zero_split_ep(z, ep, diag);
    if (rc != 0) return rc;
    double at[2] = {z->erank, -z->erank};
    if (comm_allreduce(ep, at, at, 2, COMM_F64, COMM_MAX, NULL) != 0) {
        bt_diag_set(diag, "ZeRO-%d: layout check over the ep group: %s", z->level, comm_error(ep));
        return BT_EIO;
    }
    if (at[0] != -at[1]) {
        bt_diag_set(diag,
                    "ZeRO-%d: the ep group's members sit at different places (%g to %g) "
                    "of their expert-data-parallel groups",
                    z->level, -at[1], at[0]);
        return BT_EINVAL;
    }
    return 0;
}

/* The segments the norm counts where the tp/pp norm groups do not choose them: all, less
 * (under ep) the dense copies another ep rank counts. */
static int zero_norm_default(train_zero *z, const optim_segment *segs, size_t n) {
    if (z->ep == NULL) return 0;
    return train_zero_set_norm(z, segs, n);
}

int train_zero_init(train_zero *z, int level, comm *group, comm *edp, model *m,
                    const optim_segment *segs, size_t n_segs, bt_diag *diag) {
    memset(z, 0, sizeof *z);
    z->size = group ? comm_size(group) : 1;
    if (level < 2 || z->size == 1) return 0;
    z->level = level, z->be = m->be, z->group = group, z->rank = comm_rank(group);
    z->n_units = model_n_units(m);
    int rc = zero_set_ep(z, m->ep_group, edp, diag);
    if (rc == 0 && zero_alloc(z, n_segs) != 0) {
        bt_diag_set(diag, "ZeRO-%d: out of memory for the unit tables", level);
        rc = BT_ENOMEM;
    }
    if (rc == 0) {
        zero_units(z, m);
        z->n_segs = zero_map_segments(z, segs, n_segs, z->segs, z->seg_unit, 0);
        rc = zero_norm_default(z, segs, n_segs);
    }
    rc = rc ? rc : zero_buffers(z, m, diag);
    if (rc != 0) train_zero_free(z);
    return rc;
}

void train_zero_free(train_zero *z) {
    comm_destroy(z->ep_dense);
    for (int q = 0; q < MODEL_ZERO_QUEUES; q++)
        if (z->queue[q] != NULL) z->be->stream_free(z->be, z->queue[q]);
    free(z->units);
    float *dev[2] = {z->grads, z->params};
    for (int i = 0; i < 2; i++)
        if (dev[i] != NULL) z->be->free(z->be, dev[i]);
    free(z->segs);
    free(z->seg_unit);
    free(z->norm_segs);
    free(z->bias_off);
    memset(z, 0, sizeof *z);
}

static void zero_moe_bias(void *ctx, int l, const moe_stats *st) {
    train_zero *z = ctx;
    uint64_t a, b;
    size_t at;
    size_t E = (size_t)z->moe->n_experts;
    if (z->bias_off[l] == SIZE_MAX || !train_zero_part(z, z->bias_off[l], E, &a, &b, &at)) return;
    float host[MOE_MAX_EXPERTS] = {0};
    z->be->to_host(z->be, host + a, z->params + at, (size_t)(b - a) * sizeof(float));
    moe_bias_update(z->moe, host, st);
    z->be->from_host(z->be, z->params + at, host + a, (size_t)(b - a) * sizeof(float));
}

int train_zero_moe_bias(train_zero *z, model *m) {
    if (z->level != 3 || m->cfg.moe.n_experts == 0 || m->cfg.moe.bias_rate <= 0) return 0;
    z->bias_off = malloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *z->bias_off);
    if (z->bias_off == NULL) return BT_ENOMEM;
    for (int l = 0; l < m->n_layers; l++)
        z->bias_off[l] = SIZE_MAX;
    for (int i = 0, n = model_n_tensors(m); i < n; i++) {
        model_tensor mt;
        int gl, end = 0;
        model_tensor_info(m, i, &mt);
        if (sscanf(mt.name, "model.layers.%d.mlp.gate.e_score_correction_bias%n", &gl, &end) == 1 &&
            end > 0 && mt.name[end] == '\0')
            for (int l = 0; l < m->n_layers; l++)
                if (model_stage_layer(&m->cfg, l) == gl) z->bias_off[l] = mt.offset;
    }
    z->moe = &m->cfg.moe;
    m->moe_bias_step = zero_moe_bias, m->moe_bias_ctx = z;
    return 0;
}

int train_zero_init_weights(train_zero *z, model *m, uint64_t seed) {
    for (int u = 0; u < z->n_units; u++) {
        const train_zero_unit *t = &z->units[u];
        float *whole = model_zero_place(m, u);
        int rc = model_init_weights(m, seed);
        if (rc != 0) return rc;
        z->be->copy(z->be, z->params + t->base, whole + (size_t)unit_rank(z, t) * t->chunk, t->len);
    }
    return 0;
}

void train_zero_begin_step(train_zero *z, model *m) {
    z->be->zero(z->be, z->grads, z->n);
    model_zero_grad(m);
}

int train_zero_after_backward(train_zero *z, model *m, bt_diag *diag) {
    if (z->level == 0) return 0;
    return m->comm_err ? zero_fail(z, "gradient reduce-scatter", diag) : 0;
}

/* Where segment s's parameters are: the shard (ZeRO-3) or the whole buffer (ZeRO-2). */
static float *zero_param_at(const train_zero *z, const model *m, size_t s) {
    if (z->level == 3) return z->params + z->segs[s].offset;
    const train_zero_unit *t = &z->units[z->seg_unit[s]];
    return m->params_mem + t->offset + (size_t)unit_rank(z, t) * t->chunk +
           (z->segs[s].offset - t->base);
}

/* ZeRO-2: every unit's updated chunks gathered back into the whole parameters, through
 * a gradient buffer of the model's (free between passes). */
static int zero_gather_params(train_zero *z, model *m, bt_diag *diag) {
    float *pad = model_zero_spare(m);
    if (pad == NULL) {
        bt_diag_set(diag, "ZeRO-2: a gradient reduction is still pending at the update");
        return BT_EINVAL;
    }
    for (int u = 0; u < z->n_units; u++) {
        const train_zero_unit *t = &z->units[u];
        float *whole = m->params_mem + t->offset;
        size_t at = (size_t)unit_rank(z, t) * t->chunk;
        if (unit_size(z, t) == 1) continue; /* the update wrote the whole unit in place */
        z->be->copy(z->be, pad + at, whole + at, t->len);
        if (zero_allgather(z, t, pad + at, pad, NULL) != 0)
            return zero_fail(z, "parameter all-gather", diag);
        z->be->copy(z->be, whole, pad, t->n);
    }
    return 0;
}

/* Clipping and AdamW over the rank's segments, as optim_adamw_step_norm does. */
static void zero_adamw(train_zero *z, model *m, optim_adamw *o, const optim_hparams *hp, double lr,
                       double norm) {
    backend_adamw a;
    if (!optim_adamw_begin(o, &a, hp, lr, norm)) return;
    for (size_t s = 0; s < z->n_segs; s++) /* the parameters are not where the moments are */
        optim_adamw_seg_at(o, &a, zero_param_at(z, m, s), z->grads + z->segs[s].offset,
                           &z->segs[s]);
}

int train_zero_update(train_zero *z, train_dp *d, model *m, optim_adamw *o, const optim_hparams *hp,
                      double lr, double *norm, bt_diag *diag) {
    double sumsq = z->norm_segs != NULL
                       ? optim_segments_sumsq_on(z->be, z->grads, z->norm_segs, z->n_norm_segs)
                       : optim_segments_sumsq_on(z->be, z->grads, z->segs, z->n_segs);
    if (comm_allreduce(z->group, &sumsq, &sumsq, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return zero_fail(z, "grad-norm all-reduce", diag);
    int rc = train_dp_norm_add(d, &sumsq, diag);
    if (rc != 0) return rc;
    *norm = sqrt(sumsq);
    if (!isfinite(*norm)) return 0; /* the weights are left alone (optim.h) */
    zero_adamw(z, m, o, hp, lr, *norm);
    model_zero_invalidate(m); /* ZeRO-3: the gathered units are out of date */
    return z->level == 2 ? zero_gather_params(z, m, diag) : 0;
}

int train_zero_part(const train_zero *z, size_t off, size_t count, uint64_t *a, uint64_t *b,
                    size_t *at) {
    for (int u = 0; u < z->n_units; u++) {
        const train_zero_unit *t = &z->units[u];
        size_t lo = t->offset + (size_t)unit_rank(z, t) * t->chunk, hi = lo + t->len;
        size_t s = off > lo ? off : lo, e = off + count < hi ? off + count : hi;
        if (s >= e) continue;
        *a = s - off, *b = e - off, *at = t->base + (s - lo);
        return 1;
    }
    return 0;
}

int train_zero_counts(const train_zero *z, size_t off) {
    for (int u = 0; u < z->n_units; u++) {
        const train_zero_unit *t = &z->units[u];
        if (off < t->offset || off >= t->offset + t->n) continue;
        optim_segment s = {.offset = off, .n = 1};
        return !zero_dense_copy(z, t, &s);
    }
    return 1;
}

/* Tensor name ends with suffix. */
static int ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Shard floats [at, end) summed over group (nothing when empty). */
static int zero_reduce_run(train_zero *z, comm *group, size_t at, size_t end, const char *what,
                           bt_diag *diag) {
    float *g = z->grads + at;
    if (end == at || comm_allreduce(group, g, g, end - at, COMM_F32, COMM_SUM, NULL) == 0) return 0;
    bt_diag_set(diag, "ZeRO-%d: the %s gradient all-reduce over %s: %s", z->level, what,
                comm_name(group), comm_error(group));
    return BT_EIO;
}

/* The parts in the shard of the tensors keep() picks summed over group: one all-reduce
 * per run of adjacent parts (an MoE block's tensors follow one another). */
static int zero_reduce_over(train_zero *z, const model *m, comm *group,
                            int (*keep)(const model_tensor *), const char *what, bt_diag *diag) {
    size_t run = 0, end = 0; /* the run so far: shard floats [run, end) */
    for (int i = 0, n = model_n_tensors(m); i < n; i++) {
        model_tensor mt;
        uint64_t a, b;
        size_t at;
        model_tensor_slice(&m->cfg, i, &mt);
        if (!keep(&mt) || !train_zero_part(z, mt.offset, mt.count, &a, &b, &at)) continue;
        if (at != end) {
            if (zero_reduce_run(z, group, run, end, what, diag) != 0) return BT_EIO;
            run = at;
        }
        end = at + (size_t)(b - a);
    }
    return zero_reduce_run(z, group, run, end, what, diag);
}

static int is_kv(const model_tensor *t) {
    return ends_with(t->name, ".k_proj.weight") || ends_with(t->name, ".v_proj.weight");
}

static int is_moe(const model_tensor *t) {
    return t->moe;
}

int train_zero_reduce_tp(train_zero *z, const model *m, comm *kv, bt_diag *diag) {
    if (z->level == 0) return 0;
    if (kv != NULL && zero_reduce_over(z, m, kv, is_kv, "kv heads'", diag) != 0) return BT_EIO;
    if (m->moew != NULL && model_sp_on(m) &&
        zero_reduce_over(z, m, m->tp_group, is_moe, "MoE layers'", diag) != 0)
        return BT_EIO;
    return 0;
}
