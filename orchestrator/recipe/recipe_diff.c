/* Two loaded recipes compared through their descriptors (recipe_diff.h). */
#include "recipe_diff.h"

#include <stdlib.h>
#include <string.h>

#include "pb_dump.h"
#include "pb_util.h"

typedef struct diff_ctx {
    const recipe_doc *now;
    bt_buf *out;
    size_t n, max;
} diff_ctx;

static const void *diff_at(const ProtobufCMessage *m, unsigned offset) {
    return (const char *)m + offset;
}

/* One difference at path: "FILE:LINE: PATH: WHAT". */
static void diff_note(diff_ctx *d, const char *path, const char *what) {
    if (d->n++ >= d->max) return;
    int line = 0, col = 0;
    bt_buf_printf(d->out, "%s", d->n > 1 ? "; " : "");
    if (recipe_doc_where(d->now, path, &line, &col) == 0 && line > 0)
        bt_buf_printf(d->out, "%s:%d: ", d->now->file, line);
    bt_buf_printf(d->out, "%s: %s", path, what);
}

/* A singular scalar as the recipe would give it, or "not set". */
static void diff_scalar(bt_buf *b, const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    if (pb_has_field(m, f))
        pb_dump_scalar(b, f, diff_at(m, f->offset));
    else
        bt_buf_printf(b, "not set");
}

static int diff_same_elem(const ProtobufCFieldDescriptor *f, const void *a, const void *b) {
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        const char *x = *(const char *const *)a, *y = *(const char *const *)b;
        return strcmp(x ? x : "", y ? y : "") == 0;
    }
    if (f->type == PROTOBUF_C_TYPE_BYTES) {
        const ProtobufCBinaryData *x = a, *y = b;
        return x->len == y->len && (x->len == 0 || memcmp(x->data, y->data, x->len) == 0);
    }
    return memcmp(a, b, pb_elem_size(f->type)) == 0;
}

static void diff_pair(diff_ctx *d, const char *path, const bt_buf *was, const bt_buf *now) {
    bt_buf what;
    bt_buf_init(&what);
    bt_buf_printf(&what, "%s in the run's recipe, %s here", bt_buf_str(was), bt_buf_str(now));
    diff_note(d, path, bt_buf_str(&what));
    bt_buf_free(&what);
}

static void diff_singular(diff_ctx *d, const ProtobufCMessage *a, const ProtobufCMessage *b,
                          const ProtobufCFieldDescriptor *f, const char *path) {
    int ha = pb_has_field(a, f), hb = pb_has_field(b, f);
    if (ha == hb && (!ha || diff_same_elem(f, diff_at(a, f->offset), diff_at(b, f->offset))))
        return;
    bt_buf x, y;
    bt_buf_init(&x), bt_buf_init(&y);
    diff_scalar(&x, a, f), diff_scalar(&y, b, f);
    diff_pair(d, path, &x, &y);
    bt_buf_free(&x), bt_buf_free(&y);
}

static void diff_list(bt_buf *b, const ProtobufCFieldDescriptor *f, const char *arr, size_t n) {
    bt_buf_printf(b, "[");
    for (size_t i = 0; i < n; i++) {
        bt_buf_printf(b, "%s", i ? ", " : "");
        pb_dump_scalar(b, f, arr + i * pb_elem_size(f->type));
    }
    bt_buf_printf(b, "]");
}

static void diff_msg(diff_ctx *d, const ProtobufCMessage *a, const ProtobufCMessage *b,
                     const char *path);

/* An entry of a list of messages only one side has: added or removed, named by its name:
 * when it has one. */
static void diff_entry(diff_ctx *d, const ProtobufCMessage *m, const char *path, int added) {
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "name");
    const char *name = f && f->type == PROTOBUF_C_TYPE_STRING && pb_has_field(m, f)
                           ? *(const char *const *)diff_at(m, f->offset)
                           : NULL;
    bt_buf what;
    bt_buf_init(&what);
    if (name) bt_buf_printf(&what, "\"%s\" ", name);
    bt_buf_printf(&what, "%s",
                  added ? "added (not in the run's recipe)" : "removed (in the run's recipe)");
    diff_note(d, path, bt_buf_str(&what));
    bt_buf_free(&what);
}

static void diff_repeated(diff_ctx *d, const ProtobufCMessage *a, const ProtobufCMessage *b,
                          const ProtobufCFieldDescriptor *f, const char *path) {
    size_t na = *(const size_t *)diff_at(a, f->quantifier_offset);
    size_t nb = *(const size_t *)diff_at(b, f->quantifier_offset);
    const char *xa = *(const char *const *)diff_at(a, f->offset);
    const char *xb = *(const char *const *)diff_at(b, f->offset);
    size_t sz = pb_elem_size(f->type);
    if (f->type != PROTOBUF_C_TYPE_MESSAGE) {
        int same = na == nb;
        for (size_t i = 0; same && i < na; i++)
            same = diff_same_elem(f, xa + i * sz, xb + i * sz);
        if (same) return;
        bt_buf x, y;
        bt_buf_init(&x), bt_buf_init(&y);
        diff_list(&x, f, xa, na), diff_list(&y, f, xb, nb);
        diff_pair(d, path, &x, &y);
        bt_buf_free(&x), bt_buf_free(&y);
        return;
    }
    const ProtobufCMessage *const *ma = (const void *)xa, *const *mb = (const void *)xb;
    char sub[512];
    for (size_t i = 0; i < na || i < nb; i++) {
        if (snprintf(sub, sizeof sub, "%s[%zu]", path, i) >= (int)sizeof sub) break;
        if (i < na && i < nb)
            diff_msg(d, ma[i], mb[i], sub);
        else
            diff_entry(d, i < na ? ma[i] : mb[i], sub, i >= na);
    }
}

static void diff_field(diff_ctx *d, const ProtobufCMessage *a, const ProtobufCMessage *b,
                       const ProtobufCFieldDescriptor *f, const char *path) {
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        diff_repeated(d, a, b, f, path);
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        diff_msg(d, *(const ProtobufCMessage *const *)diff_at(a, f->offset),
                 *(const ProtobufCMessage *const *)diff_at(b, f->offset), path);
    } else {
        diff_singular(d, a, b, f, path);
    }
}

/* a and b of one type; a NULL one compared as an empty message (every field not set). */
static void diff_msg(diff_ctx *d, const ProtobufCMessage *a, const ProtobufCMessage *b,
                     const char *path) {
    if (a == NULL && b == NULL) return;
    const ProtobufCMessageDescriptor *desc = a ? a->descriptor : b->descriptor;
    ProtobufCMessage *empty = NULL;
    if (a == NULL || b == NULL) {
        empty = calloc(1, desc->sizeof_message);
        if (empty == NULL) return;
        protobuf_c_message_init(desc, empty);
    }
    char sub[512];
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &desc->fields[i];
        if (snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", f->name) >=
            (int)sizeof sub)
            continue;
        diff_field(d, a ? a : empty, b ? b : empty, f, sub);
    }
    free(empty);
}

size_t recipe_diff(const recipe_doc *was, const recipe_doc *now, size_t max, bt_buf *out) {
    diff_ctx d = {.now = now, .out = out, .max = max};
    diff_msg(&d, &was->recipe->base, &now->recipe->base, "");
    if (d.n > max) bt_buf_printf(out, ", and %zu more", d.n - max);
    return d.n;
}
