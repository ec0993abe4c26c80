/* pb_util.c: clone is a faithful deep copy (same packed bytes, no shared memory), and
 * merge overlays a stage onto the defaults the way the recipe semantics say: present
 * scalars replace, sub-messages merge field by field, non-empty repeated fields replace. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "pb_util.h"
#include "recipe.pb-c.h"
#include "util/err.h"

/* A malloc'ed, initialised message of descriptor d (what free_unpacked expects). */
static void *msg_new(const ProtobufCMessageDescriptor *d) {
    ProtobufCMessage *m = malloc(d->sizeof_message);
    protobuf_c_message_init(d, m);
    return m;
}

static void msg_free(void *m) {
    protobuf_c_message_free_unpacked(m, NULL);
}

static char *str_dup(const char *s) {
    char *p = malloc(strlen(s) + 1);
    strcpy(p, s);
    return p;
}

/* Whether a and b pack to the same bytes. */
static int same_packed(const void *a, const void *b) {
    size_t la = protobuf_c_message_get_packed_size(a), lb = protobuf_c_message_get_packed_size(b);
    uint8_t *ba = malloc(la + 1), *bb = malloc(lb + 1);
    protobuf_c_message_pack(a, ba);
    protobuf_c_message_pack(b, bb);
    int same = la == lb && memcmp(ba, bb, la) == 0;
    free(ba);
    free(bb);
    return same;
}

static Baton__DataSource *source_new(const char *path, double weight) {
    Baton__DataSource *s = msg_new(&baton__data_source__descriptor);
    s->path = str_dup(path);
    s->has_weight = 1;
    s->weight = weight;
    return s;
}

static void data_set_mix(Baton__Data *d, size_t n, const char *const *paths) {
    d->mix = calloc(n, sizeof *d->mix);
    d->n_mix = n;
    for (size_t i = 0; i < n; i++)
        d->mix[i] = source_new(paths[i], (double)(i + 1));
}

/* defaults: name d, seq_len 8192, parallel {tp 8, pp 4}, precision bf16, optimizer
 * {lr 3e-4, warmup 2000}, data {train t, mix [a, b]}. */
static Baton__Stage *defaults_new(void) {
    static const char *const mix[] = {"a", "b"};
    Baton__Stage *s = msg_new(&baton__stage__descriptor);
    s->name = str_dup("d");
    s->has_seq_len = 1;
    s->seq_len = 8192;
    s->parallel = msg_new(&baton__parallel__descriptor);
    s->parallel->has_tp = s->parallel->has_pp = 1;
    s->parallel->tp = 8;
    s->parallel->pp = 4;
    s->precision = msg_new(&baton__precision__descriptor);
    s->precision->has_type = 1;
    s->precision->type = BATON__PRECISION__TYPE__BF16;
    s->optimizer = msg_new(&baton__optimizer__descriptor);
    s->optimizer->has_lr = s->optimizer->has_warmup_steps = 1;
    s->optimizer->lr = 3e-4;
    s->optimizer->warmup_steps = 2000;
    s->data = msg_new(&baton__data__descriptor);
    s->data->train = str_dup("t");
    data_set_mix(s->data, 2, mix);
    return s;
}

/* stage: name s, steps 100, parallel {tp 4, cp 2, order "tp-dp"}, precision fp8,
 * rope {theta 5e5}, data {mix [c]}. */
static Baton__Stage *stage_new(void) {
    static const char *const mix[] = {"c"};
    Baton__Stage *s = msg_new(&baton__stage__descriptor);
    s->name = str_dup("s");
    s->has_steps = 1;
    s->steps = 100;
    s->parallel = msg_new(&baton__parallel__descriptor);
    s->parallel->has_tp = s->parallel->has_cp = 1;
    s->parallel->tp = 4;
    s->parallel->cp = 2;
    s->parallel->order = str_dup("tp-dp");
    s->precision = msg_new(&baton__precision__descriptor);
    s->precision->has_type = 1;
    s->precision->type = BATON__PRECISION__TYPE__FP8;
    s->rope = msg_new(&baton__rope__descriptor);
    s->rope->has_theta = 1;
    s->rope->theta = 5e5;
    s->data = msg_new(&baton__data__descriptor);
    data_set_mix(s->data, 1, mix);
    return s;
}

