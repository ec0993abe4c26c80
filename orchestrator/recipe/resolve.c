#define _DEFAULT_SOURCE /* realpath */
#include "recipe.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pb_util.h"

static void *new_message(const ProtobufCMessageDescriptor *d) {
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    if (m != NULL) d->message_init(m);
    return m;
}

/* Makes sure *slot holds a message of type d (empty, i.e. all defaults, if absent). */
static int ensure_message(void **slot, const ProtobufCMessageDescriptor *d) {
    if (*slot == NULL) *slot = new_message(d);
    return *slot ? 0 : BT_ENOMEM;
}

static int overlay(void **dst, const void *src, const ProtobufCMessageDescriptor *d) {
    if (src == NULL) return 0;
    if (ensure_message(dst, d) != 0) return BT_ENOMEM;
    return pb_merge(*dst, src);
}

void recipe_drop_stale_split(Baton__Parallel *e, const Baton__Parallel *given, uint32_t pp0,
                             uint32_t v0) {
    if (given == NULL || given->n_stage_layers > 0 || e == NULL || e->n_stage_layers == 0) return;
    if (e->pp == pp0 && e->virtual_stages == v0) return;
    free(e->stage_layers);
    e->stage_layers = NULL, e->n_stage_layers = 0;
}

/* A stage that switches precision.type (given) leaves behind the old type's own settings
 * that it does not give again: the loss scaling is fp16's alone (an fp16 stage, then a
 * bf16 one), format, amax_history, margin and first_last_bf16 fp8's (an fp8 stage, then
 * an fp16 one), so they go back to their defaults unless the new type is fp8. */
static void precision_switch(Baton__Precision *p, const Baton__Precision *given) {
    static const Baton__Precision dflt = BATON__PRECISION__INIT;
    if (given == NULL || !given->has_type || p == NULL || p->type == given->type) return;
    if (given->loss_scale == NULL && p->loss_scale != NULL) {
        protobuf_c_message_free_unpacked(&p->loss_scale->base, NULL);
        p->loss_scale = NULL;
    }
    if (given->type == BATON__PRECISION__TYPE__FP8) return;
    if (!given->has_format) p->has_format = 0, p->format = dflt.format;
    if (!given->has_amax_history) p->has_amax_history = 0, p->amax_history = dflt.amax_history;
    if (!given->has_margin) p->has_margin = 0, p->margin = dflt.margin;
    if (!given->has_first_last_bf16)
        p->has_first_last_bf16 = 0, p->first_last_bf16 = dflt.first_last_bf16;
}

/* st (stage k-1's effective settings, or the defaults) becomes stage k's. */
static int effective_next(const Baton__Recipe *r, size_t k, Baton__Stage *st) {
    uint32_t pp0 = st->parallel ? st->parallel->pp : 0;
    uint32_t v0 = st->parallel ? st->parallel->virtual_stages : 0;
    precision_switch(st->precision, r->stages[k]->precision);
    int rc = pb_merge(&st->base, &r->stages[k]->base);
    if (rc == 0) recipe_drop_stale_split(st->parallel, r->stages[k]->parallel, pp0, v0);
    return rc;
}

int recipe_effective_stage(const recipe_doc *doc, size_t i, Baton__Stage **out) {
    const Baton__Recipe *r = doc->recipe;
    Baton__Stage *st = new_message(&baton__stage__descriptor);
    if (st == NULL) return BT_ENOMEM;
    int rc = r->defaults ? pb_merge(&st->base, &r->defaults->base) : 0;
    for (size_t k = 0; rc == 0 && k <= i && k < r->n_stages; k++)
        rc = effective_next(r, k, st);
    if (rc != 0) {
        protobuf_c_message_free_unpacked(&st->base, NULL);
        return rc;
    }
    *out = st;
    return 0;
}

/* Fills every optional sub-message of the stage so workers read defaults directly. */
static int complete_stage(Baton__Stage *st) {
    int rc = 0;
    rc |= ensure_message((void **)&st->parallel, &baton__parallel__descriptor);
    rc |= ensure_message((void **)&st->precision, &baton__precision__descriptor);
    rc |= ensure_message((void **)&st->optimizer, &baton__optimizer__descriptor);
    rc |= ensure_message((void **)&st->checkpoint, &baton__checkpoint_policy__descriptor);
    rc |= ensure_message((void **)&st->restart, &baton__restart_policy__descriptor);
    if (rc == 0 && st->restart->heartbeat_timeout == NULL) {
        rc = ensure_message((void **)&st->restart->heartbeat_timeout, &baton__duration__descriptor);
        if (rc == 0)
            st->restart->heartbeat_timeout->seconds = 300, /* default: 5 minutes */
                st->restart->heartbeat_timeout->has_seconds = 1;
    }
    return rc ? BT_ENOMEM : 0;
}

