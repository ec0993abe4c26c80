/* Stage resolution: inheritance (defaults, then every earlier stage), the effective
 * RoPE and data, dp auto, and completion of every sub-message. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "recipe.h"

static const char *recipe_text =
    "name: t\n"
    "model: {arch: llama, dim: 64, n_layers: 4, n_heads: 4, ffn_dim: 176, vocab_size: 256,\n"
    "        rope: {theta: 500000}}\n"
    "cluster: {nodes: 2, gpus_per_node: 4}\n"
    "data: {train: a/train, valid: a/valid}\n"
    "defaults:\n"
    "  seq_len: 64\n"
    "  global_batch: 16\n"
    "  parallel: {tp: 2, pp: 2, dp: auto}\n"
    "  precision: bf16\n"
    "  optimizer: {lr: 1e-3, warmup_steps: 10}\n"
    "stages:\n"
    "  - {name: pretrain, steps: 100}\n"
    "  - name: long\n"
    "    steps: 20\n"
    "    seq_len: 4K\n"
    "    parallel: {cp: 2}\n"
    "    rope: {scaling: {type: yarn, factor: 4, original_max_position: 64}}\n"
    "    data: {train: b/train}\n"
    "  - {name: fp8, steps: 10, precision: {type: fp8, amax_history: 16}}\n";

static Baton__StageSpec *resolve(const recipe_doc *doc, size_t i) {
    bt_diag d;
    bt_diag_init(&d);
    Baton__StageSpec *s = NULL;
    int rc = recipe_resolve_stage(doc, i, &s, &d);
    if (rc != 0) fprintf(stderr, "resolve %zu: %s\n", i, d.msg);
    CHECK(rc == 0);
    return s;
}

/* Loads text into doc and validates it; 0, or the failure (its message printed). */
static int load_valid(const char *name, const char *text, recipe_doc *doc) {
    bt_diag d;
    bt_diag_init(&d);
    int rc = recipe_load_buffer(name, text, strlen(text), doc, &d);
    if (rc == 0) rc = recipe_validate(doc, &d);
    if (rc != 0) fprintf(stderr, "%s\n", d.msg);
    CHECK(rc == 0);
    return rc;
}

static void test_inheritance(const recipe_doc *doc) {
    Baton__StageSpec *s0 = resolve(doc, 0), *s1 = resolve(doc, 1), *s2 = resolve(doc, 2);
    if (!s0 || !s1 || !s2) return;
    /* stage 0: defaults, dp auto = 8 / (2*2*1) */
    CHECK_EQ_U64(s0->stage->seq_len, 64);
    CHECK_EQ_U64(s0->stage->parallel->dp, 2);
    CHECK_EQ_U64(s0->stage->parallel->cp, 1);
    CHECK_EQ_U64(s0->model->n_kv_heads, 4); /* 0 in the recipe = n_heads */
    CHECK(s0->stage->precision->type == BATON__PRECISION__TYPE__BF16);
    CHECK(s0->model->rope->scaling->type == BATON__ROPE_SCALING__TYPE__NONE);
    CHECK_REL(s0->model->rope->theta, 500000, 0);
    CHECK(strcmp(s0->data->train, "a/train") == 0);
    /* stage 1: cp 2 shrinks dp to 1; rope scaling on top of the model's theta */
    CHECK_EQ_U64(s1->stage->seq_len, 4096);
    CHECK_EQ_U64(s1->stage->parallel->cp, 2);
    CHECK_EQ_U64(s1->stage->parallel->dp, 1);
    CHECK_EQ_U64(s1->stage->parallel->tp, 2);
    CHECK(s1->model->rope->scaling->type == BATON__ROPE_SCALING__TYPE__YARN);
    CHECK_REL(s1->model->rope->scaling->factor, 4, 0);
    CHECK_REL(s1->model->rope->theta, 500000, 0);
    CHECK(strcmp(s1->data->train, "b/train") == 0);
    CHECK(s1->data->valid == NULL); /* the stage's data block replaces the recipe's whole */
    /* stage 2 inherits stage 1's context, layout, rope and data; switches precision */
    CHECK_EQ_U64(s2->stage->seq_len, 4096);
    CHECK_EQ_U64(s2->stage->parallel->cp, 2);
    CHECK(s2->stage->precision->type == BATON__PRECISION__TYPE__FP8);
    CHECK_EQ_U64(s2->stage->precision->amax_history, 16);
    CHECK(s2->model->rope->scaling->type == BATON__ROPE_SCALING__TYPE__YARN);
    CHECK_EQ_U64(s2->stage->steps, 10);
    CHECK(strcmp(s2->stage->name, "fp8") == 0);
    CHECK_EQ_U64(s2->stage_index, 2);
    CHECK_EQ_U64(s2->n_stages, 3);
    /* optimizer carried from the defaults, with proto defaults filled in */
    CHECK_REL(s2->stage->optimizer->lr, 1e-3, 0);
    CHECK_REL(s2->stage->optimizer->beta2, 0.95, 0);
    CHECK_REL(s2->stage->restart->heartbeat_timeout->seconds, 300, 0);
    protobuf_c_message_free_unpacked(&s0->base, NULL);
    protobuf_c_message_free_unpacked(&s1->base, NULL);
    protobuf_c_message_free_unpacked(&s2->base, NULL);
}

