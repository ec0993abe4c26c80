/* Checkpoints on disk (schema/manifest.proto): a directory per step under a checkpoint
 * root (RUN_DIR/checkpoints), named s<stage>-step<step> with both numbers zero-padded so
 * that names sort in training order. Inside: one shard file per writing rank
 * (rank-NNNNN.bin) and manifest.pb, which is what makes the directory a checkpoint.
 *
 * Writing (every rank that holds something to save):
 *   rank 0:    ckpt_begin(root, name)          creates NAME.partial (0700), stale one removed
 *   (barrier)
 *   each rank: ckpt_writer_open / _add ... / _finish   its shard file, fsynced, then its
 *              index rank-NNNNN.pb (a Manifest holding only its tensors), renamed into place
 *   rank 0:    ckpt_commit(root, name, header, world)  waits for every index, merges them
 *              into manifest.pb (fsynced), renames NAME.partial to NAME, fsyncs the root,
 *              points `latest` at NAME (written aside and renamed) and applies retention.
 * A crash anywhere before the rename leaves only a .partial directory, which readers
 * ignore and the next ckpt_begin of that name removes.
 *
 * Reading: ckpt_resolve turns a checkpoint directory or a run directory into the newest
 * complete checkpoint; ckpt_reader_box reads any box of a global tensor from whatever
 * shards cover it, reading only the byte span that overlaps and checking the CRC32C of
 * every block it reads. Resharding is what reading a box does. */
#ifndef BATON_CKPT_H
#define BATON_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.pb-c.h"
#include "util/err.h"

#define CKPT_MANIFEST        "manifest.pb"
#define CKPT_LATEST          "latest"
#define CKPT_ROOT_IN_RUN     "checkpoints"
#define CKPT_PARTIAL_SUFFIX  ".partial"
#define CKPT_DELETING_SUFFIX ".deleting" /* a checkpoint retention is removing */
#define CKPT_DEFAULT_BLOCK   (1u << 20)
#define CKPT_PATH_MAX        4096
#define CKPT_MAX_MANIFEST    (1u << 30) /* bytes of a manifest or a rank index */
/* The manifest format written: 2 stores the fp8 amax histories in the shard files
 * (Fp8State.history) instead of inline. Format 1 is still read; a later one is refused. */
#define CKPT_FORMAT_VERSION 2

/* ---- names and directories (ckpt_dir.c) ---- */

/* "s<stage:02>-step<step:08>" into out. */
void ckpt_name(uint32_t stage, uint64_t step, char *out, size_t cap);
/* Whether name is "s" digits "-step" digits followed by suffix and nothing more: a name
 * ckpt_name makes, with suffix ("" for none; ".partial", ".deleting"). */
int ckpt_name_is(const char *name, const char *suffix);
/* <0, 0, >0 as checkpoint name a trains before, with, after b: by stage, then step, as
 * numbers ("s00-step99999999" before "s00-step100000000", "s99-..." before "s100-..."),
 * never as text; names not of that form after those, by strcmp. The one order every
 * reader and retention of a checkpoint root uses (ckpt_list). */
int ckpt_name_cmp(const char *a, const char *b);
/* Complete checkpoints (a manifest.pb present) under root, oldest first (ckpt_name_cmp's
 * order); *names is an array of malloc'd strings (free with ckpt_names_free). A missing
 * root gives 0. */
int ckpt_list(const char *root, char ***names, size_t *n, bt_diag *diag);
void ckpt_names_free(char **names, size_t n);
/* Where the checkpoint whose manifest is m stands against stage `stage` (its index) of the
 * recipe named `recipe`, by what the manifest records: its recipe's name and its stage's
 * index in that recipe's order. Never by the directory's name (a copy or a rename changes
 * it) or the stage's name (a stage renamed, two names sharing a prefix). What the worker
 * (which checkpoint a stage may start from, whether it resumes one) and `baton run` (which
 * checkpoint an attempt starts from, whether it is the stage's own) both judge by. */
