/* The sample loader: windows hold the right tokens, each epoch is a permutation of
 * the windows, the order is fixed by the seed, data-parallel slicing of global
 * indices covers the same samples for any dp, mixtures keep their weights, and
 * datasets laid out the ways Megatron allows read the same. */
#include "check.h"
#include "loader.h"
#include "recipe.pb-c.h"
#include "splitmix.h"

#include <dirent.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/baton-test-loader-XXXXXX";

/* A dataset whose concatenated stream is kept in memory to check against. */
typedef struct fixture {
    char prefix[256];
    int32_t *stream;
    uint64_t n;
} fixture;

/* n_docs documents of random length in [1, max_len]; token = base + position % span. */
static void fixture_make(fixture *f, const char *name, uint64_t seed, size_t n_docs, size_t max_len,
                         int32_t base, int32_t span) {
    snprintf(f->prefix, sizeof f->prefix, "%s/%s", tmpdir, name);
    f->stream = malloc(n_docs * max_len * sizeof *f->stream);
    f->n = 0;
    indexed_writer w;
    bt_diag d;
    bt_diag_init(&d);
    int rc = indexed_writer_open(&w, f->prefix, INDEXED_UINT16, &d);
    uint64_t rng = seed;
    for (size_t i = 0; rc == BT_OK && i < n_docs; i++) {
        size_t len = 1 + splitmix64_below(&rng, max_len);
        for (size_t k = 0; k < len; k++)
            f->stream[f->n + k] = base + (int32_t)((f->n + k) % (uint64_t)span);
        rc = indexed_writer_append(&w, f->stream + f->n, len, &d);
        rc = rc ? rc : indexed_writer_end_document(&w, &d);
        f->n += len;
    }
    rc = rc ? rc : indexed_writer_finish(&w, &d);
    if (rc != BT_OK) fprintf(stderr, "fixture %s: %s\n", name, d.msg);
    CHECK(rc == BT_OK);
}

/* One document of exactly n tokens, token i = base + i % span. */
static void fixture_tokens(fixture *f, const char *name, uint64_t n, int32_t base, int32_t span) {
    snprintf(f->prefix, sizeof f->prefix, "%s/%s", tmpdir, name);
    f->stream = malloc(n * sizeof *f->stream);
    f->n = n;
    for (uint64_t i = 0; i < n; i++)
        f->stream[i] = base + (int32_t)(i % (uint64_t)span);
    indexed_writer w;
    bt_diag d;
    bt_diag_init(&d);
    int rc = indexed_writer_open(&w, f->prefix, INDEXED_UINT16, &d);
    rc = rc ? rc : indexed_writer_append(&w, f->stream, n, &d);
    rc = rc ? rc : indexed_writer_end_document(&w, &d);
    rc = rc ? rc : indexed_writer_finish(&w, &d);
    if (rc != BT_OK) fprintf(stderr, "fixture %s: %s\n", name, d.msg);
    CHECK(rc == BT_OK);
}

static int open_loader(loader *ld, const loader_source *src, size_t n, uint32_t seq_len,
                       uint64_t seed) {
    loader_config cfg = {.seq_len = seq_len, .seed = seed, .vocab_size = 259};
    bt_diag d;
    bt_diag_init(&d);
    int rc = loader_open(ld, src, n, &cfg, &d);
    if (rc != BT_OK) fprintf(stderr, "loader_open: %s\n", d.msg);
    return rc;
}

/* The sample holds window p.window of the stream: inputs and shifted targets. */
static int sample_matches(const fixture *f, uint64_t window, uint32_t L, const int32_t *tok,
                          const int32_t *tgt) {
    const int32_t *w = f->stream + window * L;
    return memcmp(tok, w, L * sizeof *tok) == 0 && memcmp(tgt, w + 1, L * sizeof *tgt) == 0;
}

