/* pb_dump_yaml, as `baton spec` prints a resolved StageSpec: every value the worker reads,
 * those the recipe leaves unset with their schema defaults (marked "# default"); real
 * numbers in the fewest digits that read back as the same value; and the same text from
 * the spec packed and unpacked again (what `baton spec --out` writes and the worker
 * reads). */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "manifest.pb-c.h"
#include "pb_dump.h"
#include "recipe.h"

/* A recipe that leaves the optimizer, zero, sequence_parallel, the llama3 blend factors
 * and fp8's margin and first_last_bf16 to their defaults. */
static const char *recipe_text =
    "name: d\n"
    "model: {arch: llama, dim: 64, n_layers: 4, n_heads: 4, ffn_dim: 176, vocab_size: 256,\n"
    "        rope: {theta: 500000}}\n"
    "cluster: {nodes: 1, gpus_per_node: 2, mfu: 0.3}\n"
    "data: {mix: [{path: a/train, weight: 0.8}, {path: b/train, weight: 0.2}], valid: a/v}\n"
    "defaults: {seq_len: 64, global_batch: 8, parallel: {tp: 2}}\n"
    "stages:\n"
    "  - {name: pretrain, steps: 10}\n"
    "  - name: long\n"
    "    steps: 5\n"
    "    seq_len: 256\n"
    "    rope: {scaling: {type: llama3, factor: 4, original_max_position: 64}}\n"
    "    precision: {type: fp8, amax_history: 16}\n"
    "    optimizer: {lr: 0.30000000000000004, min_lr: 3e-4}\n";

static int has(const char *text, const char *line) {
    if (strstr(text, line) != NULL) return 1;
    fprintf(stderr, "missing: \"%s\"\n", line);
    return 0;
}

static char *dump(const ProtobufCMessage *m, int with_defaults) {
    bt_buf b;
    bt_buf_init(&b);
    pb_dump_yaml(&b, m, 0, with_defaults);
    char *s = strdup(bt_buf_str(&b));
    bt_buf_free(&b);
    return s;
}

static Baton__StageSpec *resolve(const recipe_doc *doc, size_t i) {
    bt_diag d;
    bt_diag_init(&d);
    Baton__StageSpec *s = NULL;
    int rc = recipe_resolve_stage(doc, i, &s, &d);
    if (rc != 0) fprintf(stderr, "resolve %zu: %s\n", i, d.msg);
    CHECK(rc == 0);
    return s;
}

static void test_defaults(const recipe_doc *doc) {
    Baton__StageSpec *s0 = resolve(doc, 0), *s1 = resolve(doc, 1);
    if (s0 == NULL || s1 == NULL) return;
    char *a = dump(&s0->base, 1), *b = dump(&s1->base, 1);
    /* the stage's parallel block: tp given, the rest the schema's */
    CHECK(has(a, "  parallel:\n    tp: 2\n"));
    CHECK(has(a, "    zero: 1  # default\n"));
    CHECK(has(a, "    sequence_parallel: true  # default\n"));
    CHECK(has(a, "    order: \"tp-cp-ep-dp-pp\"  # default\n"));
    /* no optimizer in the recipe: the worker's AdamW runs on the schema's values */
    CHECK(has(a, "    lr: 0.0003  # default\n"));
    CHECK(has(
        a, "    beta1: 0.9  # default\n    beta2: 0.95  # default\n    eps: 1.0e-8  # default\n"));
    CHECK(has(a, "    weight_decay: 0.1  # default\n    grad_clip: 1.0  # default\n"));
    /* the llama3 blend and fp8's unset fields */
    CHECK(
        has(b, "      low_freq_factor: 1.0  # default\n      high_freq_factor: 4.0  # default\n"));
    CHECK(has(b, "    margin: 0  # default\n"));
    CHECK(has(b, "    first_last_bf16: true  # default\n"));
    CHECK(has(b, "    amax_history: 16\n"));
    /* shortest round-tripping digits: 0.8 not 0.80000000000000004, 1e-5 not
     * 1.0000000000000001e-05 (nor C's 1e-05), and 17 digits where 15 and 16 would change
     * the value */
    CHECK(has(b, "weight: 0.8\n") && has(b, "weight: 0.2\n"));
    CHECK(has(b, "  norm_eps: 1.0e-5  # default\n"));
    CHECK(has(b, "  mfu: 0.3\n"));
    CHECK(has(b, "    min_lr: 0.0003\n"));
    CHECK(has(b, "    lr: 0.30000000000000004\n"));
    CHECK(has(b, "    theta: 500000.0\n"));
    /* an unset string without a default is left out, not printed as "" */
    CHECK(strstr(a, "init_checkpoint") == NULL && strstr(a, "run_dir") == NULL);
    /* without defaults: only what is set */
    char *c = dump(&s0->base, 0);
    CHECK(strstr(c, "zero:") == NULL && strstr(c, "# default") == NULL);
    CHECK(has(c, "  parallel:\n    tp: 2\n"));
    free(a), free(b), free(c);
    protobuf_c_message_free_unpacked(&s0->base, NULL);
    protobuf_c_message_free_unpacked(&s1->base, NULL);
}