static void test_spec_round_trip(const recipe_doc *doc) {
    /* a StageSpec is what a worker receives on the wire: it must survive packing */
    Baton__StageSpec *s = resolve(doc, 1);
    if (s == NULL) return;
    size_t n = protobuf_c_message_get_packed_size(&s->base);
    uint8_t *buf = malloc(n);
    protobuf_c_message_pack(&s->base, buf);
    Baton__StageSpec *u = baton__stage_spec__unpack(NULL, n, buf);
    CHECK(u != NULL);
    if (u != NULL) {
        CHECK_EQ_U64(u->stage->seq_len, 4096);
        CHECK(u->model->rope->scaling->type == BATON__ROPE_SCALING__TYPE__YARN);
        baton__stage_spec__free_unpacked(u, NULL);
    }
    free(buf);
    protobuf_c_message_free_unpacked(&s->base, NULL);
}

/* parallel.stage_layers carries forward like every setting (restating pp keeps it), until
 * a stage changes pp or virtual_stages without it, or gives an empty list: that stage and
 * the later ones go back to the even split. */
#define SPLIT_HEAD                                                                                 \
    "name: s\n"                                                                                    \
    "model: {arch: llama, dim: 64, n_layers: 4, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"      \
    "cluster: {nodes: 1, gpus_per_node: 4}\n"                                                      \
    "defaults:\n"                                                                                  \
    "  seq_len: 64\n"                                                                              \
    "  global_batch: 16\n"                                                                         \
    "  parallel: {pp: 2, dp: auto, stage_layers: [3, 1]}\n"                                        \
    "  optimizer: {lr: 1e-3}\n"                                                                    \
    "stages:\n"

static const char *split_text = SPLIT_HEAD
    "  - {name: a, steps: 10, parallel: {pp: 2, zero: 0}}\n"
    "  - {name: b, steps: 10, parallel: {pp: 4}}\n"
    "  - {name: c, steps: 10}\n"
    "  - {name: d, steps: 10, parallel: {pp: 2, virtual_stages: 2}}\n"
    "  - {name: e, steps: 10, parallel: {pp: 2, virtual_stages: 1, stage_layers: [1, 3]}}\n"
    "  - {name: f, steps: 10, parallel: {stage_layers: []}}\n"
    "  - {name: g, steps: 10, parallel: {zero: 1}}\n";

/* --set on a stage without a parallel block of its own: the block it gets keeps the list
 * given empty (a packed copy would lose it), and the stages after inherit the even split. */
static void test_split_set_new_block(void) {
    static const char *text = SPLIT_HEAD "  - {name: a, steps: 10}\n"
                                         "  - {name: b, steps: 10}\n"
                                         "  - {name: c, steps: 10}\n";
    static const char *const sets[2] = {"stages.b.parallel.stage_layers=[]",
                                        "stages.b.parallel={stage_layers: []}"};
    for (int k = 0; k < 2; k++) {
        recipe_doc doc = {0};
        bt_diag d;
        bt_diag_init(&d);
        int rc = recipe_load_buffer("s.yaml", text, strlen(text), &doc, &d);
        rc = rc ? rc : recipe_apply_set(&doc, sets[k], &d);
        if (rc != 0) fprintf(stderr, "%s\n", d.msg);
        CHECK(rc == 0);
        static const size_t want[3] = {2, 0, 0};
        for (size_t i = 0; rc == 0 && i < 3; i++) {
            Baton__StageSpec *s = resolve(&doc, i);
            if (s != NULL) CHECK_EQ_U64(s->stage->parallel->n_stage_layers, want[i]);
            if (s != NULL) protobuf_c_message_free_unpacked(&s->base, NULL);
        }
        recipe_doc_free(&doc);
    }
}

/* SPLIT_HEAD's recipe (pp 2 with [3, 1]) with two overrides applied in order, then
 * validated; the validation's code, diag its message. */
static int split_two_sets(recipe_doc *doc, const char *first, const char *second, bt_diag *d) {
    static const char *text = SPLIT_HEAD "  - {name: a, steps: 10}\n";
    bt_diag_init(d);
    int rc = recipe_load_buffer("s.yaml", text, strlen(text), doc, d);
    rc = rc ? rc : recipe_apply_set(doc, first, d);
    rc = rc ? rc : recipe_apply_set(doc, second, d);
    return rc ? rc : recipe_validate(doc, d);
}