static void test_overlay(void) {
    Baton__Stage *d = defaults_new(), *s = stage_new();
    CHECK(pb_merge(&d->base, &s->base) == 0);
    msg_free(s); /* nothing of s may be shared with d (ASan checks the reads below) */
    CHECK(strcmp(d->name, "s") == 0);
    CHECK(d->has_steps && d->steps == 100);
    CHECK(d->has_seq_len && d->seq_len == 8192);
    CHECK(d->parallel->has_tp && d->parallel->tp == 4);
    CHECK(d->parallel->has_pp && d->parallel->pp == 4);
    CHECK(d->parallel->has_cp && d->parallel->cp == 2);
    CHECK(!d->parallel->has_dp);
    CHECK(strcmp(d->parallel->order, "tp-dp") == 0);
    CHECK(d->precision->type == BATON__PRECISION__TYPE__FP8);
    CHECK(d->optimizer->has_lr && d->optimizer->lr == 3e-4);
    CHECK(d->optimizer->warmup_steps == 2000);
    CHECK(d->rope != NULL && d->rope->has_theta && d->rope->theta == 5e5);
    CHECK(d->rope != NULL && d->rope->scaling == NULL);
    CHECK(strcmp(d->data->train, "t") == 0); /* data merges: train kept, mix replaced */
    CHECK_EQ_U64(d->data->n_mix, 1);
    CHECK(strcmp(d->data->mix[0]->path, "c") == 0 && d->data->mix[0]->weight == 1.0);
    msg_free(d);
}

/* Absent fields and empty repeated fields in src change nothing. */
static void test_absent_keeps(void) {
    Baton__Stage *d = defaults_new(), *ref = defaults_new();
    Baton__Stage *s = msg_new(&baton__stage__descriptor);
    s->parallel = msg_new(&baton__parallel__descriptor); /* present but empty */
    s->data = msg_new(&baton__data__descriptor);         /* n_mix == 0 */
    CHECK(pb_merge(&d->base, &s->base) == 0);
    CHECK(same_packed(d, ref));
    CHECK_EQ_U64(d->data->n_mix, 2);
    /* the default order string is the static default, so it is not "present" */
    CHECK(d->parallel->order == baton__parallel__descriptor.fields[5].default_value);
    msg_free(s);
    msg_free(d);
    msg_free(ref);
}

/* Into an empty dst everything is copied, so the result packs like src. */
static void test_into_empty(void) {
    Baton__Stage *d = msg_new(&baton__stage__descriptor), *s = stage_new();
    CHECK(pb_merge(&d->base, &s->base) == 0);
    CHECK(same_packed(d, s));
    CHECK(d->parallel != s->parallel && d->parallel->order != s->parallel->order);
    CHECK(d->data->mix != s->data->mix && d->data->mix[0] != s->data->mix[0]);
    msg_free(s);
    CHECK(strcmp(d->parallel->order, "tp-dp") == 0);
    msg_free(d);
}

/* A scalar set to its default value explicitly is still present and copied. */
static void test_explicit_default(void) {
    Baton__Parallel *d = msg_new(&baton__parallel__descriptor);
    Baton__Parallel *s = msg_new(&baton__parallel__descriptor);
    d->has_tp = 1;
    d->tp = 8;
    s->has_tp = 1;
    s->tp = 1;
    s->has_sequence_parallel = 1;
    s->sequence_parallel = 0;
    CHECK(pb_merge(&d->base, &s->base) == 0);
    CHECK(d->has_tp && d->tp == 1);
    CHECK(d->has_sequence_parallel && !d->sequence_parallel);
    msg_free(d);
    msg_free(s);
}

static void test_type_mismatch(void) {
    Baton__Stage *d = msg_new(&baton__stage__descriptor);
    Baton__Parallel *s = msg_new(&baton__parallel__descriptor);
    CHECK(pb_merge(&d->base, &s->base) == BT_EINVAL);
    msg_free(d);
    msg_free(s);
}

static void test_clone(void) {
    Baton__Stage *s = defaults_new();
    Baton__Recipe *r = msg_new(&baton__recipe__descriptor);
    r->name = str_dup("r");
    r->n_stages = 2;
    r->stages = calloc(2, sizeof *r->stages);
    r->stages[0] = defaults_new();
    r->stages[1] = stage_new();
    r->defaults = s;
    Baton__Recipe *c = (Baton__Recipe *)pb_clone(&r->base);
    CHECK(c != NULL);
    CHECK(same_packed(c, r));
    CHECK(c->stages != r->stages && c->stages[1] != r->stages[1]);
    CHECK(strcmp(c->stages[1]->parallel->order, "tp-dp") == 0);
    CHECK(c->stages[0]->parallel->order == baton__parallel__descriptor.fields[5].default_value);
    CHECK(c->stages[0]->precision->type == BATON__PRECISION__TYPE__BF16);
    msg_free(r);
    CHECK_EQ_U64(c->n_stages, 2);
    CHECK_EQ_U64(c->stages[0]->data->n_mix, 2);
    CHECK(strcmp(c->stages[0]->data->mix[1]->path, "b") == 0);
    msg_free(c);

    Baton__Recipe *empty = msg_new(&baton__recipe__descriptor);
    Baton__Recipe *ce = (Baton__Recipe *)pb_clone(&empty->base);
    CHECK(ce != NULL && same_packed(ce, empty) && ce->n_stages == 0 && ce->model == NULL);
    msg_free(empty);
    msg_free(ce);
}

int main(void) {
    CHECK(strcmp(baton__parallel__descriptor.fields[5].name, "order") == 0);
    test_overlay();
    test_absent_keeps();
    test_into_empty();
    test_explicit_default();
    test_type_mismatch();
    test_clone();
    return check_status();
}
