#include "train_dp_overlap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_select.h"

/* The units, in order, cover [0, param_floats) without gaps. */
static int units_cover(const model *m, int n) {
    size_t end = 0;
    for (int u = 0; u < n; u++) {
        size_t off, len;
        model_unit_range(m, u, &off, &len);
        if (off != end) return 0;
        end = off + len;
    }
    return end == m->sizes.param_floats;
}

static train_dp_overlap_mode overlap_mode(const train_dp *dp) {
    if (dp->runs != NULL) return OVERLAP_EP_SHARDS;
    if (dp->sharded) return OVERLAP_SHARDS;
    return dp->n_expert > 0 ? OVERLAP_EXPERTS : OVERLAP_ALLREDUCE;
}

/* Whether the reduction has peers: a dp group of two ranks or more, or routed experts
 * held by two or more (with the tp ranks folded in, also where dp x cp = 1). */
static int overlap_has_peers(const train_dp *dp) {
    return dp->size >= 2 || (dp->n_expert > 0 && dp->edp != NULL && comm_size(dp->edp) >= 2);
}

/* Every group the mode reduces over takes a stream. */
static int overlap_queues(const train_dp *dp, train_dp_overlap_mode mode) {
    if (dp->be->stream_new == NULL) return 0;
    if (dp->group != NULL && dp->size >= 2 && !comm_has_streams(dp->group)) return 0;
    int experts = mode == OVERLAP_EXPERTS || mode == OVERLAP_EP_SHARDS;
    return !experts || dp->edp == NULL || comm_has_streams(dp->edp);
}

/* How the gradients are reduced when the overlap is off. */
static void overlap_describe_off(train_dp_overlap *o, int zero) {
    const train_dp *dp = o->dp;
    const char *how = zero >= 2 ? "reduce-scattered per layer as the backward finishes it, "
                                  "every micro-batch (model_zero.h)"
                      : train_dp_sharded(dp) ? "one reduce-scatter after the backward"
                      : dp->n_expert > 0     ? "one all-reduce per tensor after the backward"
                                             : "one all-reduce after the backward";
    snprintf(o->desc, sizeof o->desc, "data-parallel gradients: %s%s", how,
             dp->n_expert > 0
                 ? (dp->fold_tp ? " (the routed experts' over their holders, tp ranks included)"
                                : " (the routed experts' over the "
                                  "expert-data-parallel group)")
                 : "");
}

static void overlap_describe(train_dp_overlap *o) {
    static const char *what[] = {
        [OVERLAP_ALLREDUCE] = "all-reduced per layer",
        [OVERLAP_EXPERTS] = "all-reduced per layer (the routed experts' over the ranks "
                            "that hold them)",
        [OVERLAP_SHARDS] = "reduced per layer to the ranks whose shards hold them",
        [OVERLAP_EP_SHARDS] = "reduced per layer to the ranks whose shards hold them (the "
                              "routed experts' over the ranks that hold them)",
    };
    snprintf(o->desc, sizeof o->desc, "data-parallel gradients: %s%s", what[o->mode],
             o->stream != NULL ? ", on a side queue, overlapped with the backward"
                               : " during the backward (no side queue: nothing overlaps)");
}

int train_dp_overlap_init(train_dp_overlap *o, train_dp *dp, model *m, int zero, bt_diag *diag) {
    memset(o, 0, sizeof *o);
    o->dp = dp, o->m = m;
    overlap_describe_off(o, zero);
    if (zero >= 2 || !overlap_has_peers(dp) || m->grads_mem == NULL) return 0;
    o->mode = overlap_mode(dp);
    int queues = overlap_queues(dp, o->mode);
    /* BATON_DP_OVERLAP=1: on even without a side queue; automatic: where one exists */
    if (!backend_env_switch("BATON_DP_OVERLAP", queues)) return 0;
    o->n_units = model_n_units(m);
    if (!units_cover(m, o->n_units)) return 0;
    o->done = calloc((size_t)o->n_units, 1);
    if (o->done == NULL) {
        bt_diag_set(diag, "out of memory for the overlapped reduction's %d units", o->n_units);
        return BT_ENOMEM;
    }
    if (queues &&
        (o->stream = backend_side_queue(dp->be, "the gradient reduction", diag)) == NULL) {
        train_dp_overlap_free(o);
        return BT_EIO;
    }
    o->on = 1;
    overlap_describe(o);
    return 0;
}