static void test_permute(void) {
    static const uint64_t sizes[] = {1, 2, 3, 7, 64, 100, 1000, 4097, 65537};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t n = sizes[i];
        uint8_t *seen = calloc(n, 1);
        uint64_t fixed = 0;
        for (uint64_t x = 0; x < n; x++) {
            uint64_t y = loader_permute(n, 12345, x);
            CHECK(y < n);
            if (y < n) seen[y]++;
            fixed += y == x;
        }
        uint64_t once = 0;
        for (uint64_t x = 0; x < n; x++)
            once += seen[x] == 1;
        CHECK_EQ_U64(once, n);               /* a bijection */
        if (n >= 100) CHECK(fixed < n / 10); /* and not near the identity */
        free(seen);
    }
    CHECK(loader_permute(1000, 1, 5) != loader_permute(1000, 2, 5) ||
          loader_permute(1000, 1, 6) != loader_permute(1000, 2, 6));
}

static void test_global_index(void) {
    /* step 3, global batch 8: dp 2 rank 1 takes 24 + 4 + j */
    CHECK_EQ_U64(loader_global_index(3, 8, 2, 1, 0), 28);
    CHECK_EQ_U64(loader_global_index(3, 8, 2, 1, 3), 31);
    CHECK_EQ_U64(loader_global_index(3, 8, 1, 0, 7), 31);
    CHECK_EQ_U64(loader_global_index(0, 8, 4, 3, 1), 7);
}

/* Windows, epochs, determinism, on one source. */
static void test_single(void) {
    fixture f;
    fixture_make(&f, "single", 1, 60, 120, 0, 250);
    const uint32_t L = 16;
    loader_source src = {f.prefix, 1};
    loader a, b, c;
    if (open_loader(&a, &src, 1, L, 42) || open_loader(&b, &src, 1, L, 42) ||
        open_loader(&c, &src, 1, L, 43)) {
        CHECK(0);
        return;
    }
    uint64_t n = a.src[0].n_windows;
    CHECK_EQ_U64(n, (f.n - 1) / L);
    int32_t tok[16], tgt[16], tok2[16], tgt2[16];
    uint8_t *seen = calloc(n, 1);
    uint64_t same_order = 0, same_seed_diff = 0, other_seed_same = 0;
    for (uint64_t g = 0; g < 3 * n; g++) {
        loader_pos p = loader_locate(&a, g);
        CHECK_EQ_U64(p.epoch, g / n);
        CHECK(p.window < n);
        if (g % n == 0) memset(seen, 0, n);
        seen[p.window]++;
        if (g % n == n - 1)
            for (uint64_t w = 0; w < n; w++)
                CHECK(seen[w] == 1); /* every window exactly once per epoch */
        CHECK(loader_get(&a, g, tok, tgt) == BT_OK);
        CHECK(sample_matches(&f, p.window, L, tok, tgt));
        CHECK(loader_get(&b, g, tok2, tgt2) == BT_OK);
        same_seed_diff += memcmp(tok, tok2, sizeof tok) != 0;
        other_seed_same += loader_locate(&c, g).window == p.window;
        if (g < n) same_order += loader_locate(&a, g + n).window == p.window;
    }
    CHECK_EQ_U64(same_seed_diff, 0);     /* same seed, same samples */
    CHECK(other_seed_same < 3 * n / 10); /* another seed, another order */
    CHECK(same_order < n / 10);          /* each epoch is reshuffled */
    /* Random access in any order gives the same sample as in sequence. */
    CHECK(loader_get(&a, 5 * n + 3, tok, tgt) == BT_OK);
    CHECK(sample_matches(&f, loader_locate(&a, 5 * n + 3).window, L, tok, tgt));
    free(seen);
    loader_close(&a);
    loader_close(&b);
    loader_close(&c);
    free(f.stream);
}

