/* load.c: a recipe using every kind of value is mapped to the expected message, with
 * positions; every class of error gives its message at the right line:column; and the
 * limits (size, nesting, aliases) hold. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "recipe_load.h"

/* Line numbers are the comments' numbers. */
static const char full_recipe[] =
    "name: llama-test\n"                                                      /* 1 */
    "seed: 42\n"                                                              /* 2 */
    "model:\n"                                                                /* 3 */
    "  arch: llama\n"                                                         /* 4 */
    "  dim: 4K\n"                                                             /* 5 */
    "  n_layers: 32\n"                                                        /* 6 */
    "  n_heads: 32\n"                                                         /* 7 */
    "  n_kv_heads: 0\n"                                                       /* 8 */
    "  vocab_size: 128K\n"                                                    /* 9 */
    "  norm_eps: 1e-5\n"                                                      /* 10 */
    "  rope: 500000\n"                                                        /* 11 */
    "  moe:\n"                                                                /* 12 */
    "cluster:\n"                                                              /* 13 */
    "  nodes: 8\n"                                                            /* 14 */
    "  gpus_per_node: 8\n"                                                    /* 15 */
    "  device: CUDA\n"                                                        /* 16 */
    "  gpu: {memory: 80GB, peak_tflops_bf16: 989.5, name: H100}\n"            /* 17 */
    "  links:\n"                                                              /* 18 */
    "    intra_node: 450GB/s\n"                                               /* 19 */
    "    inter_node: 400Gb/s\n"                                               /* 20 */
    "data:\n"                                                                 /* 21 */
    "  mix:\n"                                                                /* 22 */
    "    - {path: /d/a, weight: 0.7}\n"                                       /* 23 */
    "    - /d/b\n"                                                            /* 24 */
    "defaults:\n"                                                             /* 25 */
    "  micro_batch: 2\n"                                                      /* 26 */
    "  parallel: {tp: 8, pp: 4, sequence_parallel: off, cp_comm: ulysses}\n"  /* 27 */
    "  precision: bf16\n"                                                     /* 28 */
    "  optimizer: {lr: 3e-4, schedule: cosine, warmup_steps: 2K}\n"           /* 29 */
    "  restart: {heartbeat_timeout: 5m, backoff: 250ms}\n"                    /* 30 */
    "  checkpoint: {every_steps: 500, async: yes}\n"                          /* 31 */
    "stages:\n"                                                               /* 32 */
    "  - name: pretrain\n"                                                    /* 33 */
    "    steps: 1000\n"                                                       /* 34 */
    "    seq_len: 8K\n"                                                       /* 35 */
    "  - name: long-context\n"                                                /* 36 */
    "    seq_len: 128K\n"                                                     /* 37 */
    "    parallel:\n"                                                         /* 38 */
    "      cp: 8\n"                                                           /* 39 */
    "    rope:\n"                                                             /* 40 */
    "      scaling: {type: llama3, factor: 8, original_max_position: 8192}\n" /* 41 */
    "    precision: {type: fp8, format: e4m3}\n"                              /* 42 */
    "    recompute: FULL\n"                                                   /* 43 */
    "  - name: fp8\n"                                                         /* 44 */
    "    precision: fp8\n"                                                    /* 45 */
    "    global_batch: 1M\n"                                                  /* 46 */
    "    data: {train: \"quoted: yes\", mix: []}\n"                           /* 47 */
    "    optimizer: {reset: true, min_lr: 0}\n";                              /* 48 */

static void check_where(const recipe_doc *doc, const char *path, int line, int col) {
    int l = -1, c = -1;
    int rc = recipe_doc_where(doc, path, &l, &c);
    if (rc != 0 || l != line || c != col) {
        fprintf(stderr, "where(%s) = %d, %d:%d; expected %d:%d\n", path, rc, l, c, line, col);
        check_failures++;
    }
}

