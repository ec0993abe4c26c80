#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "crc32c.h"

const Baton__TensorEntry *ckpt_find(const Baton__Manifest *m, const char *key) {
    for (size_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i]->key && strcmp(m->tensors[i]->key, key) == 0) return m->tensors[i];
    return NULL;
}

static const char *nz(const char *s) {
    return s ? s : "";
}

static int tensor_cmp(const void *a, const void *b) {
    return strcmp(nz((*(Baton__TensorEntry *const *)a)->key),
                  nz((*(Baton__TensorEntry *const *)b)->key));
}

static int fp8_cmp(const void *a, const void *b) {
    return strcmp(nz((*(Baton__Fp8State *const *)a)->tensor),
                  nz((*(Baton__Fp8State *const *)b)->tensor));
}

void ckpt_manifest_sort_keys(Baton__Manifest *m) {
    if (m->n_tensors > 1) qsort(m->tensors, m->n_tensors, sizeof *m->tensors, tensor_cmp);
    if (m->n_fp8 > 1) qsort(m->fp8, m->n_fp8, sizeof *m->fp8, fp8_cmp);
}

const Baton__TensorEntry *ckpt_find_sorted(const Baton__Manifest *m, const char *key) {
    Baton__TensorEntry probe = {.key = (char *)key}, *pp = &probe, **hit;
    hit = m->n_tensors ? bsearch(&pp, m->tensors, m->n_tensors, sizeof *m->tensors, tensor_cmp)
                       : NULL;
    return hit ? *hit : NULL;
}

const Baton__Fp8State *ckpt_fp8_find_sorted(const Baton__Manifest *m, const char *name) {
    Baton__Fp8State probe = {.tensor = (char *)name}, *pp = &probe, **hit;
    hit = m->n_fp8 ? bsearch(&pp, m->fp8, m->n_fp8, sizeof *m->fp8, fp8_cmp) : NULL;
    return hit ? *hit : NULL;
}

size_t ckpt_dtype_size(Baton__DType t) {
    switch (t) {
    case BATON__DTYPE__F32:
        return 4;
    case BATON__DTYPE__BF16:
    case BATON__DTYPE__F16:
        return 2;
    case BATON__DTYPE__E4M3:
    case BATON__DTYPE__E5M2:
        return 1;
    case BATON__DTYPE__F64:
        return 8;
    default:
        return 0;
    }
}

uint64_t ckpt_tensor_count(const Baton__TensorEntry *e) {
    uint64_t n = e->n_global_shape ? 1 : 0;
    for (size_t k = 0; k < e->n_global_shape; k++)
        n *= e->global_shape[k];
    return n;
}

/* The runs of one shard that a read needs, collected before any I/O. */
typedef struct read_runs {
    ckpt_run *v;
    size_t n, cap;
} read_runs;

static int read_collect(void *ctx, const ckpt_run *run) {
    read_runs *r = ctx;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        ckpt_run *v = realloc(r->v, cap * sizeof *v);
        if (v == NULL) return BT_ENOMEM;
        r->v = v, r->cap = cap;
    }
    r->v[r->n++] = *run;
    return 0;
}