static int complete_cluster(Baton__Cluster *c) {
    int rc = 0;
    rc |= ensure_message((void **)&c->gpu, &baton__gpu__descriptor);
    rc |= ensure_message((void **)&c->links, &baton__links__descriptor);
    if (rc == 0) {
        rc |= ensure_message((void **)&c->gpu->memory, &baton__byte_size__descriptor);
        rc |= ensure_message((void **)&c->links->intra_node, &baton__bandwidth__descriptor);
        rc |= ensure_message((void **)&c->links->inter_node, &baton__bandwidth__descriptor);
    }
    return rc ? BT_ENOMEM : 0;
}

/* dp = world / (tp pp cp) when the recipe says auto (0). */
static void resolve_dp(Baton__Parallel *p, const Baton__Cluster *c) {
    if (p->dp != 0) return;
    uint64_t world = (uint64_t)c->nodes * c->gpus_per_node;
    uint64_t inner = (uint64_t)p->tp * p->pp * p->cp;
    p->dp = inner ? (uint32_t)(world / inner) : 0;
    p->has_dp = 1;
}

static int resolve_model(const recipe_doc *doc, size_t i, Baton__Model *m) {
    const Baton__Recipe *r = doc->recipe;
    if (m->n_kv_heads == 0) {
        m->n_kv_heads = m->n_heads;
        m->has_n_kv_heads = 1;
    }
    int rc = ensure_message((void **)&m->rope, &baton__rope__descriptor);
    if (rc == 0 && r->defaults != NULL)
        rc = overlay((void **)&m->rope, r->defaults->rope, &baton__rope__descriptor);
    for (size_t k = 0; rc == 0 && k <= i; k++)
        rc = overlay((void **)&m->rope, r->stages[k]->rope, &baton__rope__descriptor);
    if (rc == 0) rc = ensure_message((void **)&m->rope->scaling, &baton__rope_scaling__descriptor);
    return rc;
}

/* The keys that are actions at a stage rather than settings: a stage's own value, else
 * the defaults', never an earlier stage's (a reset asked of stage 2 is not one of stage 3). */
static int stage_data_from_start(const Baton__Recipe *r, size_t i) {
    const Baton__Stage *own = r->stages[i], *def = r->defaults;
    if (own->has_data_from_start) return own->data_from_start;
    return def && def->has_data_from_start && def->data_from_start;
}

int recipe_stage_reset(const Baton__Recipe *r, size_t i) {
    const Baton__Optimizer *own = r->stages[i]->optimizer;
    const Baton__Optimizer *def = r->defaults ? r->defaults->optimizer : NULL;
    if (own && own->has_reset) return own->reset;
    return def && def->has_reset && def->reset;
}

/* Stage i's data block: the last one given up to it replaces the recipe's. */
static const Baton__Data *stage_data(const Baton__Recipe *r, size_t i) {
    const Baton__Data *data = r->data;
    for (size_t k = 0; k <= i && k < r->n_stages; k++)
        if (r->stages[k]->data != NULL) data = r->stages[k]->data;
    return data;
}

/* Source k of d's training data (a train path is one source) and its share of the mix. */
static size_t data_sources(const Baton__Data *d) {
    return d == NULL ? 0 : d->n_mix > 0 ? d->n_mix : d->train != NULL;
}

static const char *data_source(const Baton__Data *d, size_t k, double *share) {
    if (d->n_mix == 0) return *share = 1, d->train;
    double sum = 0;
    for (size_t j = 0; j < d->n_mix; j++)
        sum += d->mix[j]->weight;
    *share = sum > 0 ? d->mix[k]->weight / sum : 0;
    return d->mix[k]->path;
}

/* A prefix's directory resolved (realpath: ./, .., links) and its last component, or
 * the prefix as written when the directory does not resolve. */
