/* The Megatron indexed dataset: exact bytes against a hand-built reference, round
 * trips for every integer dtype, Megatron layouts we never write (several sequences
 * per document, sequence modes, gaps), and clear errors for truncated or corrupt
 * files. */
#include "check.h"
#include "indexed.h"
#include "splitmix.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/baton-test-indexed-XXXXXX";

static void path_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f == NULL) return;
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static size_t read_bytes(const char *path, uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* Little-endian appenders for hand-built files. */
static size_t put(uint8_t *b, size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        b[at + (size_t)i] = (uint8_t)(v >> (8 * i));
    return at + (size_t)bytes;
}

/* Builds an index from arrays, as Megatron's _IndexWriter lays it out. */
static size_t build_idx(uint8_t *b, int code, uint64_t s, const int32_t *len, const int64_t *ptr,
                        uint64_t d, const int64_t *docs, const int8_t *modes) {
    memcpy(b, "MMIDIDX\0\0", 9);
    size_t at = put(b, 9, 1, 8);
    at = put(b, at, (uint64_t)code, 1);
    at = put(b, at, s, 8);
    at = put(b, at, d, 8);
    for (uint64_t i = 0; i < s; i++)
        at = put(b, at, (uint32_t)len[i], 4);
    for (uint64_t i = 0; i < s; i++)
        at = put(b, at, (uint64_t)ptr[i], 8);
    for (uint64_t i = 0; i < d; i++)
        at = put(b, at, (uint64_t)docs[i], 8);
    for (uint64_t i = 0; modes != NULL && i < s; i++)
        at = put(b, at, (uint8_t)modes[i], 1);
    return at;
}

static int write_docs(const char *prefix, indexed_dtype dt, const int32_t *tok,
                      const size_t *doc_len, size_t n_docs) {
    bt_diag d;
    bt_diag_init(&d);
    indexed_writer w;
    int rc = indexed_writer_open(&w, prefix, dt, &d);
    for (size_t i = 0, at = 0; rc == BT_OK && i < n_docs; at += doc_len[i], i++) {
        rc = indexed_writer_append(&w, tok + at, doc_len[i], &d);
        rc = rc ? rc : indexed_writer_end_document(&w, &d);
    }
    if (rc == BT_OK)
        rc = indexed_writer_finish(&w, &d);
    else
        indexed_writer_abort(&w);
    if (rc != BT_OK) fprintf(stderr, "write_docs: %s\n", d.msg);
    return rc;
}

/* Our writer's bytes equal the layout built by hand from the specification. */
static void test_exact_bytes(void) {
    char prefix[256], path[300];
    path_of(prefix, sizeof prefix, "exact");
    int32_t tok[] = {72, 105, 257, 7, 257};
    size_t lens[] = {3, 2};
    CHECK(write_docs(prefix, INDEXED_UINT16, tok, lens, 2) == BT_OK);
    uint8_t want[256], got[256];
    int32_t L[] = {3, 2};
    int64_t P[] = {0, 6}, D[] = {0, 1, 2};
    size_t n = build_idx(want, 8, 2, L, P, 3, D, NULL);
    snprintf(path, sizeof path, "%s.idx", prefix);
    CHECK_EQ_U64(read_bytes(path, got, sizeof got), n);
    CHECK(memcmp(got, want, n) == 0);
    uint8_t bin_want[] = {72, 0, 105, 0, 1, 1, 7, 0, 1, 1};
    snprintf(path, sizeof path, "%s.bin", prefix);
    CHECK_EQ_U64(read_bytes(path, got, sizeof got), sizeof bin_want);
    CHECK(memcmp(got, bin_want, sizeof bin_want) == 0);
    snprintf(path, sizeof path, "%s.bin.partial", prefix);
    CHECK(access(path, F_OK) != 0); /* renamed into place */
}

/* Every integer dtype round-trips, with values at the edges of its range. */
static void test_round_trip(void) {
    static const struct {
        indexed_dtype dt;
        int32_t lo, hi;
    } cases[] = {{INDEXED_UINT8, 0, 255},
                 {INDEXED_INT8, -128, 127},
                 {INDEXED_UINT16, 0, 65535},
                 {INDEXED_INT16, -32768, 32767},
                 {INDEXED_INT32, INT32_MIN, INT32_MAX},
                 {INDEXED_INT64, INT32_MIN, INT32_MAX}};
    enum { N_DOCS = 37, MAX_LEN = 300 };
    int32_t *tok = malloc(N_DOCS * MAX_LEN * sizeof *tok), *back = malloc(MAX_LEN * sizeof *back);
    size_t lens[N_DOCS];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t rng = 99 + c, total = 0;
        for (size_t i = 0; i < N_DOCS; i++) {
            lens[i] = i == 5 ? 0 : 1 + splitmix64_below(&rng, MAX_LEN);
            for (size_t k = 0; k < lens[i]; k++) {
                uint64_t span = (uint64_t)((int64_t)cases[c].hi - cases[c].lo) + 1;
                int64_t v = cases[c].lo + (int64_t)splitmix64_below(&rng, span);
                tok[total + k] = k == 0 ? cases[c].lo : k == 1 ? cases[c].hi : (int32_t)v;
            }
            total += lens[i];
        }
        char prefix[256];
        path_of(prefix, sizeof prefix, indexed_dtype_name(cases[c].dt));
        CHECK(write_docs(prefix, cases[c].dt, tok, lens, N_DOCS) == BT_OK);
        indexed_dataset ds;
        bt_diag d;
        bt_diag_init(&d);
        CHECK(indexed_open(&ds, prefix, &d) == BT_OK);
        CHECK(ds.dtype == cases[c].dt);
        CHECK_EQ_U64(ds.itemsize, indexed_dtype_size(cases[c].dt));
        CHECK_EQ_U64(ds.n_sequences, N_DOCS);
        CHECK_EQ_U64(ds.n_documents, N_DOCS);
        CHECK_EQ_U64(ds.n_tokens, total);
        CHECK(ds.contiguous && !ds.has_modes);
        for (size_t i = 0, at = 0; i < N_DOCS && ds.idx != NULL; at += lens[i], i++) {
            CHECK_EQ_U64(indexed_seq_length(&ds, i), lens[i]);
            CHECK_EQ_U64(indexed_doc_start(&ds, i), i);
            CHECK_EQ_U64(indexed_doc_tokens(&ds, i), lens[i]);
            CHECK(indexed_read(&ds, i, 0, lens[i], back, &d) == BT_OK);
            CHECK(memcmp(back, tok + at, lens[i] * sizeof *back) == 0);
        }
        if (ds.idx != NULL) {
            CHECK(indexed_read(&ds, 0, 1, lens[0], back, &d) == BT_ERANGE);
            CHECK_STR_CONTAINS(d.msg, "out of range");
        }
        indexed_close(&ds);
    }
    free(tok);
    free(back);
}

