#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "crc32c.h"
#include "util/file.h"

void ckpt_partial_dir(const char *root, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s%s", root, name, CKPT_PARTIAL_SUFFIX);
}

int ckpt_begin(const char *root, const char *name, bt_diag *diag) {
    char part[CKPT_PATH_MAX];
    ckpt_partial_dir(root, name, part, sizeof part);
    if (bt_mkdir_p(root, 0700) != 0) {
        bt_diag_set_errno(diag, errno, "%s: cannot create the checkpoint directory: %s", root,
                          strerror(errno));
        return BT_EIO;
    }
    ckpt_remove_dir(part);
    if (mkdir(part, 0700) != 0) {
        bt_diag_set_errno(diag, errno, "%s: cannot create: %s", part, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

int ckpt_writer_open(ckpt_writer *w, const char *partial_dir, int rank, uint32_t block_bytes,
                     bt_diag *diag) {
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "%s", partial_dir);
    snprintf(w->file, sizeof w->file, "rank-%05d.bin", rank);
    w->rank = rank;
    w->block_bytes = block_bytes ? block_bytes : CKPT_DEFAULT_BLOCK;
    char p[CKPT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", w->dir, w->file);
    w->fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    w->index = calloc(1, sizeof *w->index);
    if (w->fd < 0 || w->index == NULL) {
        bt_diag_set_errno(diag, errno, "%s: cannot create: %s", p, strerror(errno));
        if (w->fd >= 0) close(w->fd);
        free(w->index);
        w->index = NULL, w->fd = -1;
        return BT_EIO;
    }
    baton__manifest__init(w->index);
    return 0;
}

static void shard_checksum(Baton__Shard *s, const unsigned char *p, uint64_t len, uint32_t bb) {
    s->crc32c = crc32c_update(0, p, len);
    for (uint64_t k = 0; k * bb < len; k++) {
        uint64_t n = len - k * bb < bb ? len - k * bb : bb;
        s->block_crc32c[k] = crc32c_update(0, p + k * bb, n);
    }
}

/* One part of a large write, done on its own thread. */
typedef struct write_part {
    int fd;
    const unsigned char *p;
    size_t n;
    off_t off;
    int rc, err;
} write_part;

static void *write_part_run(void *arg) {
    write_part *w = arg;
    while (w->n > 0) {
        ssize_t k = pwrite(w->fd, w->p, w->n, w->off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            w->rc = -1, w->err = errno;
            break;
        }
        w->p += k, w->n -= (size_t)k, w->off += k;
    }
    return NULL;
}

/* Writes n bytes at off; a large write is split over two threads (copying into the page
 * cache is what a save spends most of its time on), the checksums computed meanwhile. */
#define WRITE_SPLIT (8u << 20)
static int write_full(int fd, const unsigned char *p, size_t n, off_t off, Baton__Shard *s,
                      uint32_t bb) {
    size_t half = n >= WRITE_SPLIT ? n / 2 : 0;
    write_part a = {.fd = fd, .p = p + half, .n = n - half, .off = off + (off_t)half};
    write_part b = {.fd = fd, .p = p, .n = half, .off = off};
    pthread_t th;
    int threaded = half && pthread_create(&th, NULL, write_part_run, &a) == 0;
    shard_checksum(s, p, n, bb);
    write_part_run(&b);
    if (threaded)
        pthread_join(th, NULL);
    else
        write_part_run(&a);
    if (a.rc || b.rc) errno = a.rc ? a.err : b.err;
    return a.rc || b.rc ? -1 : 0;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* The bytes of n elements as stored: float32 as is, bf16 converted into the staging
 * buffer. */
static const unsigned char *write_bytes(ckpt_writer *w, const float *data, uint64_t n,
                                        Baton__DType dt) {
    if (dt == BATON__DTYPE__F32) return (const unsigned char *)data;
    if (w->stage_cap < n * 2) {
        unsigned char *s = realloc(w->stage, n * 2);
        if (s == NULL) return NULL;
        w->stage = s, w->stage_cap = n * 2;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = to_bf16(data[i]);
        w->stage[2 * i] = (unsigned char)h, w->stage[2 * i + 1] = (unsigned char)(h >> 8);
    }
    return w->stage;
}

static Baton__Shard *shard_new(const ckpt_writer *w, int ndim, const ckpt_box *b, uint64_t len) {
    Baton__Shard *s = calloc(1, sizeof *s);
    uint64_t nblocks = (len + w->block_bytes - 1) / w->block_bytes;
    if (s == NULL) return NULL;
    baton__shard__init(s);
    s->file = strdup(w->file);
    s->offset = calloc(2, sizeof(uint64_t));
    s->shape = calloc(2, sizeof(uint64_t));
    s->block_crc32c = calloc(nblocks ? nblocks : 1, sizeof(uint32_t));
    if (!s->file || !s->offset || !s->shape || !s->block_crc32c) {
        baton__shard__free_unpacked(s, NULL);
        return NULL;
    }
    s->n_offset = s->n_shape = (size_t)ndim;
    for (int k = 0; k < ndim; k++)
        s->offset[k] = b->off[2 - ndim + k], s->shape[k] = b->shape[2 - ndim + k];
    if (b->flat_end) {
        s->has_flat_begin = s->has_flat_end = 1;
        s->flat_begin = b->flat_begin, s->flat_end = b->flat_end;
    }
    s->has_byte_offset = s->has_byte_length = s->has_crc32c = 1;
    s->byte_offset = w->off, s->byte_length = len;
    s->n_block_crc32c = (size_t)nblocks;
    return s;
}

/* The index's entry for key, appended when new. */
static Baton__TensorEntry *writer_entry(ckpt_writer *w, const char *key, int ndim,
                                        const uint64_t *gshape, Baton__DType dt) {
    for (size_t i = 0; i < w->index->n_tensors; i++)
        if (strcmp(w->index->tensors[i]->key, key) == 0) return w->index->tensors[i];
    Baton__TensorEntry **v =
        realloc(w->index->tensors, (w->index->n_tensors + 1) * sizeof *w->index->tensors);
    Baton__TensorEntry *e = calloc(1, sizeof *e);
    if (v) w->index->tensors = v;
    if (v == NULL || e == NULL) return free(e), NULL;
    baton__tensor_entry__init(e);
    e->key = strdup(key);
    e->global_shape = calloc((size_t)ndim, sizeof(uint64_t));
    e->has_dtype = 1, e->dtype = dt;
    if (!e->key || !e->global_shape) return baton__tensor_entry__free_unpacked(e, NULL), NULL;
    e->n_global_shape = (size_t)ndim;
    memcpy(e->global_shape, gshape, (size_t)ndim * sizeof(uint64_t));
    w->index->tensors[w->index->n_tensors++] = e;
    return e;
}

/* Writes piece (ndim 1 or 2) of entry e's tensor at the end of the shard file and
 * records it as one of e's shards. */
static int writer_put(ckpt_writer *w, Baton__TensorEntry *e, int ndim, const ckpt_box *piece,
                      const float *data, bt_diag *diag) {
    Baton__DType dtype = e->dtype;
    uint64_t n = ckpt_box_count(piece), len = n * ckpt_dtype_size(dtype);
    const unsigned char *bytes = write_bytes(w, data, n, dtype);
    Baton__Shard *s = bytes ? shard_new(w, ndim, piece, len) : NULL;
    Baton__Shard **v = s ? realloc(e->shards, (e->n_shards + 1) * sizeof *v) : NULL;
    if (v == NULL) {
        if (s) baton__shard__free_unpacked(s, NULL);
        bt_diag_set(diag, "checkpoint tensor %s: out of memory", e->key);
        return BT_ENOMEM;
    }
    e->shards = v;
    e->shards[e->n_shards++] = s;
    if (write_full(w->fd, bytes, len, (off_t)w->off, s, w->block_bytes) != 0) {
        bt_diag_set_errno(diag, errno, "%s/%s: cannot write tensor %s: %s", w->dir, w->file, e->key,
                          strerror(errno));
        return BT_EIO;
    }
    w->off += len;
    return 0;
}

int ckpt_writer_add(ckpt_writer *w, const char *key, int ndim, const uint64_t *global_shape,
                    const ckpt_box *piece, Baton__DType dtype, const float *data, bt_diag *diag) {
    if ((dtype != BATON__DTYPE__F32 && dtype != BATON__DTYPE__BF16) || ndim < 1 || ndim > 2) {
        bt_diag_set(diag, "checkpoint tensor %s: dtype or rank not supported", key);
        return BT_EINVAL;
    }
    Baton__TensorEntry *e = writer_entry(w, key, ndim, global_shape, dtype);
    if (e == NULL) {
        bt_diag_set(diag, "checkpoint tensor %s: out of memory", key);
        return BT_ENOMEM;
    }
    return writer_put(w, e, ndim, piece, data, diag);
}

/* A one-dimensional float32 entry of len elements, in no index (its key, for messages,
 * "fp8_history." and the state's name). */
static Baton__TensorEntry *writer_history_entry(const char *name, uint32_t len) {
    Baton__TensorEntry *e = calloc(1, sizeof *e);
    if (e == NULL) return NULL;
    baton__tensor_entry__init(e);
    size_t kn = strlen(name) + sizeof "fp8_history.";
    e->key = malloc(kn);
    if (e->key) snprintf(e->key, kn, "fp8_history.%s", name);
    e->global_shape = malloc(sizeof *e->global_shape);
    e->has_dtype = 1, e->dtype = BATON__DTYPE__F32;
    if (!e->key || !e->global_shape) return baton__tensor_entry__free_unpacked(e, NULL), NULL;
    e->n_global_shape = 1, e->global_shape[0] = len;
    return e;
}

int ckpt_writer_add_fp8(ckpt_writer *w, const char *name, float scale, const float *history,
                        uint32_t len, uint32_t pos, bt_diag *diag) {
    Baton__Fp8State *f = calloc(1, sizeof *f);
    Baton__Fp8State **v = realloc(w->index->fp8, (w->index->n_fp8 + 1) * sizeof *v);
    if (v) w->index->fp8 = v;
    if (f) baton__fp8_state__init(f);
    if (f == NULL || v == NULL || (f->tensor = strdup(name)) == NULL ||
        (f->history = writer_history_entry(name, len)) == NULL) {
        if (f) baton__fp8_state__free_unpacked(f, NULL);
        bt_diag_set(diag, "checkpoint fp8 state %s: out of memory", name);
        return BT_ENOMEM;
    }
    f->has_scale = f->has_pos = 1, f->scale = scale, f->pos = pos;
    w->index->fp8[w->index->n_fp8++] = f;
    ckpt_box row = {.shape = {1, len}};
    return writer_put(w, f->history, 1, &row, history, diag);
}

static void writer_free(ckpt_writer *w) {
    if (w->fd >= 0) close(w->fd);
    if (w->index) baton__manifest__free_unpacked(w->index, NULL);
    free(w->stage);
    w->index = NULL, w->stage = NULL, w->fd = -1;
}

void ckpt_writer_abort(ckpt_writer *w) {
    writer_free(w);
}

int ckpt_writer_finish(ckpt_writer *w, bt_diag *diag) {
    int rc = 0;
    int synced = fsync(w->fd) == 0, err = errno;
    if (close(w->fd) != 0 && synced) synced = 0, err = errno;
    if (!synced) {
        bt_diag_set_errno(diag, err, "%s/%s: cannot flush: %s", w->dir, w->file, strerror(err));
        rc = BT_EIO;
    }
    w->fd = -1;
    size_t n = baton__manifest__get_packed_size(w->index);
    uint8_t *buf = rc == 0 ? malloc(n ? n : 1) : NULL;
    if (rc == 0 && buf == NULL) rc = BT_ENOMEM;
    if (rc == 0) {
        baton__manifest__pack(w->index, buf);
        char p[CKPT_PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/rank-%05d.pb", w->dir, w->rank);
        rc = ckpt_write_file_atomic(p, buf, n, diag);
    }
    free(buf);
    writer_free(w);
    return rc;
}
