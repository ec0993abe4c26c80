/* The recipe loader: YAML (libyaml's document API) mapped onto protobuf-c messages by
 * walking their descriptors. The rules are in recipe_load.h.
 *
 * Robustness limits, so that any input (the fuzz target feeds arbitrary bytes) ends in
 * a message rather than a crash or a runaway:
 *  - at most LOAD_MAX_BYTES of input, which must be UTF-8 text without NUL bytes;
 *  - a pre-pass over the event stream rejects nesting deeper than LOAD_MAX_DEPTH before
 *    the document is built, more than LOAD_MAX_NODES nodes, and a second document;
 *  - aliases are allowed; a walk that follows them visits at most LOAD_ALIAS_BUDGET
 *    nodes beyond the document's own, and the depth limit also stops alias cycles
 *    (libyaml lets "&a [*a]" refer to itself).
 * The walk recurses once per nesting level, so its depth is bounded by LOAD_MAX_DEPTH. */
#include "recipe_load.h"
#include "pb_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "units.h"
#include "util/file.h"
#include "util/utf8.h"

#define LOAD_MAX_BYTES    RECIPE_MAX_BYTES
#define LOAD_MAX_DEPTH    64
#define LOAD_MAX_NODES    (1u << 20)
#define LOAD_ALIAS_BUDGET 65536u
#define LOAD_PATH_MAX     4096
#define LOAD_QUOTE_SRC    48  /* bytes of a value quoted in a message */
#define LOAD_QUOTE_CAP    256 /* room for LOAD_QUOTE_SRC bytes escaped, quotes and "..." */
#define LOAD_LIST_CAP     1024
#define LOAD_WANT_CAP     (LOAD_LIST_CAP + 128) /* an "expected ..." phrase */
#define LOAD_MERGE_MAX    16                    /* mappings one merge key (<<) takes */

typedef struct load_ctx {
    const char *file;
    yaml_document_t *ydoc;
    recipe_doc *doc;
    size_t pos_cap;
    bt_diag *diag;
    char path[LOAD_PATH_MAX];
    size_t path_len;
    size_t visits;
    size_t max_visits;
} load_ctx;

