/* Test fixture for the pack/unpack/push/pull tests, built on the checkpoint library.
 *
 *   make_ckpt write RUN_DIR WORLD ROWS [SEED]
 *                                        RUN_DIR/checkpoints/s00-step00000004: WORLD
 *                                        shard files, each holding two tensors of
 *                                        ROWS x 256 float32 (block size 64 KiB), and one
 *                                        more (rank WORLD) holding only two fp8 states'
 *                                        amax histories (no tensor names that file);
 *                                        another SEED (default 0): other values, the
 *                                        same sizes (a later checkpoint of that name)
 *   make_ckpt read CKPT_DIR [SEED]       reads every tensor and fp8 history back
 *                                        (every block CRC32C checked) and compares them
 *                                        with the values written
 *
 * Exit 0 on success, 1 with a message otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

#define COLS  256
#define BLOCK (64u * 1024u)

static uint64_t seed; /* SEED */

/* The value written at element i of tensor t: deterministic, so `read` can recompute it. */
static float value_at(uint64_t t, uint64_t i) {
    uint64_t x = (t + 1 + seed * 1000) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
    x ^= x >> 31;
    return (float)(x % 100000) / 1000.0f - 50.0f;
}

static int write_rank(const char *part, int rank, uint32_t world, uint64_t rows, bt_diag *d) {
    ckpt_writer w;
    int rc = ckpt_writer_open(&w, part, rank, BLOCK, d);
    float *data = malloc(rows * COLS * sizeof *data);
    for (uint64_t t = 0; rc == 0 && t < 2; t++) {
        char key[32];
        snprintf(key, sizeof key, "t%llu", (unsigned long long)t);
        uint64_t shape[2] = {rows * world, COLS};
        ckpt_box piece = {.off = {rows * (uint64_t)rank, 0}, .shape = {rows, COLS}};
        for (uint64_t i = 0; i < rows * COLS; i++)
            data[i] = value_at(t, piece.off[0] * COLS + i);
        rc = ckpt_writer_add(&w, key, 2, shape, &piece, BATON__DTYPE__F32, data, d);
    }
    free(data);
    if (rc == 0) return ckpt_writer_finish(&w, d);
    ckpt_writer_abort(&w);
    return rc;
}

#define FP8_STATES  2
#define FP8_HISTORY 40

/* The rank that writes only fp8 states (their histories in its shard file). */
static int write_fp8_rank(const char *part, int rank, bt_diag *d) {
    ckpt_writer w;
    int rc = ckpt_writer_open(&w, part, rank, BLOCK, d);
    float h[FP8_HISTORY];
    for (int s = 0; rc == 0 && s < FP8_STATES; s++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d.gemm0.x", s);
        for (int i = 0; i < FP8_HISTORY; i++)
            h[i] = value_at(100 + (uint64_t)s, (uint64_t)i);
        rc = ckpt_writer_add_fp8(&w, name, 1.0f + (float)s, h, FP8_HISTORY, (uint32_t)s, d);
    }
    if (rc == 0) return ckpt_writer_finish(&w, d);
    ckpt_writer_abort(&w);
    return rc;
}

static int cmd_write(const char *run, uint32_t world, uint64_t rows, bt_diag *d) {
    char root[CKPT_PATH_MAX], part[CKPT_PATH_MAX], name[64];
    snprintf(root, sizeof root, "%s/%s", run, CKPT_ROOT_IN_RUN);
    ckpt_name(0, 4, name, sizeof name);
    int rc = ckpt_begin(root, name, d);
    ckpt_partial_dir(root, name, part, sizeof part);
    for (uint32_t r = 0; rc == 0 && r < world; r++)
        rc = write_rank(part, (int)r, world, rows, d);
    rc = rc ? rc : write_fp8_rank(part, (int)world, d);
    Baton__Manifest h = BATON__MANIFEST__INIT;
    h.recipe_name = "store-test";
    h.has_step = 1, h.step = 4;
    h.has_block_bytes = 1, h.block_bytes = BLOCK;
    return rc ? rc : ckpt_commit(root, name, &h, world + 1, 10.0, 0, d);
}

static int cmd_read(const char *dir, bt_diag *d) {
    Baton__Manifest *m = NULL;
    int rc = ckpt_manifest_read(dir, &m, d);
    for (size_t t = 0; rc == 0 && t < m->n_tensors; t++) {
        const Baton__TensorEntry *e = m->tensors[t];
        uint64_t n = ckpt_tensor_count(e), ti = strtoull(e->key + 1, NULL, 10);
        float *out = malloc(n * sizeof *out);
        rc = out ? ckpt_read_tensor(dir, m, e, out, d) : BT_ENOMEM;
        for (uint64_t i = 0; rc == 0 && i < n; i++)
            if (out[i] != value_at(ti, i)) {
                bt_diag_set(d, "%s: tensor %s element %llu differs", dir, e->key,
                            (unsigned long long)i);
                rc = BT_EIO;
            }
        free(out);
    }
    if (rc == 0 && m->n_tensors != 2) {
        bt_diag_set(d, "%s: %zu tensors, expected 2", dir, m->n_tensors);
        rc = BT_EIO;
    }
    if (rc == 0 && m->n_fp8 != FP8_STATES) {
        bt_diag_set(d, "%s: %zu fp8 states, expected %d", dir, m->n_fp8, FP8_STATES);
        rc = BT_EIO;
    }
    ckpt_reader rd;
    ckpt_reader_init(&rd, dir, m);
    for (size_t s = 0; rc == 0 && s < m->n_fp8; s++) {
        const Baton__Fp8State *f = m->fp8[s];
        float h[FP8_HISTORY];
        uint64_t si = f->tensor && strlen(f->tensor) > 7 ? strtoull(f->tensor + 7, NULL, 10) : 99;
        rc = ckpt_fp8_history_len(f) == FP8_HISTORY ? ckpt_reader_fp8(&rd, f, h, d) : BT_EIO;
        for (int i = 0; rc == 0 && i < FP8_HISTORY; i++)
            if (h[i] != value_at(100 + si, (uint64_t)i)) rc = BT_EIO;
        if (rc == BT_EIO && !d->msg[0]) bt_diag_set(d, "%s: fp8 state %s differs", dir, f->tensor);
    }
    ckpt_reader_close(&rd);
    if (m) baton__manifest__free_unpacked(m, NULL);
    return rc;
}

int main(int argc, char **argv) {
    bt_diag d;
    bt_diag_init(&d);
    int rc;
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "write") == 0) {
        seed = argc == 6 ? strtoull(argv[5], NULL, 10) : 0;
        rc = cmd_write(argv[2], (uint32_t)atoi(argv[3]), strtoull(argv[4], NULL, 10), &d);
    } else if ((argc == 3 || argc == 4) && strcmp(argv[1], "read") == 0) {
        seed = argc == 4 ? strtoull(argv[3], NULL, 10) : 0;
        rc = cmd_read(argv[2], &d);
    } else {
        fprintf(stderr, "usage: make_ckpt write RUN_DIR WORLD ROWS [SEED] | make_ckpt read "
                        "CKPT_DIR [SEED]\n");
        return 2;
    }
    if (rc < 0) fprintf(stderr, "make_ckpt: %s\n", d.msg);
    return rc < 0 ? 1 : 0;
}
