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

/* The update's all-reduces (made once): adjacent tensors of one group merged, the routed
 * experts' (pack 1) over the edp group, the rest (pack 0) over the dp group. */
static int zero0_runs(train_dp *d, const optim_segment *all, size_t n_all) {
    d->zruns = calloc(n_all ? n_all : 1, sizeof *d->zruns);
    if (d->zruns == NULL) return BT_ENOMEM;
    size_t m = 0;
    for (size_t i = 0, j; i < n_all; i = j) {
        int expert = dp_is_expert(d, all[i].offset);
        size_t len = all[i].n;
        for (j = i + 1; j < n_all && all[j].offset == all[i].offset + len &&
                        dp_is_expert(d, all[j].offset) == expert;
             j++)
            len += all[j].n;
        d->zruns[m++] = (train_dp_piece){.offset = all[i].offset, .n = len, .pack = expert};
    }
    d->n_zruns = m;
    return 0;
}

/* Each tensor's gradient summed over the ranks that hold it (done already when
 * grads_reduced). */
static int dp_reduce_ep(train_dp *d, float *grads, bt_diag *diag) {
    size_t n = d->grads_reduced ? 0 : d->n_zruns;
    d->grads_reduced = 0;
    for (size_t i = 0; i < n; i++) {
        const train_dp_piece *r = &d->zruns[i];
        comm *g = r->pack ? d->edp : d->group;
        float *x = grads + r->offset;
        if (g == NULL || comm_size(g) == 1) continue;
        if (comm_allreduce(g, x, x, r->n, COMM_F32, COMM_SUM, NULL) != 0)
            return ep_fail(g, "gradient all-reduce", diag);
    }
    return 0;
}

/* The norm's sum of squares: the dense tensors of segs (those this rank counts), and
 * every routed expert this rank holds, added over the ep group (each of whose ranks holds
 * other experts: together all of the stage's), kept on tp rank 0 only (under the fold the
 * tp ranks can be ep peers; else they hold the same experts). */
