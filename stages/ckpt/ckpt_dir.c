#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "util/file.h"

void ckpt_name(uint32_t stage, uint64_t step, char *out, size_t cap) {
    snprintf(out, cap, "s%02u-step%08llu", stage, (unsigned long long)step);
}

/* One or more decimal digits at name + *k, moved past. */
static int name_digits(const char *name, size_t *k) {
    size_t at = *k;
    while (name[*k] >= '0' && name[*k] <= '9')
        (*k)++;
    return *k > at;
}

int ckpt_name_is(const char *name, const char *suffix) {
    size_t k = 1;
    if (name[0] != 's' || !name_digits(name, &k) || strncmp(name + k, "-step", 5) != 0) return 0;
    k += 5;
    return name_digits(name, &k) && strcmp(name + k, suffix) == 0;
}

static int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists(const char *dir, const char *name) {
    char p[CKPT_PATH_MAX];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The decimal number at *p (moved past its digits), against the one at *q: by value, of
 * any length (leading zeros skipped, then the longer is the larger), never parsed into a
 * fixed-width integer that could wrap. */
static int digits_cmp(const char **p, const char **q) {
    while (**p == '0')
        (*p)++;
    while (**q == '0')
        (*q)++;
    size_t a = strspn(*p, "0123456789"), b = strspn(*q, "0123456789");
    int c = a != b ? (a < b ? -1 : 1) : memcmp(*p, *q, a);
    *p += a, *q += b;
    return c;
}

/* Where a name's numbers begin: "s" and a digit, then "-step" and a digit. */
static int name_numbered(const char *name, const char **step) {
    size_t k = 1;
    if (name[0] != 's' || !name_digits(name, &k) || strncmp(name + k, "-step", 5) != 0 ||
        name[k + 5] < '0' || name[k + 5] > '9')
        return 0;
    *step = name + k + 5;
    return 1;
}

int ckpt_name_cmp(const char *a, const char *b) {
    const char *sa = NULL, *sb = NULL, *pa = a + 1, *pb = b + 1;
    int na = name_numbered(a, &sa), nb = name_numbered(b, &sb);
    if (!na || !nb) return na != nb ? nb - na : strcmp(a, b); /* other names last */
    int c = digits_cmp(&pa, &pb);
    c = c ? c : digits_cmp(&sa, &sb);
    c = c ? c : strcmp(sa, sb);  /* the same numbers: by what follows (".partial") */
    return c ? c : strcmp(a, b); /* then by the spelling ("s0-step1", "s00-step00000001") */
}

static int name_cmp(const void *a, const void *b) {
    return ckpt_name_cmp(*(char *const *)a, *(char *const *)b);
}

/* A complete checkpoint's name: "s" digits "-step" digits, with manifest.pb inside. */
static int list_wanted(const char *root, const char *name) {
    unsigned st;
    unsigned long long step;
    int end = 0;
    if (sscanf(name, "s%u-step%llu%n", &st, &step, &end) != 2 || name[end] != '\0') return 0;
    char p[CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, name);
    return file_exists(p, CKPT_MANIFEST);
}

int ckpt_list(const char *root, char ***names, size_t *n, bt_diag *diag) {
    *names = NULL, *n = 0;
    DIR *d = opendir(root);
    if (d == NULL) {
        if (errno == ENOENT) return 0;
        bt_diag_set(diag, "%s: cannot list checkpoints: %s", root, strerror(errno));
        return BT_EIO;
    }
    size_t cap = 0;
    struct dirent *de;
    int rc = 0;
    /* errno tells readdir's end from its failure (EIO on a failing disk) */
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        if (!list_wanted(root, de->d_name)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **v = realloc(*names, cap * sizeof *v);
            if (v == NULL) rc = BT_ENOMEM;
            if (v) *names = v;
        }
        if (rc == 0 && ((*names)[*n] = strdup(de->d_name)) != NULL) (*n)++;
    }
    if (rc == 0 && errno != 0) {
        bt_diag_set(diag, "%s: cannot list checkpoints: %s", root, strerror(errno));
        rc = BT_EIO;
    }
    closedir(d);
    if (*n) qsort(*names, *n, sizeof **names, name_cmp);
    return rc;
}

ckpt_stage_rel ckpt_stage_relation(const Baton__Manifest *m, const char *recipe, uint32_t stage) {
    if (m->recipe_name == NULL || recipe == NULL || strcmp(m->recipe_name, recipe) != 0)
        return CKPT_OTHER_RECIPE;
    return m->stage_index < stage    ? CKPT_EARLIER_STAGE
           : m->stage_index == stage ? CKPT_SAME_STAGE
                                     : CKPT_LATER_STAGE;
}

int ckpt_same_run(const Baton__Manifest *m, const char *run_id, int in_run_root) {
    if (in_run_root || run_id == NULL || run_id[0] == '\0') return 1;
    return m->run_id != NULL && strcmp(m->run_id, run_id) == 0;
}