/* Data-parallel slicing: dp = 1, 2, 4 take the same global samples at every step. */
static void test_dp_slicing(void) {
    fixture f;
    fixture_make(&f, "dp", 2, 40, 100, 0, 200);
    loader_source src = {f.prefix, 1};
    loader ld;
    if (open_loader(&ld, &src, 1, 8, 7)) {
        CHECK(0);
        return;
    }
    enum { GB = 16, STEPS = 20 };
    static const uint32_t dps[] = {1, 2, 4};
    int32_t ref[STEPS * GB][8], tok[8], tgt[8];
    for (uint64_t g = 0; g < STEPS * GB; g++)
        CHECK(loader_get(&ld, g, ref[g], tgt) == BT_OK);
    for (size_t k = 0; k < 3; k++) {
        uint32_t dp = dps[k];
        for (uint64_t step = 0; step < STEPS; step++) {
            uint8_t hit[GB] = {0};
            for (uint32_t r = 0; r < dp; r++)
                for (uint32_t j = 0; j < GB / dp; j++) {
                    uint64_t g = loader_global_index(step, GB, dp, r, j);
                    CHECK(g >= step * GB && g < (step + 1) * GB);
                    if (g < step * GB || g >= (step + 1) * GB) continue;
                    hit[g - step * GB]++;
                    CHECK(loader_get(&ld, g, tok, tgt) == BT_OK);
                    CHECK(memcmp(tok, ref[g], sizeof tok) == 0);
                    /* rank r of dp holds what ranks 2r, 2r+1 of 2dp hold */
                    if (dp < 4)
                        CHECK_EQ_U64(g, loader_global_index(step, GB, 2 * dp,
                                                            2 * r + j / (GB / dp / 2),
                                                            j % (GB / dp / 2)));
                }
            for (int i = 0; i < GB; i++)
                CHECK(hit[i] == 1); /* neither skipped nor repeated */
        }
    }
    loader_close(&ld);
    free(f.stream);
}

/* Three sources weighted 5:3:2; their token ranges tell them apart. */
static void test_mixture(void) {
    fixture f[3];
    fixture_make(&f[0], "mix0", 3, 80, 100, 0, 50);
    fixture_make(&f[1], "mix1", 4, 30, 100, 60, 50);
    fixture_make(&f[2], "mix2", 5, 5, 60, 120, 50); /* small: many epochs */
    loader_source src[3] = {{f[0].prefix, 5}, {f[1].prefix, 3}, {f[2].prefix, 2}};
    const uint32_t L = 8;
    loader ld;
    if (open_loader(&ld, src, 3, L, 11)) {
        CHECK(0);
        return;
    }
    CHECK_EQ_U64(ld.src[0].quota, 512);
    CHECK_EQ_U64(ld.src[1].quota, 307);
    CHECK_EQ_U64(ld.src[2].quota, 205);
    enum { N = 10000, BLOCKS = 10 };
    uint64_t count[3] = {0}, blocks_count[3] = {0};
    uint8_t *seen[3];
    for (int s = 0; s < 3; s++)
        seen[s] = calloc(BLOCKS * 1024, 1);
    int32_t tok[8], tgt[8];
    for (uint64_t g = 0; g < BLOCKS * 1024; g++) {
        loader_pos p = loader_locate(&ld, g);
        CHECK(p.source < 3);
        if (p.source >= 3) continue;
        if (g < N) count[p.source]++;
        blocks_count[p.source]++;
        CHECK(p.sample < BLOCKS * 1024);
        if (p.sample < BLOCKS * 1024) seen[p.source][p.sample]++;
        CHECK(loader_get(&ld, g, tok, tgt) == BT_OK);
        CHECK(sample_matches(&f[p.source], p.window, L, tok, tgt));
        CHECK(tok[0] >= 60 * (int32_t)p.source && tok[0] < 60 * (int32_t)p.source + 50);
    }
    static const double w[3] = {0.5, 0.3, 0.2};
    for (int s = 0; s < 3; s++) {
        CHECK_REL((double)count[s] / N, w[s], 0.02);             /* weights over 10k samples */
        CHECK_EQ_U64(blocks_count[s], BLOCKS * ld.src[s].quota); /* exact per block */
        for (uint64_t k = 0; k < blocks_count[s]; k++)
            CHECK(seen[s][k] == 1); /* each source's counter has no gaps */
        free(seen[s]);
    }
    CHECK(ld.src[2].n_windows < 100); /* the small source went through several epochs */
    loader_close(&ld);
    /* A tiny weight still gets a slot in every block. */
    loader_source lop[2] = {{f[0].prefix, 1e6}, {f[1].prefix, 1}};
    if (open_loader(&ld, lop, 2, L, 11) == BT_OK) {
        CHECK_EQ_U64(ld.src[1].quota, 1);
        CHECK_EQ_U64(ld.src[0].quota, 1023);
        loader_close(&ld);
    }
    for (int s = 0; s < 3; s++)
        free(f[s].stream);
}

