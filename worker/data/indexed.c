/* Megatron indexed dataset: validation on open, unaligned little-endian access, and
 * a streaming writer. See indexed.h for the layout. */
#include "indexed.h"
#include "util/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the Megatron indexed format is little-endian; this host is not"
#endif

static uint32_t rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

size_t indexed_dtype_size(indexed_dtype dt) {
    switch (dt) {
    case INDEXED_UINT8:
    case INDEXED_INT8:
        return 1;
    case INDEXED_INT16:
    case INDEXED_UINT16:
        return 2;
    case INDEXED_INT32:
        return 4;
    case INDEXED_INT64:
        return 8;
    default:
        return 0;
    }
}

const char *indexed_dtype_name(indexed_dtype dt) {
    static const char *const names[] = {"unknown", "uint8",   "int8",    "int16", "int32",
                                        "int64",   "float64", "float32", "uint16"};
    return (unsigned)dt < sizeof names / sizeof names[0] ? names[dt] : names[0];
}

indexed_dtype indexed_dtype_for_vocab(uint64_t vocab) {
    return vocab < 65500 ? INDEXED_UINT16 : INDEXED_INT32;
}

/* ---- reading ---------------------------------------------------------------- */

/* Maps a whole file read-only; a zero-length file maps to NULL. */
static int map_file(const char *path, const uint8_t **data, size_t *size, bt_diag *diag) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        return errno == ENOENT ? BT_ENOENT : BT_EIO;
    }
    struct stat st;
    int rc = BT_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        bt_diag_set(diag, "%s: not a regular file", path);
        rc = BT_EINVAL;
        goto done;
    }
    *size = (size_t)st.st_size;
    *data = NULL;
    if (*size > 0) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            bt_diag_set(diag, "%s: cannot map %zu bytes: %s", path, *size, strerror(errno));
            rc = BT_EIO;
            goto done;
        }
        *data = m;
    }
done:
    close(fd);
    return rc;
}

/* Checks the fixed header and the sizes it implies; sets the array views. */
static int check_header(indexed_dataset *ds, bt_diag *diag) {
    const char *f = ds->idx_path;
    if (ds->idx_size < INDEXED_HEADER_SIZE) {
        bt_diag_set(diag, "%s: truncated: %zu bytes, shorter than the %d-byte header", f,
                    ds->idx_size, INDEXED_HEADER_SIZE);
        return BT_EINVAL;
    }
    if (memcmp(ds->idx, INDEXED_MAGIC, INDEXED_MAGIC_SIZE) != 0) {
        bt_diag_set(diag,
                    "%s: not a Megatron indexed dataset index (the file does not start "
                    "with the magic \"MMIDIDX\\0\\0\")",
                    f);
        return BT_EINVAL;
    }
    uint64_t version = rd_u64(ds->idx + 9);
    if (version != 1) {
        bt_diag_set(diag, "%s: unsupported version %llu (only version 1 exists)", f,
                    (unsigned long long)version);
        return BT_EUNSUPPORTED;
    }
    ds->dtype = (indexed_dtype)ds->idx[17];
    ds->itemsize = indexed_dtype_size(ds->dtype);
    if (ds->itemsize == 0) {
        bt_diag_set(diag,
                    "%s: dtype code %u is %s; token ids need an integer dtype (1 uint8, 2 "
                    "int8, 3 int16, 4 int32, 5 int64, 8 uint16)",
                    f, ds->idx[17],
                    ds->dtype == INDEXED_FLOAT32 || ds->dtype == INDEXED_FLOAT64 ? "a float type"
                                                                                 : "unknown");
        return ds->dtype == INDEXED_FLOAT32 || ds->dtype == INDEXED_FLOAT64 ? BT_EUNSUPPORTED
                                                                            : BT_EINVAL;
    }
    uint64_t s = rd_u64(ds->idx + 18), d = rd_u64(ds->idx + 26);
    uint64_t room = ds->idx_size - INDEXED_HEADER_SIZE;
    if (d == 0 || s > room / 12 || d > room / 8 || 12 * s + 8 * d > room) {
        bt_diag_set(diag,
                    "%s: truncated or corrupt: the header declares %llu sequences and %llu "
                    "document indices (at least 1), which do not fit in %zu bytes",
                    f, (unsigned long long)s, (unsigned long long)d, ds->idx_size);
        return BT_EINVAL;
    }
    uint64_t need = INDEXED_HEADER_SIZE + 12 * s + 8 * d;
    if (ds->idx_size != need && ds->idx_size != need + s) {
        bt_diag_set(diag,
                    "%s: size %zu bytes does not match the header: %llu sequences and %llu "
                    "document indices need %llu bytes (%llu with sequence modes)",
                    f, ds->idx_size, (unsigned long long)s, (unsigned long long)d,
                    (unsigned long long)need, (unsigned long long)(need + s));
        return BT_EINVAL;
    }
    ds->has_modes = ds->idx_size == need + s && s > 0;
    ds->n_sequences = s;
    ds->n_documents = d - 1;
    ds->lengths = ds->idx + INDEXED_HEADER_SIZE;
    ds->pointers = ds->lengths + 4 * s;
    ds->docs = ds->pointers + 8 * s;
    return BT_OK;
}