/* The spec packed (baton spec --out) and unpacked (the worker) prints the same, defaults
 * included: what the text shows is what the worker gets. */
static void test_round_trip(const recipe_doc *doc) {
    for (size_t i = 0; i < 2; i++) {
        Baton__StageSpec *s = resolve(doc, i);
        if (s == NULL) continue;
        size_t n = protobuf_c_message_get_packed_size(&s->base);
        uint8_t *buf = malloc(n ? n : 1);
        protobuf_c_message_pack(&s->base, buf);
        Baton__StageSpec *back = baton__stage_spec__unpack(NULL, n, buf);
        CHECK(back != NULL);
        if (back != NULL) {
            for (int d = 0; d < 2; d++) {
                char *x = dump(&s->base, d), *y = dump(&back->base, d);
                CHECK(strcmp(x, y) == 0);
                free(x), free(y);
            }
            CHECK(back->stage->parallel->zero == 1 && back->stage->optimizer->beta2 == 0.95);
            baton__stage_spec__free_unpacked(back, NULL);
        }
        free(buf);
        protobuf_c_message_free_unpacked(&s->base, NULL);
    }
}

/* Real numbers alone: every double and float reads back as itself, in as few digits. */
static void test_reals(void) {
    const double xs[] = {0.1, 1.0 / 3.0, 0.1 + 0.2, 3e-4, 1e-5, 2.5e-310, 1e300, 65536, 0};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        Baton__Optimizer o = BATON__OPTIMIZER__INIT;
        o.has_lr = 1, o.lr = xs[i];
        char *t = dump(&o.base, 0), *end;
        CHECK(strncmp(t, "lr: ", 4) == 0);
        double back = strtod(t + 4, &end);
        CHECK(back == xs[i] && *end == '\n');
        /* one significant digit fewer would not read back (the ".0" every real is written
         * with, 65536.0 and 1.0e+300, is no digit of it) */
        int digits = 0, lead = 1;
        const char *stop = t + 4 + strcspn(t + 4, "e\n");
        if (memchr(t + 4, '.', (size_t)(stop - (t + 4))) != NULL)
            while (stop[-1] == '0' || stop[-1] == '.')
                stop--;
        for (const char *p = t + 4; p < stop; p++) {
            if (*p < '0' || *p > '9') continue;
            lead = lead && *p == '0';
            digits += !lead;
        }
        char shorter[400];
        snprintf(shorter, sizeof shorter, "%.*g", digits > 1 ? digits - 1 : 1, xs[i]);
        CHECK(digits <= 1 || strtod(shorter, NULL) != xs[i]);
        if (digits > 15) printf("%s", t); /* the few that need more than %.15g */
        free(t);
    }
    /* written out from 1e-4 to below 1e15, else with an exponent; always as YAML 1.1
     * readers (PyYAML) read a float, as well as 1.2 ones: a dot in the mantissa, the
     * exponent signed, not padded (C's %g writes 8e-05, 3.5e+20, 10000) */
    static const struct {
        double x;
        const char *text;
    } forms[] = {{8e-5, "8.0e-5"},
                 {1e-10, "1.0e-10"},
                 {3.5e20, "3.5e+20"},
                 {-2.5e-7, "-2.5e-7"},
                 {5e-324, "5.0e-324"},
                 {1e100, "1.0e+100"},
                 {1e15, "1.0e+15"},
                 {1e14, "100000000000000.0"},
                 {1e-4, "0.0001"},
                 {10000, "10000.0"},
                 {0, "0.0"},
                 {-0.0, "-0.0"},
                 {123456789.125, "123456789.125"}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        Baton__Optimizer o = BATON__OPTIMIZER__INIT;
        o.has_lr = 1, o.lr = forms[i].x;
        char *t = dump(&o.base, 0), want[64];
        snprintf(want, sizeof want, "lr: %s\n", forms[i].text);
        CHECK(strcmp(t, want) == 0);
        if (strcmp(t, want) != 0) printf("got %s", t);
        CHECK(strtod(t + 4, NULL) == forms[i].x &&
              signbit(strtod(t + 4, NULL)) == signbit(forms[i].x));
        free(t);
    }
    Baton__Fp8State f = BATON__FP8_STATE__INIT;
    f.has_scale = 1, f.scale = 0.1f;
    char *t = dump(&f.base, 0);
    CHECK(has(t, "scale: 0.1\n"));
    free(t);
}

int main(void) {
    recipe_doc doc = {0};
    bt_diag d;
    bt_diag_init(&d);
    int rc = recipe_load_buffer("d.yaml", recipe_text, strlen(recipe_text), &doc, &d);
    if (rc == 0) rc = recipe_validate(&doc, &d);
    if (rc != 0) fprintf(stderr, "%s\n", d.msg);
    CHECK(rc == 0);
    if (rc == 0) {
        test_defaults(&doc);
        test_round_trip(&doc);
    }
    recipe_doc_free(&doc);
    test_reals();
    return check_status();
}