/* A small source drawn more often than it has windows (64 windows, 768 and 256 slots of
 * every block): each source takes its samples in its own counter order, so its epochs
 * stay whole and no window repeats before all of the source's windows were drawn (A and
 * B of 64 windows at 3:1, seq_len 8, seed 7: by slot, B's window 33 came at draws 1 and 4
 * of B). The order by slot, which older checkpoints resume under, stays as it was. */
static void test_mixture_epochs(void) {
    enum { W = 64, N = 3 * 1024 + 100 };
    fixture f[2];
    fixture_tokens(&f[0], "epA", 8 * W + 1, 0, 128);
    fixture_tokens(&f[1], "epB", 8 * W + 1, 128, 128);
    loader_source src[2] = {{f[0].prefix, 3}, {f[1].prefix, 1}};
    loader ld;
    if (open_loader(&ld, src, 2, 8, 7)) {
        CHECK(0);
        return;
    }
    CHECK_EQ_U64(ld.src[0].n_windows, W);
    CHECK_EQ_U64(ld.src[1].n_windows, W);
    uint64_t draws[2] = {0, 0}, repeats = 0;
    uint8_t seen[2][W];
    static loader_pos at[N];
    int32_t tok[8], tgt[8];
    for (uint64_t g = 0; g < N; g++) {
        loader_pos p = at[g] = loader_locate(&ld, g);
        uint32_t s = p.source < 2 ? p.source : 0;
        CHECK(p.source < 2 && p.window < W);
        CHECK_EQ_U64(p.sample, draws[s]); /* the source's next sample, in order */
        CHECK_EQ_U64(p.epoch, draws[s] / W);
        if (draws[s]++ % W == 0) memset(seen[s], 0, W);
        repeats += seen[s][p.window % W]++ != 0; /* within the epoch */
        CHECK(loader_get(&ld, g, tok, tgt) == BT_OK);
        CHECK(sample_matches(&f[s], p.window, 8, tok, tgt));
    }
    CHECK_EQ_U64(repeats, 0);
    CHECK(draws[0] >= 3 * 768 && draws[1] >= 3 * 256); /* exact per whole block */
    /* random access (blocks revisited backwards) gives the same */
    for (uint64_t i = 0; i < 40; i++) {
        uint64_t g = N - 1 - i * 79;
        loader_pos p = loader_locate(&ld, g);
        CHECK(p.source == at[g].source && p.sample == at[g].sample && p.window == at[g].window);
    }
    /* by slot: the earlier order, values from an independent model of it (Python) */
    static const struct {
        uint64_t g;
        uint32_t s;
        uint64_t k, w;
    } old[] = {{0, 1, 4, 8},        {1, 0, 760, 18},    {2, 1, 15, 47},
               {3, 0, 559, 25},     {6, 1, 67, 33},     {17, 1, 51, 33},
               {1024, 0, 1072, 15}, {1027, 1, 441, 33}, {1029, 0, 1076, 22}};
    ld.cfg.mix_by_slot = 1;
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
        loader_pos p = loader_locate(&ld, old[i].g);
        CHECK_EQ_U64(p.source, old[i].s);
        CHECK_EQ_U64(p.sample, old[i].k);
        CHECK_EQ_U64(p.window, old[i].w);
    }
    /* the same slots: each block gives each source the same samples either way */
    for (uint64_t g = 0; g < 1024; g++)
        CHECK_EQ_U64(loader_locate(&ld, g).source, at[g].source);
    loader_close(&ld);
    free(f[0].stream);
    free(f[1].stream);
}