static void prefix_canon(const char *p, char *out, size_t cap) {
    char dir[4096], real[PATH_MAX];
    const char *slash = strrchr(p, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - p) : 1, slash ? p : ".");
    if (slash == p) snprintf(dir, sizeof dir, "/");
    if (realpath(dir, real) != NULL)
        snprintf(out, cap, "%s/%s", real, slash ? slash + 1 : p);
    else
        snprintf(out, cap, "%s", p);
}

/* Whether two dataset prefixes name the same files: the same PREFIX.bin (device and
 * inode) where both exist, else the same resolved path (prefix_canon). */
static int same_prefix(const char *a, const char *b) {
    if (a == NULL || b == NULL) return a == b;
    char pa[4200], pb[4200];
    struct stat sa, sb;
    snprintf(pa, sizeof pa, "%s.bin", a), snprintf(pb, sizeof pb, "%s.bin", b);
    if (stat(pa, &sa) == 0 && stat(pb, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    prefix_canon(a, pa, sizeof pa), prefix_canon(b, pb, sizeof pb);
    return strcmp(pa, pb) == 0;
}

/* Whether stages a and b train on the same samples (given the same seq_len): the same
 * sources in the same order with the same shares, however spelled (./x or an absolute
 * path, a one-source mix or train); the validation set aside. */
static int same_samples(const Baton__Data *a, const Baton__Data *b) {
    if (a == b) return 1;
    size_t n = data_sources(a);
    if (n == 0 || n != data_sources(b)) return 0;
    for (size_t k = 0; k < n; k++) {
        double sa, sb;
        const char *pa = data_source(a, k, &sa), *pb = data_source(b, k, &sb);
        if (fabs(sa - sb) > 1e-12 || !same_prefix(pa, pb)) return 0;
    }
    return 1;
}

/* Where stage k (< i) ended: as recorded (ended), else its start at + steps x
 * global_batch + extra, saturated at UINT64_MAX rather than wrapped round to an earlier
 * stage's samples (a validated recipe's stages stay below 2^63 tokens: check_tokens). */
static uint64_t stage_data_end(const Baton__Stage *eff, size_t k, uint64_t at,
                               const uint64_t *extra, const uint64_t *ended) {
    if (ended && ended[k] != RECIPE_END_UNKNOWN) return ended[k];
    uint64_t n, end;
    if (__builtin_mul_overflow(eff->steps, eff->global_batch, &n) ||
        __builtin_add_overflow(at, n, &end) ||
        __builtin_add_overflow(end, extra ? extra[k] : 0, &end))
        return UINT64_MAX;
    return end;
}

/* (recipe.h) Each stage's position follows from those before it: it ends where its run
 * recorded (ended), else at its start + steps x global_batch + extra; the same data's
 * next stage starts at the furthest end. data_from_start is the stage's own or the
 * defaults' (stage_data_from_start). */
int recipe_data_start(const recipe_doc *doc, size_t i, const uint64_t *extra, const uint64_t *ended,
                      uint64_t *start) {
    const Baton__Recipe *r = doc->recipe;
    uint64_t *end = calloc(i + 1, sizeof *end), *len = calloc(i + 1, sizeof *len);
    const Baton__Data **dat = calloc(i + 1, sizeof *dat);
    Baton__Stage *eff = new_message(&baton__stage__descriptor);
    int rc = end && len && dat && eff ? 0 : BT_ENOMEM;
    if (rc == 0 && r->defaults) rc = pb_merge(&eff->base, &r->defaults->base);
    for (size_t k = 0; rc == 0 && k <= i; k++) {
        rc = effective_next(r, k, eff);
        if (rc != 0) break;
        uint64_t at = 0;
        len[k] = eff->seq_len, dat[k] = stage_data(r, k);
        for (size_t j = 0; j < k && !stage_data_from_start(r, k); j++)
            if (len[j] == len[k] && same_samples(dat[j], dat[k])) at = end[j] > at ? end[j] : at;
        end[k] = k < i ? stage_data_end(eff, k, at, extra, ended) : at;
    }
    if (rc == 0) *start = end[i];
    if (eff) protobuf_c_message_free_unpacked(&eff->base, NULL);
    free(end), free(len), free(dat);
    return rc;
}

static int build_spec(const recipe_doc *doc, size_t i, Baton__Stage *st, Baton__StageSpec *s) {
    const Baton__Recipe *r = doc->recipe;
    s->recipe_name = strdup(r->name ? r->name : "");
    s->stage_index = (uint32_t)i, s->has_stage_index = 1;
    s->n_stages = (uint32_t)r->n_stages, s->has_n_stages = 1;
    s->seed = r->seed, s->has_seed = 1;
    s->model = (Baton__Model *)pb_clone(&r->model->base);
    s->cluster = r->cluster ? (Baton__Cluster *)pb_clone(&r->cluster->base)
                            : new_message(&baton__cluster__descriptor);
    if (s->recipe_name == NULL || s->model == NULL || s->cluster == NULL) return BT_ENOMEM;
    int rc = complete_stage(st);
    rc = rc ? rc : complete_cluster(s->cluster);
    rc = rc ? rc : resolve_model(doc, i, s->model);
    const Baton__Data *data = stage_data(r, i);
    rc = rc ? rc : recipe_data_start(doc, i, NULL, NULL, &s->start_sample);
    s->has_start_sample = 1;
    if (rc == 0 && data != NULL && (s->data = (Baton__Data *)pb_clone(&data->base)) == NULL)
        rc = BT_ENOMEM;
    if (rc == 0) rc = ensure_message((void **)&s->data, &baton__data__descriptor);
    if (rc != 0) return rc;
    st->data_from_start = stage_data_from_start(r, i), st->has_data_from_start = 1;
    st->optimizer->reset = recipe_stage_reset(r, i), st->optimizer->has_reset = 1;
    resolve_dp(st->parallel, s->cluster);
    return 0;
}

int recipe_resolve_stage(const recipe_doc *doc, size_t i, Baton__StageSpec **out, bt_diag *diag) {
    const Baton__Recipe *r = doc->recipe;
    if (r == NULL || r->model == NULL || i >= r->n_stages) {
        bt_diag_set(diag, "%s: no stage %zu to resolve", doc->file, i);
        return BT_EINVAL;
    }
    Baton__StageSpec *s = new_message(&baton__stage_spec__descriptor);
    Baton__Stage *st = NULL;
    int rc = s ? recipe_effective_stage(doc, i, &st) : BT_ENOMEM;
    if (rc == 0) {
        s->stage = st;
        rc = build_spec(doc, i, st, s);
    }
    if (rc != 0) {
        if (s != NULL) protobuf_c_message_free_unpacked(&s->base, NULL);
        bt_diag_set(diag, "%s: resolving stage %zu: %s", doc->file, i, bt_strerror(rc));
        return rc;
    }
    *out = s;
    return 0;
}

/* (recipe.h) The values build_spec and complete_stage fill in where the recipe says
 * nothing: the seed, n_kv_heads (n_heads), restart.heartbeat_timeout (300 s), the
 * actions optimizer.reset and data_from_start (false); and fp16's loss scaling, which the
 * worker reads with its defaults when the recipe gives no loss_scale block. */
void recipe_spec_mark_defaults(const recipe_doc *doc, size_t i, Baton__StageSpec *s) {
    const Baton__Recipe *r = doc->recipe;
    const Baton__Stage *own = r->stages[i], *def = r->defaults;
    const Baton__Optimizer *oo = own->optimizer, *od = def ? def->optimizer : NULL;
    if (!r->has_seed) s->has_seed = 0;
    if (!r->model->has_n_kv_heads && s->model != NULL) s->model->has_n_kv_heads = 0;
    Baton__Stage *st = s->stage, *eff = NULL;
    if (st == NULL) return;
    if (!own->has_data_from_start && !(def && def->has_data_from_start))
        st->has_data_from_start = 0;
    if (st->optimizer && !(oo && oo->has_reset) && !(od && od->has_reset))
        st->optimizer->has_reset = 0;
    Baton__Precision *pr = st->precision; /* fp16 reads its loss scaling's defaults */
    if (pr && pr->type == BATON__PRECISION__TYPE__FP16 && pr->loss_scale == NULL)
        ensure_message((void **)&pr->loss_scale, &baton__loss_scale__descriptor);
    Baton__Duration *hb = st->restart ? st->restart->heartbeat_timeout : NULL;
    if (hb == NULL || recipe_effective_stage(doc, i, &eff) != 0) return;
    if (eff->restart == NULL || eff->restart->heartbeat_timeout == NULL) hb->has_seconds = 0;
    protobuf_c_message_free_unpacked(&eff->base, NULL);
}