/* Every sequence lies inside PREFIX.bin; also totals the tokens and notes whether
 * the sequences are stored back to back from offset 0. */
static int check_sequences(indexed_dataset *ds, bt_diag *diag) {
    uint64_t next = 0;
    ds->contiguous = 1;
    ds->n_tokens = 0;
    ds->bin_end = 0;
    for (uint64_t i = 0; i < ds->n_sequences; i++) {
        int32_t len = (int32_t)rd_u32(ds->lengths + 4 * i);
        int64_t ptr = (int64_t)rd_u64(ds->pointers + 8 * i);
        if (len < 0 || ptr < 0) {
            bt_diag_set(diag, "%s: sequence %llu has a negative %s (%lld)", ds->idx_path,
                        (unsigned long long)i, len < 0 ? "length" : "pointer",
                        len < 0 ? (long long)len : (long long)ptr);
            return BT_EINVAL;
        }
        if ((uint64_t)ptr % ds->itemsize != 0) {
            bt_diag_set(diag,
                        "%s: sequence %llu starts at byte %lld of %s, not a multiple of %zu (the "
                        "size of a %s token): its tokens would be read across their boundaries",
                        ds->idx_path, (unsigned long long)i, (long long)ptr, ds->bin_path,
                        ds->itemsize, indexed_dtype_name(ds->dtype));
            return BT_EINVAL;
        }
        uint64_t bytes = (uint64_t)len * ds->itemsize;
        if ((uint64_t)ptr > ds->bin_size || bytes > ds->bin_size - (uint64_t)ptr) {
            bt_diag_set(diag,
                        "%s: sequence %llu (%d tokens of %s at byte %lld) ends past the end of "
                        "%s (%zu bytes): the data file is truncated or does not belong to "
                        "this index",
                        ds->idx_path, (unsigned long long)i, len, indexed_dtype_name(ds->dtype),
                        (long long)ptr, ds->bin_path, ds->bin_size);
            return BT_EINVAL;
        }
        if ((uint64_t)ptr != next) ds->contiguous = 0;
        next = (uint64_t)ptr + bytes;
        if (next > ds->bin_end) ds->bin_end = (size_t)next;
        ds->n_tokens += (uint64_t)len;
    }
    return BT_OK;
}

/* Document indices start at 0, never decrease and end at the sequence count. */
static int check_documents(const indexed_dataset *ds, bt_diag *diag) {
    uint64_t prev = 0;
    for (uint64_t i = 0; i <= ds->n_documents; i++) {
        int64_t v = (int64_t)rd_u64(ds->docs + 8 * i);
        int bad = v < 0 || (uint64_t)v < prev || (uint64_t)v > ds->n_sequences ||
                  (i == 0 && v != 0) || (i == ds->n_documents && (uint64_t)v != ds->n_sequences);
        if (bad) {
            bt_diag_set(diag,
                        "%s: document index %llu is %lld; document indices must start at 0, "
                        "never decrease and end at the sequence count %llu",
                        ds->idx_path, (unsigned long long)i, (long long)v,
                        (unsigned long long)ds->n_sequences);
            return BT_EINVAL;
        }
        prev = (uint64_t)v;
    }
    return BT_OK;
}

int indexed_open(indexed_dataset *ds, const char *prefix, bt_diag *diag) {
    memset(ds, 0, sizeof *ds);
    if (prefix[0] == '\0') {
        bt_diag_set(diag, "'': an empty dataset prefix; give PREFIX (PREFIX.bin and PREFIX.idx)");
        return BT_ENOENT;
    }
    int rc = BT_ENOMEM;
    ds->idx_path = bt_str_concat(prefix, ".idx");
    ds->bin_path = bt_str_concat(prefix, ".bin");
    if (ds->idx_path == NULL || ds->bin_path == NULL) {
        bt_diag_set(diag, "out of memory");
        goto error;
    }
    rc = map_file(ds->idx_path, &ds->idx, &ds->idx_size, diag);
    if (rc == BT_OK) rc = check_header(ds, diag);
    if (rc == BT_OK) rc = map_file(ds->bin_path, &ds->bin, &ds->bin_size, diag);
    if (rc == BT_OK) rc = check_sequences(ds, diag);
    if (rc == BT_OK) rc = check_documents(ds, diag);
    if (rc != BT_OK) goto error;
    return BT_OK;
error:
    indexed_close(ds);
    return rc;
}