static int load_value(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                      const ProtobufCFieldDescriptor *f, int depth);
static int load_message(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg, int depth);
static int load_fail(load_ctx *c, yaml_mark_t mark, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- messages ------------------------------------------------------------------- */

static void load_diag(bt_diag *diag, const char *file, size_t line, size_t col, const char *path,
                      const char *msg) {
    if (path != NULL && path[0] != '\0')
        bt_diag_set_placed(diag, file, (long)line, (long)col, "%s: %s", path, msg);
    else
        bt_diag_set_placed(diag, file, (long)line, (long)col, "%s", msg);
}

/* Reports an error at mark for the current path; returns code. */
static int load_fail(load_ctx *c, yaml_mark_t mark, int code, const char *fmt, ...) {
    char msg[LOAD_WANT_CAP + 2 * LOAD_QUOTE_CAP + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    load_diag(c->diag, c->file, mark.line + 1, mark.column + 1, c->path, msg);
    return code;
}

static int load_oom(load_ctx *c) {
    bt_diag_set(c->diag, "%s: out of memory", c->file);
    return BT_ENOMEM;
}

/* How many bytes of s[0, len) to show: at most LOAD_QUOTE_SRC, not cutting a UTF-8
 * sequence in two. */
static size_t load_cut(const char *s, size_t len) {
    size_t n = len > LOAD_QUOTE_SRC ? LOAD_QUOTE_SRC : len;
    while (n < len && n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* Writes s[0, len) as a quoted, escaped and shortened literal for a message. */
static void load_quote(char *out, const char *s, size_t len) {
    size_t o = 0, n = load_cut(s, len);
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            o += (size_t)snprintf(out + o, LOAD_QUOTE_CAP - o, "\\%c", ch);
        else if (ch == '\n')
            o += (size_t)snprintf(out + o, LOAD_QUOTE_CAP - o, "\\n");
        else if (bt_is_control(ch))
            o += (size_t)snprintf(out + o, LOAD_QUOTE_CAP - o, "\\x%02x", ch);
        else
            out[o++] = (char)ch;
    }
    snprintf(out + o, LOAD_QUOTE_CAP - o, "%s\"", n < len ? "..." : "");
}

static int load_is_null(const yaml_node_t *n) {
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (strcmp((const char *)n->data.scalar.value, nulls[i]) == 0) return 1;
    return 0;
}

/* How a node reads in "got ..." (a scalar is quoted). */
static void load_describe(const yaml_node_t *n, char *out) {
    if (n->type == YAML_MAPPING_NODE)
        snprintf(out, LOAD_QUOTE_CAP, "a mapping");
    else if (n->type == YAML_SEQUENCE_NODE)
        snprintf(out, LOAD_QUOTE_CAP, "a sequence");
    else if (load_is_null(n))
        snprintf(out, LOAD_QUOTE_CAP, "nothing (null)");
    else
        load_quote(out, (const char *)n->data.scalar.value, n->data.scalar.length);
}

/* "a, b, c": the field names of d, in declaration order. */
static void load_field_list(const ProtobufCMessageDescriptor *d, char *out) {
    size_t o = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < d->n_fields && o < LOAD_LIST_CAP; i++)
        o += (size_t)snprintf(out + o, LOAD_LIST_CAP - o, "%s%s", i ? ", " : "", d->fields[i].name);
}

/* "a, b, c": the value names of e in lower case. */
static void load_enum_list(const ProtobufCEnumDescriptor *e, char *out) {
    size_t o = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < e->n_values && o + 3 < LOAD_LIST_CAP; i++) {
        if (i) {
            out[o++] = ',';
            out[o++] = ' ';
        }
        for (const char *p = e->values[i].name; *p && o + 1 < LOAD_LIST_CAP; p++)
            out[o++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    }
    out[o < LOAD_LIST_CAP ? o : LOAD_LIST_CAP - 1] = '\0';
}

static int load_is_units_type(const ProtobufCMessageDescriptor *d) {
    return d == &baton__byte_size__descriptor || d == &baton__bandwidth__descriptor ||
           d == &baton__duration__descriptor;
}

/* Whether f is parallel.dp, the one integer field where "auto" (stored as 0) means
 * something: the data-parallel degree derived from the cluster. Everywhere else 0 is a
 * value of its own (or an invalid one), so "auto" there is refused rather than read as 0. */
static int load_takes_auto(const ProtobufCFieldDescriptor *f) {
    return f == protobuf_c_message_descriptor_get_field_by_name(&baton__parallel__descriptor, "dp");
}

/* Whether f is a count that validation requires to be at least 1 (cluster.nodes, a
 * stage's steps, parallel.tp, ...): "a positive integer", not "non-negative". */
static int load_positive(const ProtobufCFieldDescriptor *f) {
    static const struct {
        const ProtobufCMessageDescriptor *md;
        const char *name;
    } counts[] = {
        {&baton__cluster__descriptor, "nodes"},
        {&baton__cluster__descriptor, "gpus_per_node"},
        {&baton__model__descriptor, "dim"},
        {&baton__model__descriptor, "n_layers"},
        {&baton__model__descriptor, "n_heads"},
        {&baton__model__descriptor, "vocab_size"},
        {&baton__parallel__descriptor, "tp"},
        {&baton__parallel__descriptor, "pp"},
        {&baton__parallel__descriptor, "cp"},
        {&baton__parallel__descriptor, "ep"},
        {&baton__parallel__descriptor, "virtual_stages"},
        {&baton__stage__descriptor, "steps"},
        {&baton__stage__descriptor, "seq_len"},
        {&baton__stage__descriptor, "global_batch"},
        {&baton__stage__descriptor, "micro_batch"},
    };
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        if (f == protobuf_c_message_descriptor_get_field_by_name(counts[k].md, counts[k].name))
            return 1;
    return 0;
}

/* What a value of field f must look like, for "expected ..." messages. */
static void load_expected(const ProtobufCFieldDescriptor *f, char *out) {
    char list[LOAD_LIST_CAP];
    const ProtobufCMessageDescriptor *md = f->descriptor;
    switch (f->type) {
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(out, LOAD_WANT_CAP, "a %s integer (such as 8, 8K = 8192%s)",
                 load_positive(f) ? "positive" : "non-negative",
                 load_takes_auto(f) ? ", or auto" : "");
        return;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
        snprintf(out, LOAD_WANT_CAP, "%s", UNITS_DOUBLE_FORMS);
        return;
    case PROTOBUF_C_TYPE_BOOL:
        snprintf(out, LOAD_WANT_CAP, "%s", UNITS_BOOL_FORMS);
        return;
    case PROTOBUF_C_TYPE_ENUM:
        load_enum_list(f->descriptor, list);
        snprintf(out, LOAD_WANT_CAP, "one of %s", list);
        return;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
        snprintf(out, LOAD_WANT_CAP, "a string");
        return;
    case PROTOBUF_C_TYPE_MESSAGE:
        if (md == &baton__byte_size__descriptor)
            snprintf(out, LOAD_WANT_CAP, "%s", UNITS_BYTES_FORMS);
        else if (md == &baton__bandwidth__descriptor)
            snprintf(out, LOAD_WANT_CAP, "%s", UNITS_BANDWIDTH_FORMS);
        else if (md == &baton__duration__descriptor)
            snprintf(out, LOAD_WANT_CAP, "%s", UNITS_DURATION_FORMS);
        else {
            load_field_list(md, list);
            snprintf(out, LOAD_WANT_CAP, "a mapping with keys from: %s", list);
        }
        return;
    default:
        snprintf(out, LOAD_WANT_CAP, "an integer (such as -3, 8, 8K = 8192, or auto)");
    }
}

/* "expected X, got Y" for field f at node n. */
static int load_fail_expected(load_ctx *c, const yaml_node_t *n,
                              const ProtobufCFieldDescriptor *f) {
    char want[LOAD_WANT_CAP], got[LOAD_QUOTE_CAP];
    load_expected(f, want);
    load_describe(n, got);
    return load_fail(c, n->start_mark, BT_ERECIPE, "expected %s, got %s", want, got);
}

/* ---- paths and positions ----------------------------------------------------------- */

/* Appends text to the path; control characters become '?'. */
static int load_path_append(load_ctx *c, const char *s, size_t len, yaml_mark_t mark) {
    if (c->path_len + len + 1 > sizeof c->path)
        return load_fail(c, mark, BT_ERECIPE, "the path to this value is too long");
    for (size_t i = 0; i < len; i++)
        c->path[c->path_len++] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    c->path[c->path_len] = '\0';
    return 0;
}

static int load_path_push_key(load_ctx *c, const char *name, size_t len, yaml_mark_t mark) {
    if (c->path_len > 0) {
        int rc = load_path_append(c, ".", 1, mark);
        if (rc < 0) return rc;
    }
    return load_path_append(c, name, len, mark);
}

static int load_path_push_index(load_ctx *c, size_t i, yaml_mark_t mark) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "[%zu]", i);
    return load_path_append(c, buf, (size_t)n, mark);
}

static void load_path_pop(load_ctx *c, size_t len) {
    c->path_len = len;
    c->path[len] = '\0';
}

/* Records the current path at mark. */
static int load_pos_add(load_ctx *c, yaml_mark_t mark) {
    recipe_doc *doc = c->doc;
    if (doc->npos == c->pos_cap) {
        size_t cap = c->pos_cap ? 2 * c->pos_cap : 64;
        recipe_pos *p = realloc(doc->pos, cap * sizeof *p);
        if (p == NULL) return load_oom(c);
        doc->pos = p;
        c->pos_cap = cap;
    }
    char *path = strdup(c->path);
    if (path == NULL) return load_oom(c);
    doc->pos[doc->npos++] = (recipe_pos){path, (int)mark.line + 1, (int)mark.column + 1, NULL};
    return 0;
}

/* ---- scalars -------------------------------------------------------------------- */

/* The text of a scalar node that may be converted: not null, no NUL inside. */
static int load_scalar_text(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f,
                            const char **text) {
    if (n->type != YAML_SCALAR_NODE || load_is_null(n)) return load_fail_expected(c, n, f);
    if (strlen((const char *)n->data.scalar.value) != n->data.scalar.length)
        return load_fail(c, n->start_mark, BT_ERECIPE, "a value must not contain a NUL character");
    *text = (const char *)n->data.scalar.value;
    return 0;
}