static void test_full_values(const Baton__Recipe *r) {
    CHECK(strcmp(r->name, "llama-test") == 0);
    CHECK(r->has_seed && r->seed == 42);
    const Baton__Model *m = r->model;
    CHECK(m->has_arch && m->arch == BATON__MODEL__ARCH__LLAMA);
    CHECK(m->has_dim && m->dim == 4096);
    CHECK(m->n_layers == 32 && m->n_heads == 32);
    CHECK(m->has_n_kv_heads && m->n_kv_heads == 0); /* = n_heads */
    CHECK(m->vocab_size == 131072);
    CHECK(m->has_norm_eps && m->norm_eps == 1e-5);
    CHECK(m->rope != NULL && m->rope->has_theta && m->rope->theta == 500000.0);
    CHECK(m->rope != NULL && m->rope->scaling == NULL);
    CHECK(m->moe != NULL && !m->moe->has_n_experts && m->moe->top_k == 2); /* empty, present */
    const Baton__Cluster *c = r->cluster;
    CHECK(c->nodes == 8 && c->has_gpus_per_node && c->gpus_per_node == 8);
    CHECK(c->has_device && c->device == BATON__CLUSTER__DEVICE__CUDA);
    CHECK(c->gpu->memory->has_bytes && c->gpu->memory->bytes == 80000000000ULL);
    CHECK(c->gpu->peak_tflops_bf16 == 989.5 && strcmp(c->gpu->name, "H100") == 0);
    CHECK(c->links->intra_node->bytes_per_s == 450e9);
    CHECK(c->links->inter_node->has_bytes_per_s && c->links->inter_node->bytes_per_s == 50e9);
    CHECK(!c->has_mfu && c->mfu == 0.4);
    CHECK_EQ_U64(r->data->n_mix, 2);
    CHECK(strcmp(r->data->mix[0]->path, "/d/a") == 0 && r->data->mix[0]->weight == 0.7);
    CHECK(strcmp(r->data->mix[1]->path, "/d/b") == 0 && !r->data->mix[1]->has_weight);
    CHECK(r->data->train == NULL);
}

static void test_full_stages(const Baton__Recipe *r) {
    const Baton__Stage *d = r->defaults;
    CHECK(d->has_micro_batch && d->micro_batch == 2);
    CHECK(d->parallel->tp == 8 && d->parallel->pp == 4 && !d->parallel->has_cp);
    CHECK(d->parallel->has_sequence_parallel && !d->parallel->sequence_parallel);
    CHECK(d->parallel->cp_comm == BATON__PARALLEL__CP_COMM__ULYSSES);
    CHECK(d->precision->has_type && d->precision->type == BATON__PRECISION__TYPE__BF16);
    CHECK(d->optimizer->lr == 3e-4 && d->optimizer->warmup_steps == 2048);
    CHECK(d->optimizer->has_schedule && d->optimizer->schedule == 0);
    CHECK(d->restart->heartbeat_timeout->seconds == 300.0);
    CHECK_REL(d->restart->backoff->seconds, 0.25, 1e-15);
    CHECK(d->checkpoint->every_steps == 500 && d->checkpoint->has_async && d->checkpoint->async);
    CHECK_EQ_U64(r->n_stages, 3);
    if (r->n_stages != 3) return;
    const Baton__Stage *s0 = r->stages[0], *s1 = r->stages[1], *s2 = r->stages[2];
    CHECK(strcmp(s0->name, "pretrain") == 0 && s0->steps == 1000 && s0->seq_len == 8192);
    CHECK(s0->parallel == NULL && s0->precision == NULL);
    CHECK(strcmp(s1->name, "long-context") == 0 && s1->seq_len == 131072);
    CHECK(s1->parallel->has_cp && s1->parallel->cp == 8 && !s1->parallel->has_tp);
    CHECK(s1->rope->scaling->type == BATON__ROPE_SCALING__TYPE__LLAMA3);
    CHECK(s1->rope->scaling->factor == 8.0 && s1->rope->scaling->original_max_position == 8192);
    CHECK(!s1->rope->has_theta);
    CHECK(s1->precision->type == BATON__PRECISION__TYPE__FP8);
    CHECK(s1->precision->has_format && s1->precision->format == BATON__PRECISION__FORMAT__E4M3);
    CHECK(s1->has_recompute && s1->recompute == BATON__STAGE__RECOMPUTE__FULL);
    CHECK(s2->precision->type == BATON__PRECISION__TYPE__FP8 && s2->global_batch == 1048576);
    CHECK(strcmp(s2->data->train, "quoted: yes") == 0 && s2->data->n_mix == 0);
    CHECK(s2->optimizer->has_reset && s2->optimizer->reset);
    CHECK(s2->optimizer->has_min_lr && s2->optimizer->min_lr == 0.0);
}