void train_dp_overlap_free(train_dp_overlap *o) {
    if (o->stream != NULL) o->dp->be->stream_free(o->dp->be, o->stream);
    if (o->m != NULL && o->m->unit_grads_ctx == o) o->m->unit_grads_done = NULL;
    free(o->done);
    memset(o, 0, sizeof *o);
}

const char *train_dp_overlap_describe(const train_dp_overlap *o) {
    return o->dp != NULL && overlap_has_peers(o->dp) ? o->desc : "";
}

static void overlap_failed(train_dp_overlap *o, comm *c, const char *what, int u) {
    o->rc = BT_EIO;
    snprintf(o->why, sizeof o->why, "gradient %s of unit %d over %s: %s", what, u, comm_name(c),
             comm_error(c));
}

static void overlap_reduce_to(train_dp_overlap *o, comm *c, int u, float *g, size_t n, int root) {
    if (n > 0 && comm_reduce(c, g, g, n, COMM_F32, COMM_SUM, root, o->stream) != 0)
        overlap_failed(o, c, "reduce", u);
}

static void overlap_allreduce(train_dp_overlap *o, comm *c, int u, float *g, size_t n) {
    if (c == NULL || comm_size(c) < 2 || n == 0 || o->rc != 0) return;
    if (comm_allreduce(c, g, g, n, COMM_F32, COMM_SUM, o->stream) != 0)
        overlap_failed(o, c, "all-reduce", u);
}

/* ZeRO-1: the unit's gradients [off, off + n) reduced to the ranks whose shards hold them,
 * one reduce per shard the unit touches (the shard of rank r: [r chunk, (r + 1) chunk)). */
static void overlap_reduce_to_shards(train_dp_overlap *o, int u, size_t off, size_t n) {
    const train_dp *dp = o->dp;
    size_t end = off + n;
    for (size_t lo = off; lo < end && o->rc == 0;) {
        int owner;
        size_t hi = train_dp_piece_end(lo, end, dp->chunk, &owner);
        overlap_reduce_to(o, dp->group, u, o->m->grads_mem + lo, hi - lo, owner);
        lo = hi;
    }
}

/* ZeRO-1 with experts: each tensor of [off, off + n) reduced, part by part, to the ranks
 * whose shards of its pack hold them (a pack without a group has one holder). */
static void overlap_reduce_to_packs(train_dp_overlap *o, int u, size_t off, size_t n) {
    const train_dp *dp = o->dp;
    for (size_t i = 0; i < dp->n_runs && o->rc == 0; i++) {
        const train_dp_run *r = &dp->runs[i];
        const train_dp_pack *p = &dp->packs[r->pack];
        if (r->offset < off || r->offset >= off + n || p->group == NULL) continue;
        for (size_t lo = r->packed, end = r->packed + r->n; lo < end && o->rc == 0;) {
            int owner;
            size_t hi = train_dp_piece_end(lo, end, p->chunk, &owner);
            overlap_reduce_to(o, p->group, u, o->m->grads_mem + r->offset + (lo - r->packed),
                              hi - lo, owner);
            lo = hi;
        }
    }
}

/* Expert parallelism: [off, off + n) in runs, each routed expert's over the edp group and
 * the rest over the dp group (train_dp's per-tensor choice; experts in offset order). */