/* A split an override gives holds whether it comes before or after the override of pp
 * that would drop the file's: the order of --set options does not matter. Given before,
 * an invalid split is refused as after, naming its override; so is one value of the
 * file's list set (before: too few entries; after: the list the pp override dropped). */
static void test_split_set_order(void) {
    static const char *const pp4 = "defaults.parallel.pp=4";
    static const char *const sets[][2] = {
        {"defaults.parallel.stage_layers=[1, 1, 1, 1]", NULL},
        {"defaults.parallel={stage_layers: [1, 1, 1, 1]}", NULL},
        {"defaults.parallel.stage_layers=[2, 1, 1, 1]",
         "--set defaults.parallel.stage_layers=[2, 1, 1, 1]: defaults.parallel.stage_layers: "
         "the stages' layers add up to 5"},
        {"defaults.parallel.stage_layers.0=1",
         "--set defaults.parallel.stage_layers.0=1: defaults.parallel.stage_layers"}};
    for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
        for (int order = 0; order < 2; order++) {
            recipe_doc doc = {0};
            bt_diag d;
            int rc = order ? split_two_sets(&doc, pp4, sets[k][0], &d)
                           : split_two_sets(&doc, sets[k][0], pp4, &d);
            const char *want = sets[k][1];
            if ((rc == 0) != (want == NULL) || (want && strstr(d.msg, want) == NULL))
                fprintf(stderr, "%s and %s in order %d: %s\n", sets[k][0], pp4, order,
                        rc ? d.msg : "accepted");
            Baton__Parallel *p = doc.recipe ? doc.recipe->defaults->parallel : NULL;
            if (want == NULL) {
                CHECK(rc == 0);
                if (rc == 0) CHECK_EQ_U64(p->n_stage_layers, 4);
            } else {
                CHECK(rc == BT_ERECIPE);
                CHECK(strstr(d.msg, want) != NULL);
            }
            recipe_doc_free(&doc);
        }
    }
}

static void test_stage_split(void) {
    recipe_doc doc = {0};
    bt_diag d;
    bt_diag_init(&d);
    int rc = load_valid("s.yaml", split_text, &doc);
    static const size_t want[7] = {2, 0, 0, 0, 2, 0, 0};
    for (size_t i = 0; rc == 0 && i < 7; i++) {
        Baton__StageSpec *s = resolve(&doc, i);
        if (s == NULL) continue;
        CHECK_EQ_U64(s->stage->parallel->n_stage_layers, want[i]);
        if (i == 4) CHECK_EQ_U64(s->stage->parallel->stage_layers[0], 1);
        protobuf_c_message_free_unpacked(&s->base, NULL);
    }
    recipe_doc_free(&doc);
    /* --set defaults.parallel.pp=4 changes the defaults' pipeline: their list goes */
    rc = recipe_load_buffer("s.yaml", split_text, strlen(split_text), &doc, &d);
    rc = rc ? rc : recipe_apply_set(&doc, "defaults.parallel.pp=4", &d);
    if (rc != 0) fprintf(stderr, "%s\n", d.msg);
    CHECK(rc == 0);
    if (rc == 0) CHECK_EQ_U64(doc.recipe->defaults->parallel->n_stage_layers, 0);
    recipe_doc_free(&doc);
    /* --set stages.a.parallel.stage_layers=[] empties stage a's list (the defaults keep theirs) */
    rc = recipe_load_buffer("s.yaml", split_text, strlen(split_text), &doc, &d);
    rc = rc ? rc : recipe_apply_set(&doc, "stages.a.parallel.stage_layers=[]", &d);
    if (rc != 0) fprintf(stderr, "%s\n", d.msg);
    CHECK(rc == 0);
    for (size_t i = 0; rc == 0 && i < 2; i++) {
        Baton__StageSpec *s = resolve(&doc, i);
        if (s != NULL) CHECK_EQ_U64(s->stage->parallel->n_stage_layers, 0);
        if (s != NULL) protobuf_c_message_free_unpacked(&s->base, NULL);
    }
    recipe_doc_free(&doc);
    test_split_set_new_block();
    test_split_set_order();
}

/* Where each stage's data starts: after the samples of the earlier stages over the same
 * training data and window length (a valid set of its own does not matter). */
static const char *carry_text =
    "name: c\n"
    "model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"
    "cluster: {nodes: 1, gpus_per_node: 1}\n"
    "data: {mix: [{path: a, weight: 0.7}, {path: b, weight: 0.3}], valid: v}\n"
    "defaults: {seq_len: 64, global_batch: 8}\n"
    "stages:\n"
    "  - {name: s0, steps: 100}\n"
    "  - {name: s1, steps: 30, global_batch: 4, precision: bf16, optimizer: {reset: true}}\n"
    "  - {name: s2, steps: 7, seq_len: 128}\n"
    "  - {name: s3, steps: 5, seq_len: 64, data: {mix: [{path: a, weight: 0.7},\n"
    "                                                {path: b, weight: 0.3}], valid: w}}\n"
    "  - {name: s4, steps: 9, data: {mix: [{path: a, weight: 0.6}, {path: b, weight: 0.4}]}}\n"
    "  - {name: s5, steps: 2, data: {train: a}}\n"
    "  - {name: s6, steps: 3, data_from_start: true}\n"
    "  - {name: s7, steps: 4}\n"
    "  - {name: s8, steps: 1, data_from_start: false}\n";

