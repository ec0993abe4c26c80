/* Reading text corpora: input expansion, archive streaming through libarchive,
 * binary detection and fortune splitting. The order rules are in corpus.h. */
#include "corpus.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define READ_CHUNK  (1 << 16)
#define SNIFF_BYTES 8192

void corpus_init(corpus *c) {
    memset(c, 0, sizeof *c);
}

void corpus_free(corpus *c) {
    for (size_t i = 0; i < c->n_files; i++)
        free(c->files[i].path);
    free(c->files);
    free(c->buf);
    memset(c, 0, sizeof *c);
}

static void note_skip(corpus *c, uint64_t *counter, const char *path, const char *member,
                      const char *why) {
    (*counter)++;
    if (c->on_skip != NULL) c->on_skip(c->on_skip_ctx, path, member, why);
}

/* ---- expanding the inputs ---------------------------------------------------- */

static int add_file(corpus *c, const char *path, uint64_t size, bt_diag *diag) {
    if (c->n_files == c->cap_files) {
        size_t cap = c->cap_files ? 2 * c->cap_files : 64;
        corpus_file *f = realloc(c->files, cap * sizeof *f);
        if (f == NULL) goto oom;
        c->files = f;
        c->cap_files = cap;
    }
    char *copy = strdup(path);
    if (copy == NULL) goto oom;
    c->files[c->n_files++] = (corpus_file){copy, size};
    c->total_bytes += size;
    return BT_OK;
oom:
    bt_diag_set(diag, "out of memory listing the inputs");
    return BT_ENOMEM;
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (p != NULL) {
        memcpy(p, dir, a);
        if (slash) p[a] = '/';
        memcpy(p + a + (size_t)slash, name, b + 1);
    }
    return p;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir, without "." and "..", sorted bytewise. */
static int list_dir(const char *dir, char ***names, size_t *n, bt_diag *diag) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        bt_diag_set(diag, "input '%s': cannot open directory: %s", dir, strerror(errno));
        return BT_EINVAL;
    }
    size_t cap = 0;
    int rc = BT_OK;
    struct dirent *e;
    while (rc == BT_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(*names, cap * sizeof *grown);
            if (grown == NULL) {
                rc = BT_ENOMEM;
                break;
            }
            *names = grown;
        }
        if (((*names)[*n] = strdup(e->d_name)) == NULL)
            rc = BT_ENOMEM;
        else
            (*n)++;
    }
    closedir(d);
    if (rc != BT_OK)
        bt_diag_set(diag, "out of memory listing '%s'", dir);
    else if (*n > 1)
        qsort(*names, *n, sizeof **names, cmp_names);
    return rc;
}

static int add_dir(corpus *c, const char *dir, bt_diag *diag);

/* One directory entry: recurse, add, or skip (links are not followed). */
static int add_entry(corpus *c, const char *path, bt_diag *diag) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        bt_diag_set(diag, "input '%s': %s", path, strerror(errno));
        return BT_EINVAL;
    }
    if (S_ISDIR(st.st_mode)) return add_dir(c, path, diag);
    if (S_ISREG(st.st_mode)) return add_file(c, path, (uint64_t)st.st_size, diag);
    if (S_ISLNK(st.st_mode))
        note_skip(c, &c->stats.skipped_links, path, NULL, "symbolic link, not followed");
    else
        note_skip(c, &c->stats.skipped_other, path, NULL, "not a regular file");
    return BT_OK;
}

