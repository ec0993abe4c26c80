/* Checking a whole checkpoint: what `baton ckpt verify` reports. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "crc32c.h"

typedef struct verify_ctx {
    const char *dir;
    const Baton__Manifest *m;
    void (*fn)(void *, const char *);
    void *ctx;
    ckpt_verify_report *rep;
    unsigned char *buf;
    size_t cap;
    int unreadable; /* a shard file this process may not read: no verdict (diag says which) */
    bt_diag *diag;
} verify_ctx;

__attribute__((format(printf, 2, 3))) static void verify_problem(verify_ctx *v, const char *fmt,
                                                                 ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    v->rep->problems++;
    if (v->fn) v->fn(v->ctx, line);
}

/* Reads the shard's bytes and checks the whole and per-block CRCs. */
static void verify_shard_bytes(verify_ctx *v, const Baton__TensorEntry *e, size_t si) {
    const Baton__Shard *s = e->shards[si];
    char p[CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", v->dir, s->file);
    if (v->cap < s->byte_length) {
        unsigned char *b = realloc(v->buf, s->byte_length);
        if (b == NULL) return verify_problem(v, "%s: out of memory reading tensor %s", p, e->key);
        v->buf = b, v->cap = s->byte_length;
    }
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && (errno == EACCES || errno == EPERM)) { /* not damage: not ours to read */
        if (!v->unreadable) bt_diag_set(v->diag, "%s: cannot read (%s)", p, strerror(errno));
        v->unreadable = 1;
        return;
    }
    if (fd < 0) return verify_problem(v, "%s: missing (tensor %s): %s", p, e->key, strerror(errno));
    uint64_t got = 0;
    ssize_t r = 1;
    while (got < s->byte_length &&
           (r = pread(fd, v->buf + got, s->byte_length - got, (off_t)(s->byte_offset + got))) > 0)
        got += (uint64_t)r;
    off_t end = lseek(fd, 0, SEEK_END);
    close(fd);
    unsigned long long a = s->byte_offset, b = s->byte_offset + s->byte_length;
    if (got < s->byte_length)
        return verify_problem(v,
                              "%s: truncated at byte %llu: tensor %s shard %zu needs [%llu, %llu)",
                              p, end >= 0 ? (unsigned long long)end : a + got, e->key, si, a, b);
    uint64_t bb = v->m->block_bytes ? v->m->block_bytes : CKPT_DEFAULT_BLOCK;
    for (size_t k = 0; k < s->n_block_crc32c; k++) {
        uint64_t lo = k * bb, hi = lo + bb < s->byte_length ? lo + bb : s->byte_length;
        if (lo < s->byte_length && crc32c_update(0, v->buf + lo, hi - lo) != s->block_crc32c[k])
            verify_problem(
                v,
                "%s: bytes [%llu, %llu) damaged (CRC32C mismatch): tensor %s shard %zu block %zu",
                p, a + lo, a + hi, e->key, si, k);
    }
    if (s->has_crc32c && crc32c_update(0, v->buf, s->byte_length) != s->crc32c &&
        s->n_block_crc32c == 0)
        verify_problem(v, "%s: bytes [%llu, %llu) damaged (CRC32C mismatch): tensor %s shard %zu",
                       p, a, b, e->key, si);
    v->rep->bytes += s->byte_length;
}

/* Geometry of every shard, then coverage: the counts add up to the tensor and no two
 * shards overlap. */