static void test_full_positions(const recipe_doc *doc) {
    check_where(doc, "", 1, 1);
    check_where(doc, "name", 1, 1);
    check_where(doc, "model", 3, 1);
    check_where(doc, "model.dim", 5, 3);
    check_where(doc, "model.moe", 12, 3);
    check_where(doc, "model.moe.n_experts", 12, 3); /* falls back to model.moe */
    check_where(doc, "cluster.gpu.memory", 17, 9);
    check_where(doc, "cluster.gpu.name", 17, 48);
    check_where(doc, "cluster.links.inter_node", 20, 5);
    check_where(doc, "data.mix", 22, 3);
    check_where(doc, "data.mix[0]", 23, 7);
    check_where(doc, "data.mix[0].weight", 23, 20);
    check_where(doc, "data.mix[1]", 24, 7);
    check_where(doc, "defaults.parallel.pp", 27, 21);
    check_where(doc, "stages", 32, 1);
    check_where(doc, "stages[1]", 36, 5);
    check_where(doc, "stages[1].parallel.cp", 39, 7);
    check_where(doc, "stages[1].parallel.dp", 38, 5);
    check_where(doc, "stages[1].rope.scaling.factor", 41, 31);
    check_where(doc, "stages[2].precision", 45, 5);
    check_where(doc, "stages[2].precision.type", 45, 5);
    check_where(doc, "stages[7].parallel", 32, 1); /* no such item: stages */
    check_where(doc, "nothing.at.all", 1, 1);      /* the root */
    /* a prefix must end at a boundary: "stages[1]x" is not under "stages[1]" */
    check_where(doc, "stages[1]x", 32, 1);
}

static void test_full(void) {
    recipe_doc doc;
    bt_diag diag;
    bt_diag_init(&diag);
    int rc = recipe_load_buffer("full.yaml", full_recipe, sizeof full_recipe - 1, &doc, &diag);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "%s\n", diag.msg);
        return;
    }
    CHECK(!bt_diag_isset(&diag));
    CHECK(strcmp(doc.file, "full.yaml") == 0);
    test_full_values(doc.recipe);
    test_full_stages(doc.recipe);
    test_full_positions(&doc);
    recipe_doc_free(&doc);
    CHECK(doc.recipe == NULL && doc.npos == 0);
}

/* Loads text and expects failure with "t.yaml:LINE:COL: " and then want in the message. */
static void expect_error_len(const char *text, size_t len, int line, int col, const char *want) {
    recipe_doc doc;
    bt_diag diag;
    char prefix[64];
    bt_diag_init(&diag);
    int rc = recipe_load_buffer("t.yaml", text, len, &doc, &diag);
    snprintf(prefix, sizeof prefix, "t.yaml:%d:%d: ", line, col);
    CHECK(rc < 0);
    CHECK(doc.recipe == NULL && doc.pos == NULL && doc.file == NULL);
    if (strncmp(diag.msg, prefix, strlen(prefix)) != 0 || strstr(diag.msg, want) == NULL) {
        fprintf(stderr, "for input %.60s...\n  got:      %s\n  expected: %s...%s\n", text, diag.msg,
                prefix, want);
        check_failures++;
    }
    if (rc == 0) recipe_doc_free(&doc);
}

static void expect_error(const char *text, int line, int col, const char *want) {
    expect_error_len(text, strlen(text), line, col, want);
}