void indexed_close(indexed_dataset *ds) {
    if (ds->idx != NULL) munmap((void *)ds->idx, ds->idx_size);
    if (ds->bin != NULL) munmap((void *)ds->bin, ds->bin_size);
    free(ds->idx_path);
    free(ds->bin_path);
    memset(ds, 0, sizeof *ds);
}

uint32_t indexed_seq_length(const indexed_dataset *ds, uint64_t seq) {
    return rd_u32(ds->lengths + 4 * seq);
}

uint64_t indexed_seq_pointer(const indexed_dataset *ds, uint64_t seq) {
    return rd_u64(ds->pointers + 8 * seq);
}

uint64_t indexed_doc_start(const indexed_dataset *ds, uint64_t doc) {
    return rd_u64(ds->docs + 8 * doc);
}

uint64_t indexed_doc_tokens(const indexed_dataset *ds, uint64_t doc) {
    uint64_t n = 0;
    for (uint64_t s = indexed_doc_start(ds, doc); s < indexed_doc_start(ds, doc + 1); s++)
        n += indexed_seq_length(ds, s);
    return n;
}

int indexed_decode(indexed_dtype dt, const uint8_t *src, size_t n, int32_t *out) {
    switch (dt) {
    case INDEXED_UINT8:
        for (size_t i = 0; i < n; i++)
            out[i] = src[i];
        return BT_OK;
    case INDEXED_INT8:
        for (size_t i = 0; i < n; i++)
            out[i] = (int8_t)src[i];
        return BT_OK;
    case INDEXED_UINT16:
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, src + 2 * i, 2);
            out[i] = v;
        }
        return BT_OK;
    case INDEXED_INT16:
        for (size_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, src + 2 * i, 2);
            out[i] = v;
        }
        return BT_OK;
    case INDEXED_INT32:
        memcpy(out, src, 4 * n);
        return BT_OK;
    case INDEXED_INT64:
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, src + 8 * i, 8);
            if (v < INT32_MIN || v > INT32_MAX) return BT_ERANGE;
            out[i] = (int32_t)v;
        }
        return BT_OK;
    default:
        return BT_EUNSUPPORTED;
    }
}

int indexed_read(const indexed_dataset *ds, uint64_t seq, uint64_t first, uint64_t count,
                 int32_t *out, bt_diag *diag) {
    uint64_t len = seq < ds->n_sequences ? indexed_seq_length(ds, seq) : 0;
    if (seq >= ds->n_sequences || first > len || count > len - first) {
        bt_diag_set(diag, "%s: tokens [%llu, %llu) of sequence %llu are out of range", ds->idx_path,
                    (unsigned long long)first, (unsigned long long)(first + count),
                    (unsigned long long)seq);
        return BT_ERANGE;
    }
    if (count == 0) return BT_OK;
    const uint8_t *src = ds->bin + indexed_seq_pointer(ds, seq) + first * ds->itemsize;
    if (indexed_decode(ds->dtype, src, count, out) != BT_OK) {
        bt_diag_set(diag, "%s: sequence %llu holds a token id that does not fit in int32",
                    ds->bin_path, (unsigned long long)seq);
        return BT_ERANGE;
    }
    return BT_OK;
}

/* ---- writing ---------------------------------------------------------------- */

static int grow(void **arr, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return BT_OK;
    uint64_t n = *cap ? *cap * 2 : 1024;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (p == NULL) return BT_ENOMEM;
    *arr = p;
    *cap = n;
    return BT_OK;
}

static int token_fits(indexed_dtype dt, int32_t t) {
    switch (dt) {
    case INDEXED_UINT8:
        return t >= 0 && t <= UINT8_MAX;
    case INDEXED_INT8:
        return t >= INT8_MIN && t <= INT8_MAX;
    case INDEXED_UINT16:
        return t >= 0 && t <= UINT16_MAX;
    case INDEXED_INT16:
        return t >= INT16_MIN && t <= INT16_MAX;
    default:
        return 1;
    }
}

