/* The shard files a manifest names and the streaming CRC32C check of their bytes. */
#include "ckpt_store_crc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/crc32c.h"
#include "ckpt_store_fs.h"

#define CHECK_CHUNK (1u << 20)

int ckpt_name_is_plain(const char *name) {
    if (name == NULL || name[0] == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    if (strlen(name) > 255) return 0;
    for (const char *p = name; *p; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        if (!ok) return 0;
    }
    return 1;
}

static ckpt_file_check *files_get(ckpt_file_set *s, const char *name, size_t *cap) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->file[i].name, name) == 0) return &s->file[i];
    if (s->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        ckpt_file_check *f = realloc(s->file, nc * sizeof *f);
        if (f == NULL) return NULL;
        s->file = f;
        *cap = nc;
    }
    ckpt_file_check *c = &s->file[s->n];
    memset(c, 0, sizeof *c);
    c->name = strdup(name);
    if (c->name == NULL) return NULL;
    s->n++;
    return c;
}

static int unit_push(ckpt_file_check *c, const ckpt_crc_unit *u) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 16;
        ckpt_crc_unit *p = realloc(c->unit, nc * sizeof *p);
        if (p == NULL) return BT_ENOMEM;
        c->unit = p;
        c->cap = nc;
    }
    c->unit[c->n++] = *u;
    return 0;
}

/* One shard range as check units: its blocks when the block list fits, else one unit. */
static int units_add_shard(ckpt_file_check *c, const Baton__Shard *s, uint64_t block) {
    uint64_t len = s->byte_length, nblk = block ? (len + block - 1) / block : 0;
    ckpt_crc_unit u = {0};
    u.range_crc = s->crc32c;
    u.range_off = s->byte_offset;
    if (block == 0 || s->n_block_crc32c != nblk) {
        u.off = s->byte_offset, u.len = len, u.crc = s->crc32c, u.range_end = 1;
        return unit_push(c, &u);
    }
    for (uint64_t b = 0; b < nblk; b++) {
        u.off = s->byte_offset + b * block;
        u.len = b + 1 < nblk ? block : len - b * block;
        u.crc = s->block_crc32c[b];
        u.range_end = b + 1 == nblk;
        int rc = unit_push(c, &u);
        if (rc < 0) return rc;
    }
    return 0;
}

static int unit_cmp(const void *a, const void *b) {
    const ckpt_crc_unit *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int file_cmp(const void *a, const void *b) {
    return strcmp(((const ckpt_file_check *)a)->name, ((const ckpt_file_check *)b)->name);
}

/* Sorts a file's units and checks that no two overlap; sets the expected size. */
static int file_seal(ckpt_file_check *c, bt_diag *diag) {
    qsort(c->unit, c->n, sizeof *c->unit, unit_cmp);
    for (size_t i = 1; i < c->n; i++) {
        const ckpt_crc_unit *p = &c->unit[i - 1], *u = &c->unit[i];
        if (u->off < p->off + p->len) {
            bt_diag_set(diag,
                        "%s: manifest ranges overlap at byte %" PRIu64 " (bytes [%" PRIu64
                        ", %" PRIu64 ") and [%" PRIu64 ", %" PRIu64 "))",
                        c->name, u->off, p->off, p->off + p->len, u->off, u->off + u->len);
            return BT_EINVAL;
        }
    }
    c->size = c->n ? c->unit[c->n - 1].off + c->unit[c->n - 1].len : 0;
    return 0;
}

/* Entry e's shard ranges as check units of their files (what names e in messages). */
static int files_add_entry(const Baton__Manifest *m, const Baton__TensorEntry *e, const char *what,
                           ckpt_file_set *s, size_t *cap, bt_diag *diag) {
    for (size_t k = 0; k < e->n_shards; k++) {
        const Baton__Shard *sh = e->shards[k];
        if (!ckpt_name_is_plain(sh->file) || strcmp(sh->file, CKPT_MANIFEST) == 0) {
            bt_diag_set(diag,
                        "manifest: %s '%s' shard %zu names file '%s', not a plain shard file name",
                        what, e->key ? e->key : "?", k, sh->file ? sh->file : "");
            return BT_EINVAL;
        }
        if (sh->byte_length == 0) continue;
        ckpt_file_check *c = files_get(s, sh->file, cap);
        if (c == NULL) return BT_ENOMEM;
        int rc = units_add_shard(c, sh, m->block_bytes);
        if (rc < 0) return rc;
    }
    return 0;
}

/* The tensors' shards and the fp8 histories stored in shards (format 2). */
static int files_add_manifest(const Baton__Manifest *m, ckpt_file_set *s, bt_diag *diag) {
    size_t cap = 0;
    int rc = 0;
    for (size_t t = 0; rc == 0 && t < m->n_tensors; t++)
        rc = files_add_entry(m, m->tensors[t], "tensor", s, &cap, diag);
    for (size_t f = 0; rc == 0 && f < m->n_fp8; f++)
        if (m->fp8[f]->history)
            rc = files_add_entry(m, m->fp8[f]->history, "fp8 history", s, &cap, diag);
    return rc;
}

int ckpt_files_from_manifest(const Baton__Manifest *m, ckpt_file_set *out, bt_diag *diag) {
    memset(out, 0, sizeof *out);
    int rc = files_add_manifest(m, out, diag);
    for (size_t i = 0; rc == 0 && i < out->n; i++)
        rc = file_seal(&out->file[i], diag);
    if (rc < 0) {
        if (rc == BT_ENOMEM) bt_diag_set(diag, "manifest: out of memory listing shard files");
        ckpt_files_free(out);
        return rc;
    }
    qsort(out->file, out->n, sizeof *out->file, file_cmp);
    return 0;
}

void ckpt_files_free(ckpt_file_set *s) {
    for (size_t i = 0; i < s->n; i++) {
        free(s->file[i].name);
        free(s->file[i].unit);
    }
    free(s->file);
    memset(s, 0, sizeof *s);
}

int ckpt_file_same(const ckpt_file_check *a, const ckpt_file_check *b) {
    if (a->size != b->size || a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++) {
        const ckpt_crc_unit *x = &a->unit[i], *y = &b->unit[i];
        if (x->off != y->off || x->len != y->len || x->crc != y->crc ||
            x->range_end != y->range_end || (x->range_end && x->range_crc != y->range_crc))
            return 0;
    }
    return 1;
}

const ckpt_file_check *ckpt_files_find(const ckpt_file_set *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->file[i].name, name) == 0) return &s->file[i];
    return NULL;
}

