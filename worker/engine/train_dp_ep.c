/* Expert parallelism in the data-parallel update (train_dp.h): the routed experts'
 * gradients reduced over the expert-data-parallel group, and under ZeRO-1 the tensors
 * packed into a dense and an expert part, each sharded over its own group. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_dp.h"

static int ep_fail(comm *g, const char *what, bt_diag *diag) {
    bt_diag_set(diag, "%s over %s: %s", what, comm_name(g), comm_error(g));
    return BT_EIO;
}

static int dp_is_expert(const train_dp *d, size_t offset) {
    for (size_t i = 0; i < d->n_expert; i++)
        if (offset >= d->expert[i].offset && offset < d->expert[i].offset + d->expert[i].n)
            return 1;
    return 0;
}

/* zero 0 -------------------------------------------------------------------------- */

/* Each tensor's gradient summed over the ranks that hold it (the dp group, or for a
 * routed expert the edp group; done already when grads_reduced), all divided by the
 * replicas. */
static int dp_reduce_ep(train_dp *d, float *grads, const optim_segment *segs, size_t n_segs,
                        bt_diag *diag) {
    size_t n = d->grads_reduced ? 0 : n_segs;
    d->grads_reduced = 0;
    for (size_t i = 0; i < n; i++) {
        comm *g = dp_is_expert(d, segs[i].offset) ? d->edp : d->group;
        if (g == NULL || comm_size(g) == 1) continue;
        if (comm_allreduce(g, grads + segs[i].offset, grads + segs[i].offset, segs[i].n, COMM_F32,
                           COMM_SUM, NULL) != 0)
            return ep_fail(g, "gradient all-reduce", diag);
    }
    optim_grad_scale_on(d->be, grads, d->n_params, 1.0f / (float)d->replicas);
    return 0;
}