/* Turns a units_* failure into a message: BT_EINVAL is "expected ...", BT_ERANGE "out of
 * range (RANGE)", RANGE the bound the value crossed ("at most 4294967295": the type's; a
 * field's own lower bound, nodes at least 1, is the validator's to say). Callers pass
 * negative values where they must not be as BT_EINVAL. */
static int load_fail_number(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f, int rc,
                            const char *range) {
    char got[LOAD_QUOTE_CAP];
    if (rc != BT_ERANGE) return load_fail_expected(c, n, f);
    load_describe(n, got);
    return load_fail(c, n->start_mark, BT_ERECIPE, "value %s is out of range (%s)", got, range);
}

/* "auto" in an integer field: 0 for parallel.dp, an error naming the field elsewhere. */
static int load_parse_auto(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f) {
    if (load_takes_auto(f)) return 0;
    return load_fail(c, n->start_mark, BT_ERECIPE,
                     "\"auto\" is only for parallel.dp (derived from the cluster); give %s a "
                     "number (such as 8, 8K = 8192)",
                     f->name);
}

static int load_parse_uint(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f,
                           const char *text, uint64_t max, uint64_t *v) {
    char range[64];
    if (strcasecmp(text, "auto") == 0) {
        *v = 0;
        return load_parse_auto(c, n, f);
    }
    int rc = units_parse_uint(text, max, v);
    if (rc == BT_ERANGE && text[0] == '-') rc = BT_EINVAL;
    snprintf(range, sizeof range, "at most %llu", (unsigned long long)max);
    return rc < 0 ? load_fail_number(c, n, f, rc, range) : 0;
}

static int load_parse_int(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f,
                          const char *text, int64_t min, int64_t max, int64_t *v) {
    char range[64];
    if (strcasecmp(text, "auto") == 0) {
        *v = 0;
        return load_parse_auto(c, n, f);
    }
    int rc = units_parse_int(text, min, max, v);
    if (text[strspn(text, " \t")] == '-')
        snprintf(range, sizeof range, "at least %lld", (long long)min);
    else
        snprintf(range, sizeof range, "at most %lld", (long long)max);
    return rc < 0 ? load_fail_number(c, n, f, rc, range) : 0;
}

/* Enum names compare case-insensitively, with '-' standing for '_'. */
static char load_enum_char(char ch) {
    if (ch == '-') return '_';
    return ch >= 'a' && ch <= 'z' ? (char)(ch - 'a' + 'A') : ch;
}

static int load_parse_enum(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f,
                           const char *text, int *v) {
    const ProtobufCEnumDescriptor *e = f->descriptor;
    for (unsigned i = 0; i < e->n_values; i++) {
        const char *a = e->values[i].name, *b = text;
        for (; *a && *b; a++, b++)
            if (load_enum_char(*b) != load_enum_char(*a)) break;
        if (*a == '\0' && *b == '\0') {
            *v = e->values[i].value;
            return 0;
        }
    }
    return load_fail_expected(c, n, f);
}

static int load_parse_real(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f,
                           const char *text, double *v) {
    int rc = units_parse_double(text, v);
    int is_float = f->type == PROTOBUF_C_TYPE_FLOAT;
    if (rc == 0 && is_float && fabs(*v) > 3.4028234663852886e38) rc = BT_ERANGE;
    /* a non-zero number written so small that it reads as 0 (1e-400): said as written,
     * not left to a later check to report as 0 */
    size_t mant = strcspn(text, "eE");
    int underflow = rc == 0 && *v == 0 && strcspn(text, "123456789") < mant;
    if (underflow) return load_fail_number(c, n, f, BT_ERANGE, "so small that it reads as 0");
    return rc < 0 ? load_fail_number(c, n, f, rc,
                                     is_float ? "not a finite float" : "not a finite double")
                  : 0;
}

static int load_copy_text(load_ctx *c, const yaml_node_t *n, int bytes, void *out) {
    size_t len = n->data.scalar.length;
    char *s = malloc(len + 1);
    if (s == NULL) return load_oom(c);
    memcpy(s, n->data.scalar.value, len + 1);
    if (bytes)
        *(ProtobufCBinaryData *)out = (ProtobufCBinaryData){len, (uint8_t *)s};
    else
        *(char **)out = s;
    return 0;
}

static int load_parse_integer(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f,
                              const char *text, void *out) {
    uint64_t u;
    int64_t i;
    int rc;
    switch (f->type) {
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if ((rc = load_parse_uint(c, n, f, text, UINT32_MAX, &u)) == 0)
            *(uint32_t *)out = (uint32_t)u;
        return rc;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if ((rc = load_parse_uint(c, n, f, text, UINT64_MAX, &u)) == 0) *(uint64_t *)out = u;
        return rc;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if ((rc = load_parse_int(c, n, f, text, INT64_MIN, INT64_MAX, &i)) == 0)
            *(int64_t *)out = i;
        return rc;
    default: /* 32-bit signed */
        if ((rc = load_parse_int(c, n, f, text, INT32_MIN, INT32_MAX, &i)) == 0)
            *(int32_t *)out = (int32_t)i;
        return rc;
    }
}

/* Converts scalar node n into the storage of one element of f's (non-message) type. */
static int load_parse_scalar(load_ctx *c, yaml_node_t *n, const ProtobufCFieldDescriptor *f,
                             void *out) {
    const char *text = NULL;
    double d;
    int b, rc = load_scalar_text(c, n, f, &text);
    if (rc < 0) return rc;
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
        return load_copy_text(c, n, f->type == PROTOBUF_C_TYPE_BYTES, out);
    case PROTOBUF_C_TYPE_BOOL:
        if (units_parse_bool(text, &b) < 0) return load_fail_expected(c, n, f);
        *(protobuf_c_boolean *)out = b;
        return 0;
    case PROTOBUF_C_TYPE_ENUM:
        return load_parse_enum(c, n, f, text, out);
    case PROTOBUF_C_TYPE_DOUBLE:
        return load_parse_real(c, n, f, text, out);
    case PROTOBUF_C_TYPE_FLOAT:
        if ((rc = load_parse_real(c, n, f, text, &d)) == 0) *(float *)out = (float)d;
        return rc;
    default:
        return load_parse_integer(c, n, f, text, out);
    }
}