static void test_errors_values(void) {
    expect_error("defaults:\n  parallel:\n    tp: two\n", 3, 9,
                 "defaults.parallel.tp: expected a positive integer");
    expect_error("defaults:\n  parallel:\n    tp: two\n", 3, 9, "got \"two\"");
    expect_error("cluster: {nodes: -2}\n", 1, 18, "cluster.nodes: expected a positive integer");
    expect_error("cluster: {nodes: 4294967296}\n", 1, 18,
                 "cluster.nodes: value \"4294967296\" is out of range (at most 4294967295)");
    expect_error("cluster: {nodes: 4G}\n", 1, 18, "out of range (at most 4294967295)");
    expect_error("seed: 18446744073709551616\n", 1, 7, "seed: value");
    expect_error("model: {dim: 1.5}\n", 1, 14, "model.dim: expected a positive integer");
    expect_error("model: {norm_eps: .inf}\n", 1, 19, "expected a finite number");
    expect_error("model: {norm_eps: 1e999}\n", 1, 19, "out of range (not a finite double)");
    expect_error("defaults: {precision: fp4}\n", 1, 23,
                 "defaults.precision: expected one of fp32, bf16, fp8, fp16, got \"fp4\"");
    expect_error("model:\n  moe: {balance: aux}\n", 2, 18,
                 "model.moe.balance: expected one of aux_loss, bias, none");
    expect_error("defaults: {parallel: {sequence_parallel: maybe}}\n", 1, 42,
                 "expected true or false (also yes/no, on/off), got \"maybe\"");
    expect_error("name:\n", 1, 6, "name: expected a string, got nothing (null)");
    expect_error("cluster: {nodes: ~}\n", 1, 18, "got nothing (null)");
    expect_error("name: \"a\\0b\"\n", 1, 7, "name: a value must not contain a NUL character");
    /* "auto" is parallel.dp's alone: elsewhere it is refused, never read as 0, and the
     * other integer fields' messages do not offer it */
    expect_error("model: {n_kv_heads: auto}\n", 1, 21,
                 "model.n_kv_heads: \"auto\" is only for parallel.dp (derived from the cluster); "
                 "give n_kv_heads a number");
    expect_error("defaults: {global_batch: AUTO}\n", 1, 26, "\"auto\" is only for parallel.dp");
    expect_error("seed: auto\n", 1, 7, "seed: \"auto\" is only for parallel.dp");
    expect_error("defaults: {steps: x}\n", 1, 19,
                 "defaults.steps: expected a positive integer (such as 8, 8K = 8192), got");
    expect_error("defaults: {parallel: {dp: x}}\n", 1, 27,
                 "defaults.parallel.dp: expected a non-negative integer (such as 8, 8K = 8192, or "
                 "auto), got \"x\"");
}

static void test_errors_units(void) {
    expect_error("cluster:\n  gpu:\n    memory: 80 gigs\n", 3, 13,
                 "cluster.gpu.memory: expected a size such as 80GB or 80GiB (units B, KB");
    expect_error("cluster: {gpu: {memory: -1GB}}\n", 1, 25, "expected a size such as 80GB");
    expect_error("cluster: {gpu: {memory: 20000PB}}\n", 1, 25,
                 "out of range (at most 18446744073709551615 bytes)");
    expect_error("cluster: {links: {intra_node: 450GB}}\n", 1, 31,
                 "cluster.links.intra_node: expected a rate such as 450GB/s");
    expect_error("defaults: {restart: {backoff: 5 years}}\n", 1, 31,
                 "defaults.restart.backoff: expected a duration such as 250ms, 300s, 5m");
    expect_error("defaults: {restart: {backoff: -5s}}\n", 1, 31, "expected a duration");
    expect_error("cluster: {gpu: {memory: {bytes: lots}}}\n", 1, 33,
                 "cluster.gpu.memory.bytes: expected a non-negative integer");
}