/* The norm's sum of squares over segs: the experts' part added over the ep group first. */
static int dp_sumsq_ep(train_dp *d, const float *grads, const optim_segment *segs, size_t n_segs,
                       double *sumsq, bt_diag *diag) {
    double dense = 0, expert = 0;
    for (size_t i = 0; i < n_segs; i++) {
        double v = optim_segments_sumsq_on(d->be, grads, &segs[i], 1);
        if (dp_is_expert(d, segs[i].offset))
            expert += v;
        else
            dense += v;
    }
    if (d->ep && comm_allreduce(d->ep, &expert, &expert, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return ep_fail(d->ep, "grad-norm all-reduce", diag);
    *sumsq = dense + expert;
    return 0;
}

static int dp_update_replicated_ep(train_dp *d, float *params, float *grads,
                                   const optim_segment *segs, size_t n_segs, optim_adamw *o,
                                   const optim_hparams *hp, double lr, double *norm,
                                   bt_diag *diag) {
    int rc = dp_reduce_ep(d, grads, segs, n_segs, diag);
    double sumsq = 0;
    if (rc == 0 && d->n_norm_groups)
        rc = dp_sumsq_ep(d, grads, d->norm_segs, d->n_norm_segs, &sumsq, diag);
    else if (rc == 0)
        rc = dp_sumsq_ep(d, grads, segs, n_segs, &sumsq, diag);
    if (rc == 0 && d->n_norm_groups) rc = train_dp_norm_add(d, &sumsq, diag);
    if (rc != 0) return rc;
    *norm = sqrt(sumsq);
    optim_adamw_step_norm(o, params, grads, segs, n_segs, hp, lr, *norm);
    return 0;
}

/* ZeRO-1: the packs ----------------------------------------------------------------- */

static void pack_shape(train_dp_pack *p, comm *g, size_t state) {
    p->group = g != NULL && comm_size(g) > 1 ? g : NULL;
    p->rank = p->group ? comm_rank(g) : 0;
    p->size = p->group ? comm_size(g) : 1;
    p->chunk = (p->n + (size_t)p->size - 1) / (size_t)p->size;
    size_t begin = (size_t)p->rank * p->chunk;
    p->shard_n = begin >= p->n ? 0 : (p->n - begin < p->chunk ? p->n - begin : p->chunk);
    p->state = state;
}

/* Each tensor's place in its pack and its part in this rank's shard. */
static void pack_runs(train_dp *d, const optim_segment *all, size_t n_all) {
    for (size_t i = 0; i < n_all; i++) {
        train_dp_run *r = &d->runs[i];
        r->offset = all[i].offset, r->n = all[i].n, r->decay = all[i].decay, r->counted = 1;
        r->pack = dp_is_expert(d, r->offset);
        r->packed = d->packs[r->pack].n;
        d->packs[r->pack].n += r->n;
    }
    d->n_runs = n_all;
    pack_shape(&d->packs[0], d->group, 0);
    pack_shape(&d->packs[1], d->edp, d->packs[0].chunk);
    for (size_t i = 0; i < n_all; i++) {
        train_dp_run *r = &d->runs[i];
        const train_dp_pack *p = &d->packs[r->pack];
        size_t lo = (size_t)p->rank * p->chunk, hi = lo + p->shard_n;
        size_t s = r->packed > lo ? r->packed : lo;
        size_t e = r->packed + r->n < hi ? r->packed + r->n : hi;
        if (s >= e) continue;
        r->part_a = s - r->packed, r->part_b = e - r->packed, r->part_at = p->state + (s - lo);
    }
}

/* The parts as optimizer segments (state-relative): every one, or those counted. */
static size_t pack_segments(const train_dp *d, int counted_only, optim_segment *out) {
    size_t k = 0;
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        if (r->part_a == r->part_b || (counted_only && !r->counted)) continue;
        out[k++] =
            (optim_segment){.offset = r->part_at, .n = r->part_b - r->part_a, .decay = r->decay};
    }
    return k;
}

static int pack_alloc(train_dp *d) {
    backend *be = d->be;
    for (int k = 0; k < 2; k++) {
        train_dp_pack *p = &d->packs[k];
        p->flat = be->alloc(be, ((size_t)p->size * p->chunk + 1) * sizeof(float));
        if (p->flat == NULL) return BT_ENOMEM;
    }
    d->shard = be->alloc(be, (d->packs[0].chunk + d->packs[1].chunk + 1) * sizeof(float));
    free(d->segs);
    d->segs = calloc(d->n_runs ? d->n_runs : 1, sizeof *d->segs);
    if (d->shard == NULL || d->segs == NULL) return BT_ENOMEM;
    d->n_segs = pack_segments(d, 0, d->segs);
    return 0;
}

/* Replaces ZeRO-1's whole-buffer shard by the packs. */
static int pack_init(train_dp *d, const optim_segment *all, size_t n_all, bt_diag *diag) {
    d->chunk = d->shard_begin = d->shard_n = 0;
    d->runs = calloc(n_all ? n_all : 1, sizeof *d->runs);
    if (d->runs != NULL) pack_runs(d, all, n_all);
    if (d->runs == NULL || pack_alloc(d) != 0) {
        bt_diag_set(diag,
                    "out of memory for the ZeRO-1 buffers under expert parallelism "
                    "(%zu parameters)",
                    d->n_params);
        return BT_ENOMEM;
    }
    return 0;
}

void train_dp_ep_free(train_dp *d) {
    for (int k = 0; k < 2; k++)
        if (d->packs[k].flat != NULL) d->be->free(d->be, d->packs[k].flat);
    if (d->shard != NULL) d->be->free(d->be, d->shard);
    free(d->runs);
    free(d->expert);
}

int train_dp_set_ep(train_dp *d, comm *ep, comm *edp, const optim_segment *segs, size_t n,
                    const optim_segment *all, size_t n_all, bt_diag *diag) {
    d->ep = ep, d->edp = edp;
    d->expert = malloc((n ? n : 1) * sizeof *d->expert);
    if (d->expert == NULL) {
        bt_diag_set(diag, "out of memory for the expert segments");
        return BT_ENOMEM;
    }
    memcpy(d->expert, segs, n * sizeof *segs);
    d->n_expert = n;
    return d->sharded && n > 0 ? pack_init(d, all, n_all, diag) : 0;
}

int train_dp_ep_set_norm(train_dp *d, const optim_segment *segs, size_t n_segs) {
    for (size_t i = 0; i < d->n_runs; i++) {
        train_dp_run *r = &d->runs[i];
        r->counted = 0;
        for (size_t j = 0; j < n_segs && !r->counted; j++)
            r->counted = segs[j].offset == r->offset;
    }
    d->n_norm_segs = pack_segments(d, 1, d->norm_segs);
    return 0;
}

int train_dp_ep_part(const train_dp *d, size_t off, uint64_t *a, uint64_t *b, size_t *at) {
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        if (off < r->offset || off >= r->offset + r->n) continue;
        if (r->part_a == r->part_b) return 0;
        *a = r->part_a, *b = r->part_b, *at = r->part_at;
        return 1;
    }
    return 0;
}

