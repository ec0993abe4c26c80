/* The safetensors file format (huggingface/safetensors), read and written:
 *
 *   8 bytes    N, u64 little endian: the header's length
 *   N bytes    a JSON object, UTF-8: for every tensor
 *                "name": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [b, e]}
 *              plus an optional "__metadata__": {string: string}; writers pad it with
 *              spaces to a multiple of 8 so the data that follows is aligned
 *   the rest   the data buffer: tensor `name` is bytes [b, e) of it, row-major, little
 *              endian; the tensors cover the buffer exactly, without holes or overlaps
 *
 * We write tensors sorted by name, data in header order, metadata {"format": "pt"} (what
 * transformers checks for). We read F32, BF16 and F16 tensors as float32. */
#ifndef BATON_SAFETENSORS_H
#define BATON_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/buf.h"
#include "util/err.h"

#define SAFETENSORS_MAX_HEADER (100u << 20) /* the reference implementation's limit */
#define SAFETENSORS_MAX_DIMS   8

typedef enum safetensors_dtype {
    SAFETENSORS_F32 = 0,
    SAFETENSORS_BF16 = 1,
    SAFETENSORS_F16 = 2,
} safetensors_dtype;

typedef struct safetensors_tensor {
    char *name;
    safetensors_dtype dtype;
    int ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data buffer */
} safetensors_tensor;

/* "F32", "BF16", "F16". */
const char *safetensors_dtype_name(safetensors_dtype t);
size_t safetensors_dtype_size(safetensors_dtype t);
/* Elements of t (the product of its shape; 1 for a scalar). */
uint64_t safetensors_count(const safetensors_tensor *t);

/* ---- writing ---- */

/* The header text for tensors t[0, n) (sorted by the caller, begin/end ignored: they
 * are assigned here in order and written back) padded with spaces to a multiple of 8,
 * into out (appended; not NUL-padded). *data_bytes gets the data buffer's size. */
void safetensors_header(safetensors_tensor *t, size_t n, bt_buf *out, uint64_t *data_bytes);
/* The 8-byte length prefix of a header of len bytes. */
void safetensors_prefix(uint64_t len, unsigned char out[8]);

/* ---- reading ---- */

typedef struct safetensors_file {
    FILE *f;
    char *path;
    uint64_t data_start; /* file offset of the data buffer */
    uint64_t data_size;
    safetensors_tensor *t; /* n tensors, in header order */
    size_t n;
} safetensors_file;

/* Opens path and validates its header against the file size: every tensor's dtype is
 * one we read, its byte range holds exactly its elements, and the ranges tile the data
 * buffer. Unknown dtypes are BT_EUNSUPPORTED; anything malformed or truncated is
 * BT_EINVAL; diag names the file, the tensor and what is wrong. */
int safetensors_open(safetensors_file *sf, const char *path, bt_diag *diag);
void safetensors_close(safetensors_file *sf);
const safetensors_tensor *safetensors_find(const safetensors_file *sf, const char *name);
/* Tensor t's elements as float32 into out (safetensors_count(t) floats). */
int safetensors_read_f32(safetensors_file *sf, const safetensors_tensor *t, float *out,
                         bt_diag *diag);

#endif
