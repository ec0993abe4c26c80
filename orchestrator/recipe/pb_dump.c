#include "pb_dump.h"

#include "pb_util.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const void *field_ptr(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    return (const char *)m + f->offset;
}

static int field_present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    const char *base = (const char *)m;
    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        return *(const size_t *)(base + f->quantifier_offset) > 0;
    /* an absent string holds its default's own storage (protobuf-c's INIT and unpack) */
    if (f->type == PROTOBUF_C_TYPE_STRING)
        return *(const void *const *)field_ptr(m, f) != NULL &&
               *(const void *const *)field_ptr(m, f) != f->default_value;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) return *(const void *const *)field_ptr(m, f) != NULL;
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0)
        return *(const protobuf_c_boolean *)(base + f->quantifier_offset);
    return 1;
}

/* text (C's %e form) as a float that YAML 1.1 readers (PyYAML) take for one, as 1.2 ones
 * do: a dot in the mantissa and a signed exponent, unpadded: C's 8e-05 as 8.0e-5, 3.5e+20
 * as 3.5e+20, 1e-10 as 1.0e-10; the same number. */
static void dump_exponent(char *text) {
    char *e = strchr(text, 'e');
    if (e == NULL) return;
    char *from = e + 2, *to = e + 2; /* past the sign C always writes */
    while (from[0] == '0' && from[1] != '\0')
        from++;
    memmove(to, from, strlen(from) + 1);
    if (memchr(text, '.', (size_t)(e - text)) != NULL) return;
    memmove(e + 2, e, strlen(e) + 1);
    e[0] = '.', e[1] = '0';
}

/* x in the fewest significant digits (at most max) that read back as x: 0.0003, not
 * 0.00029999999999999997, 5.0e-324, not 4.94065645841247e-324; written out (10000.0,
 * 0.0003) when its decimal exponent is in [-4, fixed_below), as %g would at that
 * precision, else with an exponent (8.0e-5, 3.5e+20). Always with a dot, and the exponent
 * signed, so that YAML 1.1 readers (PyYAML) read a float too, not an integer or a string
 * (recipe values are finite: no inf or nan to write). */
static void dump_real(bt_buf *out, double x, int fixed_below, int max, int is_float) {
    char text[72];
    int digits = 1;
    for (; digits <= max; digits++) {
        snprintf(text, sizeof text, "%.*e", digits - 1, x);
        double back = strtod(text, NULL);
        if (is_float ? (float)back == (float)x : back == x) break;
    }
    if (digits > max) digits = max; /* text holds max digits: the most a value needs */
    const char *e = strchr(text, 'e');
    int exp10 = e ? atoi(e + 1) : fixed_below; /* inf, nan: as they are */
    if (exp10 >= -4 && exp10 < fixed_below) {
        snprintf(text, sizeof text, "%.*f", digits - 1 - exp10 > 0 ? digits - 1 - exp10 : 0, x);
        if (strchr(text, '.') == NULL) strcat(text, ".0");
    } else {
        dump_exponent(text);
    }
    bt_buf_printf(out, "%s", text);
}

static void dump_enum(bt_buf *out, const ProtobufCEnumDescriptor *e, int v) {
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(e, v);
    if (ev == NULL) {
        bt_buf_printf(out, "%d", v);
        return;
    }
    for (const char *p = ev->name; *p; p++)
        bt_buf_printf(out, "%c", *p == '_' ? '_' : tolower((unsigned char)*p));
}

void pb_dump_scalar(bt_buf *out, const ProtobufCFieldDescriptor *f, const void *p) {
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        bt_buf_printf(out, "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        bt_buf_printf(out, "%" PRIu32, *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        bt_buf_printf(out, "%" PRId64, *(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        bt_buf_printf(out, "%" PRIu64, *(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        dump_real(out, (double)*(const float *)p, 6, 9, 1);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        dump_real(out, *(const double *)p, 15, 17, 0);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        bt_buf_printf(out, "%s", *(const protobuf_c_boolean *)p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM:
        dump_enum(out, f->descriptor, *(const int *)p);
        break;
    case PROTOBUF_C_TYPE_STRING:
        bt_buf_json_string(out, *(const char *const *)p ? *(const char *const *)p : "");
        break;
    case PROTOBUF_C_TYPE_BYTES:
        bt_buf_printf(out, "<%zu bytes>", ((const ProtobufCBinaryData *)p)->len);
        break;
    case PROTOBUF_C_TYPE_MESSAGE:
        break;
    }
}

static void dump_repeated(bt_buf *out, const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                          int indent, int with_defaults) {
    size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
    const char *arr = *(const char *const *)field_ptr(m, f);
    if (f->type != PROTOBUF_C_TYPE_MESSAGE) {
        bt_buf_printf(out, "%*s%s: [", indent, "", f->name);
        for (size_t i = 0; i < n; i++) {
            bt_buf_printf(out, i ? ", " : "");
            pb_dump_scalar(out, f, arr + i * pb_elem_size(f->type));
        }
        bt_buf_printf(out, "]\n");
        return;
    }
    bt_buf_printf(out, "%*s%s:\n", indent, "", f->name);
    for (size_t i = 0; i < n; i++) {
        bt_buf_printf(out, "%*s-\n", indent + 2, "");
        pb_dump_yaml(out, ((const ProtobufCMessage *const *)arr)[i], indent + 4, with_defaults);
    }
}

void pb_dump_yaml(bt_buf *out, const ProtobufCMessage *m, int indent, int with_defaults) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        int present = field_present(m, f);
        if (!present && !with_defaults) continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if (present) dump_repeated(out, m, f, indent, with_defaults);
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)field_ptr(m, f);
            if (sub != NULL) {
                bt_buf_printf(out, "%*s%s:\n", indent, "", f->name);
                pb_dump_yaml(out, sub, indent + 2, with_defaults);
            }
        } else if (present || f->type != PROTOBUF_C_TYPE_BYTES) {
            /* an absent string without a default is "", which nothing reads as a value */
            if (!present && f->type == PROTOBUF_C_TYPE_STRING && f->default_value == NULL) continue;
            bt_buf_printf(out, "%*s%s: ", indent, "", f->name);
            pb_dump_scalar(out, f, field_ptr(m, f));
            bt_buf_printf(out, "%s\n", present ? "" : "  # default");
        }
    }
}