/* ---- fields --------------------------------------------------------------------- */

static void *load_member(ProtobufCMessage *m, unsigned offset) {
    return (char *)m + offset;
}

static ProtobufCMessage *load_new_message(load_ctx *c, const ProtobufCMessageDescriptor *d) {
    ProtobufCMessage *m = malloc(d->sizeof_message);
    if (m == NULL) {
        load_oom(c);
        return NULL;
    }
    protobuf_c_message_init(d, m);
    return m;
}

/* Sets presence of singular field f in msg (has_ flag or oneof case). */
static void load_mark_present(ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f) {
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)load_member(msg, f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
             f->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)load_member(msg, f->quantifier_offset) = 1;
}

/* Every node visit (values and sequence items) passes here: it enforces the depth limit,
 * which also ends alias cycles, and the visit budget, which ends alias bombs. */
static int load_enter(load_ctx *c, const yaml_node_t *n, int depth) {
    if (++c->visits > c->max_visits)
        return load_fail(c, n->start_mark, BT_ERECIPE,
                         "aliases expand to more than %zu values; write the recipe out instead",
                         c->max_visits);
    if (depth > LOAD_MAX_DEPTH)
        return load_fail(c, n->start_mark, BT_ERECIPE,
                         "nested deeper than %d levels (or an alias refers to itself)",
                         LOAD_MAX_DEPTH);
    return 0;
}

/* A scalar where a baton.ByteSize / Bandwidth / Duration is expected. */
static int load_units(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                      const ProtobufCFieldDescriptor *f) {
    const char *text = NULL;
    int rc = load_scalar_text(c, n, f, &text);
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *range = "not finite";
    if (rc < 0) return rc;
    if (d == &baton__byte_size__descriptor) {
        range = "at most 18446744073709551615 bytes";
        Baton__ByteSize *b = (Baton__ByteSize *)msg;
        rc = units_parse_bytes(text, &b->bytes);
        b->has_bytes = rc == 0;
    } else if (d == &baton__bandwidth__descriptor) {
        Baton__Bandwidth *b = (Baton__Bandwidth *)msg;
        rc = units_parse_bandwidth(text, &b->bytes_per_s);
        b->has_bytes_per_s = rc == 0;
    } else {
        Baton__Duration *t = (Baton__Duration *)msg;
        rc = units_parse_duration(text, &t->seconds);
        /* as the command line's durations: a wait of years is a typo, and overflows */
        if (rc == 0 && t->seconds > UNITS_MAX_DURATION_S) rc = BT_ERANGE;
        range = "at most " UNITS_MAX_DURATION_TEXT;
        t->has_seconds = rc == 0;
    }
    if (rc == BT_ERANGE && text[0] == '-') rc = BT_EINVAL;
    return rc < 0 ? load_fail_number(c, n, f, rc, range) : 0;
}

/* A scalar where message msg (of field f) is expected: units, or field number 1. */
static int load_shorthand(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                          const ProtobufCFieldDescriptor *f, int depth) {
    if (load_is_units_type(msg->descriptor)) return load_units(c, n, msg, f);
    const ProtobufCFieldDescriptor *first =
        protobuf_c_message_descriptor_get_field(msg->descriptor, 1);
    if (first == NULL || first->label == PROTOBUF_C_LABEL_REPEATED)
        return load_fail_expected(c, n, f);
    return load_value(c, n, msg, first, depth + 1);
}

/* Fills message msg (the value of field f) from node n. */
static int load_message_node(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                             const ProtobufCFieldDescriptor *f, int depth) {
    if (n->type == YAML_MAPPING_NODE) return load_message(c, n, msg, depth);
    if (load_is_null(n)) return 0; /* an empty message, present */
    if (n->type == YAML_SCALAR_NODE) return load_shorthand(c, n, msg, f, depth);
    return load_fail_expected(c, n, f);
}

/* Fills the next item of repeated field f; arr has room for it. */
static int load_item(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                     const ProtobufCFieldDescriptor *f, char *arr, int depth) {
    int rc = load_enter(c, n, depth);
    if (rc < 0) return rc;
    size_t *count = load_member(msg, f->quantifier_offset);
    void *slot = arr + *count * pb_elem_size(f->type);
    if (f->type != PROTOBUF_C_TYPE_MESSAGE) {
        rc = load_parse_scalar(c, n, f, slot);
        *count += rc == 0;
        return rc;
    }
    ProtobufCMessage *sub = load_new_message(c, f->descriptor);
    if (sub == NULL) return BT_ENOMEM;
    *(ProtobufCMessage **)slot = sub;
    (*count)++; /* owned by msg from here on, so an error below frees it */
    return load_message_node(c, n, sub, f, depth);
}

static int load_repeated(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                         const ProtobufCFieldDescriptor *f, int depth) {
    if (load_is_null(n)) return 0;
    if (n->type != YAML_SEQUENCE_NODE) {
        char got[LOAD_QUOTE_CAP];
        load_describe(n, got);
        return load_fail(c, n->start_mark, BT_ERECIPE, "expected a sequence (a YAML list), got %s",
                         got);
    }
    size_t nitems = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    void **member = load_member(msg, f->offset);
    if (nitems == 0) { /* given empty (pb_util.h): an array of none, which overlays */
        if (*member == NULL && (*member = calloc(1, 1)) == NULL) return load_oom(c);
        return 0;
    }
    char *arr = calloc(nitems, pb_elem_size(f->type));
    if (arr == NULL) return load_oom(c);
    *member = arr;
    for (size_t i = 0; i < nitems; i++) {
        yaml_node_t *item = yaml_document_get_node(c->ydoc, n->data.sequence.items.start[i]);
        size_t saved = c->path_len;
        int rc = load_path_push_index(c, i, item->start_mark);
        if (rc == 0) rc = load_pos_add(c, item->start_mark);
        if (rc == 0) rc = load_item(c, item, msg, f, arr, depth + 1);
        if (rc < 0) return rc;
        load_path_pop(c, saved);
    }
    return 0;
}