/* ZeRO-1: the update --------------------------------------------------------------- */

/* The gradients packed, each pack reduce-scattered into its part of the shard; or, when
 * the backward reduced each part to its rank already (grads_reduced), the parts copied. */
static int pack_reduce(train_dp *d, const float *grads, bt_diag *diag) {
    backend *be = d->be;
    if (d->grads_reduced) {
        d->grads_reduced = 0;
        be->zero(be, d->shard, d->packs[0].chunk + d->packs[1].chunk);
        for (size_t i = 0; i < d->n_runs; i++) {
            const train_dp_run *r = &d->runs[i];
            be->copy(be, d->shard + r->part_at, grads + r->offset + r->part_a,
                     r->part_b - r->part_a);
        }
        return 0;
    }
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        be->copy(be, d->packs[r->pack].flat + r->packed, grads + r->offset, r->n);
    }
    for (int k = 0; k < 2; k++) {
        train_dp_pack *p = &d->packs[k];
        float *mine = d->shard + p->state;
        be->zero(be, p->flat + p->n, (size_t)p->size * p->chunk - p->n);
        if (p->chunk == 0) continue;
        if (p->group == NULL)
            be->copy(be, mine, p->flat, p->chunk);
        else if (comm_reduce_scatter(p->group, p->flat, mine, p->chunk, COMM_F32, COMM_SUM, NULL))
            return ep_fail(p->group, "gradient reduce-scatter", diag);
    }
    return 0;
}

/* The updated parts gathered from every shard back into the whole parameters. */
static int pack_gather(train_dp *d, float *params, bt_diag *diag) {
    backend *be = d->be;
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        if (r->part_a < r->part_b)
            be->copy(be, d->shard + r->part_at, params + r->offset + r->part_a,
                     r->part_b - r->part_a);
    }
    for (int k = 0; k < 2; k++) {
        train_dp_pack *p = &d->packs[k];
        if (p->chunk == 0) continue;
        if (p->group == NULL)
            be->copy(be, p->flat, d->shard + p->state, p->chunk);
        else if (comm_allgather(p->group, d->shard + p->state, p->flat, p->chunk, COMM_F32, NULL))
            return ep_fail(p->group, "parameter all-gather", diag);
    }
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        be->copy(be, params + r->offset, d->packs[r->pack].flat + r->packed, r->n);
    }
    return 0;
}

/* Every shard of both packs is on exactly one rank of the dp group (ep x edp = dp x cp),
 * so the norm's sum of squares adds over it. */
static int dp_update_sharded_ep(train_dp *d, float *params, const float *grads, optim_adamw *o,
                                const optim_hparams *hp, double lr, double *norm, bt_diag *diag) {
    int rc = pack_reduce(d, grads, diag);
    if (rc != 0) return rc;
    size_t n = d->packs[0].chunk + d->packs[1].chunk;
    optim_grad_scale_on(d->be, d->shard, n, 1.0f / (float)d->replicas);
    double sumsq = d->n_norm_groups
                       ? optim_segments_sumsq_on(d->be, d->shard, d->norm_segs, d->n_norm_segs)
                       : optim_segments_sumsq_on(d->be, d->shard, d->segs, d->n_segs);
    if (comm_allreduce(d->group, &sumsq, &sumsq, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return ep_fail(d->group, "grad-norm all-reduce", diag);
    if ((rc = train_dp_norm_add(d, &sumsq, diag)) != 0) return rc;
    *norm = sqrt(sumsq);
    backend_adamw a;
    if (!optim_adamw_begin(o, &a, hp, lr, *norm)) return 0; /* the weights are left alone */
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        optim_segment part = {.offset = r->part_at, .n = r->part_b - r->part_a, .decay = r->decay};
        if (part.n > 0) optim_adamw_seg_at(o, &a, params + r->offset + r->part_a, d->shard, &part);
    }
    return pack_gather(d, params, diag);
}

int train_dp_update_ep(train_dp *d, float *params, float *grads, const optim_segment *segs,
                       size_t n_segs, optim_adamw *o, const optim_hparams *hp, double lr,
                       double *norm, bt_diag *diag) {
    if (d->runs != NULL) return dp_update_sharded_ep(d, params, grads, o, hp, lr, norm, diag);
    return dp_update_replicated_ep(d, params, grads, segs, n_segs, o, hp, lr, norm, diag);
}