static void test_writer_errors(void) {
    char prefix[256];
    path_of(prefix, sizeof prefix, "range");
    indexed_writer w;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(indexed_writer_open(&w, prefix, INDEXED_UINT8, &d) == BT_OK);
    int32_t bad[] = {1, 2, 300};
    CHECK(indexed_writer_append(&w, bad, 3, &d) == BT_ERANGE);
    CHECK_STR_CONTAINS(d.msg, "token id 300 does not fit the dataset's dtype uint8");
    indexed_writer_abort(&w);
    char path[300];
    snprintf(path, sizeof path, "%s.bin.partial", prefix);
    CHECK(access(path, F_OK) != 0);
    bt_diag_init(&d);
    CHECK(indexed_writer_open(&w, prefix, INDEXED_FLOAT32, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "integer dtype");
    bt_diag_init(&d);
    CHECK(indexed_writer_open(&w, "/nonexistent-dir/x", INDEXED_UINT16, &d) == BT_EIO);
    CHECK_STR_CONTAINS(d.msg, "/nonexistent-dir/x.bin.partial: cannot create");
}

static void test_dtype_table(void) {
    CHECK(indexed_dtype_for_vocab(259) == INDEXED_UINT16);
    CHECK(indexed_dtype_for_vocab(65499) == INDEXED_UINT16);
    CHECK(indexed_dtype_for_vocab(65500) == INDEXED_INT32);
    CHECK(indexed_dtype_for_vocab(128256) == INDEXED_INT32);
    CHECK_EQ_U64(indexed_dtype_size(INDEXED_FLOAT64), 0);
    CHECK(strcmp(indexed_dtype_name(INDEXED_UINT16), "uint16") == 0);
    CHECK(strcmp(indexed_dtype_name((indexed_dtype)42), "unknown") == 0);
    uint8_t big[8];
    put(big, 0, (uint64_t)((int64_t)INT32_MAX + 1), 8);
    int32_t out;
    CHECK(indexed_decode(INDEXED_INT64, big, 1, &out) == BT_ERANGE);
    put(big, 0, (uint64_t)(int64_t)-5, 8);
    CHECK(indexed_decode(INDEXED_INT64, big, 1, &out) == BT_OK && out == -5);
}

/* An empty dataset and an empty document are valid. */
static void test_empty(void) {
    char prefix[256];
    path_of(prefix, sizeof prefix, "empty");
    CHECK(write_docs(prefix, INDEXED_UINT16, NULL, NULL, 0) == BT_OK);
    indexed_dataset ds;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(indexed_open(&ds, prefix, &d) == BT_OK);
    CHECK_EQ_U64(ds.n_sequences, 0);
    CHECK_EQ_U64(ds.n_documents, 0);
    CHECK_EQ_U64(ds.n_tokens, 0);
    indexed_close(&ds);
    size_t lens[] = {0, 2};
    int32_t tok[] = {4, 5};
    CHECK(write_docs(prefix, INDEXED_UINT16, tok, lens, 2) == BT_OK);
    CHECK(indexed_open(&ds, prefix, &d) == BT_OK);
    CHECK_EQ_U64(ds.n_sequences, 2);
    CHECK_EQ_U64(ds.n_documents, 2);
    CHECK_EQ_U64(indexed_doc_tokens(&ds, 0), 0);
    indexed_close(&ds);
}

/* Megatron layouts we do not write but must read: a document of several sequences
 * (sentence splitting), sequence modes (multimodal), sequences stored out of order. */
static void test_megatron_layouts(void) {
    char prefix[256], path[300];
    path_of(prefix, sizeof prefix, "megatron");
    /* int32 tokens: bin holds sequences 1, 0, 2 in that order (not contiguous). */
    int32_t bin[] = {10, 11, 0, 1, 2, 20, 21, 22, 23};
    int32_t L[] = {3, 2, 4};
    int64_t P[] = {8, 0, 20}, D[] = {0, 2, 3};
    int8_t M[] = {0, 1, 0};
    uint8_t idx[512];
    size_t n = build_idx(idx, 4, 3, L, P, 3, D, M);
    snprintf(path, sizeof path, "%s.idx", prefix);
    write_bytes(path, idx, n);
    snprintf(path, sizeof path, "%s.bin", prefix);
    write_bytes(path, bin, sizeof bin);
    indexed_dataset ds;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(indexed_open(&ds, prefix, &d) == BT_OK);
    if (ds.idx == NULL) {
        fprintf(stderr, "%s\n", d.msg);
        return;
    }
    CHECK(ds.has_modes);
    CHECK(!ds.contiguous);
    CHECK_EQ_U64(ds.n_documents, 2);
    CHECK_EQ_U64(indexed_doc_tokens(&ds, 0), 5);
    CHECK_EQ_U64(indexed_doc_tokens(&ds, 1), 4);
    int32_t out[4];
    CHECK(indexed_read(&ds, 0, 0, 3, out, &d) == BT_OK);
    CHECK(out[0] == 0 && out[1] == 1 && out[2] == 2);
    CHECK(indexed_read(&ds, 2, 1, 3, out, &d) == BT_OK);
    CHECK(out[0] == 21 && out[2] == 23);
    CHECK_EQ_U64(ds.bin_end, sizeof bin);
    indexed_close(&ds);
    /* bytes after the furthest sequence's end: allowed (Megatron never reads them), and
     * bin_end says where they start */
    int32_t longer[11] = {10, 11, 0, 1, 2, 20, 21, 22, 23, 99, 99};
    write_bytes(path, longer, sizeof longer);
    CHECK(indexed_open(&ds, prefix, &d) == BT_OK);
    if (ds.idx == NULL) return;
    CHECK_EQ_U64(ds.bin_end, sizeof bin);
    CHECK_EQ_U64(ds.bin_size, sizeof longer);
    indexed_close(&ds);
}

/* Opens prefix expecting failure with a message naming `file` and saying `what`. */
static void expect_error(const char *prefix, int code, const char *file, const char *what) {
    indexed_dataset ds;
    bt_diag d;
    bt_diag_init(&d);
    int rc = indexed_open(&ds, prefix, &d);
    CHECK(rc == code);
    CHECK_STR_CONTAINS(d.msg, file);
    CHECK_STR_CONTAINS(d.msg, what);
    CHECK(ds.idx == NULL && ds.bin == NULL); /* nothing left open */
    if (rc == BT_OK) indexed_close(&ds);
}

static void write_pair(const char *prefix, const uint8_t *idx, size_t ni, const void *bin,
                       size_t nb) {
    char path[300];
    snprintf(path, sizeof path, "%s.idx", prefix);
    write_bytes(path, idx, ni);
    snprintf(path, sizeof path, "%s.bin", prefix);
    write_bytes(path, bin, nb);
}

static void test_corrupt(void) {
    char prefix[256], idx_path[300], bin_path[300];
    path_of(prefix, sizeof prefix, "corrupt");
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    snprintf(bin_path, sizeof bin_path, "%s.bin", prefix);
    uint16_t bin[] = {1, 2, 3, 257, 4, 5, 257};
    int32_t L[] = {4, 3};
    int64_t P[] = {0, 8}, D[] = {0, 1, 2};
    uint8_t idx[512], bad[512];
    size_t n = build_idx(idx, 8, 2, L, P, 3, D, NULL);

    expect_error(prefix, BT_ENOENT, idx_path, "cannot open");
    /* Every truncation of the index is an error, never a crash. */
    for (size_t k = 0; k < n; k++) {
        write_pair(prefix, idx, k, bin, sizeof bin);
        expect_error(prefix, BT_EINVAL, idx_path, "truncated");
    }
    write_pair(prefix, idx, 20, bin, sizeof bin);
    expect_error(prefix, BT_EINVAL, idx_path, "shorter than the 34-byte header");
    memcpy(bad, idx, n);
    write_pair(prefix, bad, n + 3, bin, sizeof bin); /* trailing bytes, not S modes */
    expect_error(prefix, BT_EINVAL, idx_path,
                 "size 85 bytes does not match the header: 2 sequences and 3 document indices need "
                 "82 bytes");
    memcpy(bad, idx, n);
    bad[0] = 'X';
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EINVAL, idx_path, "magic");
    memcpy(bad, idx, n);
    bad[9] = 2;
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EUNSUPPORTED, idx_path, "unsupported version 2");
    bad[9] = 1;
    bad[17] = 7;
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EUNSUPPORTED, idx_path, "dtype code 7 is a float type");
    bad[17] = 9;
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EINVAL, idx_path, "dtype code 9 is unknown");
    /* A truncated data file. */
    write_pair(prefix, idx, n, bin, sizeof bin - 1);
    expect_error(prefix, BT_EINVAL, bin_path, "ends past the end");
    /* Bad document indices, a negative length, a pointer past the end. */
    int64_t D2[] = {0, 2, 1}, D3[] = {0, 1, 1}, D4[] = {1, 1, 2};
    const int64_t *docs[] = {D2, D3, D4};
    for (int i = 0; i < 3; i++) {
        n = build_idx(bad, 8, 2, L, P, 3, docs[i], NULL);
        write_pair(prefix, bad, n, bin, sizeof bin);
        expect_error(prefix, BT_EINVAL, idx_path, "document indices must start at 0");
    }
    int32_t L2[] = {-1, 3};
    n = build_idx(bad, 8, 2, L2, P, 3, D, NULL);
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EINVAL, idx_path, "sequence 0 has a negative length");
    int64_t P2[] = {0, 1000};
    n = build_idx(bad, 8, 2, L, P2, 3, D, NULL);
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EINVAL, idx_path, "sequence 1 (3 tokens of uint16 at byte 1000)");
    /* a pointer inside the file but not at a token boundary */
    int64_t P3[] = {0, 7};
    n = build_idx(bad, 8, 2, L, P3, 3, D, NULL);
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EINVAL, idx_path, "sequence 1 starts at byte 7 of " /* bin_path */);
    expect_error(prefix, BT_EINVAL, bin_path, "not a multiple of 2 (the size of a uint16 token)");
    /* A huge declared count must not overflow the size check. */
    n = build_idx(bad, 8, 2, L, P, 3, D, NULL);
    put(bad, 18, UINT64_MAX / 4, 8);
    write_pair(prefix, bad, n, bin, sizeof bin);
    expect_error(prefix, BT_EINVAL, idx_path, "do not fit");
    n = build_idx(idx, 8, 2, L, P, 3, D, NULL);
    write_pair(prefix, idx, n, bin, sizeof bin);
    unlink(bin_path);
    expect_error(prefix, BT_ENOENT, bin_path, "cannot open");
}