static void test_errors_shape(void) {
    expect_error("model:\n  dim: 8\n  n_head: 4\n", 3, 3,
                 "model.n_head: unknown key \"n_head\" in model (did you mean \"n_heads\"?); "
                 "valid keys: arch, dim, n_layers, n_heads,");
    expect_error("modle: {}\n", 1, 1,
                 "modle: unknown key \"modle\" at the top level (did you mean "
                 "\"model\"?); valid keys: name, seed, model, cluster,");
    expect_error("cluster: {gpus: 8}\n", 1, 11, "did you mean \"gpu\"?");
    expect_error("cluster: {gpus_per: 8}\n", 1, 11, "did you mean \"gpus_per_node\"?");
    expect_error("model: {zzzzzz: 1}\n", 1, 9, "unknown key \"zzzzzz\" in model; valid keys:");
    expect_error("stages:\n  - name: a\n  - nme: b\n", 3, 5,
                 "stages[1].nme: unknown key \"nme\" in stages[1] (did you mean \"name\"?)");
    expect_error("model: [1, 2]\n", 1, 8,
                 "model: expected a mapping with keys from: arch, dim, n_layers");
    expect_error("model: [1, 2]\n", 1, 8, "got a sequence");
    expect_error("name: {first: a}\n", 1, 7, "name: expected a string, got a mapping");
    expect_error("defaults: {parallel: {tp: [1, 2]}}\n", 1, 27,
                 "defaults.parallel.tp: expected a single value, got a sequence");
    expect_error("stages: pretrain\n", 1, 9, "stages: expected a sequence (a YAML list), got");
    expect_error("stages:\n  - [a]\n", 2, 5, "stages[0]: expected a mapping with keys from: name");
    expect_error("model:\n  dim: 8\n  n_layers: 2\n  dim: 16\n", 4, 3,
                 "model.dim: duplicate key \"dim\" (first given at line 2, column 3)");
    expect_error("? [a]\n: b\n", 1, 3, "expected a field name as key, got a sequence");
    expect_error("- model\n- cluster\n", 1, 1,
                 "a recipe must be a mapping with model, cluster, defaults and stages, got a "
                 "sequence");
    expect_error("just words\n", 1, 1, "a recipe must be a mapping");
}

static void test_errors_file(void) {
    expect_error("", 1, 1,
                 "empty recipe: expected a mapping with model, cluster, defaults and "
                 "stages");
    expect_error("# only a comment\n\n", 1, 1, "empty recipe");
    expect_error("---\n", 2, 1, "empty recipe");
    expect_error_len("name: a\0b\n", 10, 1, 8, "not a text file (a NUL byte at byte 7)");
    expect_error("name: caf\xc3\xa9\nseed: \xff\n", 2, 7, "not a text file (invalid UTF-8");
    expect_error("name: \xed\xa0\x80\n", 1, 7, "not a text file"); /* a surrogate */
    expect_error("model: {dim: 8\n", 2, 1, "YAML syntax error: did not find expected");
    expect_error("model:\n  dim: 8\n n_layers: 2\n", 3, 2,
                 "YAML syntax error: did not find expected key (while parsing a block mapping "
                 "that starts at line 1, column 1)");
    expect_error("name: a: b\n", 1, 8, "YAML syntax error: mapping values are not allowed");
    expect_error("name: a\n---\nname: b\n", 2, 1, "a second YAML document");
    expect_error("name: *nope\n", 1, 7, "YAML syntax error: found undefined alias");
}

/* YAML merge keys: a mapping's entries merged under another, its own keys winning, then
 * the sources in order; merged values keep their source's place. */
