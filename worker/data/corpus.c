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
    for (size_t i = 0; i < c->n_inputs; i++)
        free(c->inputs[i]);
    free(c->files);
    free(c->inputs);
    free(c->buf);
    memset(c, 0, sizeof *c);
}

static void note_skip(corpus *c, uint64_t *counter, const char *path, const char *member,
                      const char *why) {
    (*counter)++;
    if (c->on_skip != NULL) c->on_skip(c->on_skip_ctx, path, member, why);
}

/* ---- expanding the inputs ---------------------------------------------------- */

static void note_warning(corpus *c, const char *path, const char *what) {
    if (c->on_warning != NULL) c->on_warning(c->on_skip_ctx, path, what);
}

static int add_file(corpus *c, const char *path, const struct stat *st, bt_diag *diag) {
    if (c->n_files == c->cap_files) {
        size_t cap = c->cap_files ? 2 * c->cap_files : 64;
        corpus_file *f = realloc(c->files, cap * sizeof *f);
        if (f == NULL) goto oom;
        c->files = f;
        c->cap_files = cap;
    }
    char *copy = strdup(path);
    if (copy == NULL) goto oom;
    uint64_t size = (uint64_t)st->st_size;
    c->files[c->n_files++] =
        (corpus_file){copy, size, (uint64_t)st->st_dev, (uint64_t)st->st_ino, c->n_inputs - 1};
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
    if (S_ISREG(st.st_mode)) return add_file(c, path, &st, diag);
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

/* Records path as input number c->n_inputs - 1, which the files it expands to name. */
static int add_input(corpus *c, const char *path, bt_diag *diag) {
    char **grown = realloc(c->inputs, (c->n_inputs + 1) * sizeof *grown);
    if (grown != NULL) c->inputs = grown;
    if (grown == NULL || (c->inputs[c->n_inputs] = strdup(path)) == NULL) {
        bt_diag_set(diag, "out of memory listing the inputs");
        return BT_ENOMEM;
    }
    c->n_inputs++;
    return BT_OK;
}

int corpus_add(corpus *c, const char *path, bt_diag *diag) {
    struct stat st;
    int rc = add_input(c, path, diag);
    if (rc != BT_OK) return rc;
    if (stat(path, &st) != 0) {
        bt_diag_set(diag, "input '%s': %s", path, strerror(errno));
        return errno == ENOENT ? BT_ENOENT : BT_EINVAL;
    }
    if (S_ISDIR(st.st_mode)) return add_dir(c, path, diag);
    if (S_ISREG(st.st_mode)) return add_file(c, path, &st, diag);
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
    uint64_t members;   /* member headers read of the current archive */
    int skipped;        /* the last source was skipped (binary, compressed), not read */
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

/* ---- signatures ---------------------------------------------------------------- */

#define TAR_BLOCK 512

/* Whether head (n bytes) is a tar header: "ustar" at 257 and a checksum that holds. */
static int is_tar_header(const uint8_t *head, size_t n) {
    if (n < TAR_BLOCK || memcmp(head + 257, "ustar", 5) != 0) return 0;
    uint64_t want = 0, sum = 0;
    size_t i = 148;
    while (i < 156 && head[i] == ' ')
        i++;
    for (; i < 156 && head[i] >= '0' && head[i] <= '7'; i++)
        want = want * 8 + (uint64_t)(head[i] - '0');
    for (i = 0; i < TAR_BLOCK; i++) /* the checksum field counts as spaces */
        sum += i >= 148 && i < 156 ? (uint64_t)' ' : head[i];
    return sum == want;
}

/* What a file or member starting with head (n bytes) is packed as: "gzip", "zip", ...
 * (*compressed: a compressor's stream, else an archive), or NULL for neither. */
static const char *packed_kind(const uint8_t *head, size_t n, int *compressed) {
    static const struct {
        size_t len;
        const char *magic, *name;
        int compressed;
    } sigs[] = {
        {3, "\x1f\x8b\x08", "gzip", 1},
        {6,
         "\xfd"
         "7zXZ\x00",
         "xz", 1},
        {4, "\x28\xb5\x2f\xfd", "zstd", 1},
        {4, "PK\x03\x04", "zip", 0},
        {4, "PK\x05\x06", "zip", 0}, /* an empty one */
        {6, "7z\xbc\xaf\x27\x1c", "7z", 0},
    };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (n >= sigs[i].len && memcmp(head, sigs[i].magic, sigs[i].len) == 0) {
            *compressed = sigs[i].compressed;
            return sigs[i].name;
        }
    /* bzip2: "BZh", the block size '1'..'9', then a block's or the stream end's magic */
    if (n >= 10 && memcmp(head, "BZh", 3) == 0 && head[3] >= '1' && head[3] <= '9' &&
        (memcmp(head + 4, "1AY&SY", 6) == 0 ||
         memcmp(head + 4, "\x17\x72\x45\x38\x50\x90", 6) == 0)) {
        *compressed = 1;
        return "bzip2";
    }
    *compressed = 0;
    return is_tar_header(head, n) ? "tar" : NULL;
}

/* A member that is itself compressed or an archive: skipped, named as such (it is not
 * opened: a .jsonl.gz shard inside a tar is not text to tokenize as it stands). */
static int skip_packed(walk *w, const source *s, const uint8_t *head, size_t n) {
    int compressed;
    const char *kind = packed_kind(head, n, &compressed);
    if (kind == NULL) return 0;
    char why[128];
    snprintf(why, sizeof why,
             compressed ? "compressed (%s inside an archive: decompress it first)"
                        : "an archive (%s inside an archive: unpack it first)",
             kind);
    note_skip(w->c, &w->c->stats.skipped_packed, s->path, s->member, why);
    return 1;
}

/* The first bytes of a file (up to cap) into head; how many, 0 when it cannot be read
 * (the reading that follows reports that). */
static size_t read_head(const char *path, uint8_t *head, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, head, cap, 0);
    close(fd);
    return n > 0 ? (size_t)n : 0;
}

/* Whether the file starts with an archive or compressor signature. */
static int is_archive(const char *path) {
    uint8_t head[TAR_BLOCK];
    int compressed;
    return packed_kind(head, read_head(path, head, sizeof head), &compressed) != NULL;
}

/* Reads one file or member into documents, unless its first 8 KiB hold a NUL. */
static int feed_source(walk *w, const source *s, bt_diag *diag) {
    uint8_t *buf = w->c->buf;
    size_t have = 0;
    long k = 1;
    while (have < SNIFF_BYTES && (k = source_read(w, s, buf + have, READ_CHUNK - have, diag)) > 0)
        have += (size_t)k;
    if (k < 0) return (int)k;
    w->skipped = 1;
    if (s->member != NULL && skip_packed(w, s, buf, have)) return BT_OK;
    if (memchr(buf, 0, have < SNIFF_BYTES ? have : SNIFF_BYTES) != NULL) {
        note_skip(w->c, &w->c->stats.skipped_binary, s->path, s->member,
                  "binary (a NUL byte in the first 8 KiB)");
        return BT_OK;
    }
    w->skipped = 0;
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

/* Reads a plain file; w->pos is then the bytes it counts for: those read, or its listed
 * size when it was skipped. A file that changed size since it was listed is read as it
 * is now, with a warning. */
static int read_plain(walk *w, const corpus_file *f, bt_diag *diag) {
    source s = {f->path, NULL, open(f->path, O_RDONLY | O_CLOEXEC)};
    if (s.fd < 0) {
        bt_diag_set(diag, "input '%s': cannot open: %s", f->path, strerror(errno));
        return BT_EINVAL;
    }
    w->pos = 0;
    int rc = feed_source(w, &s, diag);
    close(s.fd);
    if (rc == BT_OK && w->skipped) w->pos = f->size;
    if (rc == BT_OK && w->pos != f->size) {
        char what[160];
        snprintf(what, sizeof what,
                 "changed while being read: %llu bytes when listed, %llu bytes read (the "
                 "dataset holds what was read)",
                 (unsigned long long)f->size, (unsigned long long)w->pos);
        note_warning(w->c, f->path, what);
    }
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
        w->members++;
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

/* Whether a file whose archive reading failed before its first member is text after all
 * (no NUL byte in its first 8 KiB: a text file that starts like "PK\x03\x04"). */
static int text_after_all(walk *w, const char *path) {
    return w->members == 0 && memchr(w->c->buf, 0, read_head(path, w->c->buf, SNIFF_BYTES)) == NULL;
}

/* Reads an archive; w->pos is then its listed size. One that cannot be read as an archive
 * from its first header on, and that holds no NUL byte at its start, is read as text. */
static int read_archive(walk *w, const corpus_file *f, bt_diag *diag) {
    struct archive *a = archive_read_new();
    if (a == NULL) {
        bt_diag_set(diag, "out of memory opening '%s'", f->path);
        return BT_ENOMEM;
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_all(a);
    archive_read_support_format_raw(a); /* a compressed single file, e.g. a.txt.gz */
    int rc = BT_OK;
    w->members = 0;
    if (archive_read_open_filename(a, f->path, READ_CHUNK) != ARCHIVE_OK) {
        bt_diag_set(diag, "input '%s': cannot read as an archive: %s", f->path,
                    archive_error_string(a));
        rc = BT_EINVAL;
    } else {
        w->ar = a;
        rc = read_members(w, f->path, diag);
        w->ar = NULL;
    }
    int text = rc == BT_EINVAL && text_after_all(w, f->path);
    char what[600];
    if (text)
        snprintf(what, sizeof what, "starts like an archive but is none (%s): read as text",
                 archive_error_string(a) ? archive_error_string(a) : "unreadable");
    archive_read_free(a);
    if (text) {
        note_warning(w->c, f->path, what);
        bt_diag_init(diag);
        return read_plain(w, f, diag);
    }
    w->c->stats.archives += rc == BT_OK;
    w->pos = f->size;
    return rc;
}

/* ---- a file reached twice -------------------------------------------------------- */

typedef struct file_id {
    uint64_t dev, ino;
    size_t index;
} file_id;

static int cmp_file_ids(const void *a, const void *b) {
    const file_id *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* How file i was reached, for a message: 'PATH', or 'PATH' (in input 'DIR'). */
static void describe_file(const corpus *c, size_t i, char *out, size_t cap) {
    const corpus_file *f = &c->files[i];
    const char *in = c->inputs[f->input];
    if (strcmp(in, f->path) == 0)
        snprintf(out, cap, "'%s'", f->path);
    else
        snprintf(out, cap, "'%s' (in input '%s')", f->path, in);
}

/* Refuses a file listed twice (same device and inode), naming its first repeat in reading
 * order and where it was listed before. */
static int check_unique(const corpus *c, bt_diag *diag) {
    file_id *ids = c->n_files > 1 ? malloc(c->n_files * sizeof *ids) : NULL;
    if (c->n_files > 1 && ids == NULL) {
        bt_diag_set(diag, "out of memory listing the inputs");
        return BT_ENOMEM;
    }
    for (size_t i = 0; ids != NULL && i < c->n_files; i++)
        ids[i] = (file_id){c->files[i].dev, c->files[i].ino, i};
    if (ids != NULL) qsort(ids, c->n_files, sizeof *ids, cmp_file_ids);
    size_t first = 0, again = SIZE_MAX;
    for (size_t i = 1; ids != NULL && i < c->n_files; i++)
        if (ids[i].dev == ids[i - 1].dev && ids[i].ino == ids[i - 1].ino && ids[i].index < again)
            first = ids[i - 1].index, again = ids[i].index;
    free(ids);
    if (again == SIZE_MAX) return BT_OK;
    char a[1024], b[1024];
    describe_file(c, first, a, sizeof a);
    describe_file(c, again, b, sizeof b);
    bt_diag_set(diag,
                "the same file is listed twice, as %s and as %s (device %llu, inode %llu): its "
                "documents would be in the dataset twice (in train and valid both, at a valid "
                "fraction); give each file once",
                a, b, (unsigned long long)c->files[again].dev,
                (unsigned long long)c->files[again].ino);
    return BT_EINVAL;
}

int corpus_read(corpus *c, const corpus_sink *sink, bt_diag *diag) {
    int rc = check_unique(c, diag);
    if (rc != BT_OK) return rc;
    if (c->buf == NULL && (c->buf = malloc(READ_CHUNK)) == NULL) {
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    walk w = {.c = c, .sink = sink};
    for (size_t i = 0; i < c->n_files; i++) {
        const corpus_file *f = &c->files[i];
        rc = is_archive(f->path) ? read_archive(&w, f, diag) : read_plain(&w, f, diag);
        if (rc != BT_OK) return rc;
        w.base += w.pos; /* the bytes the file counts for (read_plain, read_archive) */
        c->stats.bytes_read = w.base;
        w.pos = 0;
        report(&w);
    }
    return BT_OK;
}