static void test_data_carry(void) {
    recipe_doc doc = {0};
    if (load_valid("c.yaml", carry_text, &doc) != 0) return;
    /* s0 first; s1 after s0's 100 x 8; s2 another window length; s3 the same data as
     * s0/s1 though it names it again; s4 other weights; s5 other sources; s6 from the
     * start on purpose (an action: not inherited), so s7 after the furthest of s5 (2 x 4)
     * and s6 (3 x 4); s8 says false: after s7's 4 x 4 */
    const uint64_t want[] = {0, 800, 0, 800 + 120, 0, 0, 0, 12, 28};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        Baton__StageSpec *s = resolve(&doc, i);
        if (s == NULL) continue;
        CHECK(s->has_start_sample);
        CHECK_EQ_U64(s->start_sample, want[i]);
        CHECK(s->stage->optimizer->reset == (i == 1)); /* s1's reset is not s2's */
        protobuf_c_message_free_unpacked(&s->base, NULL);
    }
    recipe_doc_free(&doc);
}

/* Where completed stages ended as their run recorded it (ended) stands for their steps x
 * global_batch and their rollbacks' windows (extra), which the recipe, edited since, no
 * longer tells; stages without a record still count by the recipe. */
static void test_data_ended(void) {
    recipe_doc doc = {0};
    if (load_valid("c.yaml", carry_text, &doc) != 0) return;
    uint64_t extra[9] = {7, 50}, ended[9], start = 0;
    for (size_t k = 0; k < 9; k++)
        ended[k] = RECIPE_END_UNKNOWN;
    ended[1] = 900, ended[6] = 30;
    CHECK(recipe_data_start(&doc, 1, extra, ended, &start) == 0);
    CHECK_EQ_U64(start, 807); /* s0: 100 x 8 + 7 skipped */
    CHECK(recipe_data_start(&doc, 3, extra, ended, &start) == 0);
    CHECK_EQ_U64(start, 900); /* s1's record, not 807 + 120 + 50 */
    CHECK(recipe_data_start(&doc, 7, extra, ended, &start) == 0);
    CHECK_EQ_U64(start, 30); /* s6's record past s5's 2 x 4 */
    CHECK(recipe_data_start(&doc, 7, extra, NULL, &start) == 0);
    CHECK_EQ_U64(start, 12);
    /* an end past 2^64 - 1 saturates, never wraps round to stage 0's first samples */
    extra[0] = UINT64_MAX - 10;
    CHECK(recipe_data_start(&doc, 1, extra, NULL, &start) == 0);
    CHECK_EQ_U64(start, UINT64_MAX);
    recipe_doc_free(&doc);
}

/* The same data under other spellings continues; other data does not. */
static void test_data_identity(void) {
    char dir[] = "/tmp/test_resolve.XXXXXX", path[200], text[4096];
    if (mkdtemp(dir) == NULL) {
        CHECK(!"mkdtemp");
        return;
    }
    const char *files[] = {"x.bin", "y.bin"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        if (f) fclose(f);
    }
    snprintf(path, sizeof path, "%s/link", dir);
    CHECK(symlink(".", path) == 0);
    snprintf(text, sizeof text,
             "name: d\n"
             "model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 176, "
             "vocab_size: 256}\n"
             "cluster: {nodes: 1, gpus_per_node: 1}\n"
             "data: {train: %s/x}\n"
             "defaults: {seq_len: 64, global_batch: 2}\n"
             "stages:\n"
             "  - {name: a, steps: 10}\n"
             "  - {name: b, steps: 10, data: {train: %s/./x}}\n"
             "  - {name: c, steps: 10, data: {mix: [{path: %s/link/x, weight: 3}]}}\n"
             "  - {name: d, steps: 10, data: {train: %s/y}}\n"
             "  - {name: e, steps: 10, data: {mix: [{path: %s/x}, {path: %s/y}]}}\n"
             "  - {name: f, steps: 10, data: {mix: [{path: %s/link/x, weight: 2},\n"
             "                                     {path: %s/y, weight: 2}]}}\n"
             "  - {name: g, steps: 10, data: {mix: [{path: %s/y}, {path: %s/x}]}}\n"
             "  - {name: h, steps: 10, data: {train: %s/gone}}\n"
             "  - {name: i, steps: 10, data: {train: %s/link/./gone}}\n",
             dir, dir, dir, dir, dir, dir, dir, dir, dir, dir, dir, dir);
    recipe_doc doc = {0};
    if (load_valid("d.yaml", text, &doc) == 0) {
        /* b and c are a's data spelled otherwise; d other data; f is e's mix (the same
         * shares); g the same sources in another order: another interleaving; i is h's
         * data, whose files are gone (moved, deleted): compared by resolved path */
        const uint64_t want[] = {0, 20, 40, 0, 0, 20, 0, 0, 20};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            Baton__StageSpec *sp = resolve(&doc, i);
            if (sp == NULL) continue;
            CHECK_EQ_U64(sp->start_sample, want[i]);
            protobuf_c_message_free_unpacked(&sp->base, NULL);
        }
    }
    recipe_doc_free(&doc);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/link", dir);
    unlink(path);
    rmdir(dir);
}

