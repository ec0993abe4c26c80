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

int train_dp_overlap_init(train_dp_overlap *o, train_dp *dp, model *m, int zero, bt_diag *diag) {
    memset(o, 0, sizeof *o);
    o->dp = dp, o->m = m;
    if (zero > 1 || dp->size < 2 || dp->n_expert > 0 || m->grads_mem == NULL) return 0;
    backend *be = dp->be;
    int queues = be->stream_new != NULL && comm_has_streams(dp->group);
    /* BATON_DP_OVERLAP=1: on even without a side queue; automatic: zero 0 and ZeRO-1 where
     * a side queue exists */
    if (!backend_env_switch("BATON_DP_OVERLAP", queues && zero <= 1)) return 0;
    o->n_units = model_n_units(m);
    if (!units_cover(m, o->n_units)) return 0;
    o->done = calloc((size_t)o->n_units, 1);
    if (o->done == NULL) {
        bt_diag_set(diag, "out of memory for the overlapped reduction's %d units", o->n_units);
        return BT_ENOMEM;
    }
    if (queues && (o->stream = backend_side_queue(be, "the gradient reduction", diag)) == NULL) {
        train_dp_overlap_free(o);
        return BT_EIO;
    }
    o->on = 1;
    return 0;
}

void train_dp_overlap_free(train_dp_overlap *o) {
    if (o->stream != NULL) o->dp->be->stream_free(o->dp->be, o->stream);
    if (o->m != NULL && o->m->unit_grads_ctx == o) o->m->unit_grads_done = NULL;
    free(o->done);
    memset(o, 0, sizeof *o);
}

const char *train_dp_overlap_describe(const train_dp_overlap *o) {
    if (o->dp == NULL || o->dp->size < 2) return "";
    if (!o->on)
        return o->dp->flat != NULL
                   ? "data-parallel gradients: one reduce-scatter after the backward"
                   : "data-parallel gradients: one all-reduce after the backward";
    if (o->dp->flat != NULL)
        return o->stream != NULL
                   ? "data-parallel gradients: reduced per layer to the ranks whose shards hold "
                     "them, on a side queue, overlapped with the backward"
                   : "data-parallel gradients: reduced per layer to the ranks whose shards hold "
                     "them during the backward (no side queue: nothing overlaps)";
    return o->stream != NULL ? "data-parallel gradients: all-reduced per layer on a side queue, "
                               "overlapped with the backward"
                             : "data-parallel gradients: all-reduced per layer during the "
                               "backward (no side queue: nothing overlaps)";
}

static void overlap_failed(train_dp_overlap *o, const char *what, int u) {
    comm *c = o->dp->group;
    o->rc = BT_EIO;
    snprintf(o->why, sizeof o->why, "gradient %s of unit %d over %s: %s", what, u, comm_name(c),
             comm_error(c));
}

/* ZeRO-1: the unit's gradients [off, off + n) reduced to the ranks whose shards hold them,
 * one reduce per shard the unit touches (the shard of rank r: [r chunk, (r + 1) chunk)). */
static void overlap_reduce_to_shards(train_dp_overlap *o, int u, size_t off, size_t n) {
    const train_dp *dp = o->dp;
    size_t end = off + n;
    for (size_t lo = off; lo < end && o->rc == 0;) {
        size_t owner = lo / dp->chunk, hi = (owner + 1) * dp->chunk;
        hi = hi < end ? hi : end;
        float *g = o->m->grads_mem + lo;
        if (comm_reduce(dp->group, g, g, hi - lo, COMM_F32, COMM_SUM, (int)owner, o->stream) != 0)
            overlap_failed(o, "reduce", u);
        lo = hi;
    }
}

/* Starts unit u's reduction (once per step). */
static void overlap_reduce(train_dp_overlap *o, int u) {
    if (o->done[u] || o->rc != 0) return;
    o->done[u] = 1;
    size_t off, n;
    model_unit_range(o->m, u, &off, &n);
    if (n == 0) return;
    backend *be = o->dp->be;
    if (o->stream != NULL) be->stream_wait(be, o->stream, NULL);
    if (o->dp->flat != NULL) {
        overlap_reduce_to_shards(o, u, off, n);
        return;
    }
    float *g = o->m->grads_mem + off;
    if (comm_allreduce(o->dp->group, g, g, n, COMM_F32, COMM_SUM, o->stream) != 0)
        overlap_failed(o, "all-reduce", u);
}

static void overlap_unit_done(void *ctx, int u) {
    train_dp_overlap *o = ctx;
    if (u >= 0 && u < o->n_units) overlap_reduce(o, u);
}

void train_dp_overlap_arm(train_dp_overlap *o, int on) {
    if (!o->on) return;
    o->m->unit_grads_done = on ? overlap_unit_done : NULL;
    o->m->unit_grads_ctx = on ? o : NULL;
}

int train_dp_overlap_finish(train_dp_overlap *o, int step_failed, bt_diag *diag) {
    if (!o->on) return 0;
    train_dp_overlap_arm(o, 0);
    if (step_failed && o->rc == 0) o->rc = BT_EIO; /* start nothing more */
    for (int u = 0; u < o->n_units; u++)
        overlap_reduce(o, u);
    backend *be = o->dp->be;
    if (o->stream != NULL) {
        if (comm_wait(o->dp->group, o->stream) != 0 && o->rc == 0) {
            o->rc = BT_EIO;
            snprintf(o->why, sizeof o->why, "gradient reduction over %s: %s",
                     comm_name(o->dp->group), comm_error(o->dp->group));
        }
        be->stream_wait(be, NULL, o->stream);
    }
    memset(o->done, 0, (size_t)o->n_units);
    int rc = o->rc;
    o->rc = 0;
    if (step_failed) return 0;
    if (rc != 0) {
        bt_diag_set(diag, "data-parallel %s (rank %d of %d)", o->why, o->dp->rank, o->dp->size);
        return rc;
    }
    o->dp->grads_reduced = 1;
    return 0;
}