static void overlap_reduce_experts(train_dp_overlap *o, int u, size_t off, size_t n) {
    const train_dp *dp = o->dp;
    float *g = o->m->grads_mem;
    size_t at = off, end = off + n;
    for (size_t i = 0; i < dp->n_expert && at < end; i++) {
        size_t lo = dp->expert[i].offset, hi = lo + dp->expert[i].n;
        if (hi <= at || lo >= end) continue;
        lo = lo > at ? lo : at, hi = hi < end ? hi : end;
        overlap_allreduce(o, dp->group, u, g + at, lo - at);
        overlap_allreduce(o, dp->edp, u, g + lo, hi - lo);
        at = hi;
    }
    overlap_allreduce(o, dp->group, u, g + at, end - at);
}

/* Starts unit u's reduction (once per pass). */
static void overlap_reduce(train_dp_overlap *o, int u) {
    if (o->done[u] || o->rc != 0) return;
    o->done[u] = 1;
    size_t off, n;
    model_unit_range(o->m, u, &off, &n);
    if (n == 0) return;
    backend *be = o->dp->be;
    if (o->stream != NULL) be->stream_wait(be, o->stream, NULL);
    switch (o->mode) {
    case OVERLAP_ALLREDUCE:
        overlap_allreduce(o, o->dp->group, u, o->m->grads_mem + off, n);
        break;
    case OVERLAP_EXPERTS:
        overlap_reduce_experts(o, u, off, n);
        break;
    case OVERLAP_SHARDS:
        overlap_reduce_to_shards(o, u, off, n);
        break;
    case OVERLAP_EP_SHARDS:
        overlap_reduce_to_packs(o, u, off, n);
        break;
    }
}

static void overlap_unit_done(void *ctx, int u) {
    train_dp_overlap *o = ctx;
    if (u >= 0 && u < o->n_units) overlap_reduce(o, u);
}

static void overlap_hook(train_dp_overlap *o, int on) {
    o->m->unit_grads_done = on ? overlap_unit_done : NULL;
    o->m->unit_grads_ctx = on ? o : NULL;
}

void train_dp_overlap_arm(train_dp_overlap *o, int last) {
    if (!o->on) return;
    /* Under an interleaved pipeline each chunk's last backward is armed in turn, other
     * micro-batches' backwards between them: the units marked stay marked until
     * train_dp_overlap_finish clears them. */
    overlap_hook(o, last);
}

/* The pass's reductions completed: every unit started, the side queue waited for and
 * the ops' queue ordered after it. 0, or after a failed pass (failed) 0 as well, or the
 * reductions' failure. */
static int overlap_complete(train_dp_overlap *o, int failed, bt_diag *diag) {
    overlap_hook(o, 0);
    if (failed && o->rc == 0) o->rc = BT_EIO; /* start nothing more */
    for (int u = 0; u < o->n_units; u++)
        overlap_reduce(o, u);
    backend *be = o->dp->be;
    if (o->stream != NULL) {
        int experts = o->mode == OVERLAP_EXPERTS || o->mode == OVERLAP_EP_SHARDS;
        comm *groups[2] = {o->dp->size >= 2 ? o->dp->group : NULL, experts ? o->dp->edp : NULL};
        for (int i = 0; i < 2; i++)
            if (groups[i] != NULL && comm_wait(groups[i], o->stream) != 0 && o->rc == 0) {
                o->rc = BT_EIO;
                snprintf(o->why, sizeof o->why, "gradient reduction over %s: %s",
                         comm_name(groups[i]), comm_error(groups[i]));
            }
        be->stream_wait(be, NULL, o->stream);
    }
    memset(o->done, 0, (size_t)o->n_units);
    int rc = o->rc;
    o->rc = 0;
    if (failed) return 0;
    if (rc != 0) {
        bt_diag_set(diag, "%s (data-parallel rank %d of %d)", o->why, o->dp->rank, o->dp->size);
        return rc;
    }
    return 0;
}

int train_dp_overlap_finish(train_dp_overlap *o, int step_failed, bt_diag *diag) {
    if (!o->on) return 0;
    int rc = overlap_complete(o, step_failed, diag);
    if (rc == 0 && !step_failed) o->dp->grads_reduced = 1;
    return rc;
}