/* An fp16 stage's loss scaling stays with fp16: a stage that switches type leaves it
 * behind (validation refuses loss_scale on bf16), one that keeps fp16 inherits it. */
static void test_loss_scale_left_behind(void) {
    static const char *text =
        "name: l\n"
        "model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"
        "cluster: {nodes: 1, gpus_per_node: 1}\n"
        "data: {train: a}\n"
        "defaults: {steps: 2, seq_len: 64, global_batch: 2}\n"
        "stages:\n"
        "  - {name: a, precision: {type: fp16, loss_scale: {initial: 1024}}}\n"
        "  - {name: b, precision: {type: fp16}}\n"
        "  - {name: c, precision: bf16}\n"
        "  - {name: d, precision: fp16}\n";
    recipe_doc doc = {0};
    if (load_valid("l.yaml", text, &doc) == 0) {
        const double want[] = {1024, 1024, 0, 0}; /* 0: none (the default scaler) */
        for (size_t i = 0; i < 4; i++) {
            Baton__StageSpec *sp = resolve(&doc, i);
            if (sp == NULL) continue;
            const Baton__LossScale *ls = sp->stage->precision->loss_scale;
            CHECK_REL(ls ? ls->initial : 0, want[i], 0);
            protobuf_c_message_free_unpacked(&sp->base, NULL);
        }
    }
    recipe_doc_free(&doc);
}

/* fp8's own settings stay with fp8 likewise: a later fp16 or bf16 stage resolves to the
 * defaults (amax_history 1024, margin 0, first_last_bf16 on, format hybrid) unless it
 * gives them; a stage that stays fp8 inherits them. */
static void test_fp8_settings_left_behind(void) {
    static const char *text =
        "name: f\n"
        "model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"
        "cluster: {nodes: 1, gpus_per_node: 1}\n"
        "data: {train: a}\n"
        "defaults: {steps: 2, seq_len: 64, global_batch: 2}\n"
        "stages:\n"
        "  - {name: a, precision: {type: fp8, format: e4m3, amax_history: 16, margin: 2,\n"
        "                          first_last_bf16: false}}\n"
        "  - {name: b, steps: 3}\n"
        "  - {name: c, precision: {type: fp16, margin: 3}}\n"
        "  - {name: d, precision: bf16}\n";
    recipe_doc doc = {0};
    if (load_valid("f.yaml", text, &doc) == 0) {
        const uint32_t hist[] = {16, 16, 1024, 1024}, margin[] = {2, 2, 3, 0};
        const int fmt[] = {1, 1, 0, 0}, first_last[] = {0, 0, 1, 1};
        for (size_t i = 0; i < 4; i++) {
            Baton__StageSpec *sp = resolve(&doc, i);
            if (sp == NULL) continue;
            const Baton__Precision *p = sp->stage->precision;
            CHECK_EQ_U64(p->amax_history, hist[i]);
            CHECK_EQ_U64(p->margin, margin[i]);
            CHECK_EQ_U64((uint64_t)p->format, (uint64_t)fmt[i]);
            CHECK_EQ_U64(p->first_last_bf16, (uint64_t)first_last[i]);
            CHECK(p->has_amax_history == (i < 2));
            protobuf_c_message_free_unpacked(&sp->base, NULL);
        }
    }
    recipe_doc_free(&doc);
}

/* The warnings validating recipe text prints (it must validate) into out. */
static void validate_warnings(const char *text, char *out, size_t cap) {
    recipe_doc doc = {0};
    bt_diag d;
    bt_diag_init(&d);
    out[0] = '\0';
    int rc = recipe_load_buffer("w.yaml", text, strlen(text), &doc, &d);
    CHECK(rc == 0 && doc.warn == stderr);
    FILE *f = tmpfile();
    doc.warn = f;
    if (rc == 0 && f != NULL) {
        CHECK(recipe_validate(&doc, &d) == 0);
        rewind(f);
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
    }
    if (f) fclose(f);
    recipe_doc_free(&doc);
}