/* Loads node n into singular field f of msg. */
static int load_singular(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                         const ProtobufCFieldDescriptor *f, int depth) {
    void *member = load_member(msg, f->offset);
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        ProtobufCMessage **sub = member;
        if (*sub == NULL && (*sub = load_new_message(c, f->descriptor)) == NULL) return BT_ENOMEM;
        load_mark_present(msg, f);
        return load_message_node(c, n, *sub, f, depth);
    }
    unsigned char value[sizeof(ProtobufCBinaryData)] = {0};
    int rc = load_parse_scalar(c, n, f, value);
    if (rc < 0) return rc;
    if (f->type == PROTOBUF_C_TYPE_STRING) { /* replaces at most the static default */
        char *old = *(char **)member;
        if (old != NULL && old != f->default_value) free(old);
    }
    memcpy(member, value, pb_elem_size(f->type));
    load_mark_present(msg, f);
    return 0;
}

/* Loads node n into field f of msg. */
static int load_value(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg,
                      const ProtobufCFieldDescriptor *f, int depth) {
    int rc = load_enter(c, n, depth);
    if (rc < 0) return rc;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) return load_repeated(c, n, msg, f, depth);
    if (n->type == YAML_SEQUENCE_NODE && f->type != PROTOBUF_C_TYPE_MESSAGE)
        return load_fail(c, n->start_mark, BT_ERECIPE,
                         "expected a single value, got a sequence (\"%s\" is not repeated)",
                         f->name);
    return load_singular(c, n, msg, f, depth);
}

/* ---- mappings ------------------------------------------------------------------- */

/* Optimal string alignment distance of two short strings. */
static size_t load_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), d[LOAD_QUOTE_SRC + 1][LOAD_QUOTE_SRC + 1];
    if (la > LOAD_QUOTE_SRC || lb > LOAD_QUOTE_SRC) return SIZE_MAX;
    for (size_t i = 0; i <= la; i++)
        for (size_t j = 0; j <= lb; j++) {
            if (i == 0 || j == 0) {
                d[i][j] = i + j;
                continue;
            }
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* The field name closest to key: edit distance <= 2, else one that key begins. */
static const char *load_suggest(const ProtobufCMessageDescriptor *d, const char *key) {
    const char *best = NULL;
    size_t best_dist = 3, klen = strlen(key);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const char *name = d->fields[i].name;
        size_t dist = load_edit_distance(key, name);
        if (dist > 2 && klen >= 3 && strncmp(name, key, klen) == 0)
            dist = 2; /* key is the beginning of a field name */
        if (dist < best_dist) {
            best = name;
            best_dist = dist;
        }
    }
    return best;
}

static int load_fail_unknown(load_ctx *c, yaml_node_t *key, const ProtobufCMessageDescriptor *d) {
    char list[LOAD_LIST_CAP], where[LOAD_QUOTE_CAP + 8], name[LOAD_QUOTE_CAP], hint[128] = "";
    const char *text = (const char *)key->data.scalar.value;
    size_t keylen = key->data.scalar.length;
    if (c->path_len > 0)
        snprintf(where, sizeof where, "in %.*s", LOAD_QUOTE_CAP, c->path);
    else
        snprintf(where, sizeof where, "at the top level");
    load_quote(name, text, keylen);
    const char *s = strlen(text) == keylen ? load_suggest(d, text) : NULL;
    if (s != NULL) snprintf(hint, sizeof hint, " (did you mean \"%s\"?)", s);
    load_field_list(d, list);
    if (load_path_push_key(c, text, load_cut(text, keylen), key->start_mark) < 0) return BT_ERECIPE;
    return load_fail(c, key->start_mark, BT_ERECIPE, "unknown key %s %s%s; valid keys: %s", name,
                     where, hint, list);
}

/* The field named by key node k of a mapping of d, or an error. */
static int load_key_field(load_ctx *c, yaml_node_t *k, const ProtobufCMessageDescriptor *d,
                          const ProtobufCFieldDescriptor **f) {
    char got[LOAD_QUOTE_CAP];
    if (k->type != YAML_SCALAR_NODE || load_is_null(k)) {
        load_describe(k, got);
        return load_fail(c, k->start_mark, BT_ERECIPE, "expected a field name as key, got %s", got);
    }
    const char *name = (const char *)k->data.scalar.value;
    *f = strlen(name) == k->data.scalar.length
             ? protobuf_c_message_descriptor_get_field_by_name(d, name)
             : NULL;
    return *f == NULL ? load_fail_unknown(c, k, d) : 0;
}

/* Rejects key i of mapping n when an earlier key names the same field. Every earlier key
 * is a valid field name, so this is at most n_fields comparisons. */
static int load_check_duplicate(load_ctx *c, yaml_node_t *n, size_t i) {
    yaml_node_pair_t *pairs = n->data.mapping.pairs.start;
    yaml_node_t *k = yaml_document_get_node(c->ydoc, pairs[i].key);
    for (size_t j = 0; j < i; j++) {
        yaml_node_t *prev = yaml_document_get_node(c->ydoc, pairs[j].key);
        if (strcmp((const char *)prev->data.scalar.value, (const char *)k->data.scalar.value))
            continue;
        load_path_push_key(c, (const char *)k->data.scalar.value, k->data.scalar.length,
                           k->start_mark);
        return load_fail(c, k->start_mark, BT_ERECIPE,
                         "duplicate key \"%s\" (first given at line %zu, column %zu)",
                         (const char *)k->data.scalar.value, prev->start_mark.line + 1,
                         prev->start_mark.column + 1);
    }
    return 0;
}

/* Rejects a second member of one oneof. */
static int load_check_oneof(load_ctx *c, yaml_node_t *k, ProtobufCMessage *msg,
                            const ProtobufCFieldDescriptor *f) {
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) return 0;
    uint32_t cur = *(uint32_t *)load_member(msg, f->quantifier_offset);
    if (cur == 0 || cur == f->id) return 0;
    const ProtobufCFieldDescriptor *other =
        protobuf_c_message_descriptor_get_field(msg->descriptor, cur);
    return load_fail(c, k->start_mark, BT_ERECIPE, "\"%s\" cannot be given together with \"%s\"",
                     f->name, other ? other->name : "?");
}

