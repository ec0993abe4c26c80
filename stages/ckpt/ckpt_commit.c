/* Publishing a checkpoint: the ranks' indexes merged into manifest.pb, then the rename
 * that makes it complete. */
#define _GNU_SOURCE /* renameat2 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "util/clock.h"
#include "util/file.h"

static int commit_wait(const char *part, uint32_t world, double timeout_s, bt_diag *diag) {
    double t0 = bt_clock_now();
    char p[CKPT_PATH_MAX + 32];
    struct stat st;
    for (uint32_t r = 0; r < world; r++) {
        snprintf(p, sizeof p, "%s/rank-%05u.pb", part, r);
        while (stat(p, &st) != 0) {
            if (bt_clock_now() - t0 > timeout_s) {
                bt_diag_set(diag, "%s: rank %u did not finish its shard within %.0f s", part, r,
                            timeout_s);
                return BT_EIO;
            }
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

static Baton__Manifest *commit_clone(const Baton__Manifest *h) {
    size_t n = baton__manifest__get_packed_size(h);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) return NULL;
    baton__manifest__pack(h, buf);
    Baton__Manifest *m = baton__manifest__unpack(NULL, n, buf);
    free(buf);
    return m;
}

static Baton__TensorEntry *commit_find(Baton__Manifest *m, const char *key) {
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i]->key, key) == 0) return m->tensors[i];
    return NULL;
}

/* Moves the shards of src into dst (same key). */
static int commit_move_shards(Baton__TensorEntry *dst, Baton__TensorEntry *src) {
    Baton__Shard **v = realloc(dst->shards, (dst->n_shards + src->n_shards) * sizeof *v);
    if (v == NULL) return BT_ENOMEM;
    if (src->n_shards) memcpy(v + dst->n_shards, src->shards, src->n_shards * sizeof *v);
    dst->shards = v, dst->n_shards += src->n_shards;
    src->n_shards = 0;
    return 0;
}

/* Moves every tensor entry (or its shards, for a key already present) and fp8 state of
 * idx into m. */
static int commit_merge(Baton__Manifest *m, Baton__Manifest *idx) {
    for (size_t i = 0; i < idx->n_tensors; i++) {
        Baton__TensorEntry *e = idx->tensors[i], *have = commit_find(m, e->key);
        if (have) {
            if (commit_move_shards(have, e) != 0) return BT_ENOMEM;
            continue;
        }
        Baton__TensorEntry **v = realloc(m->tensors, (m->n_tensors + 1) * sizeof *v);
        if (v == NULL) return BT_ENOMEM;
        m->tensors = v;
        m->tensors[m->n_tensors++] = e;
        idx->tensors[i] = NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < idx->n_tensors; i++)
        if (idx->tensors[i]) idx->tensors[k++] = idx->tensors[i];
    idx->n_tensors = k;
    Baton__Fp8State **f = realloc(m->fp8, (m->n_fp8 + idx->n_fp8) * sizeof *f);
    if (f == NULL && m->n_fp8 + idx->n_fp8 > 0) return BT_ENOMEM;
    if (f && idx->n_fp8) memcpy(f + m->n_fp8, idx->fp8, idx->n_fp8 * sizeof *f);
    m->fp8 = f, m->n_fp8 += idx->n_fp8, idx->n_fp8 = 0;
    return 0;
}