/* Validation's warnings: the recipe stays valid, each warning names its place. */
static void test_warnings(void) {
    static const char *text =
        "name: w\n" /* 1 */
        "model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"
        "cluster: {nodes: 1, gpus_per_node: 1}\n" /* 3 */
        "data: {train: a}\n"                      /* 4 */
        "defaults: {steps: 20, seq_len: 64, global_batch: 2, optimizer: {warmup_steps: 10}}\n"
        "stages:\n"                                                                   /* 6 */
        "  - {name: a}\n"                                                             /* 7 */
        "  - name: b\n"                                                               /* 8 */
        "    seq_len: 1024\n"                                                         /* 9 */
        "    rope: {scaling: {type: llama3, factor: 4, original_max_position: 32}}\n" /* 10 */
        "  - {name: c, steps: 5}\n"                                                   /* 11 */
        "  - {name: d, seq_len: 128, steps: 20}\n";                                   /* 12 */
    char out[4096];
    validate_warnings(text, out, sizeof out);
    /* b: 1024 beyond 2 x 32 x 4 (llama3), and 32 is not a's 64; c: warmup 10 of 5 steps (b's 1024
     * is not warned about again); d: 128 within 128, warmup within 20 steps */
    CHECK_STR_CONTAINS(out, "w.yaml:9:5: warning: stages[1].seq_len: seq_len 1024 is beyond the "
                            "context the RoPE scaling extends to, for llama3 twice "
                            "original_max_position 32 × factor 4 = 256 (stage 1 \"b\")\n");
    CHECK_STR_CONTAINS(out, "w.yaml:10:47: warning: stages[1].rope.scaling.original_max_position: "
                            "original_max_position 32 is not the seq_len 64 the previous stage "
                            "(\"a\") trained at");
    CHECK_STR_CONTAINS(out, "w.yaml:5:65: warning: defaults.optimizer.warmup_steps: warmup_steps "
                            "10 is more than the stage's 5 steps");
    CHECK(strstr(out, "stage 3") == NULL);
    const char *first = strstr(out, "is beyond the context");
    CHECK(first != NULL && strstr(first + 1, "is beyond the context") == NULL);
    CHECK(strstr(out, "original_max_position 32 is not the seq_len 1024") == NULL);
}

/* linear and ntk scaling without original_max_position: the context they scale is the
 * seq_len trained at before the scaling, so the beyond-the-context warnings still come. */
static void test_warnings_implicit_original(void) {
    static const char *text =
        "name: w\n" /* 1 */
        "model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"
        "cluster: {nodes: 1, gpus_per_node: 1}\n"                                    /* 3 */
        "data: {train: a}\n"                                                         /* 4 */
        "defaults: {steps: 20, seq_len: 64, global_batch: 2}\n"                      /* 5 */
        "stages:\n"                                                                  /* 6 */
        "  - {name: a}\n"                                                            /* 7 */
        "  - {name: b, seq_len: 4096, rope: {scaling: {type: linear, factor: 2}}}\n" /* 8 */
        "  - {name: c}\n"                                                            /* 9 */
        "  - {name: d, seq_len: 256, rope: {scaling: {type: none}}}\n"               /* 10 */
        "  - {name: e, seq_len: 1024, rope: {scaling: {type: ntk, factor: 4}}}\n"    /* 11 */
        "  - {name: f, seq_len: 2048}\n";                                            /* 12 */
    char out[4096];
    validate_warnings(text, out, sizeof out);
    /* b: 4096 beyond a's 64 x 2 (c the same: not again); d: scaling off at 256, beyond 64;
     * e: 1024 within d's 256 x 4; f: 2048 beyond it */
    CHECK_STR_CONTAINS(out, "w.yaml:8:15: warning: stages[1].seq_len: seq_len 4096 is beyond the "
                            "context the RoPE scaling extends to, 64 (the seq_len trained at "
                            "before the scaling; original_max_position is not set) × factor 2 = "
                            "128 (stage 1 \"b\")\n");
    CHECK_STR_CONTAINS(out, "warning: stages[3].rope.scaling: RoPE scaling is off from this "
                            "stage, but seq_len 256 is beyond 64 (the seq_len trained at before "
                            "the scaling; original_max_position is not set), the context the "
                            "previous stage's linear scaling extended (to 128)");
    CHECK_STR_CONTAINS(out, "w.yaml:12:15: warning: stages[5].seq_len: seq_len 2048 is beyond "
                            "the context the RoPE scaling extends to, 256 (the seq_len trained "
                            "at before the scaling; original_max_position is not set) × factor 4 "
                            "= 1024 (stage 5 \"f\")\n");
    CHECK(strstr(out, "stage 2") == NULL && strstr(out, "stage 4") == NULL);
    CHECK(strstr(out, "is not the seq_len") == NULL);
}

/* A scaling field that a rope block sets and its type does not read: warned where it is
 * set; not for fields a stage inherits through the overlay (it cannot unset them), nor
 * for the type's own fields. */
