#include "train_dp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int dp_fail(train_dp *d, const char *what, bt_diag *diag) {
    bt_diag_set(diag, "data-parallel %s (rank %d of %d): %s", what, d->rank, d->size,
                comm_error(d->group));
    return BT_EIO;
}

/* The parts of the segments that fall in [begin, begin + n), shard-relative. */
static size_t dp_shard_segments(const optim_segment *segs, size_t n_segs, size_t begin, size_t n,
                                optim_segment *out) {
    size_t k = 0;
    for (size_t s = 0; s < n_segs; s++) {
        size_t lo = segs[s].offset, hi = segs[s].offset + segs[s].n;
        if (hi <= begin || lo >= begin + n) continue;
        lo = lo > begin ? lo : begin;
        hi = hi < begin + n ? hi : begin + n;
        out[k++] = (optim_segment){.offset = lo - begin, .n = hi - lo, .decay = segs[s].decay};
    }
    return k;
}

int train_dp_init(train_dp *d, backend *be, comm *group, int zero, size_t n_params, size_t n_alloc,
                  const optim_segment *segs, size_t n_segs, bt_diag *diag) {
    memset(d, 0, sizeof *d);
    d->be = be, d->group = group, d->zero = zero, d->n_params = n_params;
    d->rank = group ? comm_rank(group) : 0;
    d->size = group ? comm_size(group) : 1;
    if (zero == 0 || d->size == 1) return 0;
    d->chunk = (n_params + (size_t)d->size - 1) / (size_t)d->size;
    d->shard_begin = (size_t)d->rank * d->chunk;
    size_t end = d->shard_begin + d->chunk < n_params ? d->shard_begin + d->chunk : n_params;
    d->shard_n = end > d->shard_begin ? end - d->shard_begin : 0;
    if (n_alloc < d->chunk * (size_t)d->size) {
        bt_diag_set(diag, "ZeRO-1 over %d ranks needs parameter buffers of %zu floats, got %zu",
                    d->size, d->chunk * (size_t)d->size, n_alloc);
        return BT_EINVAL;
    }
    d->sharded = 1;
    d->segs = calloc(n_segs ? n_segs : 1, sizeof *d->segs);
    if (d->segs == NULL) {
        train_dp_free(d);
        bt_diag_set(diag, "out of memory for the ZeRO-1 segments (%zu parameters)", n_params);
        return BT_ENOMEM;
    }
    d->n_segs = dp_shard_segments(segs, n_segs, d->shard_begin, d->shard_n, d->segs);
    return 0;
}

void train_dp_free(train_dp *d) {
    free(d->segs);
    free(d->norm_segs);
    train_dp_ep_free(d);
    memset(d, 0, sizeof *d);
}

int train_dp_set_norm(train_dp *d, comm *const *groups, int n_groups, const optim_segment *segs,
                      size_t n_segs, bt_diag *diag) {
    for (int i = 0; i < n_groups && d->n_norm_groups < 2; i++)
        if (groups[i] != NULL) d->norm_groups[d->n_norm_groups++] = groups[i];
    if (d->n_norm_groups == 0) return 0;
    size_t cap = d->runs != NULL && d->n_runs > n_segs ? d->n_runs : n_segs; /* fold_tp */
    d->norm_segs = calloc(cap ? cap : 1, sizeof *d->norm_segs);
    if (d->norm_segs == NULL) {
        bt_diag_set(diag, "out of memory for the gradient-norm segments");
        return BT_ENOMEM;
    }
    if (d->runs != NULL)
        train_dp_ep_set_norm(d, segs, n_segs);
    else if (d->sharded)
        d->n_norm_segs = dp_shard_segments(segs, n_segs, d->shard_begin, d->shard_n, d->norm_segs);
    else
        memcpy(d->norm_segs, segs, n_segs * sizeof *segs), d->n_norm_segs = n_segs;
    return 0;
}

/* The rank's partial sum of squares (sumsq), added over the norm groups. */
static int dp_norm_over_group(train_dp *d, double *sumsq, bt_diag *diag) {
    for (int i = 0; i < d->n_norm_groups; i++) {
        comm *g = d->norm_groups[i];
        if (comm_allreduce(g, sumsq, sumsq, 1, COMM_F64, COMM_SUM, NULL) != 0) {
            bt_diag_set(diag, "grad-norm all-reduce over %s: %s", comm_name(g), comm_error(g));
            return BT_EIO;
        }
    }
    return 0;
}

int train_dp_norm_add(train_dp *d, double *sumsq, bt_diag *diag) {
    return dp_norm_over_group(d, sumsq, diag);
}

size_t train_dp_optim_floats(const train_dp *d) {
    if (d->runs != NULL) return d->packs[0].chunk + d->packs[1].chunk;
    return d->sharded ? (d->chunk ? d->chunk : 1) : d->n_params;
}

