/* The Megatron-LM indexed dataset (megatron/core/datasets/indexed_dataset.py), read
 * and written byte for byte, so data prepared by Megatron's preprocess_data.py loads
 * unchanged and ours loads in Megatron.
 *
 * PREFIX.bin holds the token ids of every sequence, back to back, in the dtype named
 * by the index. PREFIX.idx, all integers little-endian, no padding:
 *
 *   offset      size   field
 *   0           9      magic "MMIDIDX\0\0"
 *   9           8      u64 version, always 1
 *   17          1      u8  dtype code (indexed_dtype below)
 *   18          8      u64 S, the sequence count
 *   26          8      u64 D, the document index count (documents + 1)
 *   34          4*S    i32 sequence lengths, in tokens
 *   34+4S       8*S    i64 sequence pointers, byte offsets into PREFIX.bin
 *   34+12S      8*D    i64 document indices: document d is sequences
 *                          [doc[d], doc[d+1]); doc[0] = 0 and doc[D-1] = S
 *   34+12S+8D   S      i8  sequence modes, present only in multimodal datasets
 *
 * Our writer makes each document one sequence (a document longer than INT32_MAX
 * tokens continues in further sequences), with pointers back to back from 0, as
 * Megatron's builder does. The reader accepts any layout Megatron's reader would,
 * after checking every length, pointer and document index against the file sizes:
 * a truncated or corrupt pair of files is an error naming the file, never a crash.
 *
 * The format has no byte-order field; like Megatron we read and write it on
 * little-endian hosts only. */
#ifndef BATON_INDEXED_H
#define BATON_INDEXED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#define INDEXED_MAGIC       "MMIDIDX\0\0"
#define INDEXED_MAGIC_SIZE  9
#define INDEXED_HEADER_SIZE 34

/* Megatron's DType codes. The float codes exist in the format but hold no token ids;
 * the reader refuses them. */
typedef enum indexed_dtype {
    INDEXED_UINT8 = 1,
    INDEXED_INT8 = 2,
    INDEXED_INT16 = 3,
    INDEXED_INT32 = 4,
    INDEXED_INT64 = 5,
    INDEXED_FLOAT64 = 6,
    INDEXED_FLOAT32 = 7,
    INDEXED_UINT16 = 8,
} indexed_dtype;

/* Bytes per token of an integer dtype; 0 for a float or unknown code. */
size_t indexed_dtype_size(indexed_dtype dt);
/* "uint16" etc.; "unknown" for a code outside the table. */
const char *indexed_dtype_name(indexed_dtype dt);
/* Megatron's choice (DType.optimal_dtype): uint16 when vocab < 65500, else int32. */
indexed_dtype indexed_dtype_for_vocab(uint64_t vocab);

/* An open dataset: both files mapped read-only. The caller owns the struct;
 * indexed_open fills it, indexed_close releases it. */
typedef struct indexed_dataset {
    char *idx_path;     /* PREFIX.idx */
    char *bin_path;     /* PREFIX.bin */
    const uint8_t *idx; /* idx_size bytes */
    const uint8_t *bin; /* bin_size bytes; NULL when bin_size is 0 */
    size_t idx_size;
    size_t bin_size;
    indexed_dtype dtype;
    size_t itemsize;         /* bytes per token */
    uint64_t n_sequences;    /* S */
    uint64_t n_documents;    /* D - 1 */
    uint64_t n_tokens;       /* sum of the sequence lengths */
    int has_modes;           /* the optional per-sequence mode array is present */
    int contiguous;          /* pointer[i] = itemsize * (length[0] + ... + length[i-1]) */
    size_t bin_end;          /* where the sequence ending furthest into PREFIX.bin ends: the
                              * bytes after it (bin_size - bin_end) belong to none */
    const uint8_t *lengths;  /* S x i32, unaligned: use the accessors */
    const uint8_t *pointers; /* S x i64 */
    const uint8_t *docs;     /* D x i64 */
} indexed_dataset;

/* Maps PREFIX.idx and PREFIX.bin and validates them: every sequence inside PREFIX.bin and
 * starting at a multiple of the token size (Megatron's reader would take tokens across
 * their boundaries), the document indices in order. Bytes of PREFIX.bin no sequence
 * covers are allowed (bin_end). On error returns a negative BT_ code, fills diag with the
 * file and what is wrong, and leaves nothing open. */