ckpt_stage_rel ckpt_run_relation(const Baton__Manifest *m, const char *recipe, const char *run_id,
                                 uint32_t stage, int in_run_root) {
    if (!ckpt_same_run(m, run_id, in_run_root)) return CKPT_OTHER_RECIPE;
    return ckpt_stage_relation(m, recipe, stage);
}

void ckpt_names_free(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The checkpoint root's `latest` when it names a complete checkpoint, into dir. */
static int resolve_latest(const char *root, char *dir, size_t cap) {
    char p[CKPT_PATH_MAX], name[256] = "";
    snprintf(p, sizeof p, "%s/%s", root, CKPT_LATEST);
    FILE *f = fopen(p, "r");
    if (f == NULL) return -1;
    int ok = fgets(name, sizeof name, f) != NULL;
    fclose(f);
    name[strcspn(name, "\n")] = '\0';
    if (!ok || !list_wanted(root, name)) return -1;
    snprintf(dir, cap, "%s/%s", root, name);
    return 0;
}

static int resolve_root(const char *root, char *dir, size_t cap, bt_diag *diag) {
    if (resolve_latest(root, dir, cap) == 0) return 0;
    char **names;
    size_t n;
    int rc = ckpt_list(root, &names, &n, diag);
    if (rc != 0) return rc;
    if (n == 0) {
        bt_diag_set(diag, "%s: no complete checkpoint there (a directory with %s)", root,
                    CKPT_MANIFEST);
        return BT_ENOENT;
    }
    snprintf(dir, cap, "%s/%s", root, names[n - 1]);
    ckpt_names_free(names, n);
    return 0;
}

int ckpt_resolve(const char *path, char *dir, size_t cap, bt_diag *diag) {
    if (path[0] == '\0') {
        bt_diag_set(diag, "'': an empty name; give a checkpoint or run directory");
        return BT_ENOENT;
    }
    if (file_exists(path, CKPT_MANIFEST)) {
        snprintf(dir, cap, "%s", path);
        return 0;
    }
    struct stat st;
    int found = stat(path, &st) == 0;
    if (!found && errno != ENOENT && errno != ENOTDIR) { /* EACCES, ELOOP, ... */
        bt_diag_set(diag, "%s: cannot access: %s", path, strerror(errno));
        return BT_EIO;
    }
    if (found && !S_ISDIR(st.st_mode)) {
        bt_diag_set(diag, "%s: not a directory (give a checkpoint or run directory)", path);
        return BT_ENOENT;
    }
    if (!dir_exists(path)) {
        bt_diag_set(diag, "%s: no such checkpoint or run directory", path);
        return BT_ENOENT;
    }
    char root[CKPT_PATH_MAX];
    snprintf(root, sizeof root, "%s/%s", path, CKPT_ROOT_IN_RUN);
    if (dir_exists(root)) return resolve_root(root, dir, cap, diag);
    return resolve_root(path, dir, cap, diag);
}

int ckpt_open(const char *path, char *dir, size_t cap, Baton__Manifest **out, bt_diag *diag) {
    *out = NULL;
    int rc = ckpt_resolve(path, dir, cap, diag);
    rc = rc ? rc : ckpt_manifest_read(dir, out, diag);
    if (rc == 0 && ((*out)->model == NULL || (*out)->n_tensors == 0)) {
        /* an empty file decodes as an empty message: no model, no tensors */
        bt_diag_set(diag, "%s/%s: not a checkpoint manifest (%s)", dir, CKPT_MANIFEST,
                    (*out)->model == NULL ? "no model in it" : "no tensors in it");
        baton__manifest__free_unpacked(*out, NULL);
        *out = NULL;
        rc = BT_EINVAL;
    }
    return rc;
}

int ckpt_removed(const char *dir) {
    char p[CKPT_PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, CKPT_MANIFEST);
    return stat(p, &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
}

int ckpt_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return BT_EIO;
    int rc = fsync(fd) == 0 ? 0 : BT_EIO;
    close(fd);
    return rc;
}

int ckpt_remove_dir(const char *dir) {
    struct stat st;
    if (lstat(dir, &st) != 0) return errno == ENOENT ? 0 : BT_EIO;
    if (!S_ISDIR(st.st_mode)) /* a link named like a checkpoint goes, never what it names */
        return unlink(dir) == 0 ? 0 : BT_EIO;
    DIR *d = opendir(dir);
    if (d == NULL) return errno == ENOENT ? 0 : BT_EIO;
    struct dirent *de;
    char p[CKPT_PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0 && errno == EISDIR) ckpt_remove_dir(p);
    }
    closedir(d);
    return rmdir(dir) == 0 ? 0 : BT_EIO;
}