static int dp_sumsq_ep(train_dp *d, const float *grads, const optim_segment *segs, size_t n_segs,
                       double *sumsq, bt_diag *diag) {
    double dense = 0, expert = optim_segments_sumsq_on(d->be, grads, d->expert, d->n_expert);
    for (size_t i = 0; i < n_segs; i++)
        if (!dp_is_expert(d, segs[i].offset))
            dense += optim_segments_sumsq_on(d->be, grads, &segs[i], 1);
    if (d->ep && comm_allreduce(d->ep, &expert, &expert, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return ep_fail(d->ep, "grad-norm all-reduce", diag);
    *sumsq = dense + (d->expert_norm_skip ? 0 : expert);
    return 0;
}

static int dp_update_replicated_ep(train_dp *d, float *params, float *grads,
                                   const optim_segment *segs, size_t n_segs, optim_adamw *o,
                                   const optim_hparams *hp, double lr, double *norm,
                                   bt_diag *diag) {
    int rc = dp_reduce_ep(d, grads, diag);
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
    p->shard_n = train_dp_chunk_len(p->n, p->chunk, (size_t)p->rank);
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

/* The parts as segments of the full buffers (the gradients' sums and their norm stay in
 * place): every one, or those counted. */
static size_t pack_segments(const train_dp *d, int counted_only, optim_segment *out) {
    size_t k = 0;
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        if (r->part_a == r->part_b || (counted_only && !r->counted)) continue;
        out[k++] = (optim_segment){
            .offset = r->offset + r->part_a, .n = r->part_b - r->part_a, .decay = r->decay};
    }
    return k;
}

/* Appends the pieces of a span [packed, packed + n) of pack k at full offset off: split
 * where its group's shards split it, each with the shard's rank as root. */
static size_t pack_span_pieces(const train_dp *d, int k, size_t off, size_t packed, size_t n,
                               train_dp_piece *out) {
    const train_dp_pack *p = &d->packs[k];
    size_t m = 0;
    for (size_t lo = packed, end = packed + n; p->group != NULL && lo < end; m++) {
        int owner;
        size_t hi = train_dp_piece_end(lo, end, p->chunk, &owner);
        if (out != NULL)
            out[m] = (train_dp_piece){
                .offset = off + (lo - packed), .n = hi - lo, .pack = k, .root = owner};
        lo = hi;
    }
    return m;
}

/* The collectives' pieces: runs of adjacent tensors of one pack merged, then split by
 * owner. Counts them with out NULL. */
static size_t pack_pieces(const train_dp *d, train_dp_piece *out) {
    size_t m = 0;
    for (size_t i = 0; i < d->n_runs;) {
        const train_dp_run *r = &d->runs[i];
        size_t j = i + 1, n = r->n;
        while (j < d->n_runs && d->runs[j].pack == r->pack && d->runs[j].offset == r->offset + n &&
               d->runs[j].packed == r->packed + n)
            n += d->runs[j++].n;
        m += pack_span_pieces(d, r->pack, r->offset, r->packed, n, out ? out + m : NULL);
        i = j;
    }
    return m;
}

static int pack_alloc(train_dp *d) {
    free(d->segs);
    d->segs = calloc(d->n_runs ? d->n_runs : 1, sizeof *d->segs);
    d->n_pieces = pack_pieces(d, NULL);
    d->pieces = calloc(d->n_pieces ? d->n_pieces : 1, sizeof *d->pieces);
    if (d->segs == NULL || d->pieces == NULL) return BT_ENOMEM;
    d->n_segs = pack_segments(d, 0, d->segs);
    pack_pieces(d, d->pieces);
    return 0;
}

/* Replaces ZeRO-1's whole-buffer shard by the packs. */
static int pack_init(train_dp *d, const optim_segment *all, size_t n_all, bt_diag *diag) {
    d->chunk = d->shard_begin = d->shard_n = 0;
    d->runs = calloc(n_all ? n_all : 1, sizeof *d->runs);
    if (d->runs != NULL) pack_runs(d, all, n_all);
    if (d->runs == NULL || pack_alloc(d) != 0) {
        bt_diag_set(diag,
                    "out of memory for the ZeRO-1 tables under expert parallelism "
                    "(%zu parameters)",
                    d->n_params);
        return BT_ENOMEM;
    }
    return 0;
}

void train_dp_ep_free(train_dp *d) {
    free(d->zruns);
    free(d->pieces);
    free(d->runs);
    free(d->expert);
}

int train_dp_set_ep(train_dp *d, comm *ep, comm *edp, int fold_tp, const optim_segment *segs,
                    size_t n, const optim_segment *all, size_t n_all, bt_diag *diag) {
    d->ep = ep, d->edp = edp, d->fold_tp = fold_tp;
    d->expert = malloc((n ? n : 1) * sizeof *d->expert);
    if (d->expert == NULL) {
        bt_diag_set(diag, "out of memory for the expert segments");
        return BT_ENOMEM;
    }
    memcpy(d->expert, segs, n * sizeof *segs);
    d->n_expert = n;
    /* ZeRO-1 packs also when only the experts have more than one holder (dp x cp = 1,
     * the tp ranks folded in): the dense pack then lies whole on every rank */
    int experts_shard = d->zero >= 1 && edp != NULL && comm_size(edp) > 1;
    if ((d->sharded || experts_shard) && n > 0) {
        d->sharded = 1;
        return pack_init(d, all, n_all, diag);
    }
    if (zero0_runs(d, all, n_all) != 0) {
        bt_diag_set(diag, "out of memory for the gradient all-reduces (%zu tensors)", n_all);
        return BT_ENOMEM;
    }
    return 0;
}

/* Each run counted as its tensor is (segs: the replicas 0), but with the tp ranks folded
 * in every tp rank counts its own part of the experts' shards. */
int train_dp_ep_set_norm(train_dp *d, const optim_segment *segs, size_t n_segs) {
    for (size_t i = 0; i < d->n_runs; i++) {
        train_dp_run *r = &d->runs[i];
        r->counted = d->fold_tp && r->pack == 1;
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

/* Each piece of buf reduced to (reduce) or broadcast from (else) the rank whose shard
 * holds it, over its pack's group, in place. */
static int pack_collectives(train_dp *d, float *buf, int reduce, bt_diag *diag) {
    for (size_t i = 0; i < d->n_pieces; i++) {
        const train_dp_piece *q = &d->pieces[i];
        comm *g = d->packs[q->pack].group;
        float *x = buf + q->offset;
        int rc = reduce ? comm_reduce(g, x, x, q->n, COMM_F32, COMM_SUM, q->root, NULL)
                        : comm_broadcast(g, x, q->n, COMM_F32, q->root, NULL);
        if (rc != 0) return ep_fail(g, reduce ? "gradient reduce" : "parameter broadcast", diag);
    }
    return 0;
}

/* In place: each part of the rank's shards reduced to it (or already, grads_reduced),
 * updated there, broadcast back. Every shard of both packs is on exactly one rank of the
 * dp group (ep x edp = dp x cp), so the norm's sum of squares adds over it; with the tp
 * ranks folded in, every expert shard on one rank of the dp group and tp group together
 * (the sum goes on over tp, train_dp_norm_add; with dp x cp = 1 over tp alone). */
static int dp_update_sharded_ep(train_dp *d, float *params, float *grads, optim_adamw *o,
                                const optim_hparams *hp, double lr, double *norm, bt_diag *diag) {
    int reduced = d->grads_reduced, rc = 0;
    d->grads_reduced = 0;
    if (!reduced && (rc = pack_collectives(d, grads, 1, diag)) != 0) return rc;
    double sumsq = d->n_norm_groups
                       ? optim_segments_sumsq_on(d->be, grads, d->norm_segs, d->n_norm_segs)
                       : optim_segments_sumsq_on(d->be, grads, d->segs, d->n_segs);
    if (d->size > 1 && comm_allreduce(d->group, &sumsq, &sumsq, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return ep_fail(d->group, "grad-norm all-reduce", diag);
    if ((rc = train_dp_norm_add(d, &sumsq, diag)) != 0) return rc;
    *norm = sqrt(sumsq);
    backend_adamw a;
    if (!optim_adamw_begin(o, &a, hp, lr, *norm)) return 0; /* the weights are left alone */
    for (size_t i = 0; i < d->n_runs; i++) {
        const train_dp_run *r = &d->runs[i];
        optim_segment part = {.offset = r->part_at, .n = r->part_b - r->part_a, .decay = r->decay};
        size_t at = r->offset + r->part_a;
        if (part.n > 0) optim_adamw_seg_at(o, &a, params + at, grads + at, &part);
    }
    return pack_collectives(d, params, 0, diag);
}

int train_dp_update_ep(train_dp *d, float *params, float *grads, const optim_segment *segs,
                       size_t n_segs, optim_adamw *o, const optim_hparams *hp, double lr,
                       double *norm, bt_diag *diag) {
    if (d->runs != NULL) return dp_update_sharded_ep(d, params, grads, o, hp, lr, norm, diag);
    return dp_update_replicated_ep(d, params, grads, segs, n_segs, o, hp, lr, norm, diag);
}