static void test_warnings_unread_scaling(void) {
    static const char *text =
        "name: w\n" /* 1 */
        "model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"
        "cluster: {nodes: 1, gpus_per_node: 1}\n"                                            /* 3 */
        "data: {train: a}\n"                                                                 /* 4 */
        "defaults: {steps: 20, seq_len: 64, global_batch: 2}\n"                              /* 5 */
        "stages:\n"                                                                          /* 6 */
        "  - {name: a, rope: {scaling: {type: yarn, factor: 2, original_max_position: 64,\n" /* 7 */
        "                               truncate: false, beta_fast: 16}}}\n"                 /* 8 */
        "  - {name: b, rope: {scaling: {type: llama3, original_max_position: 64}}}\n"        /* 9 */
        "  - {name: c, rope: {scaling: {type: llama3, truncate: false}}}\n" /* 10 */
        "  - {name: d, rope: {scaling: {low_freq_factor: 2}}}\n"            /* 11 */
        "  - {name: e, rope: {scaling: {beta_slow: 2, attn_factor: 1}}}\n"; /* 12 */
    char out[4096];
    validate_warnings(text, out, sizeof out);
    CHECK_STR_CONTAINS(out, "w.yaml:10:46: warning: stages[2].rope.scaling.truncate: rope.scaling "
                            "sets truncate, which llama3 scaling does not use (truncate, "
                            "beta_fast, beta_slow and attn_factor are yarn's; low_freq_factor and "
                            "high_freq_factor llama3's) (stage 2 \"c\")\n");
    CHECK_STR_CONTAINS(out, "stages[4].rope.scaling.beta_slow: rope.scaling sets beta_slow, "
                            "attn_factor, which llama3 scaling");
    CHECK(strstr(out, "stage 0") == NULL && strstr(out, "stage 1") == NULL);
    CHECK(strstr(out, "stage 3") == NULL);
}

/* --set into an element of a list (any list, as stages): the element's field, a whole
 * element, one value of a list of numbers; the other elements and the list's length stay,
 * and an index past the end is refused naming the length. */
static const char *list_text =
    "name: l\n"
    "model: {arch: llama, dim: 64, n_layers: 4, n_heads: 4, ffn_dim: 176, vocab_size: 256}\n"
    "cluster: {nodes: 1, gpus_per_node: 4}\n"
    "data:\n"
    "  mix: [{path: a, weight: 0.25}, {path: b, weight: 0.75}]\n"
    "defaults:\n"
    "  seq_len: 64\n"
    "  global_batch: 16\n"
    "  parallel: {pp: 2, dp: auto, stage_layers: [3, 1]}\n"
    "  optimizer: {lr: 1e-3}\n"
    "stages:\n"
    "  - {name: a, steps: 10}\n"
    "  - {name: b, steps: 10, data: {mix: [{path: c}, {path: d, weight: 2}]}}\n";

/* list_text loaded, the n overrides applied, validated; 0 or the error (said, CHECKed). */
static int load_list_with_sets(recipe_doc *doc, const char *const *sets, size_t n, bt_diag *d) {
    bt_diag_init(d);
    int rc = recipe_load_buffer("l.yaml", list_text, strlen(list_text), doc, d);
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = recipe_apply_set(doc, sets[k], d);
    if (rc == 0) rc = recipe_validate(doc, d);
    if (rc != 0) fprintf(stderr, "%s\n", d->msg);
    CHECK(rc == 0);
    return rc;
}