/* A Megatron dataset with sequences out of order, an empty sequence and a document
 * of two sequences: the stream is the sequences in index order. */
static void test_gapped_layout(void) {
    char prefix[256], path[300];
    snprintf(prefix, sizeof prefix, "%s/gapped", tmpdir);
    /* sequence lengths 5, 0, 7, 4 stored in the bin as seq 2, seq 3, seq 0 */
    uint16_t bin[16];
    int32_t want[16];
    int32_t L[] = {5, 0, 7, 4};
    int64_t P[] = {22, 22, 0, 14}, D[] = {0, 2, 3, 4};
    for (int i = 0; i < 16; i++)
        want[i] = 100 + i;
    for (int i = 0; i < 7; i++)
        bin[i] = (uint16_t)want[5 + i]; /* seq 2 */
    for (int i = 0; i < 4; i++)
        bin[7 + i] = (uint16_t)want[12 + i]; /* seq 3 */
    for (int i = 0; i < 5; i++)
        bin[11 + i] = (uint16_t)want[i]; /* seq 0 */
    uint8_t idx[256];
    memcpy(idx, "MMIDIDX\0\0", 9);
    uint64_t v1 = 1, s = 4, d = 4;
    memcpy(idx + 9, &v1, 8);
    idx[17] = 8;
    memcpy(idx + 18, &s, 8);
    memcpy(idx + 26, &d, 8);
    memcpy(idx + 34, L, sizeof L);
    memcpy(idx + 34 + sizeof L, P, sizeof P);
    memcpy(idx + 34 + sizeof L + sizeof P, D, sizeof D);
    size_t n = 34 + sizeof L + sizeof P + sizeof D;
    snprintf(path, sizeof path, "%s.idx", prefix);
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(idx, 1, n, fp) == n);
    if (fp) fclose(fp);
    snprintf(path, sizeof path, "%s.bin", prefix);
    fp = fopen(path, "wb");
    CHECK(fp && fwrite(bin, 2, 16, fp) == 16);
    if (fp) fclose(fp);
    loader_source src = {prefix, 1};
    loader ld;
    if (open_loader(&ld, &src, 1, 3, 5)) {
        CHECK(0);
        return;
    }
    CHECK(!ld.src[0].ds.contiguous);
    CHECK_EQ_U64(ld.src[0].n_windows, 5);
    fixture f = {.stream = want, .n = 16};
    int32_t tok[3], tgt[3];
    for (uint64_t g = 0; g < 10; g++) {
        CHECK(loader_get(&ld, g, tok, tgt) == BT_OK);
        CHECK(sample_matches(&f, loader_locate(&ld, g).window, 3, tok, tgt));
    }
    loader_close(&ld);
}

static void expect_open_error(const loader_source *src, size_t n, uint32_t seq_len,
                              const char *what) {
    loader ld;
    loader_config cfg = {.seq_len = seq_len, .seed = 1};
    bt_diag d;
    bt_diag_init(&d);
    CHECK(loader_open(&ld, src, n, &cfg, &d) != BT_OK);
    CHECK_STR_CONTAINS(d.msg, what);
    CHECK(ld.src == NULL && ld.window == NULL);
}