static int add_dir(corpus *c, const char *dir, bt_diag *diag) {
    char **names = NULL;
    size_t n = 0;
    int rc = list_dir(dir, &names, &n, diag);
    for (size_t i = 0; rc == BT_OK && i < n; i++) {
        char *path = path_join(dir, names[i]);
        if (path == NULL) {
            bt_diag_set(diag, "out of memory listing '%s'", dir);
            rc = BT_ENOMEM;
            break;
        }
        rc = add_entry(c, path, diag);
        free(path);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int corpus_add(corpus *c, const char *path, bt_diag *diag) {
    struct stat st;
    if (stat(path, &st) != 0) {
        bt_diag_set(diag, "input '%s': %s", path, strerror(errno));
        return errno == ENOENT ? BT_ENOENT : BT_EINVAL;
    }
    if (S_ISDIR(st.st_mode)) return add_dir(c, path, diag);
    if (S_ISREG(st.st_mode)) return add_file(c, path, (uint64_t)st.st_size, diag);
    bt_diag_set(diag, "input '%s': not a regular file, directory or archive", path);
    return BT_EINVAL;
}

/* ---- documents --------------------------------------------------------------- */

/* Reading state: progress position and the fortune splitter. */
typedef struct walk {
    corpus *c;
    const corpus_sink *sink;
    uint64_t base;      /* sizes of the inputs finished */
    uint64_t pos;       /* bytes read of the current plain file */
    struct archive *ar; /* the current archive, or NULL */
    int line_start;     /* the next byte starts a line */
    int pending;        /* bytes of a possible separator held back: "%" (1), "%\r" (2) */
    uint64_t doc_bytes; /* bytes delivered of the current document */
} walk;

static void report(walk *w) {
    if (w->sink->progress == NULL) return;
    uint64_t done = w->base + (w->ar ? (uint64_t)archive_filter_bytes(w->ar, -1) : w->pos);
    uint64_t total = w->c->total_bytes;
    w->sink->progress(w->sink->ctx, done < total ? done : total, total);
}

static int emit(walk *w, const uint8_t *p, size_t n) {
    if (n == 0) return BT_OK;
    w->doc_bytes += n;
    w->c->stats.bytes += n;
    return w->sink->doc_data(w->sink->ctx, p, n);
}

static int end_doc(walk *w) {
    if (w->doc_bytes == 0) return BT_OK;
    w->doc_bytes = 0;
    w->c->stats.documents++;
    return w->sink->doc_end(w->sink->ctx);
}

/* Feeds text, cutting documents at lines that hold only "%" when splitting. Bytes
 * are delivered in runs; a "%" at a line start is held back until the next byte
 * says whether it is a separator. */
static int split_feed(walk *w, const uint8_t *p, size_t n) {
    if (!w->c->split_on_percent) return emit(w, p, n);
    size_t run = 0;
    int rc = BT_OK;
    for (size_t i = 0; i < n && rc == BT_OK; i++) {
        uint8_t ch = p[i];
        if (w->pending == 1 && ch == '\r') {
            w->pending = 2;
            run = i + 1;
            continue;
        }
        if (w->pending && ch == '\n') { /* a separator line */
            w->pending = 0;
            w->line_start = 1;
            run = i + 1;
            rc = end_doc(w);
            continue;
        }
        if (w->pending) { /* it was text after all; run == i here */
            rc = emit(w, (const uint8_t *)"%\r", (size_t)w->pending);
            w->pending = 0;
        }
        if (w->line_start && ch == '%') {
            rc = rc ? rc : emit(w, p + run, i - run);
            w->pending = 1;
            w->line_start = 0;
            run = i + 1;
            continue;
        }
        w->line_start = ch == '\n';
    }
    return rc ? rc : emit(w, p + run, n - run);
}

static void split_start(walk *w) {
    w->line_start = 1;
    w->pending = 0;
    w->doc_bytes = 0;
}

/* End of a file: a held "%" on the last line is a separator; the document ends. */
static int split_finish(walk *w) {
    w->pending = 0;
    return end_doc(w);
}

/* A source of bytes: a plain file or an archive member. Returns bytes read, 0 at
 * the end, negative (with diag) on error. */
typedef struct source {
    const char *path;
    const char *member; /* NULL for a plain file */
    int fd;
} source;

static long source_read(walk *w, const source *s, uint8_t *buf, size_t cap, bt_diag *diag) {
    if (s->member != NULL) {
        la_ssize_t k = archive_read_data(w->ar, buf, cap);
        if (k < 0)
            bt_diag_set(diag, "input '%s': member '%s': %s", s->path, s->member,
                        archive_error_string(w->ar));
        return k < 0 ? BT_EINVAL : (long)k;
    }
    ssize_t k;
    do
        k = read(s->fd, buf, cap);
    while (k < 0 && errno == EINTR);
    if (k < 0) {
        bt_diag_set(diag, "input '%s': read failed: %s", s->path, strerror(errno));
        return BT_EINVAL;
    }
    w->pos += (uint64_t)k;
    return (long)k;
}

/* Reads one file or member into documents, unless its first 8 KiB hold a NUL. */
static int feed_source(walk *w, const source *s, bt_diag *diag) {
    uint8_t *buf = w->c->buf;
    size_t have = 0;
    long k = 1;
    while (have < SNIFF_BYTES && (k = source_read(w, s, buf + have, READ_CHUNK - have, diag)) > 0)
        have += (size_t)k;
    if (k < 0) return (int)k;
    if (memchr(buf, 0, have < SNIFF_BYTES ? have : SNIFF_BYTES) != NULL) {
        note_skip(w->c, &w->c->stats.skipped_binary, s->path, s->member,
                  "binary (a NUL byte in the first 8 KiB)");
        return BT_OK;
    }
    w->c->stats.files++;
    split_start(w);
    while (have > 0) {
        int rc = split_feed(w, buf, have);
        if (rc != BT_OK) return rc;
        report(w);
        if ((k = source_read(w, s, buf, READ_CHUNK, diag)) < 0) return (int)k;
        have = (size_t)k;
    }
    return split_finish(w);
}

static int read_plain(walk *w, const char *path, bt_diag *diag) {
    source s = {path, NULL, open(path, O_RDONLY | O_CLOEXEC)};
    if (s.fd < 0) {
        bt_diag_set(diag, "input '%s': cannot open: %s", path, strerror(errno));
        return BT_EINVAL;
    }
    w->pos = 0;
    int rc = feed_source(w, &s, diag);
    close(s.fd);
    return rc;
}

/* Every regular member of an archive, in archive order. */
static int read_members(walk *w, const char *path, bt_diag *diag) {
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(w->ar, &e);
        if (r == ARCHIVE_EOF) return BT_OK;
        if (r < ARCHIVE_WARN) {
            bt_diag_set(diag, "input '%s': corrupt or unreadable archive: %s", path,
                        archive_error_string(w->ar));
            return BT_EINVAL;
        }
        const char *name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "(unnamed)";
        unsigned type = (unsigned)archive_entry_filetype(e);
        if (type == AE_IFLNK || archive_entry_hardlink(e) != NULL) {
            note_skip(w->c, &w->c->stats.skipped_links, path, name, "link, not followed");
            continue;
        }
        if (type == AE_IFDIR) continue;
        if (type != AE_IFREG) {
            note_skip(w->c, &w->c->stats.skipped_other, path, name, "not a regular file");
            continue;
        }
        source s = {path, name, -1};
        int rc = feed_source(w, &s, diag);
        if (rc != BT_OK) return rc;
    }
}

static int read_archive(walk *w, const char *path, bt_diag *diag) {
    struct archive *a = archive_read_new();
    if (a == NULL) {
        bt_diag_set(diag, "out of memory opening '%s'", path);
        return BT_ENOMEM;
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_all(a);
    archive_read_support_format_raw(a); /* a compressed single file, e.g. a.txt.gz */
    int rc = BT_OK;
    if (archive_read_open_filename(a, path, READ_CHUNK) != ARCHIVE_OK) {
        bt_diag_set(diag, "input '%s': cannot read as an archive: %s", path,
                    archive_error_string(a));
        rc = BT_EINVAL;
    } else {
        w->ar = a;
        w->c->stats.archives++;
        rc = read_members(w, path, diag);
        w->ar = NULL;
    }
    archive_read_free(a);
    return rc;
}

/* Whether the file starts with an archive or compressor signature. */
static int is_archive(const char *path) {
    static const struct {
        size_t off, len;
        const char *magic;
    } sigs[] = {
        {0, 2, "\x1f\x8b"}, /* gzip */
        {0, 3, "BZh"},      /* bzip2 */
        {0, 6,
         "\xfd"
         "7zXZ\x00"},                 /* xz */
        {0, 4, "\x28\xb5\x2f\xfd"},   /* zstd */
        {0, 4, "PK\x03\x04"},         /* zip */
        {0, 4, "PK\x05\x06"},         /* empty zip */
        {0, 6, "7z\xbc\xaf\x27\x1c"}, /* 7z */
        {257, 5, "ustar"},            /* tar (POSIX and GNU) */
    };
    uint8_t head[262];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0; /* read_plain reports the error */
    ssize_t n = pread(fd, head, sizeof head, 0);
    close(fd);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (n >= (ssize_t)(sigs[i].off + sigs[i].len) &&
            memcmp(head + sigs[i].off, sigs[i].magic, sigs[i].len) == 0)
            return 1;
    return 0;
}

int corpus_read(corpus *c, const corpus_sink *sink, bt_diag *diag) {
    if (c->buf == NULL && (c->buf = malloc(READ_CHUNK)) == NULL) {
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    walk w = {.c = c, .sink = sink};
    for (size_t i = 0; i < c->n_files; i++) {
        const char *path = c->files[i].path;
        int rc = is_archive(path) ? read_archive(&w, path, diag) : read_plain(&w, path, diag);
        if (rc != BT_OK) return rc;
        w.base += c->files[i].size;
        w.pos = 0;
        report(&w);
    }
    return BT_OK;
}