static void test_set_list_element(void) {
    static const char *const sets[] = {"data.mix.0.weight=0.5",
                                       "data.mix.1={path: e}",
                                       "defaults.parallel.stage_layers.1=2",
                                       "defaults.parallel.stage_layers.0=2",
                                       "stages.b.data.mix.1.path=f",
                                       "stages.1.data.mix.0.weight=3"};
    recipe_doc doc = {0};
    bt_diag d;
    int rc = load_list_with_sets(&doc, sets, sizeof sets / sizeof *sets, &d);
    Baton__StageSpec *s0 = rc == 0 ? resolve(&doc, 0) : NULL;
    Baton__StageSpec *s1 = rc == 0 ? resolve(&doc, 1) : NULL;
    if (s0 != NULL && s1 != NULL) {
        Baton__Data *d0 = s0->data, *d1 = s1->data;
        CHECK_EQ_U64(d0->n_mix, 2);
        CHECK(strcmp(d0->mix[0]->path, "a") == 0);
        CHECK_REL(d0->mix[0]->weight, 0.5, 0);
        CHECK(strcmp(d0->mix[1]->path, "e") == 0); /* the element replaced whole */
        CHECK(!d0->mix[1]->has_weight);
        CHECK_EQ_U64(s0->stage->parallel->n_stage_layers, 2);
        CHECK_EQ_U64(s0->stage->parallel->stage_layers[0], 2);
        CHECK_EQ_U64(s0->stage->parallel->stage_layers[1], 2);
        CHECK_EQ_U64(d1->n_mix, 2);
        CHECK(strcmp(d1->mix[0]->path, "c") == 0);
        CHECK_REL(d1->mix[0]->weight, 3, 0);
        CHECK(strcmp(d1->mix[1]->path, "f") == 0);
        CHECK_REL(d1->mix[1]->weight, 2, 0);
    }
    if (s0 != NULL) protobuf_c_message_free_unpacked(&s0->base, NULL);
    if (s1 != NULL) protobuf_c_message_free_unpacked(&s1->base, NULL);
    static const char *const bad[][2] = {
        {"data.mix.2.weight=1", "--set data.mix.2.weight=1: data.mix (l.yaml:5:3) has 2 "
                                "elements, so index 2 is out of range"},
        {"defaults.parallel.stage_layers.5=1", "stage_layers (l.yaml:9:31) has 2 elements"},
        {"stages.a.data.mix.2.path=x",
         "stages[0].data.mix has 2 elements, so index 2 is out of range"},
        {"data.mix.weight=1", "data.mix is a list: name an element by its 0-based index"},
        {"data.mix.0.weight=abc", "--set data.mix.0.weight=abc: data.mix[0].weight: expected"},
        {"defaults.parallel.stage_layers.1=x", "defaults.parallel.stage_layers[1]: expected"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        bt_diag_init(&d);
        CHECK(recipe_apply_set(&doc, bad[k][0], &d) == BT_ERECIPE);
        CHECK_STR_CONTAINS(d.msg, bad[k][1]);
    }
    CHECK(doc.recipe->stages[0]->data == NULL); /* the refused one copied nothing */
    recipe_doc_free(&doc);
}

/* --set into an element of a list a stage inherits: the list is copied into the stage
 * (a data block whole), the element set there; what it was inherited from, and the
 * stages that do not inherit it, stay as they were. */
static void test_set_inherited_list(void) {
    static const char *const sets[] = {"stages.a.data.mix.1.weight=0.5",
                                       "stages.0.parallel.stage_layers.0=1",
                                       "stages.a.parallel.stage_layers.1=3"};
    recipe_doc doc = {0};
    bt_diag d;
    int rc = load_list_with_sets(&doc, sets, sizeof sets / sizeof *sets, &d);
    Baton__StageSpec *s0 = rc == 0 ? resolve(&doc, 0) : NULL;
    if (s0 != NULL) {
        CHECK_EQ_U64(s0->data->n_mix, 2);
        CHECK(strcmp(s0->data->mix[0]->path, "a") == 0);
        CHECK_REL(s0->data->mix[0]->weight, 0.25, 0);
        CHECK(strcmp(s0->data->mix[1]->path, "b") == 0);
        CHECK_REL(s0->data->mix[1]->weight, 0.5, 0);
        CHECK_EQ_U64(s0->stage->parallel->n_stage_layers, 2);
        CHECK_EQ_U64(s0->stage->parallel->stage_layers[0], 1);
        CHECK_EQ_U64(s0->stage->parallel->stage_layers[1], 3);
        protobuf_c_message_free_unpacked(&s0->base, NULL);
    }
    const Baton__Recipe *r = doc.recipe;
    CHECK_REL(r->data->mix[1]->weight, 0.75, 0); /* the recipe's own block */
    CHECK_EQ_U64(r->defaults->parallel->stage_layers[0], 3);
    CHECK(r->stages[1]->data->n_mix == 2 && strcmp(r->stages[1]->data->mix[0]->path, "c") == 0);
    bt_diag_init(&d); /* stage b gives its own data: its list, not the recipe's */
    CHECK(recipe_apply_set(&doc, "stages.b.data.mix.2.weight=1", &d) == BT_ERECIPE);
    CHECK_STR_CONTAINS(d.msg, "stages[1].data.mix (l.yaml:13:33) has 2 elements");
    /* a refused one leaves no trace: not the copied list, nor the parallel block made
     * to hold it */
    bt_diag_init(&d);
    CHECK(recipe_apply_set(&doc, "stages.b.parallel.stage_layers.5=1", &d) == BT_ERECIPE);
    CHECK_STR_CONTAINS(d.msg, "has 2 elements, so index 5 is out of range");
    CHECK(r->stages[1]->parallel == NULL);
    recipe_doc_free(&doc);
}

int main(void) {
    recipe_doc doc = {0};
    if (load_valid("t.yaml", recipe_text, &doc) == 0) {
        test_inheritance(&doc);
        test_spec_round_trip(&doc);
    }
    recipe_doc_free(&doc);
    test_stage_split();
    test_set_list_element();
    test_set_inherited_list();
    test_data_carry();
    test_data_ended();
    test_data_identity();
    test_loss_scale_left_behind();
    test_fp8_settings_left_behind();
    test_warnings();
    test_warnings_implicit_original();
    test_warnings_unread_scaling();
    return check_status();
}