/* Converts n (<= INDEXED_WRITER_CHUNK) tokens into the scratch buffer. */
static int encode_chunk(indexed_writer *w, const int32_t *t, size_t n, bt_diag *diag) {
    for (size_t i = 0; i < n; i++) {
        if (!token_fits(w->dtype, t[i])) {
            bt_diag_set(diag, "%s: token id %ld does not fit the dataset's dtype %s", w->bin_path,
                        (long)t[i], indexed_dtype_name(w->dtype));
            return BT_ERANGE;
        }
        uint8_t *dst = w->scratch + i * w->itemsize;
        if (w->itemsize == 1) {
            *dst = (uint8_t)t[i];
        } else if (w->itemsize == 2) {
            uint16_t v = (uint16_t)t[i];
            memcpy(dst, &v, 2);
        } else if (w->itemsize == 4) {
            memcpy(dst, &t[i], 4);
        } else {
            int64_t v = t[i];
            memcpy(dst, &v, 8);
        }
    }
    return BT_OK;
}

int indexed_writer_open(indexed_writer *w, const char *prefix, indexed_dtype dtype, bt_diag *diag) {
    memset(w, 0, sizeof *w);
    w->dtype = dtype;
    w->itemsize = indexed_dtype_size(dtype);
    if (w->itemsize == 0) {
        bt_diag_set(diag, "%s: cannot write dtype %s; use an integer dtype", prefix,
                    indexed_dtype_name(dtype));
        return BT_EINVAL;
    }
    w->bin_path = bt_str_concat(prefix, ".bin");
    w->idx_path = bt_str_concat(prefix, ".idx");
    w->bin_partial = bt_str_concat(prefix, ".bin.partial");
    w->idx_partial = bt_str_concat(prefix, ".idx.partial");
    w->scratch = malloc(INDEXED_WRITER_CHUNK * w->itemsize);
    if (!w->bin_path || !w->idx_path || !w->bin_partial || !w->idx_partial || !w->scratch ||
        grow((void **)&w->docs, &w->cap_docs, 1, sizeof *w->docs) != BT_OK) {
        bt_diag_set(diag, "out of memory");
        indexed_writer_abort(w);
        return BT_ENOMEM;
    }
    w->docs[w->n_docs++] = 0;
    int rc = indexed_writer_check_targets(w, diag); /* said now, not after the work */
    if (rc != BT_OK) {
        indexed_writer_abort(w);
        return rc;
    }
    w->bin = fopen(w->bin_partial, "wb");
    if (w->bin == NULL) {
        bt_diag_set(diag, "%s: cannot create: %s", w->bin_partial, strerror(errno));
        indexed_writer_abort(w);
        return BT_EIO;
    }
    return BT_OK;
}

/* Records the open sequence's length. */
static int close_sequence(indexed_writer *w, bt_diag *diag) {
    if (grow((void **)&w->lengths, &w->cap_sequences, w->n_sequences + 1, sizeof *w->lengths)) {
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    w->lengths[w->n_sequences++] = (int32_t)w->open_len;
    w->open_len = 0;
    w->open_seq = 0;
    return BT_OK;
}

int indexed_writer_append(indexed_writer *w, const int32_t *tokens, size_t n, bt_diag *diag) {
    while (n > 0) {
        if (w->open_len == INT32_MAX) { /* a sequence length is an int32: continue anew */
            int rc = close_sequence(w, diag);
            if (rc != BT_OK) return rc;
        }
        size_t k = n < INDEXED_WRITER_CHUNK ? n : INDEXED_WRITER_CHUNK;
        if (k > INT32_MAX - w->open_len) k = (size_t)(INT32_MAX - w->open_len);
        int rc = encode_chunk(w, tokens, k, diag);
        if (rc != BT_OK) return rc;
        if (fwrite(w->scratch, w->itemsize, k, w->bin) != k) {
            bt_diag_set(diag, "%s: write failed: %s", w->bin_partial, strerror(errno));
            return BT_EIO;
        }
        w->open_seq = 1;
        w->open_len += k;
        w->n_tokens += k;
        tokens += k;
        n -= k;
    }
    return BT_OK;
}

int indexed_writer_end_document(indexed_writer *w, bt_diag *diag) {
    int empty_doc = w->n_sequences == (uint64_t)w->docs[w->n_docs - 1];
    if (w->open_seq || empty_doc) {
        int rc = close_sequence(w, diag);
        if (rc != BT_OK) return rc;
    }
    if (grow((void **)&w->docs, &w->cap_docs, w->n_docs + 1, sizeof *w->docs) != BT_OK) {
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    w->docs[w->n_docs++] = (int64_t)w->n_sequences;
    return BT_OK;
}

static int write_all(FILE *f, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, f) == n ? BT_OK : BT_EIO;
}

/* Writes the index arrays: header, lengths, pointers, document indices. */
static int write_index(indexed_writer *w, FILE *f) {
    uint64_t s = w->n_sequences, d = w->n_docs, version = 1;
    uint8_t code = (uint8_t)w->dtype;
    int rc = write_all(f, INDEXED_MAGIC, INDEXED_MAGIC_SIZE);
    rc = rc ? rc : write_all(f, &version, 8);
    rc = rc ? rc : write_all(f, &code, 1);
    rc = rc ? rc : write_all(f, &s, 8);
    rc = rc ? rc : write_all(f, &d, 8);
    rc = rc ? rc : write_all(f, w->lengths, 4 * s);
    int64_t ptr = 0;
    for (uint64_t i = 0; rc == BT_OK && i < s; i++) {
        rc = write_all(f, &ptr, 8);
        ptr += (int64_t)w->lengths[i] * (int64_t)w->itemsize;
    }
    return rc ? rc : write_all(f, w->docs, 8 * d);
}

/* fflush + fsync + fclose, reporting the first failure. */
static int close_synced(FILE *f, const char *path, bt_diag *diag) {
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        bt_diag_set(diag, "%s: write failed: %s", path, strerror(errno));
        return BT_EIO;
    }
    return BT_OK;
}