/* Loads pair i of mapping n (whose keys before i were loaded) into msg. */
static int load_pair(load_ctx *c, yaml_node_t *n, size_t i, ProtobufCMessage *msg, int depth) {
    yaml_node_pair_t *pair = &n->data.mapping.pairs.start[i];
    yaml_node_t *k = yaml_document_get_node(c->ydoc, pair->key);
    yaml_node_t *v = yaml_document_get_node(c->ydoc, pair->value);
    const ProtobufCFieldDescriptor *f;
    size_t saved = c->path_len;
    int rc = load_key_field(c, k, msg->descriptor, &f);
    if (rc == 0) rc = load_check_duplicate(c, n, i);
    if (rc == 0) rc = load_check_oneof(c, k, msg, f);
    if (rc == 0) rc = load_path_push_key(c, f->name, strlen(f->name), k->start_mark);
    if (rc == 0) rc = load_pos_add(c, k->start_mark);
    if (rc == 0) rc = load_value(c, v, msg, f, depth + 1);
    if (rc == 0) load_path_pop(c, saved);
    return rc;
}

/* YAML's merge key: "<<: *base" (or "<<: [*a, *b]") merges a mapping's entries into the
 * mapping that holds it. libyaml leaves it to the application, as a plain key "<<". */
static int load_is_merge_key(const yaml_node_t *k) {
    return k->type == YAML_SCALAR_NODE && k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           k->data.scalar.length == 2 && memcmp(k->data.scalar.value, "<<", 2) == 0;
}

/* Whether mapping m gives key k (a scalar) itself, not through a merge key. */
static int load_gives_key(load_ctx *c, yaml_node_t *m, const yaml_node_t *k) {
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *q = yaml_document_get_node(c->ydoc, p->key);
        if (q->type == YAML_SCALAR_NODE && !load_is_merge_key(q) &&
            q->data.scalar.length == k->data.scalar.length &&
            memcmp(q->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0)
            return 1;
    }
    return 0;
}

/* The merge sources of merge value v: v itself (a mapping) or its items (mappings). */
static int load_merge_sources(load_ctx *c, yaml_node_t *v, yaml_node_t **src, size_t *n,
                              int depth) {
    int rc = load_enter(c, v, depth);
    if (rc < 0) return rc;
    if (v->type == YAML_MAPPING_NODE) {
        src[0] = v, *n = 1;
        return 0;
    }
    size_t items = v->type == YAML_SEQUENCE_NODE
                       ? (size_t)(v->data.sequence.items.top - v->data.sequence.items.start)
                       : 0;
    for (size_t i = 0; i < items && i < LOAD_MERGE_MAX; i++) {
        src[i] = yaml_document_get_node(c->ydoc, v->data.sequence.items.start[i]);
        if (src[i]->type != YAML_MAPPING_NODE) items = 0;
    }
    if (items == 0 || items > LOAD_MERGE_MAX)
        return load_fail(c, v->start_mark, BT_ERECIPE,
                         "a merge key (<<) takes a mapping or a list of 1 to %d mappings, "
                         "usually aliases: <<: *base or <<: [*a, *b]",
                         LOAD_MERGE_MAX);
    *n = items;
    return 0;
}

/* Merges the entries of the merge key at pair i of n into msg: each source's keys that n
 * does not give itself and no earlier source gave (YAML's rule: explicit keys win, then
 * the sources in order). Their places are the sources' keys. */
static int load_merge(load_ctx *c, yaml_node_t *n, size_t i, ProtobufCMessage *msg, int depth) {
    yaml_node_pair_t *pair = &n->data.mapping.pairs.start[i];
    yaml_node_t *k = yaml_document_get_node(c->ydoc, pair->key);
    yaml_node_t *src[LOAD_MERGE_MAX];
    size_t nsrc = 0, saved = c->path_len;
    int rc = load_path_push_key(c, "<<", 2, k->start_mark);
    if (rc == 0)
        rc = load_merge_sources(c, yaml_document_get_node(c->ydoc, pair->value), src, &nsrc,
                                depth + 1);
    if (rc < 0) return rc;
    load_path_pop(c, saved);
    for (size_t s = 0; s < nsrc; s++) {
        size_t npairs = (size_t)(src[s]->data.mapping.pairs.top - src[s]->data.mapping.pairs.start);
        for (size_t j = 0; rc == 0 && j < npairs; j++) {
            yaml_node_t *sk =
                yaml_document_get_node(c->ydoc, src[s]->data.mapping.pairs.start[j].key);
            int given = 0;
            if (sk->type == YAML_SCALAR_NODE && !load_is_merge_key(sk)) {
                given = load_gives_key(c, n, sk);
                for (size_t e = 0; !given && e < s; e++)
                    given = load_gives_key(c, src[e], sk);
            } else if (load_is_merge_key(sk)) {
                rc = load_fail(c, sk->start_mark, BT_ERECIPE,
                               "a mapping merged with << holds a merge key of its own; merge "
                               "both into the outer mapping instead: <<: [*a, *b]");
            }
            if (rc == 0 && !given) rc = load_pair(c, src[s], j, msg, depth + 1);
        }
        if (rc < 0) return rc;
    }
    return 0;
}