static float read_elem(const unsigned char *p, Baton__DType t) {
    if (t == BATON__DTYPE__BF16) {
        uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* One shard of a tensor, as a read sees it. */
typedef struct read_span {
    ckpt_reader *r; /* the checkpoint (dir, manifest) and its open files */
    const Baton__TensorEntry *e;
    const Baton__Shard *s;
} read_span;

void ckpt_reader_init(ckpt_reader *r, const char *dir, const Baton__Manifest *m) {
    memset(r, 0, sizeof *r);
    r->dir = dir, r->m = m;
}

void ckpt_reader_close(ckpt_reader *r) {
    for (int i = 0; i < r->n_fd; i++) {
        close(r->fd[i].fd);
        free(r->fd[i].name);
    }
    r->n_fd = 0;
}

/* Closes r's least recently used file and drops it from the list. */
static void reader_evict(ckpt_reader *r) {
    int lru = 0;
    for (int i = 1; i < r->n_fd; i++)
        if (r->fd[i].used < r->fd[lru].used) lru = i;
    close(r->fd[lru].fd);
    free(r->fd[lru].name);
    r->fd[lru] = r->fd[--r->n_fd];
}

/* Shard file name of r's checkpoint, open for reading: kept open for the next reads, the
 * least recently used closed when CKPT_READER_FDS are, or when the process has no
 * descriptor left (EMFILE, ENFILE). -1 with errno on failure. */
static int reader_fd(ckpt_reader *r, const char *name) {
    for (int i = 0; i < r->n_fd; i++)
        if (strcmp(r->fd[i].name, name) == 0) {
            r->fd[i].used = ++r->tick;
            return r->fd[i].fd;
        }
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && (errno == EMFILE || errno == ENFILE) && r->n_fd > 0) {
        reader_evict(r);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    char *copy = fd >= 0 ? strdup(name) : NULL;
    if (fd < 0 || copy == NULL) {
        int err = fd < 0 ? errno : ENOMEM;
        if (fd >= 0) close(fd);
        errno = err;
        return -1;
    }
    r->opens++;
    if (r->n_fd == CKPT_READER_FDS) reader_evict(r);
    int slot = r->n_fd++;
    r->fd[slot].name = copy, r->fd[slot].fd = fd, r->fd[slot].used = ++r->tick;
    return fd;
}

static int read_check_blocks(const read_span *sp, const unsigned char *buf, uint64_t A, uint64_t B,
                             bt_diag *diag) {
    const Baton__Shard *s = sp->s;
    uint64_t bb = sp->r->m->block_bytes ? sp->r->m->block_bytes : CKPT_DEFAULT_BLOCK;
    uint64_t nblocks = (s->byte_length + bb - 1) / bb;
    if (s->n_block_crc32c != 0 && s->n_block_crc32c != nblocks) {
        bt_diag_set(diag,
                    "%s/%s: tensor %s: %zu block checksums for %llu blocks of %llu bytes: the "
                    "manifest is inconsistent",
                    sp->r->dir, s->file, sp->e->key, s->n_block_crc32c, (unsigned long long)nblocks,
                    (unsigned long long)bb);
        return BT_EINVAL;
    }
    if (s->n_block_crc32c == 0) {
        /* no block checksums: only a whole-shard read can be checked */
        if (A == 0 && B == s->byte_length && s->has_crc32c &&
            crc32c_update(0, buf, B) != s->crc32c) {
            bt_diag_set(diag, "%s/%s: bytes [%llu, %llu) of tensor %s: CRC32C mismatch", sp->r->dir,
                        s->file, (unsigned long long)s->byte_offset,
                        (unsigned long long)(s->byte_offset + s->byte_length), sp->e->key);
            return BT_EIO;
        }
        return 0;
    }
    for (uint64_t k = A / bb; k * bb < B; k++) {
        uint64_t lo = k * bb, hi = lo + bb < s->byte_length ? lo + bb : s->byte_length;
        if (crc32c_update(0, buf + (lo - A), hi - lo) != s->block_crc32c[k]) {
            bt_diag_set(diag,
                        "%s/%s: bytes [%llu, %llu) (tensor %s, block %llu): CRC32C mismatch, the "
                        "checkpoint is damaged",
                        sp->r->dir, s->file, (unsigned long long)(s->byte_offset + lo),
                        (unsigned long long)(s->byte_offset + hi), sp->e->key,
                        (unsigned long long)k);
            return BT_EIO;
        }
    }
    return 0;
}

/* The bytes [A, B) of a shard to read for its bytes [a, b) (relative to its
 * byte_offset): widened to whole CRC blocks, or to the whole shard when only the shard
 * has a checksum. */
static void span_bounds(const read_span *sp, uint64_t a, uint64_t b, uint64_t *A, uint64_t *B) {
    const Baton__Shard *s = sp->s;
    uint64_t bb = sp->r->m->block_bytes ? sp->r->m->block_bytes : CKPT_DEFAULT_BLOCK;
    int blocks = s->n_block_crc32c > 0;
    *A = blocks ? a / bb * bb : 0;
    *B = blocks ? (b + bb - 1) / bb * bb : s->byte_length;
    if (*B > s->byte_length) *B = s->byte_length;
    if (!blocks && s->has_crc32c) *A = 0, *B = s->byte_length;
}

/* Bytes [lo, hi) of a shard read into dst (where byte lo goes) and checked: one part of a
 * span, run on a thread of its own for the upper half of a large one. */
typedef struct read_part {
    const read_span *sp;
    int fd;
    unsigned char *dst;
    uint64_t lo, hi, got;
    int rc;
    bt_diag diag;
} read_part;

static void *read_part_run(void *arg) {
    read_part *p = arg;
    const Baton__Shard *s = p->sp->s;
    while (p->got < p->hi - p->lo) {
        ssize_t r = pread(p->fd, p->dst + p->got, p->hi - p->lo - p->got,
                          (off_t)(s->byte_offset + p->lo + p->got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        p->got += (uint64_t)r;
    }
    if (p->got == p->hi - p->lo) p->rc = read_check_blocks(p->sp, p->dst, p->lo, p->hi, &p->diag);
    return NULL;
}

/* Spans of at least this many bytes are read and checked as two halves on two threads
 * (the disk's queue and the CRCs of one half overlap the other's). */
#define READ_SPLIT (8u << 20)

/* Reads the shard's bytes [A, B) (span_bounds) into buf and checks their blocks. */
static int read_span_into(const read_span *sp, uint64_t A, uint64_t B, unsigned char *buf,
                          bt_diag *diag) {
    const Baton__Shard *s = sp->s;
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", sp->r->dir, s->file);
    int fd = reader_fd(sp->r, s->file);
    if (fd < 0) {
        bt_diag_set(diag, "%s: cannot open shard of tensor %s: %s", path, sp->e->key,
                    strerror(errno));
        return BT_EIO;
    }
    uint64_t bb = sp->r->m->block_bytes ? sp->r->m->block_bytes : CKPT_DEFAULT_BLOCK;
    uint64_t M = B - A >= READ_SPLIT && s->n_block_crc32c > 0 ? (A + (B - A) / 2) / bb * bb : A;
    read_part part[2] = {{.sp = sp, .fd = fd, .dst = buf, .lo = A, .hi = M > A ? M : B},
                         {.sp = sp, .fd = fd, .dst = buf + (M - A), .lo = M, .hi = B}};
    pthread_t th;
    int threaded = M > A && pthread_create(&th, NULL, read_part_run, &part[1]) == 0;
    read_part_run(&part[0]);
    if (threaded)
        pthread_join(th, NULL);
    else if (M > A)
        read_part_run(&part[1]);
    int n_parts = M > A ? 2 : 1;
    for (int i = 0; i < n_parts; i++) {
        const read_part *p = &part[i];
        if (p->got < p->hi - p->lo) {
            struct stat st; /* where the file ends: a read past it gets nothing at all */
            unsigned long long end = fstat(fd, &st) == 0 ? (unsigned long long)st.st_size
                                                         : s->byte_offset + p->lo + p->got;
            bt_diag_set(diag,
                        "%s: truncated: tensor %s needs bytes up to %llu, the file ends at %llu",
                        path, sp->e->key, (unsigned long long)(s->byte_offset + B), end);
            return BT_EIO;
        }
        if (p->rc != 0) {
            memcpy(diag, &p->diag, sizeof *diag);
            return p->rc;
        }
    }
    return 0;
}

static int read_shard(const read_span *sp, const ckpt_box *want, float *out, uint64_t *covered,
                      bt_diag *diag) {
    ckpt_box have;
    size_t esz = ckpt_dtype_size(sp->e->dtype);
    if (ckpt_box_from_shard(sp->e, sp->s, &have) != 0 || sp->s->file == NULL ||
        strchr(sp->s->file, '/') || sp->s->byte_length != ckpt_box_count(&have) * esz) {
        bt_diag_set(diag, "%s/%s: tensor %s: a shard's box, range or length is inconsistent",
                    sp->r->dir, CKPT_MANIFEST, sp->e->key);
        return BT_EINVAL;
    }
    read_runs runs = {0};
    uint64_t n = 0;
    int rc = ckpt_box_overlap(&have, want, read_collect, &runs, &n);
    if (rc != 0 || runs.n == 0) {
        free(runs.v);
        return rc;
    }
    uint64_t a = runs.v[0].src * esz, b = 0, A, B;
    for (size_t i = 0; i < runs.n; i++)
        if ((runs.v[i].src + runs.v[i].n) * esz > b) b = (runs.v[i].src + runs.v[i].n) * esz;
    span_bounds(sp, a, b, &A, &B);
    /* One float32 run that is the whole span (a shard loaded whole, as a resume under the
     * same layout does): read straight into out, no staging copy. */
    int direct = sp->e->dtype == BATON__DTYPE__F32 && runs.n == 1 && A == a && B == b;
    unsigned char *buf =
        direct ? (unsigned char *)(out + runs.v[0].dst) : malloc(B - A ? B - A : 1);
    rc = buf ? read_span_into(sp, A, B, buf, diag) : BT_ENOMEM;
    for (size_t i = 0; rc == 0 && !direct && i < runs.n; i++) {
        const unsigned char *p = buf + (runs.v[i].src * esz - A);
        float *o = out + runs.v[i].dst;
        if (sp->e->dtype == BATON__DTYPE__F32)
            memcpy(o, p, runs.v[i].n * 4);
        else
            for (uint64_t k = 0; k < runs.v[i].n; k++)
                o[k] = read_elem(p + k * esz, sp->e->dtype);
    }
    if (!direct) free(buf);
    free(runs.v);
    *covered += rc == 0 ? n : 0;
    return rc;
}

int ckpt_reader_box(ckpt_reader *r, const Baton__TensorEntry *e, const ckpt_box *want, float *out,
                    bt_diag *diag) {
    const char *dir = r->dir;
    if (e->dtype != BATON__DTYPE__F32 && e->dtype != BATON__DTYPE__BF16) {
        bt_diag_set(
            diag, "%s: tensor %s: stored as %s, which this reader does not convert", dir, e->key,
            protobuf_c_enum_descriptor_get_value(&baton__dtype__descriptor, e->dtype)
                ? protobuf_c_enum_descriptor_get_value(&baton__dtype__descriptor, e->dtype)->name
                : "an unknown dtype");
        return BT_EUNSUPPORTED;
    }
    uint64_t covered = 0;
    for (size_t i = 0; i < e->n_shards; i++) {
        read_span sp = {.r = r, .e = e, .s = e->shards[i]};
        int rc = read_shard(&sp, want, out, &covered, diag);
        if (rc != 0) return rc;
    }
    if (covered != ckpt_box_count(want)) {
        bt_diag_set(
            diag,
            "%s: tensor %s: the shards cover %llu of the %llu elements asked for rows "
            "[%llu, %llu) columns [%llu, %llu)",
            dir, e->key, (unsigned long long)covered, (unsigned long long)ckpt_box_count(want),
            (unsigned long long)want->off[0], (unsigned long long)(want->off[0] + want->shape[0]),
            (unsigned long long)want->off[1], (unsigned long long)(want->off[1] + want->shape[1]));
        return BT_EINVAL;
    }
    return 0;
}

int ckpt_reader_tensor(ckpt_reader *r, const Baton__TensorEntry *e, float *out, bt_diag *diag) {
    ckpt_box all = {.shape = {1, 1}};
    size_t nd = e->n_global_shape;
    if (nd < 1 || nd > 2) {
        bt_diag_set(diag, "%s: tensor %s has %zu dimensions (1 or 2 expected)", r->dir, e->key, nd);
        return BT_EINVAL;
    }
    for (size_t k = 0; k < nd; k++)
        all.shape[2 - nd + k] = e->global_shape[k];
    return ckpt_reader_box(r, e, &all, out, diag);
}

uint64_t ckpt_fp8_history_len(const Baton__Fp8State *f) {
    return f->history ? ckpt_tensor_count(f->history) : f->n_amax_history;
}

float ckpt_fp8_legacy_factor(const Baton__Manifest *m, const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (m->format_version >= 2 || m->layout == NULL || m->layout->dp < 2 || n < 3 ||
        strcmp(name + n - 3, ".dy") != 0)
        return 1.0f;
    return (float)m->layout->dp;
}

int ckpt_reader_fp8(ckpt_reader *r, const Baton__Fp8State *f, float *out, bt_diag *diag) {
    if (f->history == NULL) {
        memcpy(out, f->amax_history, f->n_amax_history * sizeof *out);
        return 0;
    }
    if (f->history->n_global_shape != 1) {
        bt_diag_set(diag, "%s: fp8 state %s: its history is not one-dimensional", r->dir,
                    nz(f->tensor));
        return BT_EINVAL;
    }
    return ckpt_reader_tensor(r, f->history, out, diag);
}

/* One read through a reader of its own: its files closed after it. */
int ckpt_read_tensor(const char *dir, const Baton__Manifest *m, const Baton__TensorEntry *e,
                     float *out, bt_diag *diag) {
    ckpt_reader r;
    ckpt_reader_init(&r, dir, m);
    int rc = ckpt_reader_tensor(&r, e, out, diag);
    ckpt_reader_close(&r);
    return rc;
}