int indexed_writer_complete(indexed_writer *w, bt_diag *diag) {
    int rc = BT_OK;
    if (w->open_seq || w->n_sequences != (uint64_t)w->docs[w->n_docs - 1])
        rc = indexed_writer_end_document(w, diag);
    FILE *bin = w->bin;
    w->bin = NULL;
    int brc = close_synced(bin, w->bin_partial, diag);
    rc = rc ? rc : brc;
    if (rc != BT_OK) return rc;
    FILE *idx = fopen(w->idx_partial, "wb");
    if (idx == NULL) {
        bt_diag_set(diag, "%s: cannot create: %s", w->idx_partial, strerror(errno));
        return BT_EIO;
    }
    rc = write_index(w, idx);
    if (rc != BT_OK) bt_diag_set(diag, "%s: write failed: %s", w->idx_partial, strerror(errno));
    int irc = close_synced(idx, w->idx_partial, diag);
    return rc ? rc : irc;
}

/* BT_EINVAL naming path when something other than a regular file has its name: a
 * directory (a rename onto it would fail), a symbolic link, a device or a FIFO (which the
 * rename would replace with the new file). */
static int target_free(const char *path, bt_diag *diag) {
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return BT_OK;
    const char *what = S_ISDIR(st.st_mode)   ? "a directory"
                       : S_ISLNK(st.st_mode) ? "a symbolic link"
                                             : "a device, FIFO or socket";
    bt_diag_set(diag,
                "%s: %s is in the way of the output (a new regular file); remove it or choose "
                "another output",
                path, what);
    return BT_EINVAL;
}

int indexed_writer_check_targets(const indexed_writer *w, bt_diag *diag) {
    int rc = target_free(w->bin_path, diag);
    return rc ? rc : target_free(w->idx_path, diag);
}

int indexed_writer_publish(indexed_writer *w, bt_diag *diag) {
    int rc = indexed_writer_check_targets(w, diag);
    if (rc == BT_OK && rename(w->bin_partial, w->bin_path) != 0) {
        bt_diag_set(diag, "%s: cannot move into place: %s", w->bin_path, strerror(errno));
        rc = BT_EIO;
    } else if (rc == BT_OK && rename(w->idx_partial, w->idx_path) != 0) {
        bt_diag_set(diag, "%s: cannot move into place: %s", w->idx_path, strerror(errno));
        unlink(w->bin_path); /* no data file without its index */
        rc = BT_EIO;
    }
    indexed_writer_abort(w); /* frees; removes the partial names where still there */
    return rc;
}

int indexed_writer_finish(indexed_writer *w, bt_diag *diag) {
    int rc = indexed_writer_complete(w, diag);
    if (rc != BT_OK) {
        indexed_writer_abort(w);
        return rc;
    }
    return indexed_writer_publish(w, diag);
}

void indexed_writer_abort(indexed_writer *w) {
    if (w->bin != NULL) fclose(w->bin);
    if (w->bin_partial != NULL) unlink(w->bin_partial);
    if (w->idx_partial != NULL) unlink(w->idx_partial);
    free(w->bin_path);
    free(w->idx_path);
    free(w->bin_partial);
    free(w->idx_partial);
    free(w->lengths);
    free(w->docs);
    free(w->scratch);
    memset(w, 0, sizeof *w);
}
