/* The checkpoint library (stages/ckpt): CRC32C, box overlap against brute force, the
 * write/commit/read round trip across ranks and dtypes, damage detection, resolution
 * and retention. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ckpt/ckpt.h"
#include "ckpt/crc32c.h"
#include "util/file.h"

/* One-off reads through a reader of their own. */
static int read_box(const char *dir, const Baton__Manifest *m, const Baton__TensorEntry *e,
                    const ckpt_box *want, float *out, bt_diag *d) {
    ckpt_reader r;
    ckpt_reader_init(&r, dir, m);
    int rc = ckpt_reader_box(&r, e, want, out, d);
    ckpt_reader_close(&r);
    return rc;
}

static int read_fp8(const char *dir, const Baton__Manifest *m, const Baton__Fp8State *f, float *out,
                    bt_diag *d) {
    ckpt_reader r;
    ckpt_reader_init(&r, dir, m);
    int rc = ckpt_reader_fp8(&r, f, out, d);
    ckpt_reader_close(&r);
    return rc;
}

static void test_crc32c(void) {
    CHECK_EQ_U64(crc32c_update(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_U64(crc32c_update(0, "", 0), 0);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    uint32_t whole = crc32c_update(0, buf, sizeof buf);
    uint32_t parts = crc32c_update(crc32c_update(0, buf, 333), buf + 333, 667);
    CHECK_EQ_U64(whole, parts);
}

/* Global (row, col) of stored element k of a piece. */
static void box_coord(const ckpt_box *b, uint64_t k, uint64_t *r, uint64_t *c) {
    uint64_t i = (b->flat_end ? b->flat_begin : 0) + k;
    *r = b->off[0] + i / b->shape[1], *c = b->off[1] + i % b->shape[1];
}

static int box_has(const ckpt_box *b, uint64_t r, uint64_t c) {
    if (r < b->off[0] || r >= b->off[0] + b->shape[0] || c < b->off[1] ||
        c >= b->off[1] + b->shape[1])
        return 0;
    uint64_t i = (r - b->off[0]) * b->shape[1] + (c - b->off[1]);
    return !b->flat_end || (i >= b->flat_begin && i < b->flat_end);
}

typedef struct run_check {
    const ckpt_box *src, *dst;
    int bad;
    uint64_t last_src_end;
} run_check;

static int run_verify(void *ctx, const ckpt_run *run) {
    run_check *rc = ctx;
    if (run->src < rc->last_src_end) rc->bad = 1;
    rc->last_src_end = run->src + run->n;
    for (uint64_t k = 0; k < run->n; k++) {
        uint64_t r1, c1, r2, c2;
        box_coord(rc->src, run->src + k, &r1, &c1);
        box_coord(rc->dst, run->dst + k, &r2, &c2);
        if (r1 != r2 || c1 != c2 || !box_has(rc->src, r1, c1) || !box_has(rc->dst, r1, c1))
            rc->bad = 1;
    }
    return 0;
}

static void random_box(ckpt_box *b, unsigned *seed) {
    memset(b, 0, sizeof *b);
    b->off[0] = (uint64_t)(rand_r(seed) % 6), b->off[1] = (uint64_t)(rand_r(seed) % 6);
    b->shape[0] = 1 + (uint64_t)(rand_r(seed) % 6), b->shape[1] = 1 + (uint64_t)(rand_r(seed) % 6);
    if (rand_r(seed) % 2) {
        uint64_t n = b->shape[0] * b->shape[1];
        b->flat_begin = (uint64_t)rand_r(seed) % n;
        b->flat_end = b->flat_begin + 1 + (uint64_t)rand_r(seed) % (n - b->flat_begin);
    }
}

static void test_box_overlap(void) {
    unsigned seed = 7;
    for (int t = 0; t < 2000; t++) {
        ckpt_box s, d;
        random_box(&s, &seed);
        random_box(&d, &seed);
        uint64_t brute = 0, got = 0;
        for (uint64_t r = 0; r < 12; r++)
            for (uint64_t c = 0; c < 12; c++)
                brute += box_has(&s, r, c) && box_has(&d, r, c);
        run_check rc = {.src = &s, .dst = &d};
        CHECK(ckpt_box_overlap(&s, &d, run_verify, &rc, &got) == 0);
        CHECK_EQ_U64(got, brute);
        CHECK(!rc.bad);
    }
}

static char test_root[256];

/* A 6 x 10 tensor "w" written by two ranks (rank 0 rows 0-2 whole, rank 1 rows 3-5 as two
 * flat ranges) and a 10-element vector "b" in bf16 by rank 1, committed as step `step`. */
static void write_ckpt(uint64_t step, int final, const float *w, const float *bias) {
    char name[64], part[CKPT_PATH_MAX];
    ckpt_name(0, step, name, sizeof name);
    ckpt_partial_dir(test_root, name, part, sizeof part);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(ckpt_begin(test_root, name, &d) == 0);
    uint64_t g[2] = {6, 10}, gb[1] = {10};
    ckpt_writer w0, w1;
    CHECK(ckpt_writer_open(&w0, part, 0, 16, &d) == 0);
    CHECK(ckpt_writer_open(&w1, part, 1, 16, &d) == 0);
    ckpt_box top = {.off = {0, 0}, .shape = {3, 10}};
    ckpt_box lo1 = {.off = {3, 0}, .shape = {3, 10}, .flat_begin = 0, .flat_end = 13};
    ckpt_box lo2 = {.off = {3, 0}, .shape = {3, 10}, .flat_begin = 13, .flat_end = 30};
    ckpt_box vec = {.off = {0, 0}, .shape = {1, 10}};
    CHECK(ckpt_writer_add(&w0, "w", 2, g, &top, BATON__DTYPE__F32, w, &d) == 0);
    CHECK(ckpt_writer_add(&w1, "w", 2, g, &lo1, BATON__DTYPE__F32, w + 30, &d) == 0);
    CHECK(ckpt_writer_add(&w1, "w", 2, g, &lo2, BATON__DTYPE__F32, w + 43, &d) == 0);
    CHECK(ckpt_writer_add(&w1, "b", 1, gb, &vec, BATON__DTYPE__BF16, bias, &d) == 0);
    float hist[3] = {1, 2, 3};
    CHECK(ckpt_writer_add_fp8(&w0, "layers.0.gemm0.x", 0.5f, hist, 3, 1, &d) == 0);
    CHECK(ckpt_writer_finish(&w1, &d) == 0);
    CHECK(ckpt_writer_finish(&w0, &d) == 0);
    Baton__Manifest h = BATON__MANIFEST__INIT;
    h.has_step = 1, h.step = step, h.has_stage_final = 1, h.stage_final = final;
    h.has_block_bytes = 1, h.block_bytes = 16;
    CHECK(ckpt_commit(test_root, name, &h, 2, 10, 2, &d) == 0);
    if (d.msg[0]) fprintf(stderr, "%s\n", d.msg);
}

static void corrupt(const char *dir, const char *file, off_t at, int truncate_it) {
    char p[CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    int fd = open(p, O_RDWR);
    CHECK(fd >= 0);
    if (truncate_it) {
        CHECK(ftruncate(fd, at) == 0);
    } else {
        unsigned char c;
        CHECK(pread(fd, &c, 1, at) == 1);
        c ^= 0x10;
        CHECK(pwrite(fd, &c, 1, at) == 1);
    }
    close(fd);
}

static void test_round_trip(void) {
    float w[60], bias[10], out[60];
    for (int i = 0; i < 60; i++)
        w[i] = (float)i * 0.25f - 3.0f;
    for (int i = 0; i < 10; i++)
        bias[i] = 1.0f + (float)i / 3.0f;
    write_ckpt(10, 1, w, bias);
    write_ckpt(20, 0, w, bias);
    write_ckpt(30, 0, w, bias);
    write_ckpt(40, 0, w, bias);
    bt_diag d;
    bt_diag_init(&d);
    char **names;
    size_t n;
    CHECK(ckpt_list(test_root, &names, &n, &d) == 0);
    CHECK_EQ_U64(n, 3); /* keep 2 plus the stage's final one */
    if (n == 3) CHECK(strcmp(names[0], "s00-step00000010") == 0);
    ckpt_names_free(names, n);
    char dir[CKPT_PATH_MAX];
    CHECK(ckpt_resolve(test_root, dir, sizeof dir, &d) == 0);
    CHECK(strstr(dir, "s00-step00000040") != NULL);
    Baton__Manifest *m = NULL;
    CHECK(ckpt_manifest_read(dir, &m, &d) == 0);
    if (m == NULL) return;
    CHECK_EQ_U64(m->world, 2);
    CHECK_EQ_U64(m->n_fp8, 1);
    const Baton__TensorEntry *e = ckpt_find(m, "w"), *b = ckpt_find(m, "b");
    CHECK(e && b);
    if (!e || !b) return;
    CHECK(ckpt_read_tensor(dir, m, e, out, &d) == 0);
    CHECK(memcmp(out, w, sizeof w) == 0);
    /* format 2: no state needs rescaling; format 1 under dp4: the gradient states only */
    Baton__Parallel dp4 = BATON__PARALLEL__INIT;
    dp4.dp = 4;
    Baton__Manifest old = BATON__MANIFEST__INIT;
    old.layout = &dp4;
    CHECK(ckpt_fp8_legacy_factor(m, "layers.0.gemm1.dy") == 1.0f);
    CHECK(ckpt_fp8_legacy_factor(&old, "layers.0.gemm1.dy") == 4.0f);
    CHECK(ckpt_fp8_legacy_factor(&old, "layers.0.gemm1.x") == 1.0f);
    CHECK(ckpt_fp8_legacy_factor(&old, "head.w") == 1.0f);
    ckpt_box mid = {.off = {2, 3}, .shape = {3, 4}};
    CHECK(read_box(dir, m, e, &mid, out, &d) == 0);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            CHECK(out[r * 4 + c] == w[(r + 2) * 10 + c + 3]);
    CHECK(ckpt_read_tensor(dir, m, b, out, &d) == 0);
    for (int i = 0; i < 10; i++)
        CHECK_REL(out[i], bias[i], 1.0 / 256);
    /* a flipped byte in rank 1's shard: reading the damaged block fails, others work */
    corrupt(dir, "rank-00001.bin", 50, 0);
    CHECK(ckpt_read_tensor(dir, m, e, out, &d) == BT_EIO);
    CHECK(strstr(d.msg, "CRC32C mismatch") != NULL);
    bt_diag_init(&d);
    ckpt_box top = {.off = {0, 0}, .shape = {3, 10}};
    CHECK(read_box(dir, m, e, &top, out, &d) == 0);
    corrupt(dir, "rank-00000.bin", 100, 1);
    CHECK(read_box(dir, m, e, &top, out, &d) == BT_EIO);
    CHECK(strstr(d.msg, "truncated") != NULL);
    baton__manifest__free_unpacked(m, NULL);
}

/* manifest.pb carries its own CRC32C: every single-bit flip of a committed manifest is
 * refused as damaged (never read as another manifest, nor as one from before the
 * checksum); a manifest without one (as earlier batons wrote) still reads, unchecked. */
static void test_manifest_checksum(void) {
    bt_diag d;
    bt_diag_init(&d);
    char dir[CKPT_PATH_MAX], p[CKPT_PATH_MAX + 32];
    CHECK(ckpt_resolve(test_root, dir, sizeof dir, &d) == 0);
    snprintf(p, sizeof p, "%s/%s", dir, CKPT_MANIFEST);
    char *buf = NULL;
    size_t n = 0;
    CHECK(bt_read_file(p, CKPT_MAX_MANIFEST, &buf, &n) == 0 && n > 6);
    if (buf == NULL) return;
    Baton__Manifest *m = NULL;
    CHECK(ckpt_manifest_decode((uint8_t *)buf, n, p, &m, &d) == 0 && ckpt_manifest_checked(m));
    if (m) baton__manifest__free_unpacked(m, NULL);
    m = NULL;
    size_t missed = 0;
    for (size_t bit = 0; bit < 8 * n; bit++) {
        Baton__Manifest *x = NULL;
        buf[bit / 8] ^= (char)(1u << (bit % 8));
        bt_diag_init(&d);
        if (ckpt_manifest_decode((uint8_t *)buf, n, p, &x, &d) != BT_EINVAL || x != NULL) missed++;
        if (x) baton__manifest__free_unpacked(x, NULL);
        buf[bit / 8] ^= (char)(1u << (bit % 8));
    }
    CHECK_EQ_U64(missed, 0);
    buf[n / 2] ^= 1; /* the message says which file and why */
    bt_diag_init(&d);
    CHECK(ckpt_manifest_decode((uint8_t *)buf, n, p, &m, &d) == BT_EINVAL);
    CHECK(strstr(d.msg, p) != NULL && strstr(d.msg, "damaged") != NULL);
    buf[n / 2] ^= 1;
    free(buf);
    /* as a baton from before the checksum wrote it: read, marked unchecked */
    CHECK(ckpt_manifest_read(dir, &m, &d) == 0);
    if (m == NULL) return;
    m->has_manifest_crc32c = 0, m->has_checksummed = 0, m->checksummed = 0;
    n = baton__manifest__get_packed_size(m);
    uint8_t *old = malloc(n);
    CHECK(old != NULL);
    if (old) baton__manifest__pack(m, old);
    baton__manifest__free_unpacked(m, NULL);
    m = NULL;
    CHECK(old && ckpt_manifest_decode(old, n, p, &m, &d) == 0 && m && !ckpt_manifest_checked(m));
    if (m) baton__manifest__free_unpacked(m, NULL);
    free(old);
}

/* A piece large enough to be written and read by two threads reads back intact, whole
 * and in part; damage in either half is found. */
static void test_large_piece(void) {
    uint64_t n = 3u << 20, g[1] = {n};
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    CHECK(x && y);
    if (!x || !y) return;
    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)i * 0.5f;
    char root[300], part[CKPT_PATH_MAX], dir[CKPT_PATH_MAX];
    snprintf(root, sizeof root, "%s/big", test_root);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(ckpt_begin(root, "s00-step00000001", &d) == 0);
    ckpt_partial_dir(root, "s00-step00000001", part, sizeof part);
    ckpt_writer w;
    ckpt_box all = {.shape = {1, n}};
    CHECK(ckpt_writer_open(&w, part, 0, 0, &d) == 0);
    CHECK(ckpt_writer_add(&w, "big", 1, g, &all, BATON__DTYPE__F32, x, &d) == 0);
    CHECK(ckpt_writer_finish(&w, &d) == 0);
    Baton__Manifest h = BATON__MANIFEST__INIT;
    CHECK(ckpt_commit(root, "s00-step00000001", &h, 1, 10, 0, &d) == 0);
    Baton__Manifest *m = NULL;
    CHECK(ckpt_resolve(root, dir, sizeof dir, &d) == 0);
    CHECK(ckpt_manifest_read(dir, &m, &d) == 0);
    const Baton__TensorEntry *e = m ? ckpt_find(m, "big") : NULL;
    CHECK(e && ckpt_read_tensor(dir, m, e, y, &d) == 0);
    CHECK(memcmp(x, y, n * sizeof *x) == 0);
    ckpt_verify_report rep;
    CHECK(m && ckpt_verify(dir, m, NULL, NULL, &rep, &d) == 0 && rep.problems == 0);
    /* A part that starts and ends inside blocks: staged, read as two halves too. */
    ckpt_box mid = {.off = {0, 1000}, .shape = {1, n - 2000}};
    memset(y, 0, n * sizeof *y);
    CHECK(e && read_box(dir, m, e, &mid, y, &d) == 0);
    CHECK(memcmp(x + 1000, y, (n - 2000) * sizeof *x) == 0);
    /* Damage in the upper half (read on the second thread) is found and placed. */
    corrupt(dir, "rank-00000.bin", (10 << 20) + 5, 0);
    CHECK(e && ckpt_read_tensor(dir, m, e, y, &d) == BT_EIO);
    CHECK(strstr(d.msg, "CRC32C mismatch") && strstr(d.msg, "block 10)"));
    bt_diag_init(&d);
    corrupt(dir, "rank-00000.bin", 11 << 20, 1);
    CHECK(e && ckpt_read_tensor(dir, m, e, y, &d) == BT_EIO);
    CHECK(strstr(d.msg, "truncated") && strstr(d.msg, "the file ends at 11534336"));
    if (!strstr(d.msg, "the file ends at 11534336")) fprintf(stderr, "%s\n", d.msg);
    /* cut below where the upper half starts: that read gets nothing, the end is the file's */
    bt_diag_init(&d);
    corrupt(dir, "rank-00000.bin", 100, 1);
    ckpt_box far = {.off = {0, 1u << 20}, .shape = {1, 1000}}; /* from byte 4 MB on */
    CHECK(e && read_box(dir, m, e, &far, y, &d) == BT_EIO);
    CHECK(strstr(d.msg, "truncated") && strstr(d.msg, "the file ends at 100"));
    if (!strstr(d.msg, "the file ends at 100")) fprintf(stderr, "%s\n", d.msg);
    if (m) baton__manifest__free_unpacked(m, NULL);
    free(x);
    free(y);
}

/* Committing a name again replaces the earlier checkpoint (set aside as NAME.old, then
 * removed); a directory of that name that is not a checkpoint is never replaced; stray
 * directories in the root that are not ours survive retention. */
/* One checkpoint `name` under root holding x = {v, 2, 3, 4}, written and committed. */
static int replace_commit(const char *root, const char *name, float v, bt_diag *d) {
    char part[CKPT_PATH_MAX];
    float x[4] = {v, 2, 3, 4};
    uint64_t g[1] = {4};
    ckpt_box all = {.shape = {1, 4}};
    CHECK(ckpt_begin(root, name, d) == 0);
    ckpt_partial_dir(root, name, part, sizeof part);
    ckpt_writer w;
    CHECK(ckpt_writer_open(&w, part, 0, 0, d) == 0);
    CHECK(ckpt_writer_add(&w, "x", 1, g, &all, BATON__DTYPE__F32, x, d) == 0);
    CHECK(ckpt_writer_finish(&w, d) == 0);
    Baton__Manifest h = BATON__MANIFEST__INIT;
    bt_diag_init(d);
    return ckpt_commit(root, name, &h, 1, 10, 0, d);
}

/* x[0] of checkpoint root/name, or -1 when it cannot be read. */
static float replace_read(const char *root, const char *name) {
    char dir[CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    bt_diag d;
    bt_diag_init(&d);
    Baton__Manifest *m = NULL;
    float y[4] = {-1, -1, -1, -1};
    if (ckpt_manifest_read(dir, &m, &d) == 0) ckpt_read_tensor(dir, m, ckpt_find(m, "x"), y, &d);
    if (m) baton__manifest__free_unpacked(m, NULL);
    return y[0];
}

/* A file's first line under root, or "" when there is none. */
static const char *replace_file(const char *root, const char *path, char *buf, size_t cap) {
    char p[CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, path);
    FILE *f = fopen(p, "r");
    buf[0] = '\0';
    if (f && fgets(buf, (int)cap, f) == NULL) buf[0] = '\0';
    if (f) fclose(f);
    return buf;
}

static void replace_write(const char *root, const char *path, const char *text) {
    char p[CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, path);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

/* Committing over a name: an earlier complete checkpoint is replaced (no .old left); a
 * directory of a checkpoint's name without manifest.pb (incomplete) is set aside as
 * NAME.incomplete, then NAME.incomplete.1, its files kept; a directory of another name, a
 * file or a symbolic link of a checkpoint's name are never replaced nor moved. */
static void test_replace(void) {
    char root[300], dir[CKPT_PATH_MAX], buf[64], aside[CKPT_PATH_MAX];
    snprintf(root, sizeof root, "%s/replace", test_root);
    bt_diag d;
    bt_diag_init(&d);
    const char *one = "s00-step00000001", *two = "s00-step00000002";
    CHECK(replace_commit(root, one, 0, &d) == 0);
    CHECK(replace_commit(root, one, 1, &d) == 0);
    CHECK(replace_read(root, one) == 1.0f);
    snprintf(dir, sizeof dir, "%s/%s.old", root, one);
    CHECK(access(dir, F_OK) != 0);

    /* an incomplete checkpoint (a user's file in it) is set aside, never removed */
    snprintf(dir, sizeof dir, "%s/%s", root, two);
    CHECK(mkdir(dir, 0700) == 0);
    replace_write(root, "s00-step00000002/notes", "mine\n");
    CHECK(replace_commit(root, two, 2, &d) == 0);
    CHECK(replace_read(root, two) == 2.0f);
    CHECK(strcmp(replace_file(root, "s00-step00000002.incomplete/notes", buf, sizeof buf),
                 "mine\n") == 0);
    /* the same again (its manifest deleted): .incomplete is taken, so .incomplete.1 */
    snprintf(dir, sizeof dir, "%s/%s/%s", root, two, CKPT_MANIFEST);
    CHECK(unlink(dir) == 0);
    replace_write(root, "s00-step00000002/notes", "again\n");
    CHECK(replace_commit(root, two, 3, &d) == 0);
    CHECK(replace_read(root, two) == 3.0f);
    CHECK(strcmp(replace_file(root, "s00-step00000002.incomplete/notes", buf, sizeof buf),
                 "mine\n") == 0);
    CHECK(strcmp(replace_file(root, "s00-step00000002.incomplete.1/notes", buf, sizeof buf),
                 "again\n") == 0);
    /* nothing to set aside: a complete checkpoint, a missing name */
    CHECK(ckpt_set_aside_incomplete(root, two, aside, sizeof aside, &d) == 0 && aside[0] == 0);
    CHECK(ckpt_set_aside_incomplete(root, "s00-step00000009", aside, sizeof aside, &d) == 0 &&
          aside[0] == 0);

    /* not a checkpoint: a directory of another name, a file and a symbolic link of a
     * checkpoint's name; each refused and left as it was */
    snprintf(dir, sizeof dir, "%s/keep-me", root);
    CHECK(mkdir(dir, 0700) == 0);
    replace_write(root, "keep-me/notes", "kept\n");
    replace_write(root, "s00-step00000003", "a file\n");
    snprintf(dir, sizeof dir, "%s/s00-step00000004", root);
    CHECK(symlink("keep-me", dir) == 0);
    const char *refused[] = {"keep-me", "s00-step00000003", "s00-step00000004"};
    for (int k = 0; k < 3; k++) {
        CHECK(replace_commit(root, refused[k], 4, &d) == BT_EINVAL);
        CHECK(strstr(d.msg, "is not a checkpoint: not replacing it") != NULL);
        CHECK(ckpt_set_aside_incomplete(root, refused[k], aside, sizeof aside, &d) == 0 &&
              aside[0] == 0);
    }
    CHECK(strcmp(replace_file(root, "keep-me/notes", buf, sizeof buf), "kept\n") == 0);
    CHECK(strcmp(replace_file(root, "s00-step00000003", buf, sizeof buf), "a file\n") == 0);
    struct stat st;
    snprintf(dir, sizeof dir, "%s/s00-step00000004", root);
    CHECK(lstat(dir, &st) == 0 && S_ISLNK(st.st_mode));
    snprintf(dir, sizeof dir, "%s/keep-me.incomplete", root);
    CHECK(access(dir, F_OK) != 0);
}

/* The sorted lookups find every key of a shuffled manifest, and nothing else. */
static void test_sorted_find(void) {
    enum { N = 500 };
    Baton__Manifest m = BATON__MANIFEST__INIT;
    Baton__TensorEntry te[N], *tp[N];
    Baton__Fp8State fe[N], *fp[N];
    char keys[N][32];
    for (int i = 0; i < N; i++) {
        int j = (i * 337) % N; /* a shuffle: 337 is prime to 500 */
        snprintf(keys[i], sizeof keys[i], "layers.%d.expert%d.w13.x", j / 7, j % 7);
        te[i] = (Baton__TensorEntry)BATON__TENSOR_ENTRY__INIT;
        fe[i] = (Baton__Fp8State)BATON__FP8_STATE__INIT;
        te[i].key = keys[i], fe[i].tensor = keys[i], tp[i] = &te[i], fp[i] = &fe[i];
    }
    m.tensors = tp, m.n_tensors = N, m.fp8 = fp, m.n_fp8 = N;
    ckpt_manifest_sort_keys(&m);
    for (int i = 0; i < N; i++) {
        CHECK(ckpt_find_sorted(&m, keys[i]) == &te[i]);
        CHECK(ckpt_fp8_find_sorted(&m, keys[i]) == &fe[i]);
        CHECK(ckpt_find(&m, keys[i]) == &te[i]);
    }
    CHECK(ckpt_find_sorted(&m, "layers.0.expert0.w13") == NULL);
    CHECK(ckpt_fp8_find_sorted(&m, "zzz") == NULL);
    m.n_tensors = m.n_fp8 = 0;
    CHECK(ckpt_find_sorted(&m, keys[0]) == NULL && ckpt_fp8_find_sorted(&m, keys[0]) == NULL);
}

/* The fp8 amax histories live in the shard files (format 2): read back through their
 * checksums, checked by ckpt_verify, an inline (format 1) history still read, and a
 * manifest of a later format refused. */
static void test_fp8_history(void) {
    char root[300], part[CKPT_PATH_MAX], dir[CKPT_PATH_MAX];
    snprintf(root, sizeof root, "%s/fp8", test_root);
    bt_diag d;
    bt_diag_init(&d);
    float hist[5] = {0.5f, 8, 3, 0, 1e-3f}, x[2] = {7, 9}, got[5] = {0};
    uint64_t g[1] = {2};
    ckpt_box all = {.shape = {1, 2}};
    CHECK(ckpt_begin(root, "s00-step00000001", &d) == 0);
    ckpt_partial_dir(root, "s00-step00000001", part, sizeof part);
    ckpt_writer w;
    CHECK(ckpt_writer_open(&w, part, 0, 16, &d) == 0);
    CHECK(ckpt_writer_add(&w, "x", 1, g, &all, BATON__DTYPE__F32, x, &d) == 0);
    CHECK(ckpt_writer_add_fp8(&w, "layers.0.gemm1.dy", 0.25f, hist, 5, 2, &d) == 0);
    CHECK(ckpt_writer_finish(&w, &d) == 0);
    Baton__Manifest h = BATON__MANIFEST__INIT;
    h.has_block_bytes = 1, h.block_bytes = 16;
    CHECK(ckpt_commit(root, "s00-step00000001", &h, 1, 10, 0, &d) == 0);
    Baton__Manifest *m = NULL;
    CHECK(ckpt_resolve(root, dir, sizeof dir, &d) == 0 && ckpt_manifest_read(dir, &m, &d) == 0);
    CHECK(m != NULL && m->n_fp8 == 1);
    if (m == NULL || m->n_fp8 != 1) {
        if (m) baton__manifest__free_unpacked(m, NULL);
        return;
    }
    const Baton__Fp8State *f = m->fp8[0];
    CHECK_EQ_U64(m->format_version, CKPT_FORMAT_VERSION);
    CHECK(f->history != NULL && f->n_amax_history == 0); /* not inline */
    CHECK_EQ_U64(ckpt_fp8_history_len(f), 5);
    CHECK(f->scale == 0.25f && f->pos == 2);
    CHECK(read_fp8(dir, m, f, got, &d) == 0 && memcmp(got, hist, sizeof hist) == 0);
    ckpt_verify_report rep;
    CHECK(ckpt_verify(dir, m, NULL, NULL, &rep, &d) == 0 && rep.problems == 0);
    CHECK_EQ_U64(rep.tensors, 1);
    CHECK_EQ_U64(rep.fp8_histories, 1);
    /* a flipped byte of the history (after x's 8 bytes): reading and verifying see it */
    corrupt(dir, "rank-00000.bin", 8 + 4 * 3, 0);
    CHECK(read_fp8(dir, m, f, got, &d) == BT_EIO && strstr(d.msg, "CRC32C") != NULL);
    CHECK(ckpt_verify(dir, m, NULL, NULL, &rep, &d) == 0 && rep.problems == 1);
    /* format 1: the history inline */
    Baton__Fp8State old = BATON__FP8_STATE__INIT;
    old.amax_history = hist, old.n_amax_history = 3;
    memset(got, 0, sizeof got);
    CHECK_EQ_U64(ckpt_fp8_history_len(&old), 3);
    CHECK(read_fp8(dir, m, &old, got, &d) == 0 && memcmp(got, hist, 3 * sizeof *hist) == 0);
    /* a later format than this reader knows */
    m->format_version = CKPT_FORMAT_VERSION + 1;
    CHECK(ckpt_manifest_write(dir, m, &d) == 0);
    baton__manifest__free_unpacked(m, NULL);
    m = NULL;
    bt_diag_init(&d);
    CHECK(ckpt_manifest_read(dir, &m, &d) == BT_EUNSUPPORTED && m == NULL);
    CHECK(strstr(d.msg, "written by a newer baton") != NULL);
    /* retention keeping 1 of 3 never removes the newer baton's checkpoint */
    for (uint64_t step = 2; step <= 3; step++) {
        char name[64];
        ckpt_name(0, step, name, sizeof name);
        CHECK(ckpt_begin(root, name, &d) == 0);
        ckpt_partial_dir(root, name, part, sizeof part);
        CHECK(ckpt_writer_open(&w, part, 0, 16, &d) == 0);
        CHECK(ckpt_writer_add(&w, "x", 1, g, &all, BATON__DTYPE__F32, x, &d) == 0);
        CHECK(ckpt_writer_finish(&w, &d) == 0);
        CHECK(ckpt_commit(root, name, &h, 1, 10, 1, &d) == 0);
    }
    CHECK(access(dir, F_OK) == 0);
    char path[CKPT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/s00-step00000002", root);
    CHECK(access(path, F_OK) != 0);
}

/* A reader opens each shard file once, keeps at most CKPT_READER_FDS open (the least
 * recently used closed for another), and reads right across the evictions. */
static void test_reader_files(void) {
    enum { RANKS = CKPT_READER_FDS + 8 };
    char root[300], part[CKPT_PATH_MAX], dir[CKPT_PATH_MAX];
    snprintf(root, sizeof root, "%s/reader", test_root);
    bt_diag d;
    bt_diag_init(&d);
    uint64_t g[1] = {2 * RANKS};
    CHECK(ckpt_begin(root, "s00-step00000001", &d) == 0);
    ckpt_partial_dir(root, "s00-step00000001", part, sizeof part);
    for (int r = 0; r < RANKS; r++) {
        ckpt_writer w;
        float x[2] = {(float)r, (float)r + 0.5f};
        ckpt_box piece = {.off = {0, 2 * (uint64_t)r}, .shape = {1, 2}};
        CHECK(ckpt_writer_open(&w, part, r, 0, &d) == 0);
        CHECK(ckpt_writer_add(&w, "x", 1, g, &piece, BATON__DTYPE__F32, x, &d) == 0);
        CHECK(ckpt_writer_add(&w, "y", 1, g, &piece, BATON__DTYPE__F32, x, &d) == 0);
        CHECK(ckpt_writer_finish(&w, &d) == 0);
    }
    Baton__Manifest h = BATON__MANIFEST__INIT;
    CHECK(ckpt_commit(root, "s00-step00000001", &h, RANKS, 10, 0, &d) == 0);
    Baton__Manifest *m = NULL;
    CHECK(ckpt_resolve(root, dir, sizeof dir, &d) == 0 && ckpt_manifest_read(dir, &m, &d) == 0);
    if (m == NULL) return;
    ckpt_reader r;
    ckpt_reader_init(&r, dir, m);
    float out[2 * RANKS];
    const char *keys[2] = {"x", "y"};
    for (int k = 0; k < 2; k++) {
        CHECK(ckpt_reader_tensor(&r, ckpt_find(m, keys[k]), out, &d) == 0);
        for (int i = 0; i < RANKS; i++)
            CHECK(out[2 * i] == (float)i && out[2 * i + 1] == (float)i + 0.5f);
    }
    CHECK(r.n_fd == CKPT_READER_FDS);
    /* one pass over more files than the reader keeps: each one's reopening closes the
     * next it needs (least recently used), so y opens every file again */
    CHECK_EQ_U64(r.opens, 2 * (uint64_t)RANKS);
    uint64_t before = r.opens;
    ckpt_box last = {.off = {0, 2 * (RANKS - 1)}, .shape = {1, 2}};
    CHECK(ckpt_reader_box(&r, ckpt_find(m, "x"), &last, out, &d) == 0 && out[0] == RANKS - 1);
    CHECK_EQ_U64(r.opens, before); /* the most recently used file: still open */
    ckpt_reader_close(&r);
    CHECK(r.n_fd == 0);
    /* a process allowed only a few more descriptors than it holds: the reader closes its
     * least recently used files to open others, and reads everything */
    struct rlimit was, low;
    int spare = open("/dev/null", O_RDONLY); /* the lowest free descriptor: about as many held */
    CHECK(spare >= 0 && getrlimit(RLIMIT_NOFILE, &was) == 0);
    low = was, low.rlim_cur = (rlim_t)spare + 6;
    close(spare);
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    ckpt_reader_init(&r, dir, m);
    CHECK(ckpt_reader_tensor(&r, ckpt_find(m, "x"), out, &d) == 0);
    for (int i = 0; i < RANKS; i++)
        CHECK(out[2 * i] == (float)i);
    CHECK(r.n_fd > 0 && r.n_fd < 8 && r.opens == RANKS);
    ckpt_reader_close(&r);
    CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
    if (d.msg[0]) fprintf(stderr, "%s\n", d.msg);
    baton__manifest__free_unpacked(m, NULL);
}

/* Retention removes a stale .partial that is a link to a directory as the link alone:
 * what it points to (here a directory of the user's) keeps its files. */
static void test_retain_links(void) {
    char root[300], user[300], file[CKPT_PATH_MAX], link[CKPT_PATH_MAX];
    snprintf(root, sizeof root, "%s/links", test_root);
    snprintf(user, sizeof user, "%s/users-data", test_root);
    snprintf(file, sizeof file, "%s/precious", user);
    snprintf(link, sizeof link, "%s/s00-step00000009.partial", root);
    CHECK(mkdir(root, 0700) == 0 && mkdir(user, 0700) == 0);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
    CHECK(symlink(user, link) == 0);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(ckpt_retain(root, 2, NULL, &d) == 0);
    struct stat st;
    CHECK(lstat(link, &st) != 0); /* the link went */
    CHECK(stat(file, &st) == 0);  /* the user's file stayed */
    CHECK(ckpt_remove_dir(user) == 0 && ckpt_remove_dir(root) == 0);
}

/* Checkpoints named by (stage, step) in root, each with a manifest (not final). */
static void make_named(const char *root, const uint32_t *stage, const uint64_t *step, size_t n) {
    bt_diag d;
    bt_diag_init(&d);
    CHECK(mkdir(root, 0700) == 0);
    for (size_t i = 0; i < n; i++) {
        char name[64], dir[CKPT_PATH_MAX];
        ckpt_name(stage[i], step[i], name, sizeof name);
        snprintf(dir, sizeof dir, "%s/%s", root, name);
        Baton__Manifest h = BATON__MANIFEST__INIT;
        h.has_step = 1, h.step = step[i], h.has_stage_index = 1, h.stage_index = stage[i];
        CHECK(mkdir(dir, 0700) == 0 && ckpt_manifest_write(dir, &h, &d) == 0);
    }
}

/* The names' order is training order, by stage and step as numbers: past step 99,999,999
 * (9 digits) and stage 99 text would put the newest first, retention would remove it and
 * resolution take an older one. */
static void test_name_order(void) {
    CHECK(ckpt_name_cmp("s00-step99999999", "s00-step100000000") < 0);
    CHECK(ckpt_name_cmp("s100-step00000001", "s99-step99999999") > 0);
    CHECK(ckpt_name_cmp("s00-step18446744073709551616", "s00-step18446744073709551615") > 0);
    CHECK(ckpt_name_cmp("s01-step00000002", "s01-step00000002") == 0);
    CHECK(ckpt_name_cmp("s1-step2", "s01-step00000002") != 0); /* a total order */
    CHECK(ckpt_name_cmp("s00-step00000002", "s00-step00000002.partial") < 0);
    CHECK(ckpt_name_cmp("s00-step9", "latest") < 0 && ckpt_name_cmp("latest", "s00-step9") > 0);
    char root[300], dir[CKPT_PATH_MAX], **names = NULL;
    size_t n = 0;
    bt_diag d;
    bt_diag_init(&d);
    snprintf(root, sizeof root, "%s/order", test_root);
    const uint32_t st0[4] = {0, 0, 0, 0};
    const uint64_t steps[4] = {99999998, 99999999, 100000000, 100000001};
    make_named(root, st0, steps, 4);
    CHECK(ckpt_retain(root, 2, NULL, &d) == 0);
    CHECK(ckpt_list(root, &names, &n, &d) == 0);
    CHECK_EQ_U64(n, 2); /* the two newest kept */
    if (n == 2)
        CHECK(strcmp(names[0], "s00-step100000000") == 0 &&
              strcmp(names[1], "s00-step100000001") == 0);
    ckpt_names_free(names, n);
    CHECK(ckpt_resolve(root, dir, sizeof dir, &d) == 0); /* no `latest`: the newest name */
    CHECK(strstr(dir, "/s00-step100000001") != NULL);
    CHECK(ckpt_remove_dir(root) == 0);
    const uint32_t st[3] = {100, 99, 9};
    const uint64_t at[3] = {1, 5, 7};
    make_named(root, st, at, 3);
    CHECK(ckpt_list(root, &names, &n, &d) == 0 && n == 3);
    if (n == 3)
        CHECK(strcmp(names[0], "s09-step00000007") == 0 &&
              strcmp(names[1], "s99-step00000005") == 0 &&
              strcmp(names[2], "s100-step00000001") == 0);
    ckpt_names_free(names, n);
    CHECK(ckpt_resolve(root, dir, sizeof dir, &d) == 0);
    CHECK(strstr(dir, "/s100-step00000001") != NULL);
    CHECK(ckpt_remove_dir(root) == 0);
    if (d.msg[0]) fprintf(stderr, "%s\n", d.msg);
}

/* A manifest that cannot be read leaves errno saying why (baton run weighs it: a file
 * where a directory belongs is for good, EIO may pass), and a file over the cap is EFBIG,
 * never ENOMEM (which would pass for a shortage that may end); test_file.c tries the caps
 * the read buffer grows through (64 KiB, 128 KiB). */
static void test_unread_errno(void) {
    char file[300], p[CKPT_PATH_MAX], *buf = NULL;
    size_t n = 0;
    snprintf(file, sizeof file, "%s/not-a-dir", test_root);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f == NULL) return;
    for (int i = 0; i < 200; i++)
        fputc('x', f);
    fclose(f);
    bt_diag d;
    bt_diag_init(&d);
    Baton__Manifest *m = NULL;
    errno = 0;
    CHECK(ckpt_manifest_read(file, &m, &d) == BT_EIO && m == NULL);
    CHECK(errno == ENOTDIR);
    snprintf(p, sizeof p, "%s/%s", file, CKPT_MANIFEST);
    CHECK_STR_CONTAINS(d.msg, p);
    errno = 0;
    CHECK(bt_read_file(file, 100, &buf, &n) == -1 && errno == EFBIG);
    CHECK(bt_read_file(file, 200, &buf, &n) == 0 && n == 200);
    free(buf);
    CHECK(unlink(file) == 0);
}

/* A write that fails keeps its errno in the diag beside the message (the worker tells
 * baton run a full disk by it, not by strerror's words), through a prefix too; a shard
 * past the file-size limit (EFBIG, SIGXFSZ ignored as the worker does) in a child, as the
 * limit is the process's. */
static int write_errno_child(void) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0) return 2;
    rl.rlim_cur = 4096;
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 2;
    static float big[4096];
    uint64_t shape[2] = {1, 4096};
    ckpt_box row = {.shape = {1, 4096}};
    char part[CKPT_PATH_MAX];
    bt_diag d, outer;
    bt_diag_init(&d), bt_diag_init(&outer);
    ckpt_partial_dir(test_root, "s00-step00000099", part, sizeof part);
    ckpt_writer w;
    if (ckpt_begin(test_root, "s00-step00000099", &d) != 0 ||
        ckpt_writer_open(&w, part, 0, 0, &d) != 0)
        return 3;
    int rc = ckpt_writer_add(&w, "big", 2, shape, &row, BATON__DTYPE__F32, big, &d);
    ckpt_writer_abort(&w);
    ckpt_remove_dir(part);
    bt_diag_forward(&outer, &d, "checkpoint %s", "s00-step00000099");
    return rc == BT_EIO && d.err == EFBIG && outer.err == EFBIG &&
                   strncmp(outer.msg, "checkpoint s00-step00000099: ", 29) == 0 &&
                   strcmp(outer.msg + 29, d.msg) == 0
               ? 0
               : 1;
}

static void test_write_errno(void) {
    char path[300];
    bt_diag d;
    bt_diag_init(&d);
    snprintf(path, sizeof path, "%s/no-such-dir/rank-00000.pb", test_root);
    CHECK(ckpt_write_file_atomic(path, "x", 1, &d) == BT_EIO && d.err == ENOENT);
    bt_diag_set_errno(&d, ENOSPC, "a later failure"); /* the first message and its errno win */
    CHECK(d.err == ENOENT && strstr(d.msg, "no-such-dir") != NULL);
    bt_diag_init(&d);
    bt_diag_set(&d, "no system call's"); /* no errno */
    CHECK(d.err == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(write_errno_child());
    int st = -1;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Where a checkpoint stands against a stage is what its manifest records (recipe name,
 * stage index), the same for `baton run` and the worker: never its stage's name, so that a
 * renamed stage, or two whose names share a prefix, change nothing; and not its directory's
 * name (ckpt_stage_relation takes none). Another recipe's is never a later stage's. */
static void test_stage_relation(void) {
    Baton__Manifest m = BATON__MANIFEST__INIT;
    m.recipe_name = "run-test", m.has_stage_index = 1, m.stage_index = 1;
    m.stage_name = "pretrain-long"; /* stage 0 of the recipe is "pretrain" */
    CHECK(ckpt_stage_relation(&m, "run-test", 0) == CKPT_LATER_STAGE);
    CHECK(ckpt_stage_relation(&m, "run-test", 1) == CKPT_SAME_STAGE);
    CHECK(ckpt_stage_relation(&m, "run-test", 2) == CKPT_EARLIER_STAGE);
    m.stage_name = "renamed"; /* the same stage by its index */
    CHECK(ckpt_stage_relation(&m, "run-test", 1) == CKPT_SAME_STAGE);
    CHECK(ckpt_stage_relation(&m, "run-test-2", 0) == CKPT_OTHER_RECIPE);
    CHECK(ckpt_stage_relation(&m, "run", 0) == CKPT_OTHER_RECIPE);
    CHECK(ckpt_stage_relation(&m, NULL, 0) == CKPT_OTHER_RECIPE);
    m.recipe_name = ""; /* a recipe without a name: its specs and manifests carry "" */
    CHECK(ckpt_stage_relation(&m, "", 0) == CKPT_LATER_STAGE);
    m.recipe_name = NULL; /* a manifest that records none */
    CHECK(ckpt_stage_relation(&m, "", 0) == CKPT_OTHER_RECIPE);
}

/* Whose run a checkpoint is: in the run's own checkpoints/ its own, whatever its manifest
 * records; elsewhere (named by init) only when it records the same run id, so that another
 * run of the same recipe (or of another without a name) is a hand-off, never a resume; a
 * spec no run wrote (run id "") judges by the recipe's name and the stage's index alone. */
static void test_run_relation(void) {
    Baton__Manifest m = BATON__MANIFEST__INIT;
    m.recipe_name = "", m.has_stage_index = 1, m.stage_index = 0;
    m.run_id = "0123456789abcdef0123456789abcdef";
    CHECK(ckpt_run_relation(&m, "", "0123456789abcdef0123456789abcdef", 0, 0) == CKPT_SAME_STAGE);
    CHECK(ckpt_run_relation(&m, "", "fedcba9876543210fedcba9876543210", 0, 0) == CKPT_OTHER_RECIPE);
    CHECK(ckpt_run_relation(&m, "", "fedcba9876543210fedcba9876543210", 1, 0) == CKPT_OTHER_RECIPE);
    CHECK(ckpt_run_relation(&m, "", "fedcba9876543210fedcba9876543210", 0, 1) == CKPT_SAME_STAGE);
    CHECK(ckpt_run_relation(&m, "", "", 0, 0) == CKPT_SAME_STAGE);
    CHECK(ckpt_run_relation(&m, "", NULL, 1, 0) == CKPT_EARLIER_STAGE);
    CHECK(ckpt_run_relation(&m, "x", "0123456789abcdef0123456789abcdef", 0, 0) ==
          CKPT_OTHER_RECIPE);
    m.run_id = NULL; /* saved before manifests recorded the run */
    CHECK(ckpt_same_run(&m, "0123456789abcdef0123456789abcdef", 0) == 0);
    CHECK(ckpt_same_run(&m, "0123456789abcdef0123456789abcdef", 1) == 1);
    CHECK(ckpt_same_run(&m, "", 0) == 1);
    CHECK(ckpt_run_relation(&m, "", "0123456789abcdef0123456789abcdef", 0, 1) == CKPT_SAME_STAGE);
}

int main(void) {
    snprintf(test_root, sizeof test_root, "/tmp/baton-test-ckpt.XXXXXX");
    if (mkdtemp(test_root) == NULL) return 1;
    test_crc32c();
    test_box_overlap();
    test_round_trip();
    test_manifest_checksum();
    test_large_piece();
    test_replace();
    test_sorted_find();
    test_fp8_history();
    test_reader_files();
    test_retain_links();
    test_name_order();
    test_stage_relation();
    test_run_relation();
    test_unread_errno();
    test_write_errno();
    check_rmdir(test_root);
    return check_status();
}