int indexed_open(indexed_dataset *ds, const char *prefix, bt_diag *diag);
void indexed_close(indexed_dataset *ds);

/* Accessors; the index must be in range (seq < n_sequences, doc <= n_documents). */
uint32_t indexed_seq_length(const indexed_dataset *ds, uint64_t seq);
uint64_t indexed_seq_pointer(const indexed_dataset *ds, uint64_t seq);
/* The first sequence of document doc; indexed_doc_start(ds, n_documents) = S. */
uint64_t indexed_doc_start(const indexed_dataset *ds, uint64_t doc);
/* Tokens in document doc (the sum of its sequences' lengths). */
uint64_t indexed_doc_tokens(const indexed_dataset *ds, uint64_t doc);

/* Converts n tokens stored as dt at src (any alignment) to int32. Returns BT_ERANGE
 * when a value does not fit an int32 (possible for int64 only). */
int indexed_decode(indexed_dtype dt, const uint8_t *src, size_t n, int32_t *out);

/* Tokens [first, first + count) of sequence seq into out. BT_ERANGE (with diag) when
 * the range is outside the sequence or a value does not fit an int32. */
int indexed_read(const indexed_dataset *ds, uint64_t seq, uint64_t first, uint64_t count,
                 int32_t *out, bt_diag *diag);

/* Streams a new dataset to PREFIX.bin.partial and PREFIX.idx.partial; finish renames
 * them to PREFIX.bin and PREFIX.idx, so a reader never sees a half-written pair. */
typedef struct indexed_writer {
    char *bin_path, *idx_path;       /* final names */
    char *bin_partial, *idx_partial; /* names while writing */
    FILE *bin;
    indexed_dtype dtype;
    size_t itemsize;
    int32_t *lengths; /* n_sequences entries (capacity cap_sequences) */
    uint64_t n_sequences, cap_sequences;
    int64_t *docs; /* n_docs entries: doc[0] = 0, then one per finished document */
    uint64_t n_docs, cap_docs;
    uint64_t open_len; /* tokens in the sequence being written */
    int open_seq;      /* a sequence was started and not yet recorded */
    uint64_t n_tokens; /* written so far */
    uint8_t *scratch;  /* conversion buffer of INDEXED_WRITER_CHUNK tokens */
} indexed_writer;

#define INDEXED_WRITER_CHUNK 65536

int indexed_writer_open(indexed_writer *w, const char *prefix, indexed_dtype dtype, bt_diag *diag);
/* Appends tokens to the current document. A token outside the dtype's range is
 * BT_ERANGE. */
int indexed_writer_append(indexed_writer *w, const int32_t *tokens, size_t n, bt_diag *diag);
/* Ends the current document (an empty one becomes one zero-length sequence). */
int indexed_writer_end_document(indexed_writer *w, bt_diag *diag);
/* Writes the index, syncs both files and renames them into place; frees w. A
 * document still open is ended first. On error the partial files are removed. The
 * same as complete, then publish (abort when complete fails). */
int indexed_writer_finish(indexed_writer *w, bt_diag *diag);
/* The first half of finish, for a caller that publishes several writers together only
 * once all are complete: ends an open document, writes the index and syncs both files,
 * still under their .partial names. On error the caller aborts w. */
int indexed_writer_complete(indexed_writer *w, bt_diag *diag);
/* BT_EINVAL (with diag) when anything but a regular file (a directory, a symbolic link, a
 * device or FIFO, which the rename would replace) has the final name of the .bin or the
 * .idx. indexed_writer_open checks it first, publish again. */
int indexed_writer_check_targets(const indexed_writer *w, bt_diag *diag);
/* The second half: renames a completed w's files into place and frees w (also on error,
 * after removing its partial files and a .bin already renamed). */
int indexed_writer_publish(indexed_writer *w, bt_diag *diag);
/* Removes the partial files and frees w. Safe on a zeroed or finished writer. */
void indexed_writer_abort(indexed_writer *w);

#endif