void ckpt_check_reset(ckpt_file_check *c) {
    c->cur = 0;
    c->pos = 0;
    c->crc = 0;
    c->range_crc = 0;
}

/* The current unit is complete: compare its CRC and, at a range's end, the range's. */
static int unit_close(ckpt_file_check *c, const char *where, bt_diag *diag) {
    const ckpt_crc_unit *u = &c->unit[c->cur];
    if (c->crc != u->crc) {
        bt_diag_set(diag,
                    "%s: CRC32C mismatch in bytes [%" PRIu64 ", %" PRIu64 "): manifest 0x%08" PRIx32
                    ", data 0x%08" PRIx32,
                    where, u->off, u->off + u->len, u->crc, c->crc);
        return BT_EIO;
    }
    if (u->range_end) {
        if (c->range_crc != u->range_crc) {
            bt_diag_set(diag,
                        "%s: CRC32C mismatch in bytes [%" PRIu64 ", %" PRIu64
                        "): manifest 0x%08" PRIx32 ", data 0x%08" PRIx32,
                        where, u->range_off, u->off + u->len, u->range_crc, c->range_crc);
            return BT_EIO;
        }
        c->range_crc = 0;
    }
    c->crc = 0;
    c->cur++;
    return 0;
}

int ckpt_check_feed(ckpt_file_check *c, const void *p, size_t n, const char *where, bt_diag *diag) {
    const unsigned char *b = p;
    while (n > 0) {
        if (c->cur == c->n) {
            bt_diag_set(diag, "%s: longer than the manifest says (%" PRIu64 " bytes)", where,
                        c->size);
            return BT_EIO;
        }
        const ckpt_crc_unit *u = &c->unit[c->cur];
        if (c->pos < u->off) { /* a gap no range covers: nothing to check */
            uint64_t skip = u->off - c->pos < n ? u->off - c->pos : n;
            b += skip, n -= skip, c->pos += skip;
            continue;
        }
        uint64_t left = u->off + u->len - c->pos, take = left < n ? left : n;
        c->crc = crc32c_update(c->crc, b, take);
        c->range_crc = crc32c_update(c->range_crc, b, take);
        b += take, n -= take, c->pos += take;
        if (take == left) {
            int rc = unit_close(c, where, diag);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

int ckpt_check_end(ckpt_file_check *c, const char *where, bt_diag *diag) {
    if (c->pos != c->size) {
        bt_diag_set(diag, "%s: %" PRIu64 " bytes, the manifest says %" PRIu64, where, c->pos,
                    c->size);
        return BT_EIO;
    }
    return 0;
}

int ckpt_check_file(const char *dir, ckpt_file_check *c, bt_diag *diag) {
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, sizeof path, dir, c->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        return errno == ENOENT ? BT_ENOENT : BT_EIO;
    }
    unsigned char *buf = malloc(CHECK_CHUNK);
    int rc = buf ? 0 : BT_ENOMEM;
    ckpt_check_reset(c);
    while (rc == 0) {
        ssize_t got = read(fd, buf, CHECK_CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            bt_diag_set(diag, "%s: read error at byte %" PRIu64 ": %s", path, c->pos,
                        strerror(errno));
            rc = BT_EIO;
        } else if (got == 0) {
            rc = ckpt_check_end(c, path, diag);
            break;
        } else {
            rc = ckpt_check_feed(c, buf, (size_t)got, path, diag);
        }
    }
    free(buf);
    close(fd);
    return rc;
}

int ckpt_check_dir(const char *dir, bt_diag *diag) {
    Baton__Manifest *m = NULL;
    int rc = ckpt_manifest_read(dir, &m, diag);
    if (rc < 0) return rc;
    ckpt_file_set set;
    rc = ckpt_files_from_manifest(m, &set, diag);
    baton__manifest__free_unpacked(m, NULL);
    for (size_t i = 0; rc == 0 && i < set.n; i++)
        rc = ckpt_check_file(dir, &set.file[i], diag);
    ckpt_files_free(&set);
    return rc;
}