typedef enum ckpt_stage_rel {
    CKPT_OTHER_RECIPE, /* another recipe's (or one that records none), or another run's
                        * (ckpt_run_relation): a hand-off at most */
    CKPT_EARLIER_STAGE,
    CKPT_SAME_STAGE,
    CKPT_LATER_STAGE, /* never a start for the stage when found in a run directory */
} ckpt_stage_rel;
ckpt_stage_rel ckpt_stage_relation(const Baton__Manifest *m, const char *recipe, uint32_t stage);
/* Whether the checkpoint whose manifest is m was saved by the run that run_id names
 * (StageSpec.run_id), so that ckpt_stage_relation may call it one of that run's stages:
 *   - in_run_root (found in that run's own checkpoints/): yes, whatever it records (its
 *     checkpoints from before manifests recorded the run, a run_id file lost and made
 *     again);
 *   - run_id NULL or "" (a spec no run wrote, `baton spec`'s): yes, as before runs were
 *     told apart (the recipe's name and the stage's index decide);
 *   - else only when the manifest records the same run_id: another run's checkpoint, and
 *     one from before manifests recorded the run, named by init or --init, is another
 *     run's, whose weights a stage takes (a hand-off), never a resume of its own. */
int ckpt_same_run(const Baton__Manifest *m, const char *run_id, int in_run_root);
/* ckpt_stage_relation of the run's stage: CKPT_OTHER_RECIPE for another run's checkpoint
 * (ckpt_same_run). */
ckpt_stage_rel ckpt_run_relation(const Baton__Manifest *m, const char *recipe, const char *run_id,
                                 uint32_t stage, int in_run_root);
/* path: a checkpoint directory, a checkpoint root, or a run directory (its
 * checkpoints/ root): the checkpoint directory to read, into dir. A root's `latest`
 * pointer is followed when it names a complete checkpoint, else the newest complete one
 * is taken. BT_ENOENT with the places looked at when there is none. */
int ckpt_resolve(const char *path, char *dir, size_t cap, bt_diag *diag);
/* ckpt_resolve, then ckpt_manifest_read of the checkpoint found: what every tool that
 * takes a checkpoint or run directory starts with. A manifest without a model or without
 * tensors (an empty file decodes as one) is BT_EINVAL: not a checkpoint's. */
int ckpt_open(const char *path, char *dir, size_t cap, Baton__Manifest **out, bt_diag *diag);
/* ---- manifest.pb (ckpt_manifest.c) ----
 * The file carries its own CRC32C: the field manifest_crc32c first (a protobuf field may
 * come anywhere), the CRC32C of every byte after it, then the message packed with
 * `checksummed` set. A reader checks the bytes as they are; a manifest from before the
 * checksum (neither field) is read unchecked (ckpt_manifest_checked). */

/* The bytes of manifest.pb for m (its own manifest_crc32c and checksummed ignored): a
 * malloc'd buffer into *out. BT_ENOMEM. */
int ckpt_manifest_pack(const Baton__Manifest *m, uint8_t **out, size_t *len);
/* Writes dir/manifest.pb for m (ckpt_manifest_pack) atomically. */
int ckpt_manifest_write(const char *dir, const Baton__Manifest *m, bt_diag *diag);
/* Checks and decodes manifest bytes (where: the file, for messages): BT_EINVAL when the
 * checksum does not match, is missing from a manifest marked checksummed, or the bytes do
 * not decode; BT_EUNSUPPORTED for a later format than CKPT_FORMAT_VERSION. */
int ckpt_manifest_decode(const uint8_t *buf, size_t len, const char *where, Baton__Manifest **out,
                         bt_diag *diag);
/* Whether m was read with its checksum checked (0: a manifest from before the checksum). */
int ckpt_manifest_checked(const Baton__Manifest *m);
/* Whether checkpoint directory dir is gone (its manifest.pb no longer there): removed
 * while it was being read, as a run's retention removes older checkpoints. */
