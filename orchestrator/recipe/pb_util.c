#include "pb_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* Memory layout rules of protobuf-c 1.4 that this file relies on (they are the ones
 * protobuf_c_message_free_unpacked() relies on too):
 *  - a singular field lives at offset; a repeated one is a malloc'ed array at offset
 *    with its size_t count at quantifier_offset;
 *  - proto2 optional scalars and bytes have a protobuf_c_boolean has_ flag at
 *    quantifier_offset; strings and messages are present when the pointer is non-NULL
 *    and, for strings, not the descriptor's static default_value;
 *  - a oneof member is present when the uint32 case at quantifier_offset is its id. */

size_t pb_elem_size(ProtobufCType type) {
    switch (type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    default: /* 32-bit integers, float, enum */
        return 4;
    }
}

static void *pb_at(const ProtobufCMessage *m, unsigned offset) {
    return (char *)m + offset;
}

static int pb_is_oneof(const ProtobufCFieldDescriptor *f) {
    return (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
}

ProtobufCMessage *pb_clone(const ProtobufCMessage *m) {
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) return NULL;
    protobuf_c_message_pack(m, buf);
    ProtobufCMessage *copy = protobuf_c_message_unpack(m->descriptor, NULL, len, buf);
    free(buf);
    return copy;
}

/* Frees what element i of an array of f's type owns (not the array). */
static void pb_elem_release(const ProtobufCFieldDescriptor *f, void *elem) {
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        char *s = *(char **)elem;
        if (s != NULL && s != f->default_value) free(s);
        *(char **)elem = NULL;
    } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
        ProtobufCBinaryData *b = elem;
        const ProtobufCBinaryData *def = f->default_value;
        if (b->data != NULL && (def == NULL || def->data != b->data)) free(b->data);
        b->data = NULL;
        b->len = 0;
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        protobuf_c_message_free_unpacked(*(ProtobufCMessage **)elem, NULL);
        *(ProtobufCMessage **)elem = NULL;
    }
}

static void pb_array_free(const ProtobufCFieldDescriptor *f, void *arr, size_t n) {
    size_t sz = pb_elem_size(f->type);
    for (size_t i = 0; arr != NULL && i < n; i++)
        pb_elem_release(f, (char *)arr + i * sz);
    free(arr);
}

/* A deep copy made by merging into a new message: unlike pb_clone's, it keeps the lists
 * given empty (pb_util.h). NULL when out of memory. */
static ProtobufCMessage *pb_copy(const ProtobufCMessage *s) {
    ProtobufCMessage *m = calloc(1, s->descriptor->sizeof_message);
    if (m == NULL) return NULL;
    s->descriptor->message_init(m);
    if (pb_merge(m, s) != 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

/* Deep-copies one element of f's type from src to dst (dst zeroed). */
static int pb_elem_copy(const ProtobufCFieldDescriptor *f, void *dst, const void *src) {
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        const char *s = *(char *const *)src;
        if (s != NULL && (*(char **)dst = strdup(s)) == NULL) return BT_ENOMEM;
    } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
        const ProtobufCBinaryData *s = src;
        ProtobufCBinaryData *d = dst;
        if (s->len > 0) {
            if ((d->data = malloc(s->len)) == NULL) return BT_ENOMEM;
            memcpy(d->data, s->data, s->len);
        }
        d->len = s->len;
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        const ProtobufCMessage *s = *(ProtobufCMessage *const *)src;
        if (s != NULL && (*(ProtobufCMessage **)dst = pb_copy(s)) == NULL) return BT_ENOMEM;
    } else {
        memcpy(dst, src, pb_elem_size(f->type));
    }
    return 0;
}

/* Replaces dst's repeated field with a deep copy of src's (given empty: with an array of
 * none); dst is untouched on failure. */
static int pb_merge_repeated(ProtobufCMessage *dst, const ProtobufCMessage *src,
                             const ProtobufCFieldDescriptor *f) {
    size_t n = *(size_t *)pb_at(src, f->quantifier_offset);
    const char *from = *(void **)pb_at(src, f->offset);
    size_t sz = pb_elem_size(f->type);
    if (from == NULL) return 0;
    char *arr = calloc(n ? n : 1, sz);
    if (arr == NULL) return BT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (pb_elem_copy(f, arr + i * sz, from + i * sz) < 0) {
            pb_array_free(f, arr, i + 1);
            return BT_ENOMEM;
        }
    }
    size_t *dn = pb_at(dst, f->quantifier_offset);
    void **darr = pb_at(dst, f->offset);
    pb_array_free(f, *darr, *dn);
    *darr = arr;
    *dn = n;
    return 0;
}