static void test_merge_keys(void) {
    static const char text[] =
        "defaults:\n"                                                   /* 1 */
        "  optimizer: &opt {lr: 1e-3, min_lr: 1e-4, warmup_steps: 7}\n" /* 2 */
        "  restart: &rs {max_restarts: 4}\n"                            /* 3 */
        "stages:\n"                                                     /* 4 */
        "  - name: a\n"                                                 /* 5 */
        "    optimizer: {<<: *opt, lr: 2e-3}\n"                         /* 6 */
        "  - name: b\n"                                                 /* 7 */
        "    optimizer:\n"                                              /* 8 */
        "      <<: [{lr: 5e-3, grad_clip: 0.5}, *opt]\n"                /* 9 */
        "      weight_decay: 0.2\n"                                     /* 10 */
        "    restart: {<<: *rs}\n";                                     /* 11 */
    recipe_doc doc;
    bt_diag diag;
    bt_diag_init(&diag);
    int rc = recipe_load_buffer("m.yaml", text, sizeof text - 1, &doc, &diag);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "%s\n", diag.msg);
        return;
    }
    const Baton__Optimizer *a = doc.recipe->stages[0]->optimizer;
    const Baton__Optimizer *b = doc.recipe->stages[1]->optimizer;
    CHECK(a->lr == 2e-3 && a->has_min_lr && a->min_lr == 1e-4 && a->warmup_steps == 7);
    CHECK(!a->has_grad_clip);
    CHECK(b->lr == 5e-3 && b->grad_clip == 0.5 && b->min_lr == 1e-4 && b->warmup_steps == 7);
    CHECK(b->weight_decay == 0.2);
    CHECK(doc.recipe->stages[1]->restart->has_max_restarts &&
          doc.recipe->stages[1]->restart->max_restarts == 4);
    check_where(&doc, "stages[0].optimizer.lr", 6, 27);
    check_where(&doc, "stages[0].optimizer.min_lr", 2, 30);
    check_where(&doc, "stages[1].optimizer.grad_clip", 9, 23);
    recipe_doc_free(&doc);
    expect_error("defaults:\n  optimizer: {<<: [a, b]}\n", 2, 19,
                 "defaults.optimizer.<<: a merge key (<<) takes a mapping or a list of 1 to 16");
    expect_error("defaults:\n  optimizer: {<<: {lr: 1, lr: 2}}\n", 2, 27,
                 "defaults.optimizer.lr: duplicate key \"lr\"");
    expect_error("defaults:\n  optimizer: {<<: &o {<<: *o}}\n", 2, 23,
                 "a mapping merged with << holds a merge key of its own");
    /* a quoted "<<" is a key like any other */
    expect_error("defaults:\n  optimizer: {\"<<\": {lr: 1}}\n", 2, 15,
                 "unknown key \"<<\" in defaults.optimizer");
}

static void test_limits(void) {
    char deep[512] = "stages: ";
    for (int i = 0; i < 100; i++)
        strcat(deep, "[");
    /* the root mapping is level 1, so the 64th '[' (column 9 + 63) is the 65th level */
    expect_error(deep, 1, 72, "nested deeper than 64 levels");

    size_t big = (16u << 20) + 1;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    recipe_doc doc;
    bt_diag diag;
    bt_diag_init(&diag);
    CHECK(recipe_load_buffer("t.yaml", huge, big, &doc, &diag) == BT_ERECIPE);
    CHECK_STR_CONTAINS(diag.msg, "t.yaml: larger than 16 MiB");
    free(huge);
}

/* The loader frees nothing twice and leaks nothing when an error comes late. */
static void test_error_late(void) {
    char *text = malloc(sizeof full_recipe + 64);
    strcpy(text, full_recipe);
    strcat(text, "    seq_len: 8X\n"); /* line 49, inside stages[2] */
    expect_error(text, 49, 14, "stages[2].seq_len: expected a positive integer");
    free(text);
}

static void test_aliases(void) {
    static const char text[] = "defaults: &d {micro_batch: 2, parallel: {tp: 2}}\n"
                               "stages:\n"
                               "  - *d\n"
                               "  - {name: b, parallel: *p}\n"
                               "model: {dim: &p 8}\n";
    recipe_doc doc;
    bt_diag diag;
    bt_diag_init(&diag);
    /* *p is used before &p is defined: an error */
    CHECK(recipe_load_buffer("a.yaml", text, sizeof text - 1, &doc, &diag) < 0);
    CHECK_STR_CONTAINS(diag.msg, "a.yaml:4:25: YAML syntax error: found undefined alias");

    static const char ok[] = "defaults: &d {micro_batch: 2, parallel: &p {tp: 2}}\n"
                             "stages:\n"
                             "  - *d\n"
                             "  - {name: b, parallel: *p}\n";
    bt_diag_init(&diag);
    CHECK(recipe_load_buffer("a.yaml", ok, sizeof ok - 1, &doc, &diag) == 0);
    if (doc.recipe == NULL) return;
    CHECK_EQ_U64(doc.recipe->n_stages, 2);
    CHECK(doc.recipe->stages[0]->micro_batch == 2 && doc.recipe->stages[0]->parallel->tp == 2);
    CHECK(doc.recipe->stages[1]->parallel->tp == 2);
    CHECK(doc.recipe->stages[1]->parallel != doc.recipe->defaults->parallel); /* copies */
    check_where(&doc, "stages[1].parallel.tp", 1, 45); /* where the anchored value is */
    recipe_doc_free(&doc);

    expect_error("stages: &a [*a]\n", 1, 9, "stages[0]: expected a mapping");
    /* the schema has no cycle, so a self-referring mapping meets an unknown key */
    expect_error("defaults: &a {rope: *a}\n", 1, 15,
                 "defaults.rope.rope: unknown key \"rope\" in defaults.rope");
}