/* Random byte flips: the open either fails cleanly or every sequence reads in bounds
 * (the sanitizer build checks the "in bounds"). */
static void test_fuzz_flips(void) {
    char prefix[256];
    path_of(prefix, sizeof prefix, "flip");
    uint16_t bin[64];
    for (int i = 0; i < 64; i++)
        bin[i] = (uint16_t)i;
    int32_t L[] = {10, 0, 30, 24};
    int64_t P[] = {0, 20, 20, 80}, D[] = {0, 2, 3, 4};
    uint8_t idx[512], bad[512];
    size_t n = build_idx(idx, 8, 4, L, P, 4, D, NULL);
    uint64_t rng = 7;
    int opened = 0;
    int32_t *out = malloc(64 * sizeof *out);
    for (int t = 0; t < 2000; t++) {
        memcpy(bad, idx, n);
        int flips = 1 + (int)splitmix64_below(&rng, 3);
        for (int f = 0; f < flips; f++) {
            size_t at = 17 + splitmix64_below(&rng, n - 17); /* past the magic and version */
            bad[at] ^= (uint8_t)(1u << splitmix64_below(&rng, 8));
        }
        write_pair(prefix, bad, n, bin, sizeof bin);
        indexed_dataset ds;
        bt_diag d;
        bt_diag_init(&d);
        if (indexed_open(&ds, prefix, &d) != BT_OK) {
            CHECK_STR_CONTAINS(d.msg, prefix);
            continue;
        }
        opened++;
        for (uint64_t s = 0; s < ds.n_sequences; s++) {
            uint32_t len = indexed_seq_length(&ds, s);
            CHECK(len <= 64);
            if (len <= 64) CHECK(indexed_read(&ds, s, 0, len, out, &d) == BT_OK);
        }
        indexed_close(&ds);
    }
    free(out);
    CHECK(opened > 0); /* some flips (token-value bits, lengths within the file) survive */
}

int main(void) {
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_exact_bytes();
    test_round_trip();
    test_writer_errors();
    test_dtype_table();
    test_empty();
    test_megatron_layouts();
    test_corrupt();
    test_fuzz_flips();
    check_rmdir(tmpdir);
    return check_status();
}
