/* The files of a checkpoint as its manifest names them, and a streaming check of their
 * bytes against the manifest's CRC32C values: shared by pack/unpack (ckpt_pack.c) and
 * push/pull (ckpt_store.c), which see a shard file only as a stream of chunks.
 *
 * Each shard file is cut into check units, sorted by offset: one per block_crc32c of a
 * shard range (Manifest.block_bytes each, the last short), or the whole range when the
 * block list does not fit; the whole-range crc32c is checked as well. Units never
 * overlap; a file's expected size is the end of its last unit. */
#ifndef BATON_CKPT_STORE_CRC_H
#define BATON_CKPT_STORE_CRC_H

#include <stdint.h>

#include "ckpt/ckpt.h"

typedef struct ckpt_crc_unit {
    uint64_t off, len;
    uint32_t crc;       /* of this unit */
    uint32_t range_crc; /* of the shard range this unit ends, when range_end */
    uint64_t range_off; /* where that range starts */
    int range_end;
} ckpt_crc_unit;

typedef struct ckpt_file_check {
    char *name;          /* file name inside the checkpoint directory */
    ckpt_crc_unit *unit; /* sorted by off */
    size_t n, cap;
    uint64_t size; /* expected file size */
    /* streaming state (ckpt_check_reset) */
    size_t cur;
    uint64_t pos;
    uint32_t crc, range_crc;
} ckpt_file_check;

typedef struct ckpt_file_set {
    ckpt_file_check *file; /* sorted by name; manifest.pb is not among them */
    size_t n;
} ckpt_file_set;

/* The shard files m names, with their check units. File names must be plain names
 * (no '/', not "." or ".."; letters, digits, '.', '_' and '-'), since they become
 * paths and URLs; overlapping ranges are an error. */
int ckpt_files_from_manifest(const Baton__Manifest *m, ckpt_file_set *out, bt_diag *diag);
void ckpt_files_free(ckpt_file_set *s);
/* 1 when a and b describe the same bytes: the same size and the same check units (offsets,
 * lengths and CRC32C values), as two manifests listing one file's content do. */
int ckpt_file_same(const ckpt_file_check *a, const ckpt_file_check *b);
/* The file of set s named name, or NULL. */
const ckpt_file_check *ckpt_files_find(const ckpt_file_set *s, const char *name);
/* 1 when name is a plain file name as above. */
int ckpt_name_is_plain(const char *name);

void ckpt_check_reset(ckpt_file_check *c);
/* Feeds the next n bytes of the file; where names it in messages (a path or a URL).
 * BT_EIO on a CRC mismatch (naming the byte range) or bytes past the expected end. */
int ckpt_check_feed(ckpt_file_check *c, const void *p, size_t n, const char *where, bt_diag *diag);
/* After the last byte: BT_EIO when the file was shorter than the manifest says. */
int ckpt_check_end(ckpt_file_check *c, const char *where, bt_diag *diag);
/* Streams dir/c->name from disk through the check. */
int ckpt_check_file(const char *dir, ckpt_file_check *c, bt_diag *diag);
/* Reads dir's manifest and checks every shard file it names. */
int ckpt_check_dir(const char *dir, bt_diag *diag);

#endif