int ckpt_removed(const char *dir);
/* Reads, checks and decodes dir/manifest.pb (ckpt_manifest_decode); free with
 * baton__manifest__free_unpacked(m, NULL). A file that cannot be read: BT_ENOENT, or
 * BT_EIO with errno saying why (EACCES, ENOTDIR, EMFILE, EIO, ...). */
int ckpt_manifest_read(const char *dir, Baton__Manifest **out, bt_diag *diag);
/* BT_EUNSUPPORTED (diag naming where) when m is of a later format than this reader's. */
int ckpt_manifest_check_version(const Baton__Manifest *m, const char *where, bt_diag *diag);
/* Keeps the newest `keep` complete checkpoints under root plus every one whose manifest
 * says stage_final; removes the rest (each renamed to NAME.deleting first, then removed)
 * and any .partial, .old or .deleting directory other than `busy` (may be NULL): what a
 * crash left. keep 0 keeps everything. */
int ckpt_retain(const char *root, uint32_t keep, const char *busy, bt_diag *diag);
/* rm -r of a directory tree of plain files (a checkpoint is flat); a symbolic link (at the
 * top or inside) is removed itself, never what it points to. */
int ckpt_remove_dir(const char *dir);
/* Writes data to path through path.tmp, fsync and rename, then fsyncs the directory. On
 * a failure to write, errno is the cause (ENOSPC: a full disk; EINVAL, ELOOP: path.tmp is
 * not a regular file, or a link, refused at once as bt_open_private refuses it). */
int ckpt_write_file_atomic(const char *path, const void *data, size_t n, bt_diag *diag);
/* The same; *at_tmp (may be NULL) set to whether what failed was the open of path.tmp
 * itself (errno then says why: EINVAL, ELOOP or EISDIR, something put there), not a
 * write, fsync or rename after it (EINVAL there is no file's doing: fsync on a file system
 * without it). */
int ckpt_write_file_atomic_at(const char *path, const void *data, size_t n, int *at_tmp,
                              bt_diag *diag);
/* fsync of a directory by path. */
int ckpt_fsync_dir(const char *dir);

/* ---- geometry (ckpt_box.c) ---- */

/* A piece of a global tensor of at most two dimensions (a 1-D tensor is one row): the box
 * [off, off + shape) and, inside it, the flat range [flat_begin, flat_end) of its
 * row-major elements (the whole box when flat_end == 0). */
typedef struct ckpt_box {
    uint64_t off[2], shape[2];
    uint64_t flat_begin, flat_end;
} ckpt_box;

/* A contiguous run shared by a source and a destination piece: n elements starting at
 * element src of the source's stored elements (counted from its flat_begin) and at
 * element dst of the destination's (likewise). */
typedef struct ckpt_run {
    uint64_t src, dst, n;
} ckpt_run;

typedef int (*ckpt_run_fn)(void *ctx, const ckpt_run *run);

/* The runs where src and dst overlap, in increasing src order, adjacent runs merged;
 * stops at the first nonzero return of fn and returns it. *count (may be NULL) gets
 * the elements in common. */
int ckpt_box_overlap(const ckpt_box *src, const ckpt_box *dst, ckpt_run_fn fn, void *ctx,
                     uint64_t *count);
/* Elements stored in a piece. */
uint64_t ckpt_box_count(const ckpt_box *b);
/* The piece a manifest shard describes (its tensor's rank decides 1-D or 2-D). Returns
 * BT_EINVAL when its dimensions or ranges do not fit the global shape. */
int ckpt_box_from_shard(const Baton__TensorEntry *e, const Baton__Shard *s, ckpt_box *out);

/* ---- reading (ckpt_read.c) ---- */

