/* Reading text corpora into documents for `baton data prepare`.
 *
 * Inputs are plain text files, directories and archives, read in a fixed order so the
 * same inputs always give the same documents:
 *   - inputs in the order given;
 *   - a directory recursively, entries sorted by name (byte order, not locale);
 *     symbolic links inside a directory are not followed (they would duplicate files,
 *     e.g. the fortunes package's NAME.u8 links, or loop) and are counted as skipped;
 *   - a file whose first bytes are an archive or compressor signature (tar, zip, 7z;
 *     gzip, bzip2, xz, zstd) is read through libarchive, streaming, in archive order:
 *     every regular member is a file (a compressed single file, e.g. a.txt.gz, is
 *     one file); directories, links and devices in an archive are skipped;
 *   - a file that starts like an archive but cannot be read as one (its first header
 *     unreadable) and holds no NUL byte in its first 8 KiB is text after all: read as
 *     a plain file, with a warning;
 *   - a member of an archive that is itself compressed or an archive (a.txt.gz,
 *     b.jsonl.zst, inner.tar inside outer.tar) is skipped, named as such: it is not
 *     opened (decompress or unpack it first);
 *   - a file or member with a NUL byte in its first 8 KiB is binary and skipped
 *     (the fortunes package's strfile NAME.dat indexes are);
 *   - the same file (device and inode) reached twice, by two inputs or two spellings
 *     of one, is refused: its documents would be in the dataset twice, and in both
 *     the train and the valid split.
 * Each file is one document, or, with split_on_percent, the fortune(6) format: the
 * text between lines holding only "%" (also "%\r"), each such entry a document.
 * Empty documents are dropped. Documents are delivered as bytes to a sink. */
#ifndef BATON_CORPUS_H
#define BATON_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Receives the documents. Each document is one or more data calls (n > 0) then one
 * end call. A non-zero return stops the reading and is returned by corpus_read. */
typedef struct corpus_sink {
    int (*doc_data)(void *ctx, const uint8_t *bytes, size_t n);
    int (*doc_end)(void *ctx);
    /* Input bytes consumed (compressed bytes for archives) of the total; may be NULL. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
} corpus_sink;

typedef struct corpus_stats {
    uint64_t files;          /* plain files and archive members read as text */
    uint64_t archives;       /* archives opened */
    uint64_t documents;      /* non-empty documents delivered */
    uint64_t bytes;          /* text bytes delivered */
    uint64_t bytes_read;     /* input bytes read: plain files' as read, archives' listed sizes */
    uint64_t skipped_binary; /* files or members with a NUL in the first 8 KiB */
    uint64_t skipped_packed; /* archive members that are compressed files or archives */
    uint64_t skipped_links;  /* symbolic or hard links not followed */
    uint64_t skipped_other;  /* devices, sockets, fifos inside directories or archives */
} corpus_stats;

typedef struct corpus_file {
    char *path;
    uint64_t size;     /* when listed */
    uint64_t dev, ino; /* what it is, to find a file reached twice */
    size_t input;      /* the corpus_add call it came from (corpus.inputs) */
} corpus_file;

typedef struct corpus {
    corpus_file *files; /* the expanded input list, in reading order */
    size_t n_files, cap_files;
    char **inputs; /* the paths given to corpus_add, in order */
    size_t n_inputs;
    uint64_t total_bytes; /* sum of the files' sizes */
    int split_on_percent; /* fortune(6) format */
    /* Told of each skipped file or member (member NULL for a file), when not NULL. */
    void (*on_skip)(void *ctx, const char *path, const char *member, const char *why);
    void *on_skip_ctx;
    /* Told of what is read but deserves a word (a file that changed while being read, a
     * file read as text although it starts like an archive), when not NULL; its ctx is
     * on_skip_ctx. */
    void (*on_warning)(void *ctx, const char *path, const char *what);
    corpus_stats stats;
    uint8_t *buf; /* read buffer */
} corpus;

void corpus_init(corpus *c);
void corpus_free(corpus *c);

/* Adds an input: a file, or a directory expanded now (sorted, recursively). A
 * missing or unreadable input is BT_ENOENT/BT_EINVAL with diag naming it. */
int corpus_add(corpus *c, const char *path, bt_diag *diag);

/* Reads every input and delivers the documents. An unreadable file or a corrupt
 * archive is BT_EINVAL with diag naming it (and the member); so is a file reached
 * twice (diag names both ways to it), before anything is read. */
int corpus_read(corpus *c, const corpus_sink *sink, bt_diag *diag);

#endif
