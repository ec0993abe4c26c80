/* safetensors reading and writing; see safetensors.h. Little-endian hosts only, like
 * the rest of baton's file formats. */
#include "safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_json.h"
#include "util/buf.h"
#include "util/utf8.h"

static const char *const dtype_names[] = {"F32", "BF16", "F16"};

const char *safetensors_dtype_name(safetensors_dtype t) {
    return (unsigned)t < 3 ? dtype_names[t] : "?";
}

size_t safetensors_dtype_size(safetensors_dtype t) {
    return t == SAFETENSORS_F32 ? 4 : 2;
}

uint64_t safetensors_count(const safetensors_tensor *t) {
    uint64_t n = 1;
    for (int k = 0; k < t->ndim; k++)
        n *= t->shape[k];
    return n;
}

/* ---- writing ---- */

void safetensors_header(safetensors_tensor *t, size_t n, bt_buf *out, uint64_t *data_bytes) {
    size_t start = out->len;
    uint64_t off = 0;
    bt_buf_printf(out, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++) {
        t[i].begin = off;
        t[i].end = off += safetensors_count(&t[i]) * safetensors_dtype_size(t[i].dtype);
        bt_buf_printf(out, ",");
        bt_buf_json_string(out, t[i].name);
        bt_buf_printf(out, ":{\"dtype\":\"%s\",\"shape\":[", safetensors_dtype_name(t[i].dtype));
        for (int k = 0; k < t[i].ndim; k++)
            bt_buf_printf(out, "%s%" PRIu64, k ? "," : "", t[i].shape[k]);
        bt_buf_printf(out, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", t[i].begin, t[i].end);
    }
    bt_buf_printf(out, "}");
    while ((out->len - start) % 8 != 0)
        bt_buf_append(out, " ", 1);
    *data_bytes = off;
}

void safetensors_prefix(uint64_t len, unsigned char out[8]) {
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(len >> (8 * i));
}

/* ---- reading ---- */

/* The name as a message shows it (bt_buf_text: control characters escaped). */
static int st_bad(bt_diag *diag, const char *path, const char *name, const char *what) {
    bt_buf b;
    bt_buf_init(&b);
    bt_diag_set(diag, "%s: tensor '%s': %s", path, bt_buf_text_of(&b, name), what);
    bt_buf_free(&b);
    return BT_EINVAL;
}

/* A name baton can keep and print: not empty, no control character (the JSON parser
 * already refused \u0000 and text that is not UTF-8). */
static int st_name_ok(const char *path, const char *name, bt_diag *diag) {
    size_t at = bt_utf8_first_unprintable(name);
    char what[96];
    if (name[0] == '\0') return st_bad(diag, path, name, "an empty name");
    if (name[at] == '\0') return 0;
    snprintf(what, sizeof what, "its name holds a control character (byte %zu of the name)", at);
    return st_bad(diag, path, name, what);
}

static int st_u64_array(const hf_json *a, uint64_t *out, int max, int *n) {
    if (a == NULL || a->type != HF_JSON_ARRAY || a->n > (size_t)max) return -1;
    for (size_t k = 0; k < a->n; k++) {
        if (a->items[k].type != HF_JSON_NUMBER || !a->items[k].is_u64) return -1;
        out[k] = a->items[k].u64;
    }
    *n = (int)a->n;
    return 0;
}

static int st_dtype(const hf_json *d, safetensors_dtype *out) {
    for (int k = 0; k < 3; k++)
        if (strcmp(d->str, dtype_names[k]) == 0) return *out = (safetensors_dtype)k, 0;
    return -1;
}

/* One header member into t, its byte range checked against its shape. */
static int st_entry(const hf_json *e, const char *path, safetensors_tensor *t, bt_diag *diag) {
    const char *name = e->key;
    if (st_name_ok(path, name, diag) != 0) return BT_EINVAL;
    if (e->type != HF_JSON_OBJECT) return st_bad(diag, path, name, "entry is not an object");
    const hf_json *d = hf_json_get(e, "dtype");
    if (d == NULL || d->type != HF_JSON_STRING)
        return st_bad(diag, path, name, "missing \"dtype\" string");
    if (st_dtype(d, &t->dtype) != 0) {
        bt_buf b;
        bt_buf_init(&b);
        bt_buf_text(&b, d->str);
        bt_diag_set(diag, "%s: tensor '%s' has dtype %s; only F32, BF16 and F16 can be read", path,
                    name, bt_buf_str(&b));
        bt_buf_free(&b);
        return BT_EUNSUPPORTED;
    }
    if (st_u64_array(hf_json_get(e, "shape"), t->shape, SAFETENSORS_MAX_DIMS, &t->ndim) != 0)
        return st_bad(diag, path, name, "\"shape\" must be an array of at most 8 sizes");
    uint64_t off[2];
    int n_off;
    if (st_u64_array(hf_json_get(e, "data_offsets"), off, 2, &n_off) != 0 || n_off != 2 ||
        off[1] < off[0])
        return st_bad(diag, path, name, "\"data_offsets\" must be [begin, end] with begin <= end");
    uint64_t count = 1;
    for (int k = 0; k < t->ndim; k++) {
        if (t->shape[k] != 0 && count > UINT64_MAX / 8 / t->shape[k])
            return st_bad(diag, path, name, "shape too large");
        count *= t->shape[k];
    }
    if (off[1] - off[0] != count * safetensors_dtype_size(t->dtype))
        return st_bad(diag, path, name, "\"data_offsets\" do not span its shape's bytes");
    t->begin = off[0], t->end = off[1];
    t->name = strdup(name);
    return t->name == NULL ? BT_ENOMEM : 0;
}

static int st_by_begin(const void *a, const void *b) {
    const safetensors_tensor *x = *(safetensors_tensor *const *)a;
    const safetensors_tensor *y = *(safetensors_tensor *const *)b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

/* Two tensors whose bytes overlap (o sorted by begin): the first such pair named. */
static int st_check_overlap(safetensors_tensor **o, size_t n, const char *path, bt_diag *diag) {
    size_t last = 0; /* the tensor reaching furthest so far */
    for (size_t i = 1; i < n; i++) {
        if (o[i]->begin < o[last]->end && o[i]->end > o[i]->begin) {
            char what[512];
            bt_buf b;
            bt_buf_init(&b);
            snprintf(what, sizeof what,
                     "its data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s''s [%" PRIu64
                     ", %" PRIu64 ")",
                     o[i]->begin, o[i]->end, bt_buf_text_of(&b, o[last]->name), o[last]->begin,
                     o[last]->end);
            bt_buf_free(&b);
            return st_bad(diag, path, o[i]->name, what);
        }
        if (o[i]->end > o[last]->end) last = i;
    }
    return 0;
}

/* The tensors' ranges must tile [0, data_size): none overlapping another, no hole between
 * them, and a shorter file is truncated. */
static int st_check_tiling(safetensors_file *sf, bt_diag *diag) {
    if (sf->n == 0) return 0;
    safetensors_tensor **o = malloc(sf->n * sizeof *o);
    if (o == NULL) return BT_ENOMEM;
    for (size_t i = 0; i < sf->n; i++)
        o[i] = &sf->t[i];
    qsort(o, sf->n, sizeof *o, st_by_begin);
    int rc = st_check_overlap(o, sf->n, sf->path, diag);
    uint64_t at = 0;
    for (size_t i = 0; i < sf->n && rc == 0; i++) {
        if (o[i]->begin > at)
            rc = st_bad(diag, sf->path, o[i]->name, "a hole in the data buffer before it");
        if (o[i]->end > at) at = o[i]->end;
    }
    if (rc == 0 && at > sf->data_size) {
        bt_diag_set(diag,
                    "%s: truncated: the header describes %" PRIu64 " data bytes, the file "
                    "holds %" PRIu64,
                    sf->path, at, sf->data_size);
        rc = BT_EINVAL;
    } else if (rc == 0 && at < sf->data_size) {
        bt_diag_set(diag, "%s: %" PRIu64 " bytes after the last tensor's data", sf->path,
                    sf->data_size - at);
        rc = BT_EINVAL;
    }
    free(o);
    return rc;
}

static int st_parse_header(safetensors_file *sf, const char *text, size_t len, bt_diag *diag) {
    hf_json root;
    int rc = hf_json_parse(text, len, sf->path, &root, diag);
    if (rc) return rc;
    if (root.type != HF_JSON_OBJECT) {
        bt_diag_set(diag, "%s: the header is not a JSON object", sf->path);
        hf_json_free(&root);
        return BT_EINVAL;
    }
    sf->t = calloc(root.n ? root.n : 1, sizeof *sf->t);
    if (sf->t == NULL) rc = BT_ENOMEM;
    for (size_t i = 0; i < root.n && rc == 0; i++) {
        if (strcmp(root.items[i].key, "__metadata__") == 0) continue;
        rc = st_entry(&root.items[i], sf->path, &sf->t[sf->n], diag);
        if (rc == 0) sf->n++;
    }
    hf_json_free(&root);
    return rc ? rc : st_check_tiling(sf, diag);
}

static int st_read_header(safetensors_file *sf, uint64_t file_size, bt_diag *diag) {
    unsigned char pre[8];
    if (file_size < 8 || fread(pre, 1, 8, sf->f) != 8) {
        bt_diag_set(diag, "%s: truncated: shorter than the 8-byte header length", sf->path);
        return BT_EINVAL;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | pre[i];
    if (n > SAFETENSORS_MAX_HEADER || n > file_size - 8) {
        bt_diag_set(diag,
                    "%s: header length %" PRIu64 " is %s (file of %" PRIu64 " bytes); not a "
                    "safetensors file, or truncated",
                    sf->path, n, n > SAFETENSORS_MAX_HEADER ? "over 100 MiB" : "past the end",
                    file_size);
        return BT_EINVAL;
    }
    char *text = malloc(n ? n : 1);
    if (text == NULL) return BT_ENOMEM;
    int rc = 0;
    if (fread(text, 1, n, sf->f) != n) {
        bt_diag_set(diag, "%s: cannot read the header: %s", sf->path, strerror(errno));
        rc = BT_EIO;
    }
    sf->data_start = 8 + n;
    sf->data_size = file_size - 8 - n;
    if (rc == 0) rc = st_parse_header(sf, text, n, diag);
    free(text);
    return rc;
}

int safetensors_open(safetensors_file *sf, const char *path, bt_diag *diag) {
    memset(sf, 0, sizeof *sf);
    sf->path = strdup(path);
    if (sf->path == NULL) return BT_ENOMEM;
    sf->f = fopen(path, "rb");
    struct stat st;
    if (sf->f == NULL || fstat(fileno(sf->f), &st) != 0) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        safetensors_close(sf);
        return errno == ENOENT ? BT_ENOENT : BT_EIO;
    }
    int rc = st_read_header(sf, (uint64_t)st.st_size, diag);
    if (rc) safetensors_close(sf);
    return rc;
}

void safetensors_close(safetensors_file *sf) {
    if (sf->f != NULL) fclose(sf->f);
    for (size_t i = 0; i < sf->n; i++)
        free(sf->t[i].name);
    free(sf->t);
    free(sf->path);
    memset(sf, 0, sizeof *sf);
}

const safetensors_tensor *safetensors_find(const safetensors_file *sf, const char *name) {
    for (size_t i = 0; i < sf->n; i++)
        if (strcmp(sf->t[i].name, name) == 0) return &sf->t[i];
    return NULL;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE half to float, exactly (every half is a float). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF, u;
    if (e == 0x1F) {
        u = sign | 0x7F800000u | m << 13;
    } else if (e != 0) {
        u = sign | (e + 112) << 23 | m << 13;
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400))
            m <<= 1, e--;
        u = sign | e << 23 | (m & 0x3FF) << 13;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int safetensors_read_f32(safetensors_file *sf, const safetensors_tensor *t, float *out,
                         bt_diag *diag) {
    uint64_t n = safetensors_count(t), bytes = t->end - t->begin;
    void *raw = t->dtype == SAFETENSORS_F32 ? (void *)out : malloc(bytes ? bytes : 1);
    if (raw == NULL) return BT_ENOMEM;
    int rc = 0;
    if (fseeko(sf->f, (off_t)(sf->data_start + t->begin), SEEK_SET) != 0 ||
        fread(raw, 1, bytes, sf->f) != bytes) {
        bt_diag_set(diag, "%s: tensor '%s': cannot read %" PRIu64 " bytes at %" PRIu64 ": %s",
                    sf->path, t->name, bytes, sf->data_start + t->begin,
                    feof(sf->f) ? "end of file" : strerror(errno));
        rc = BT_EIO;
    }
    const uint16_t *h = raw;
    for (uint64_t i = 0; rc == 0 && t->dtype != SAFETENSORS_F32 && i < n; i++)
        out[i] = t->dtype == SAFETENSORS_BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    if (raw != out) free(raw);
    return rc;
}