const Baton__TensorEntry *ckpt_find(const Baton__Manifest *m, const char *key);
/* Sorts m's tensor entries by key and its fp8 states by tensor name (the pointer arrays
 * only; nothing else depends on their order), after which ckpt_find_sorted and
 * ckpt_fp8_find_sorted look one up in log time: a loader that looks up every tensor of a
 * large MoE model's manifest would otherwise scan it once per tensor. */
void ckpt_manifest_sort_keys(Baton__Manifest *m);
const Baton__TensorEntry *ckpt_find_sorted(const Baton__Manifest *m, const char *key);
const Baton__Fp8State *ckpt_fp8_find_sorted(const Baton__Manifest *m, const char *name);
/* The floats in state f's amax history (in its shard, or inline in format 1). */
uint64_t ckpt_fp8_history_len(const Baton__Fp8State *f);
/* How many times larger than today's the saved amaxes of fp8 state name are: format 1 was
 * written when each replica scaled its loss gradients by its own micro-batch count, so
 * its gradient (".dy") states are the saving layout's dp times today's; else 1. */
float ckpt_fp8_legacy_factor(const Baton__Manifest *m, const char *name);
size_t ckpt_dtype_size(Baton__DType t);
/* Elements of a global tensor. */
uint64_t ckpt_tensor_count(const Baton__TensorEntry *e);

/* A checkpoint being read piece by piece: its shard files stay open between reads (the
 * least recently used of CKPT_READER_FDS closed for another, or when the process runs out
 * of descriptors), so that a loader reading hundreds of tensors and fp8 histories from a
 * few files opens each once, not once per read (on a parallel filesystem an open is a
 * metadata server round trip). dir and m must outlive it. */
#define CKPT_READER_FDS 128 /* well inside the usual 1024 descriptors a process may hold */
typedef struct ckpt_reader {
    const char *dir;
    const Baton__Manifest *m;
    struct {
        char *name;
        int fd;
        uint64_t used;
    } fd[CKPT_READER_FDS];
    int n_fd;
    uint64_t tick;
    uint64_t opens; /* files opened so far */
} ckpt_reader;
void ckpt_reader_init(ckpt_reader *r, const char *dir, const Baton__Manifest *m);
void ckpt_reader_close(ckpt_reader *r);
/* Fills out (float32, row-major, the box's elements; flat ranges allowed) with the
 * piece want of tensor e from the checkpoint's shard files, converting bf16 to float32.
 * Every block read is checked against its CRC32C; a missing, short or damaged file, or a
 * piece not fully covered by the shards, is an error naming the file and place. */
int ckpt_reader_box(ckpt_reader *r, const Baton__TensorEntry *e, const ckpt_box *want, float *out,
                    bt_diag *diag);
/* The whole global tensor. */
int ckpt_reader_tensor(ckpt_reader *r, const Baton__TensorEntry *e, float *out, bt_diag *diag);
/* State f's amax history, ckpt_fp8_history_len(f) floats, into out (checksums checked). */
int ckpt_reader_fp8(ckpt_reader *r, const Baton__Fp8State *f, float *out, bt_diag *diag);
/* ckpt_reader_tensor through a reader of its own, for a one-off read. */
int ckpt_read_tensor(const char *dir, const Baton__Manifest *m, const Baton__TensorEntry *e,
                     float *out, bt_diag *diag);

/* ---- verification (ckpt_verify.c) ---- */

typedef struct ckpt_verify_report {
    uint64_t tensors, shards, bytes;
    uint64_t fp8_histories; /* the fp8 amax histories stored in shards (format 2) */
    uint64_t problems;      /* each one also passed to the callback */
} ckpt_verify_report;

/* Checks every shard of checkpoint dir: geometry, file length, whole and per-block
 * CRC32C, that the shards of every tensor cover it exactly once (no gap, no overlap), and
 * that no shard file holds bytes after the last range the manifest places in it; the fp8
 * amax histories stored in shards too. Each problem is passed to fn (may be NULL) as one
 * line naming the file, byte range and tensor. Returns 0 when readable (problems or not;
 * see the report), else a BT_ code with diag: BT_EIO when a shard file may not be read
 * here (permission: no verdict on it, not damage). */