/* Fills msg from mapping node n, one field per key; then the merge key's entries. */
static int load_message(load_ctx *c, yaml_node_t *n, ProtobufCMessage *msg, int depth) {
    size_t npairs = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    for (size_t i = 0; i < npairs; i++) {
        yaml_node_t *k = yaml_document_get_node(c->ydoc, n->data.mapping.pairs.start[i].key);
        int rc =
            load_is_merge_key(k) ? load_check_duplicate(c, n, i) : load_pair(c, n, i, msg, depth);
        if (rc < 0) return rc;
    }
    for (size_t i = 0; i < npairs; i++) {
        yaml_node_t *k = yaml_document_get_node(c->ydoc, n->data.mapping.pairs.start[i].key);
        int rc = load_is_merge_key(k) ? load_merge(c, n, i, msg, depth) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- input checks and the YAML parser ---------------------------------------------- */

/* Line and column (1-based, columns in characters) of byte offset off in data. */
static void load_offset_mark(const char *data, size_t off, size_t *line, size_t *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        unsigned char ch = (unsigned char)data[i];
        if (ch == '\n') {
            (*line)++;
            *col = 1;
        } else if ((ch & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is invalid. */
static size_t load_utf8_len(const unsigned char *s, size_t n) {
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF)
        len = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        len = 3;
        lo = s[0] == 0xE0 ? 0xA0 : 0x80; /* no overlong forms */
        hi = s[0] == 0xED ? 0x9F : 0xBF; /* no surrogates */
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4;
        lo = s[0] == 0xF0 ? 0x90 : 0x80;
        hi = s[0] == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* Rejects input that is not UTF-8 text or contains NUL bytes. */
static int load_check_text(const char *file, const char *data, size_t len, bt_diag *diag) {
    const unsigned char *s = (const unsigned char *)data;
    size_t line, col;
    for (size_t i = 0; i < len;) {
        size_t n = s[i] == 0 ? 0 : load_utf8_len(s + i, len - i);
        if (n > 0) {
            i += n;
            continue;
        }
        load_offset_mark(data, i, &line, &col);
        bt_diag_set_placed(diag, file, (long)line, (long)col,
                           "not a text file (%s at byte %zu); a recipe is YAML text",
                           s[i] == 0 ? "a NUL byte" : "invalid UTF-8", i);
        return BT_ERECIPE;
    }
    return 0;
}

/* The column (1-based) of the first tab in the indentation of line line0 (0-based) of
 * data (len bytes), or 0 when there is none. */
static size_t load_tab_indent(const char *data, size_t len, size_t line0) {
    size_t i = 0;
    for (size_t l = 0; l < line0 && i < len; i++)
        l += data[i] == '\n';
    for (size_t col = 1; i < len && (data[i] == ' ' || data[i] == '\t'); i++, col++)
        if (data[i] == '\t') return col;
    return 0;
}

/* Reports a libyaml parser failure; one at a tab in the line's indentation (libyaml's
 * own words do not say so) with a hint. */
static int load_fail_yaml(const char *file, const char *data, size_t len, const yaml_parser_t *p,
                          bt_diag *diag) {
    char msg[640];
    size_t line = p->problem_mark.line + 1, col = p->problem_mark.column + 1;
    /* libyaml reports some failed allocations without setting error or problem */
    if (p->error == YAML_MEMORY_ERROR || p->error == YAML_NO_ERROR || p->problem == NULL) {
        bt_diag_set(diag, "%s: out of memory", file);
        return BT_ENOMEM;
    }
    if (p->error == YAML_READER_ERROR) load_offset_mark(data, p->problem_offset, &line, &col);
    if (p->context != NULL)
        snprintf(msg, sizeof msg, "YAML syntax error: %s (%s that starts at line %zu, column %zu)",
                 p->problem, p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    else
        snprintf(msg, sizeof msg, "YAML syntax error: %s", p->problem);
    size_t tab = p->error == YAML_READER_ERROR ? 0 : load_tab_indent(data, len, line - 1);
    if (tab > 0) {
        size_t n = strlen(msg);
        snprintf(msg + n, sizeof msg - n,
                 "; YAML indentation takes spaces, not tabs (a tab at line %zu, column %zu)", line,
                 tab);
    }
    load_diag(diag, file, line, col, NULL, msg);
    return BT_ERECIPE;
}

/* Checks one event of the pre-pass; *depth and *nodes are running counts. */
static int load_check_event(const char *file, const yaml_event_t *ev, int *depth, size_t *nodes,
                            int *ndocs, bt_diag *diag) {
    size_t line = ev->start_mark.line + 1, col = ev->start_mark.column + 1;
    char msg[256];
    if (ev->type == YAML_DOCUMENT_START_EVENT && ++*ndocs > 1) {
        load_diag(diag, file, line, col, NULL,
                  "a second YAML document starts here; a recipe is a single document");
        return BT_ERECIPE;
    }
    if (ev->type == YAML_SEQUENCE_END_EVENT || ev->type == YAML_MAPPING_END_EVENT) --*depth;
    if (ev->type != YAML_SCALAR_EVENT && ev->type != YAML_SEQUENCE_START_EVENT &&
        ev->type != YAML_MAPPING_START_EVENT)
        return 0;
    if (++*nodes > LOAD_MAX_NODES) {
        snprintf(msg, sizeof msg, "more than %u YAML values; a recipe is a small file",
                 LOAD_MAX_NODES);
        load_diag(diag, file, line, col, NULL, msg);
        return BT_ERECIPE;
    }
    if (ev->type != YAML_SCALAR_EVENT && ++*depth > LOAD_MAX_DEPTH) {
        snprintf(msg, sizeof msg, "nested deeper than %d levels", LOAD_MAX_DEPTH);
        load_diag(diag, file, line, col, NULL, msg);
        return BT_ERECIPE;
    }
    return 0;
}

/* Runs the event parser over the input to enforce the limits before anything is built;
 * stops at the first problem, so a deep "[[[[..." costs only LOAD_MAX_DEPTH levels. */
static int load_prescan(const char *file, const char *data, size_t len, size_t *nodes,
                        bt_diag *diag) {
    yaml_parser_t p;
    yaml_event_t ev;
    int depth = 0, ndocs = 0, rc = 0, done = 0;
    *nodes = 0;
    if (!yaml_parser_initialize(&p)) {
        bt_diag_set(diag, "%s: out of memory", file);
        return BT_ENOMEM;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)data, len);
    while (rc == 0 && !done) {
        if (!yaml_parser_parse(&p, &ev)) {
            rc = load_fail_yaml(file, data, len, &p, diag);
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        rc = load_check_event(file, &ev, &depth, nodes, &ndocs, diag);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return rc;
}

/* Maps the root node of ydoc onto a new Recipe. */
static int load_root(load_ctx *c, yaml_node_t *root, Baton__Recipe **out) {
    static const char shape[] = "a mapping with model, cluster, defaults and stages";
    if (root == NULL || load_is_null(root)) {
        yaml_mark_t start = root ? root->start_mark : (yaml_mark_t){0, 0, 0};
        return load_fail(c, start, BT_ERECIPE, "empty recipe: expected %s", shape);
    }
    if (root->type != YAML_MAPPING_NODE) {
        char got[LOAD_QUOTE_CAP];
        load_describe(root, got);
        return load_fail(c, root->start_mark, BT_ERECIPE, "a recipe must be %s, got %s", shape,
                         got);
    }
    ProtobufCMessage *msg = load_new_message(c, &baton__recipe__descriptor);
    if (msg == NULL) return BT_ENOMEM;
    int rc = load_pos_add(c, root->start_mark);
    if (rc == 0) rc = load_message(c, root, msg, 1);
    if (rc < 0) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return rc;
    }
    *out = (Baton__Recipe *)msg;
    return 0;
}

/* Parses the (pre-scanned) input into a YAML document and maps it. */
static int load_document(load_ctx *c, const char *data, size_t len, size_t nodes) {
    yaml_parser_t p;
    yaml_document_t ydoc;
    int rc;
    if (!yaml_parser_initialize(&p)) return load_oom(c);
    yaml_parser_set_input_string(&p, (const unsigned char *)data, len);
    if (!yaml_parser_load(&p, &ydoc)) {
        rc = load_fail_yaml(c->file, data, len, &p, c->diag);
        yaml_parser_delete(&p);
        return rc;
    }
    c->ydoc = &ydoc;
    c->max_visits = nodes + LOAD_ALIAS_BUDGET;
    rc = load_root(c, yaml_document_get_root_node(&ydoc), &c->doc->recipe);
    yaml_document_delete(&ydoc);
    yaml_parser_delete(&p);
    return rc;
}

/* ---- public --------------------------------------------------------------------- */

void recipe_doc_free(recipe_doc *doc) {
    if (doc == NULL) return;
    for (size_t i = 0; i < doc->npos; i++) {
        free(doc->pos[i].path);
        free(doc->pos[i].set);
    }
    free(doc->pos);
    free(doc->file);
    free(doc->text);
    if (doc->recipe != NULL) protobuf_c_message_free_unpacked(&doc->recipe->base, NULL);
    memset(doc, 0, sizeof *doc);
}

int recipe_load_buffer(const char *name, const char *data, size_t len, recipe_doc *doc,
                       bt_diag *diag) {
    load_ctx *c;
    size_t nodes;
    int rc;
    const char *file = name ? name : "<recipe>";
    memset(doc, 0, sizeof *doc);
    if (len > LOAD_MAX_BYTES) {
        bt_diag_set(diag, "%s: larger than %u MiB; a recipe is a small text file", file,
                    LOAD_MAX_BYTES >> 20);
        return BT_ERECIPE;
    }
    if (data == NULL) data = "";
    if ((rc = load_check_text(file, data, len, diag)) < 0 ||
        (rc = load_prescan(file, data, len, &nodes, diag)) < 0)
        return rc;
    if ((c = calloc(1, sizeof *c)) == NULL) {
        bt_diag_set(diag, "%s: out of memory", file);
        return BT_ENOMEM;
    }
    *c = (load_ctx){.file = file, .doc = doc, .diag = diag};
    rc = load_document(c, data, len, nodes);
    free(c);
    doc->warn = stderr;
    if (rc == 0 && (doc->file = strdup(file)) == NULL) {
        bt_diag_set(diag, "%s: out of memory", file);
        rc = BT_ENOMEM;
    }
    if (rc < 0) recipe_doc_free(doc);
    return rc;
}

/* recipe_load_file, of a run's kept copy when kept (recipe_load_kept). */
static int load_file(const char *path, int kept, recipe_doc *doc, bt_diag *diag) {
    char *data = NULL;
    size_t len = 0;
    int once = 0;
    memset(doc, 0, sizeof *doc);
    if (path[0] == '\0') {
        bt_diag_set(diag, "'': an empty file name; give the recipe's path (a YAML file)");
        return BT_ENOENT;
    }
    int rc = 0;
    if (!kept) {
        rc = recipe_read_file(path, &data, &len, &once, diag);
    } else if (bt_read_private(path, RECIPE_MAX_BYTES, 0, &data, &len) != 0) {
        rc = errno == ENOENT ? BT_ENOENT : BT_EIO;
        bt_diag_set(diag, "%s: cannot %s: %s", path, errno == ENOENT ? "open" : "read",
                    bt_file_why(errno));
    }
    if (rc < 0) return rc;
    rc = recipe_load_buffer(path, data, len, doc, diag);
    if (rc < 0) {
        free(data);
        return rc;
    }
    doc->text = data; /* the bytes parsed, kept: never read again */
    doc->text_len = len;
    doc->text_once = once;
    return 0;
}

int recipe_load_file(const char *path, recipe_doc *doc, bt_diag *diag) {
    return load_file(path, 0, doc, diag);
}

int recipe_load_kept(const char *path, recipe_doc *doc, bt_diag *diag) {
    return load_file(path, 1, doc, diag);
}

/* Whether path[0, len) is recorded; returns its index or -1. The last entry wins: the
 * overrides are appended after the file's entries, in the order they were applied. */
static long load_find(const recipe_doc *doc, const char *path, size_t len) {
    for (size_t i = doc->npos; i-- > 0;)
        if (strlen(doc->pos[i].path) == len && strncmp(doc->pos[i].path, path, len) == 0)
            return (long)i;
    return -1;
}

const recipe_pos *recipe_doc_find(const recipe_doc *doc, const char *path) {
    size_t len = strlen(path);
    for (;;) {
        long i = load_find(doc, path, len);
        if (i >= 0) return &doc->pos[i];
        if (len == 0) return NULL;
        do /* the next shorter prefix ends before a '.' or '[' */
            len--;
        while (len > 0 && path[len] != '.' && path[len] != '[');
    }
}

int recipe_doc_where(const recipe_doc *doc, const char *path, int *line, int *col) {
    const recipe_pos *p = recipe_doc_find(doc, path);
    *line = p ? p->line : 0;
    *col = p ? p->col : 0;
    return p ? 0 : -1;
}
