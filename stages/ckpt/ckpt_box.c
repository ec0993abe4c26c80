#include "ckpt.h"

static uint64_t box_min(uint64_t a, uint64_t b) {
    return a < b ? a : b;
}

static uint64_t box_max(uint64_t a, uint64_t b) {
    return a > b ? a : b;
}

static uint64_t box_all(const ckpt_box *b) {
    return b->shape[0] * b->shape[1];
}

/* The stored flat range of a piece, [lo, hi) of its box's elements. */
static void box_range(const ckpt_box *b, uint64_t *lo, uint64_t *hi) {
    *lo = b->flat_end ? b->flat_begin : 0;
    *hi = b->flat_end ? b->flat_end : box_all(b);
}

uint64_t ckpt_box_count(const ckpt_box *b) {
    uint64_t lo, hi;
    box_range(b, &lo, &hi);
    return hi - lo;
}

/* A run being built: extended while source and destination both continue. */
typedef struct box_pending {
    ckpt_run run;
    int open;
    ckpt_run_fn fn;
    void *ctx;
} box_pending;

static int box_emit(box_pending *p, uint64_t src, uint64_t dst, uint64_t n) {
    if (p->open && p->run.src + p->run.n == src && p->run.dst + p->run.n == dst) {
        p->run.n += n;
        return 0;
    }
    int rc = p->open && p->fn ? p->fn(p->ctx, &p->run) : 0;
    p->run = (ckpt_run){.src = src, .dst = dst, .n = n};
    p->open = 1;
    return rc;
}

/* The overlap on global row r over global columns [c0, c1): box-flat indices in each
 * piece, clipped to both stored ranges. */
static int box_row(const ckpt_box *s, const ckpt_box *d, uint64_t r, uint64_t c0, uint64_t c1,
                   box_pending *p, uint64_t *count) {
    uint64_t slo, shi, dlo, dhi;
    box_range(s, &slo, &shi);
    box_range(d, &dlo, &dhi);
    uint64_t si = (r - s->off[0]) * s->shape[1] + (c0 - s->off[1]);
    uint64_t di = (r - d->off[0]) * d->shape[1] + (c0 - d->off[1]);
    uint64_t n = c1 - c0;
    /* clip [si, si + n) to the source's range and [di, di + n) to the destination's */
    uint64_t skip = box_max(slo > si ? slo - si : 0, dlo > di ? dlo - di : 0);
    if (skip >= n) return 0;
    uint64_t end = box_min(n, box_min(shi > si ? shi - si : 0, dhi > di ? dhi - di : 0));
    if (end <= skip) return 0;
    *count += end - skip;
    return box_emit(p, si + skip - slo, di + skip - dlo, end - skip);
}

/* Rows of a piece that can hold stored elements: [first, last]. */
static void box_rows(const ckpt_box *b, uint64_t *first, uint64_t *end) {
    uint64_t lo, hi;
    box_range(b, &lo, &hi);
    *first = b->off[0] + (b->shape[1] ? lo / b->shape[1] : 0);
    *end = hi == lo ? *first : b->off[0] + (b->shape[1] ? (hi - 1) / b->shape[1] + 1 : 0);
}

int ckpt_box_overlap(const ckpt_box *src, const ckpt_box *dst, ckpt_run_fn fn, void *ctx,
                     uint64_t *count) {
    uint64_t n = 0, sr0, sr1, dr0, dr1;
    box_rows(src, &sr0, &sr1);
    box_rows(dst, &dr0, &dr1);
    uint64_t r0 = box_max(sr0, dr0), r1 = box_min(sr1, dr1);
    uint64_t c0 = box_max(src->off[1], dst->off[1]);
    uint64_t c1 = box_min(src->off[1] + src->shape[1], dst->off[1] + dst->shape[1]);
    box_pending p = {.fn = fn, .ctx = ctx};
    int rc = 0;
    for (uint64_t r = r0; rc == 0 && c0 < c1 && r < r1; r++)
        rc = box_row(src, dst, r, c0, c1, &p, &n);
    if (rc == 0 && p.open && fn) rc = fn(ctx, &p.run);
    if (count) *count = n;
    return rc;
}

int ckpt_box_from_shard(const Baton__TensorEntry *e, const Baton__Shard *s, ckpt_box *out) {
    size_t nd = e->n_global_shape;
    if (nd < 1 || nd > 2 || s->n_offset != nd || s->n_shape != nd) return BT_EINVAL;
    uint64_t g[2] = {1, 1}, o[2] = {0, 0}, sh[2] = {1, 1};
    for (size_t k = 0; k < nd; k++) {
        g[2 - nd + k] = e->global_shape[k];
        o[2 - nd + k] = s->offset[k];
        sh[2 - nd + k] = s->shape[k];
    }
    for (int k = 0; k < 2; k++)
        if (o[k] > g[k] || sh[k] > g[k] - o[k] || (sh[k] != 0 && g[k] > UINT32_MAX))
            return BT_EINVAL;
    *out = (ckpt_box){.off = {o[0], o[1]}, .shape = {sh[0], sh[1]}};
    if (s->has_flat_end && s->flat_end != 0) {
        if (s->flat_begin >= s->flat_end || s->flat_end > sh[0] * sh[1]) return BT_EINVAL;
        out->flat_begin = s->flat_begin, out->flat_end = s->flat_end;
    }
    return 0;
}