int ckpt_verify(const char *dir, const Baton__Manifest *m, void (*fn)(void *, const char *),
                void *ctx, ckpt_verify_report *out, bt_diag *diag);

/* ---- writing (ckpt_write.c) ---- */

typedef struct ckpt_writer {
    char dir[CKPT_PATH_MAX]; /* the .partial directory */
    char file[64];           /* shard file name inside it */
    int fd, rank;
    uint32_t block_bytes;
    uint64_t off; /* bytes written so far */
    Baton__Manifest *index;
    unsigned char *stage; /* staging buffer for dtype conversion */
    size_t stage_cap;
} ckpt_writer;

/* The .partial directory of checkpoint `name` under root, into out. */
void ckpt_partial_dir(const char *root, const char *name, char *out, size_t cap);
/* Creates root (0700) if needed and a fresh root/name.partial (0700). One rank calls it
 * before any rank opens a writer. */
int ckpt_begin(const char *root, const char *name, bt_diag *diag);
int ckpt_writer_open(ckpt_writer *w, const char *partial_dir, int rank, uint32_t block_bytes,
                     bt_diag *diag);
/* Appends a piece of tensor `key` (ndim 1 or 2, global_shape) stored as dtype (F32 or
 * BF16, converted from the float32 data with round-to-nearest-even): data holds the
 * piece's ckpt_box_count(piece) elements. */
int ckpt_writer_add(ckpt_writer *w, const char *key, int ndim, const uint64_t *global_shape,
                    const ckpt_box *piece, Baton__DType dtype, const float *data, bt_diag *diag);
/* Records a delayed-scaling state (FP8) in the index, its history in the shard file. */
int ckpt_writer_add_fp8(ckpt_writer *w, const char *name, float scale, const float *history,
                        uint32_t len, uint32_t pos, bt_diag *diag);
/* fsyncs the shard file, writes the index rank-NNNNN.pb atomically; frees w. */
int ckpt_writer_finish(ckpt_writer *w, bt_diag *diag);
/* Closes and frees without writing the index (the checkpoint will never complete). */
void ckpt_writer_abort(ckpt_writer *w);
/* A directory root/name, name a checkpoint's (as ckpt_name makes), without manifest.pb: an
 * incomplete checkpoint (a crash, or a user, deleted its manifest). It is renamed to
 * NAME.incomplete, or NAME.incomplete.N when that is taken (never removed, never renamed
 * over anything), and the name it got goes into aside; aside is "" when there was nothing
 * to set aside (no such directory, a complete checkpoint, not a checkpoint's name, not a
 * directory). ckpt_commit does this itself; a writer calls it first to say so. */
int ckpt_set_aside_incomplete(const char *root, const char *name, char *aside, size_t cap,
                              bt_diag *diag);
/* Waits up to timeout_s for the indexes of ranks [0, world), merges them into a copy of
 * header (tensors and fp8 states; block_bytes and world set), writes manifest.pb, and
 * publishes: rename, fsync of the root, `latest`, retention keeping `keep` (0: all). A
 * complete checkpoint of that name is replaced, an incomplete one set aside
 * (ckpt_set_aside_incomplete); anything else of that name is refused (BT_EINVAL). */
int ckpt_commit(const char *root, const char *name, const Baton__Manifest *header, uint32_t world,
                double timeout_s, uint32_t keep, bt_diag *diag);
/* ckpt_commit for a tool that writes one checkpoint directory wherever it is asked to
 * (reshard, import): the same merge and rename, but neither `latest` nor retention, which
 * belong to a run's checkpoint root, not to whatever folder holds a tool's output. */
int ckpt_commit_dir(const char *root, const char *name, const Baton__Manifest *header,
                    uint32_t world, double timeout_s, bt_diag *diag);

#endif