static int write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Test hook (fault injection; tests/ckpt/check-faults.sh renamed-dir-gone):
 * BATON_FAULT_RENAMED_WAIT=NAME makes the write of a file named NAME (rank-00001.pb: rank
 * 1's shard index) wait, once the file is renamed into place, until its directory no
 * longer exists by that name (rank 0's commit renamed the .partial directory), 30 s at
 * most, before fsyncing the directory: the directory must be synced through the fd
 * opened before the rename, its name being gone by then. */
static void fault_renamed_wait(const char *path, const char *dir) {
    const char *f = getenv("BATON_FAULT_RENAMED_WAIT"), *base = strrchr(path, '/');
    if (f == NULL || strcmp(base ? base + 1 : path, f) != 0) return;
    struct stat st;
    for (int i = 0; i < 3000 && stat(dir, &st) == 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
}

/* Test hook: BATON_FAULT_FSYNC_EINVAL=NAME makes the fsync of NAME's temp file fail with
 * EINVAL, as on a file system without sync support: an error after the open, no file
 * planted (tests/run/check-resume-edit.sh fifo-writes). */
static int fault_fsync(const char *path, int fd) {
    const char *f = getenv("BATON_FAULT_FSYNC_EINVAL"), *base = strrchr(path, '/');
    if (f == NULL || strcmp(base ? base + 1 : path, f) != 0) return fsync(fd);
    errno = EINVAL;
    return -1;
}

int ckpt_write_file_atomic(const char *path, const void *data, size_t n, bt_diag *diag) {
    return ckpt_write_file_atomic_at(path, data, n, NULL, diag);
}

int ckpt_write_file_atomic_at(const char *path, const void *data, size_t n, int *at_tmp,
                              bt_diag *diag) {
    char tmp[CKPT_PATH_MAX + 8], dir[CKPT_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    /* The directory is opened before the rename makes the file visible: a rank's shard
     * index in a .partial directory is what rank 0's commit waits for, and the commit
     * then renames that directory, so opening it by name afterwards could fail. */
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* a FIFO put at tmp (a run's specs/) is refused, never waited on (bt_open_private) */
    int fd = dfd >= 0 ? bt_open_private(tmp, O_WRONLY | O_CREAT | O_TRUNC) : -1;
    int ok = fd >= 0 && write_all(fd, data, n) == 0 && fault_fsync(path, fd) == 0;
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) ok = 0, err = errno; /* NFS: ENOSPC at close */
    if (ok && rename(tmp, path) != 0) ok = 0, err = errno;
    if (ok) fault_renamed_wait(path, slash ? dir : ".");
    if (ok && fsync(dfd) != 0) ok = 0, err = errno;
    if (dfd >= 0) close(dfd);
    if (at_tmp) *at_tmp = !ok && dfd >= 0 && fd < 0;
    if (!ok) {
        if (fd >= 0) unlink(tmp);
        if (dfd >= 0 && fd < 0) /* tmp itself: named, with why (a FIFO, a link) */
            bt_diag_set_errno(diag, err, "%s: cannot write: %s", tmp, bt_file_why(err));
        else
            bt_diag_set_errno(diag, err, "%s: cannot write: %s", path, strerror(err));
        errno = err; /* the caller may tell a full disk from other failures */
        return BT_EIO;
    }
    return 0;
}

static int retain_is_final(const char *root, const char *name) {
    char p[CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int rc = ckpt_manifest_read(p, &m, &d);
    if (rc == BT_EUNSUPPORTED) return 1; /* a newer baton's: not ours to judge */
    if (rc != 0) return 0;
    int fin = m->stage_final;
    baton__manifest__free_unpacked(m, NULL);
    return fin;
}

/* A name this module made: "s<N>-step<N>" followed by suffix. */
static int retain_ours(const char *name, const char *suffix) {
    return ckpt_name_is(name, suffix);
}

/* Removes the .partial, .old and .deleting checkpoint directories a crash left, other than
 * busy; nothing else in root is touched. */
static void retain_partials(const char *root, const char *busy) {
    DIR *d = opendir(root);
    if (d == NULL) return;
    struct dirent *de;
    char p[CKPT_PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        if (!retain_ours(de->d_name, CKPT_PARTIAL_SUFFIX) && !retain_ours(de->d_name, ".old") &&
            !retain_ours(de->d_name, CKPT_DELETING_SUFFIX))
            continue;
        if (busy && strcmp(de->d_name, busy) == 0) continue;
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        ckpt_remove_dir(p);
    }
    closedir(d);
}

int ckpt_retain(const char *root, uint32_t keep, const char *busy, bt_diag *diag) {
    retain_partials(root, busy);
    if (keep == 0) return 0;
    char **names;
    size_t n;
    int rc = ckpt_list(root, &names, &n, diag);
    char p[CKPT_PATH_MAX];
    for (size_t i = 0; rc == 0 && i + keep < n; i++) {
        if (retain_is_final(root, names[i])) continue;
        /* Renamed first, in one step: no reader sees a half-removed checkpoint as complete,
         * and what a crash mid-removal leaves bears a name the next retention and baton
         * run's sweep remove (a checkpoint's name without a manifest is never removed: it
         * may be a user's). */
        char gone[CKPT_PATH_MAX + 16];
        snprintf(p, sizeof p, "%s/%s", root, names[i]);
        snprintf(gone, sizeof gone, "%s%s", p, CKPT_DELETING_SUFFIX);
        ckpt_remove_dir(gone); /* swept above; one made since by another writer at most */
        if (rename(p, gone) == 0) ckpt_remove_dir(gone);
    }
    ckpt_names_free(names, n);
    return rc;
}