static void verify_tensor(verify_ctx *v, const Baton__TensorEntry *e) {
    uint64_t total = 0, want = ckpt_tensor_count(e);
    size_t esz = ckpt_dtype_size(e->dtype);
    ckpt_box *boxes = calloc(e->n_shards ? e->n_shards : 1, sizeof *boxes);
    int geom_ok = boxes != NULL;
    for (size_t i = 0; boxes && i < e->n_shards; i++) {
        const Baton__Shard *s = e->shards[i];
        if (ckpt_box_from_shard(e, s, &boxes[i]) != 0 || !s->file || strchr(s->file, '/') ||
            esz == 0 || s->byte_length != ckpt_box_count(&boxes[i]) * esz) {
            verify_problem(v, "%s/%s: tensor %s shard %zu: box, range or length inconsistent",
                           v->dir, CKPT_MANIFEST, e->key, i);
            geom_ok = 0;
            continue;
        }
        total += ckpt_box_count(&boxes[i]);
        verify_shard_bytes(v, e, i);
        v->rep->shards++;
    }
    for (size_t i = 0; geom_ok && i < e->n_shards; i++)
        for (size_t j = i + 1; j < e->n_shards; j++) {
            uint64_t n = 0;
            ckpt_box_overlap(&boxes[i], &boxes[j], NULL, NULL, &n);
            if (n)
                verify_problem(v, "tensor %s: shards %zu and %zu overlap in %llu elements", e->key,
                               i, j, (unsigned long long)n);
        }
    if (geom_ok && total != want)
        verify_problem(v, "tensor %s: the shards hold %llu elements, the tensor has %llu%s", e->key,
                       (unsigned long long)total, (unsigned long long)want,
                       total < want ? " (a part is missing)" : "");
    free(boxes);
}

/* Entry i of m's tensors followed by its fp8 histories (NULL for a state without one). */
static const Baton__TensorEntry *verify_entry(const Baton__Manifest *m, size_t i) {
    return i < m->n_tensors ? m->tensors[i] : m->fp8[i - m->n_tensors]->history;
}

typedef struct verify_file {
    const char *name;
    uint64_t end; /* of the last range the manifest places in it */
} verify_file;

/* Bytes after the last range the manifest places in a shard file: not the file a save
 * wrote (appended to, or another file of that name). */
static void verify_trailing(verify_ctx *v) {
    verify_file *f = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < v->m->n_tensors + v->m->n_fp8; i++) {
        const Baton__TensorEntry *e = verify_entry(v->m, i);
        for (size_t k = 0; e && k < e->n_shards; k++) {
            const Baton__Shard *s = e->shards[k];
            size_t j = 0;
            while (s->file && j < n && strcmp(f[j].name, s->file) != 0)
                j++;
            if (s->file == NULL || strchr(s->file, '/')) continue;
            if (j == n && n == cap) {
                verify_file *g = realloc(f, (cap = cap ? cap * 2 : 16) * sizeof *g);
                if (g == NULL) return free(f);
                f = g;
            }
            if (j == n) f[n++] = (verify_file){s->file, 0};
            if (s->byte_offset + s->byte_length > f[j].end)
                f[j].end = s->byte_offset + s->byte_length;
        }
    }
    for (size_t j = 0; j < n; j++) {
        char p[CKPT_PATH_MAX];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", v->dir, f[j].name);
        if (stat(p, &st) == 0 && (uint64_t)st.st_size > f[j].end)
            verify_problem(v,
                           "%s: bytes [%llu, %llu) lie after the last range the manifest "
                           "places there (trailing data: appended to, or not the file saved)",
                           p, (unsigned long long)f[j].end, (unsigned long long)st.st_size);
    }
    free(f);
}

int ckpt_verify(const char *dir, const Baton__Manifest *m, void (*fn)(void *, const char *),
                void *ctx, ckpt_verify_report *out, bt_diag *diag) {
    memset(out, 0, sizeof *out);
    verify_ctx v = {.dir = dir, .m = m, .fn = fn, .ctx = ctx, .rep = out, .diag = diag};
    for (size_t i = 0; i < m->n_tensors; i++)
        verify_tensor(&v, m->tensors[i]), out->tensors++;
    for (size_t i = 0; i < m->n_fp8; i++) {
        const Baton__TensorEntry *h = m->fp8[i]->history;
        if (h == NULL) continue;
        if (h->n_global_shape != 1 || h->dtype != BATON__DTYPE__F32)
            verify_problem(&v, "fp8 state %s: its history is not a 1-D float32 tensor",
                           m->fp8[i]->tensor ? m->fp8[i]->tensor : "?");
        verify_tensor(&v, h), out->fp8_histories++;
    }
    verify_trailing(&v);
    free(v.buf);
    return v.unreadable ? BT_EIO : 0;
}