/* 300 stages, each an alias of a stage whose data.mix has 300 items: 90000 values from a
 * few kilobytes. */
static void test_alias_bomb(void) {
    size_t cap = 64 * 1024, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "defaults: &s {data: {mix: [");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(text + n, cap - n, "%sa", i ? "," : "");
    n += (size_t)snprintf(text + n, cap - n, "]}}\nstages: [");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s*s", i ? "," : "");
    snprintf(text + n, cap - n, "]\n");
    recipe_doc doc;
    bt_diag diag;
    bt_diag_init(&diag);
    CHECK(recipe_load_buffer("b.yaml", text, strlen(text), &doc, &diag) == BT_ERECIPE);
    CHECK_STR_CONTAINS(diag.msg, "aliases expand to more than");
    free(text);
}

static void test_file(void) {
    recipe_doc doc;
    bt_diag diag;
    bt_diag_init(&diag);
    CHECK(recipe_load_file("/nonexistent/r.yaml", &doc, &diag) == BT_ENOENT);
    CHECK(strcmp(diag.msg, "/nonexistent/r.yaml: cannot open: No such file or directory") == 0);

    char path[] = "/tmp/baton_test_recipe_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(full_recipe, f);
    fclose(f);
    bt_diag_init(&diag);
    CHECK(recipe_load_file(path, &doc, &diag) == 0);
    if (doc.recipe != NULL) {
        CHECK(strcmp(doc.file, path) == 0);
        CHECK_EQ_U64(doc.recipe->n_stages, 3);
        check_where(&doc, "stages[1].parallel.cp", 39, 7);
    }
    recipe_doc_free(&doc);
    unlink(path);

    bt_diag_init(&diag);
    CHECK(recipe_load_file("/tmp", &doc, &diag) == BT_EIO);
    CHECK_STR_CONTAINS(diag.msg, "/tmp: cannot read: Is a directory");
}

/* The bytes parsed are kept in doc.text, read once: from a file, and from a pipe
 * (/dev/fd/N, as /dev/stdin or <(...) name one), which a second read would find empty. */
static void test_file_text(void) {
    recipe_doc doc;
    bt_diag diag;
    size_t n = strlen(full_recipe);
    char path[] = "/tmp/baton_test_recipe_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, full_recipe, n) == (ssize_t)n);
    close(fd);
    bt_diag_init(&diag);
    CHECK(recipe_load_file(path, &doc, &diag) == 0);
    CHECK(doc.text != NULL && doc.text_len == n && memcmp(doc.text, full_recipe, n) == 0);
    recipe_doc_free(&doc);
    unlink(path);

    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], full_recipe, n) == (ssize_t)n); /* fits a pipe's 64 KiB */
    close(p[1]);
    char name[64];
    snprintf(name, sizeof name, "/dev/fd/%d", p[0]);
    bt_diag_init(&diag);
    CHECK(recipe_load_file(name, &doc, &diag) == 0);
    CHECK(doc.text != NULL && doc.text_len == n && memcmp(doc.text, full_recipe, n) == 0);
    if (doc.recipe != NULL) CHECK_EQ_U64(doc.recipe->n_stages, 3);
    recipe_doc_free(&doc);
    char c;
    CHECK(read(p[0], &c, 1) == 0); /* all of it was taken: a second read gets nothing */
    close(p[0]);

    bt_diag_init(&diag);
    CHECK(recipe_load_buffer("b.yaml", full_recipe, n, &doc, &diag) == 0);
    CHECK(doc.text == NULL); /* a buffer's bytes are the caller's */
    recipe_doc_free(&doc);
}

int main(void) {
    test_full();
    test_errors_values();
    test_errors_units();
    test_errors_shape();
    test_errors_file();
    test_merge_keys();
    test_limits();
    test_error_late();
    test_aliases();
    test_alias_bomb();
    test_file();
    test_file_text();
    return check_status();
}