int pb_repeated_set(ProtobufCMessage *dst, const ProtobufCMessage *src,
                    const ProtobufCFieldDescriptor *f, size_t i) {
    size_t sz = pb_elem_size(f->type);
    if (f->label != PROTOBUF_C_LABEL_REPEATED || i >= *(size_t *)pb_at(dst, f->quantifier_offset) ||
        i >= *(size_t *)pb_at(src, f->quantifier_offset))
        return BT_EINVAL;
    char *d = *(char **)pb_at(dst, f->offset) + i * sz;
    const char *s = *(char *const *)pb_at(src, f->offset) + i * sz;
    /* Copy first, release the old element after: dst stays valid when the copy fails. */
    union { /* any element type, aligned for it */
        ProtobufCBinaryData bytes;
        void *ptr;
        double d;
        uint64_t u;
    } tmp;
    memset(&tmp, 0, sizeof tmp);
    if (pb_elem_copy(f, &tmp, s) < 0) return BT_ENOMEM;
    pb_elem_release(f, d);
    memcpy(d, &tmp, sz);
    return 0;
}

int pb_has_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    const void *v = pb_at(m, f->offset);
    if (pb_is_oneof(f)) return *(const uint32_t *)pb_at(m, f->quantifier_offset) == f->id;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) return *(ProtobufCMessage *const *)v != NULL;
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        const char *s = *(char *const *)v;
        if (s == NULL || s == f->default_value) return 0;
        return f->label != PROTOBUF_C_LABEL_NONE || s[0] != '\0';
    }
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL)
        return *(const protobuf_c_boolean *)pb_at(m, f->quantifier_offset) != 0;
    if (f->label == PROTOBUF_C_LABEL_NONE) { /* proto3: present when not zero */
        static const char zero[sizeof(ProtobufCBinaryData)];
        if (f->type == PROTOBUF_C_TYPE_BYTES) return ((const ProtobufCBinaryData *)v)->len != 0;
        return memcmp(v, zero, pb_elem_size(f->type)) != 0;
    }
    return 1; /* required */
}

/* Marks f present in m (has_ flag or oneof case). */
static void pb_mark_present(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    if (pb_is_oneof(f))
        *(uint32_t *)pb_at(m, f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
             f->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)pb_at(m, f->quantifier_offset) = 1;
}

/* Before f (a oneof member) is set in m, releases the member currently chosen. */
static void pb_oneof_release(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    uint32_t cur = *(uint32_t *)pb_at(m, f->quantifier_offset);
    if (cur == 0 || cur == f->id) return;
    const ProtobufCFieldDescriptor *g =
        protobuf_c_message_descriptor_get_field(m->descriptor, (unsigned)cur);
    if (g != NULL) pb_elem_release(g, pb_at(m, g->offset));
    *(uint32_t *)pb_at(m, f->quantifier_offset) = 0;
}

static int pb_merge_singular(ProtobufCMessage *dst, const ProtobufCMessage *src,
                             const ProtobufCFieldDescriptor *f) {
    void *d = pb_at(dst, f->offset);
    const void *s = pb_at(src, f->offset);
    if (!pb_has_field(src, f)) return 0;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && pb_has_field(dst, f))
        return pb_merge(*(ProtobufCMessage **)d, *(ProtobufCMessage *const *)s);
    /* Copy first, release the old value after: dst stays valid when the copy fails. */
    unsigned char tmp[sizeof(ProtobufCBinaryData)] = {0};
    if (pb_elem_copy(f, tmp, s) < 0) return BT_ENOMEM;
    if (pb_is_oneof(f)) pb_oneof_release(dst, f);
    pb_elem_release(f, d);
    memcpy(d, tmp, pb_elem_size(f->type));
    pb_mark_present(dst, f);
    return 0;
}

int pb_merge(ProtobufCMessage *dst, const ProtobufCMessage *src) {
    const ProtobufCMessageDescriptor *desc = src->descriptor;
    if (dst->descriptor != desc) return BT_EINVAL;
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &desc->fields[i];
        int rc = f->label == PROTOBUF_C_LABEL_REPEATED ? pb_merge_repeated(dst, src, f)
                                                       : pb_merge_singular(dst, src, f);
        if (rc < 0) return rc;
    }
    return 0;
}