static int commit_read_index(const char *part, uint32_t r, Baton__Manifest *m, bt_diag *diag) {
    char p[CKPT_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/rank-%05u.pb", part, r);
    char *buf = NULL;
    size_t n = 0;
    Baton__Manifest *idx = bt_read_file(p, CKPT_MAX_MANIFEST, &buf, &n) == 0
                               ? baton__manifest__unpack(NULL, n, (const uint8_t *)buf)
                               : NULL;
    free(buf);
    if (idx == NULL) {
        bt_diag_set(diag, "%s: cannot read this rank's checkpoint index", p);
        return BT_EIO;
    }
    int rc = commit_merge(m, idx);
    baton__manifest__free_unpacked(idx, NULL);
    if (rc == 0) unlink(p);
    return rc;
}

static int commit_write_manifest(const char *part, Baton__Manifest *m, bt_diag *diag) {
    return ckpt_manifest_write(part, m, diag);
}

/* Renames from to the first free one of to, to.1, to.2, ... (never over anything: rename
 * would replace an empty directory); the name taken into out. */
static int commit_rename_free(const char *from, const char *to, char *out, size_t cap) {
    struct stat st;
    for (unsigned k = 0; k < 1000; k++) {
        if (k == 0)
            snprintf(out, cap, "%s", to);
        else
            snprintf(out, cap, "%s.%u", to, k);
        if (lstat(out, &st) == 0) continue;
        if (errno != ENOENT) return -1;
        if (renameat2(AT_FDCWD, from, AT_FDCWD, out, RENAME_NOREPLACE) == 0) return 0;
        if (errno == EEXIST) continue;
        if (errno != EINVAL && errno != ENOSYS) return -1;
        return rename(from, out); /* a filesystem without RENAME_NOREPLACE: lstat said free */
    }
    errno = EEXIST;
    return -1;
}

int ckpt_set_aside_incomplete(const char *root, const char *name, char *aside, size_t cap,
                              bt_diag *diag) {
    char fin[CKPT_PATH_MAX], man[CKPT_PATH_MAX + 32], to[CKPT_PATH_MAX + 16];
    char got[CKPT_PATH_MAX + 32];
    struct stat st;
    aside[0] = '\0';
    snprintf(fin, sizeof fin, "%s/%s", root, name);
    snprintf(man, sizeof man, "%s/%s", fin, CKPT_MANIFEST);
    if (!ckpt_name_is(name, "") || lstat(fin, &st) != 0 || !S_ISDIR(st.st_mode) ||
        lstat(man, &st) == 0)
        return 0;
    snprintf(to, sizeof to, "%s.incomplete", fin);
    if (commit_rename_free(fin, to, got, sizeof got) != 0) {
        bt_diag_set(diag,
                    "%s is an incomplete checkpoint (no %s) and cannot be set aside as "
                    "%s[.N]: %s",
                    fin, CKPT_MANIFEST, to, strerror(errno));
        return BT_EIO;
    }
    if (ckpt_fsync_dir(root) != 0) {
        bt_diag_set(diag, "%s: cannot fsync: %s", root, strerror(errno));
        return BT_EIO;
    }
    const char *base = strrchr(got, '/');
    snprintf(aside, cap, "%s", base ? base + 1 : got);
    return 0;
}

/* A checkpoint of the same name (an earlier attempt's) is renamed to NAME.old, replaced,
 * and only then removed, so a crash leaves one of the two complete. A directory of a
 * checkpoint's name without manifest.pb (a crash's, or a user's deletion) is set aside
 * as NAME.incomplete (never removed: it may hold someone's data); anything else under
 * that name is not ours to touch. */
static int commit_set_aside(const char *root, const char *name, const char *fin, char *old,
                            size_t cap, bt_diag *diag) {
    struct stat st;
    char man[CKPT_PATH_MAX + 32], aside[CKPT_PATH_MAX];
    old[0] = '\0';
    if (lstat(fin, &st) != 0) return 0;
    snprintf(man, sizeof man, "%s/%s", fin, CKPT_MANIFEST);
    if (!S_ISDIR(st.st_mode) || lstat(man, &st) != 0) {
        int rc = ckpt_set_aside_incomplete(root, name, aside, sizeof aside, diag);
        if (rc != 0 || aside[0]) return rc;
        bt_diag_set(diag, "%s exists and is not a checkpoint: not replacing it", fin);
        return BT_EINVAL;
    }
    snprintf(old, cap, "%s.old", fin);
    ckpt_remove_dir(old);
    if (rename(fin, old) != 0) {
        bt_diag_set(diag, "%s: cannot set the earlier checkpoint aside: %s", fin, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

/* Renames part to root/name; a run's save (run_save) then points root's `latest` at it. */
static int commit_publish(const char *root, const char *name, const char *part, int run_save,
                          bt_diag *diag) {
    char fin[CKPT_PATH_MAX], latest[CKPT_PATH_MAX], old[CKPT_PATH_MAX + 8];
    snprintf(fin, sizeof fin, "%s/%s", root, name);
    int rc = commit_set_aside(root, name, fin, old, sizeof old, diag);
    if (rc != 0) return rc;
    if (rename(part, fin) != 0) {
        bt_diag_set_errno(diag, errno, "%s: cannot rename to %s: %s", part, fin, strerror(errno));
        return BT_EIO;
    }
    if (ckpt_fsync_dir(root) != 0) {
        bt_diag_set(diag, "%s: cannot fsync: %s", root, strerror(errno));
        return BT_EIO;
    }
    if (old[0]) ckpt_remove_dir(old);
    if (!run_save) return 0;
    char line[300];
    int n = snprintf(line, sizeof line, "%s\n", name);
    snprintf(latest, sizeof latest, "%s/%s", root, CKPT_LATEST);
    return ckpt_write_file_atomic(latest, line, (size_t)n, diag);
}

static int commit_run(const char *root, const char *name, const Baton__Manifest *header,
                      uint32_t world, double timeout_s, int run_save, bt_diag *diag) {
    char part[CKPT_PATH_MAX];
    ckpt_partial_dir(root, name, part, sizeof part);
    int rc = commit_wait(part, world, timeout_s, diag);
    Baton__Manifest *m = rc == 0 ? commit_clone(header) : NULL;
    if (rc == 0 && m == NULL) rc = BT_ENOMEM;
    if (m) {
        m->has_world = 1, m->world = world;
        m->has_format_version = 1, m->format_version = CKPT_FORMAT_VERSION;
        if (!m->has_block_bytes) m->has_block_bytes = 1, m->block_bytes = CKPT_DEFAULT_BLOCK;
    }
    for (uint32_t r = 0; rc == 0 && r < world; r++)
        rc = commit_read_index(part, r, m, diag);
    rc = rc ? rc : commit_write_manifest(part, m, diag);
    if (m) baton__manifest__free_unpacked(m, NULL);
    if (rc == 0 && ckpt_fsync_dir(part) != 0) rc = BT_EIO;
    return rc ? rc : commit_publish(root, name, part, run_save, diag);
}

int ckpt_commit(const char *root, const char *name, const Baton__Manifest *header, uint32_t world,
                double timeout_s, uint32_t keep, bt_diag *diag) {
    int rc = commit_run(root, name, header, world, timeout_s, 1, diag);
    return rc ? rc : ckpt_retain(root, keep, NULL, diag);
}

int ckpt_commit_dir(const char *root, const char *name, const Baton__Manifest *header,
                    uint32_t world, double timeout_s, bt_diag *diag) {
    return commit_run(root, name, header, world, timeout_s, 0, diag);
}