static void test_errors(void) {
    fixture f;
    fixture_make(&f, "small", 6, 2, 10, 200, 100); /* tokens 200..299: some above 258 */
    loader_source src = {f.prefix, 1};
    expect_open_error(&src, 1, (uint32_t)f.n, "fewer than one sample of seq_len + 1");
    expect_open_error(&src, 1, 0, "seq_len >= 1");
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing", tmpdir);
    loader_source two[2] = {{f.prefix, 1}, {missing, 1}};
    expect_open_error(two, 2, 2, "missing.idx: cannot open");
    two[1].prefix = f.prefix;
    two[1].weight = 0;
    expect_open_error(two, 2, 2, "mixture weight 0 is invalid");
    two[1].weight = -1;
    expect_open_error(two, 2, 2, "weights must be positive");
    loader ld;
    if (f.n > 60 && open_loader(&ld, &src, 1, 2, 1) == BT_OK) {
        int32_t tok[2], tgt[2];
        int bad = 0;
        for (uint64_t g = 0; g < ld.src[0].n_windows; g++)
            if (loader_get(&ld, g, tok, tgt) == BT_ERANGE) {
                bad++;
                CHECK_STR_CONTAINS(
                    loader_error(&ld),
                    "outside the model's vocabulary [0, 259): model.vocab_size is too small");
            }
        CHECK(bad > 0);
        loader_close(&ld);
    }
    free(f.stream);
}

/* loader_get allocates nothing (glibc's counters; the sanitizer build has its own
 * allocator and reports nothing here, which the normal build covers). */
static void test_no_allocation(void) {
    fixture f;
    fixture_make(&f, "alloc", 8, 50, 100, 0, 250);
    loader_source src[2] = {{f.prefix, 1}, {f.prefix, 2}};
    loader ld;
    if (open_loader(&ld, src, 2, 16, 3)) {
        CHECK(0);
        return;
    }
    int32_t tok[16], tgt[16];
    CHECK(loader_get(&ld, 0, tok, tgt) == BT_OK);
    struct mallinfo2 before = mallinfo2();
    for (uint64_t g = 0; g < 5000; g++)
        CHECK(loader_get(&ld, g * 7919, tok, tgt) == BT_OK);
    struct mallinfo2 after = mallinfo2();
    CHECK_EQ_U64(after.uordblks, before.uordblks);
    CHECK_EQ_U64(after.hblkhd, before.hblkhd);
    loader_close(&ld);
    free(f.stream);
}

/* A recipe's data section: mix replaces train. */
static void test_recipe_sources(void) {
    Baton__Data data = BATON__DATA__INIT;
    loader_source out[4];
    CHECK_EQ_U64(loader_sources_from_data(&data, out, 4), 0);
    data.train = "data/fortunes_train";
    CHECK_EQ_U64(loader_sources_from_data(&data, out, 4), 1);
    CHECK(strcmp(out[0].prefix, "data/fortunes_train") == 0 && out[0].weight == 1.0);
    Baton__DataSource a = BATON__DATA_SOURCE__INIT, b = BATON__DATA_SOURCE__INIT;
    a.path = "web";
    b.path = "code";
    b.weight = 0.25;
    Baton__DataSource *mix[] = {&a, &b};
    data.n_mix = 2;
    data.mix = mix;
    CHECK_EQ_U64(loader_sources_from_data(&data, out, 4), 2);
    CHECK(strcmp(out[0].prefix, "web") == 0 && out[0].weight == 1.0); /* the default */
    CHECK(strcmp(out[1].prefix, "code") == 0 && out[1].weight == 0.25);
    CHECK_EQ_U64(loader_sources_from_data(&data, out, 1), 2); /* says how many it needs */
}

int main(void) {
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_permute();
    test_global_index();
    test_single();
    test_dp_slicing();
    test_mixture();
    test_mixture_epochs();
    test_gapped_layout();
    test_errors();
    test_no_allocation();
    test_recipe_sources();
    check_rmdir(tmpdir);
    return check_status();
}