int train_dp_sharded(const train_dp *d) {
    return d->sharded;
}

int train_dp_part(const train_dp *d, size_t off, size_t count, uint64_t *a, uint64_t *b,
                  size_t *at) {
    if (d->runs != NULL) return train_dp_ep_part(d, off, a, b, at);
    if (!d->sharded) { /* zero 0, or one data-parallel rank */
        *a = 0, *b = count, *at = off;
        return 1;
    }
    size_t lo = d->shard_begin, hi = lo + d->shard_n;
    size_t s = off > lo ? off : lo, e = off + count < hi ? off + count : hi;
    if (s >= e) return 0;
    *a = s - off, *b = e - off, *at = s - lo;
    return 1;
}

/* zero 0: every rank holds the summed gradient and updates everything. */
static int dp_update_replicated(train_dp *d, float *params, float *grads, const optim_segment *segs,
                                size_t n_segs, optim_adamw *o, const optim_hparams *hp, double lr,
                                double *norm, bt_diag *diag) {
    if (d->size > 1) {
        int reduced = d->grads_reduced;
        d->grads_reduced = 0;
        if (!reduced &&
            comm_allreduce(d->group, grads, grads, d->n_params, COMM_F32, COMM_SUM, NULL) != 0)
            return dp_fail(d, "gradient all-reduce", diag);
    }
    if (d->n_norm_groups == 0) {
        *norm = optim_adamw_step(o, params, grads, segs, n_segs, hp, lr);
        return 0;
    }
    double sumsq = optim_segments_sumsq_on(d->be, grads, d->norm_segs, d->n_norm_segs);
    int rc = dp_norm_over_group(d, &sumsq, diag);
    if (rc != 0) return rc;
    *norm = sqrt(sumsq);
    optim_adamw_step_norm(o, params, grads, segs, n_segs, hp, lr, *norm);
    return 0;
}

/* zero 1: reduce-scatter, sharded update, all-gather, all in place: the rank's shard is
 * [shard_begin, + chunk) of grads and params, whose buffers hold size * chunk floats (the
 * padding zero). */
static int dp_update_sharded(train_dp *d, float *params, float *grads, optim_adamw *o,
                             const optim_hparams *hp, double lr, double *norm, bt_diag *diag) {
    float *shard = grads + d->shard_begin, *mine = params + d->shard_begin;
    int reduced = d->grads_reduced; /* to the shards during the backward (train_dp_overlap.h) */
    d->grads_reduced = 0;
    if (!reduced &&
        comm_reduce_scatter(d->group, grads, shard, d->chunk, COMM_F32, COMM_SUM, NULL) != 0)
        return dp_fail(d, "gradient reduce-scatter", diag);
    double sumsq = d->n_norm_groups
                       ? optim_segments_sumsq_on(d->be, shard, d->norm_segs, d->n_norm_segs)
                       : optim_segments_sumsq_on(d->be, shard, d->segs, d->n_segs);
    if (comm_allreduce(d->group, &sumsq, &sumsq, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return dp_fail(d, "grad-norm all-reduce", diag);
    if (d->n_norm_groups && dp_norm_over_group(d, &sumsq, diag) != 0) return BT_EIO;
    *norm = sqrt(sumsq);
    optim_adamw_step_norm(o, mine, shard, d->segs, d->n_segs, hp, lr, *norm);
    if (comm_allgather(d->group, mine, params, d->chunk, COMM_F32, NULL) != 0)
        return dp_fail(d, "parameter all-gather", diag);
    return 0;
}

int train_dp_update(train_dp *d, float *params, float *grads, const optim_segment *segs,
                    size_t n_segs, optim_adamw *o, const optim_hparams *hp, double lr, double *norm,
                    bt_diag *diag) {
    if (d->n_expert > 0)
        return train_dp_update_ep(d, params, grads, segs, n_segs, o, hp, lr, norm, diag);
    if (!d->sharded)
        return dp_update_replicated(d, params, grads, segs, n_segs, o, hp, lr, norm, diag);
    return dp_update_sharded(d, params, grads, o, hp, lr, norm, diag);
}

int train_dp_mean(train_dp *d, double *x, bt_diag *diag) {
    if (d->size == 1) return 0;
    if (comm_allreduce(d->group, x, x, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return dp_fail(d, "loss all-reduce", diag);
    *x /= d->size;
    return 0;
}

int train_dp_max(train_dp *d, float *x, size_t n, bt_diag *diag) {
    if (d->size == 1 || n == 0) return 0;
    if (comm_allreduce(d->group, x, x, n, COMM_F32, COMM_MAX, NULL) != 0)
        return dp_fail(d, "fp8 amax all-reduce", diag);
    return 0;
}
