/* config.json of a Hugging Face LLaMA (orchestrator/ckpt/hf_config.c): the rope_scaling
 * dict of each RoPE scaling in transformers' field names, max_position_embeddings as the
 * context the checkpoint records or else the one the model was extended to, read back by
 * import as it was written, and the models and scalings that have no Hugging Face form
 * refused with a reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hf_config.h"

typedef struct model_fx {
    Baton__Model m;
    Baton__Rope rope;
    Baton__RopeScaling s;
    Baton__Moe moe;
} model_fx;

static void fx_init(model_fx *f, Baton__RopeScaling__Type type, double factor, uint64_t orig) {
    *f = (model_fx){BATON__MODEL__INIT, BATON__ROPE__INIT, BATON__ROPE_SCALING__INIT,
                    BATON__MOE__INIT};
    f->m.dim = 64, f->m.n_layers = 2, f->m.n_heads = 4, f->m.n_kv_heads = 2;
    f->m.ffn_dim = 176, f->m.vocab_size = 272, f->m.norm_eps = 1e-5;
    f->m.rope = &f->rope;
    f->rope.theta = 10000;
    f->s.type = type, f->s.factor = factor, f->s.original_max_position = orig;
    if (type != BATON__ROPE_SCALING__TYPE__NONE) f->rope.scaling = &f->s;
}

/* Writes m's config.json into *text (caller frees); returns the rc. */
static int write_config(const Baton__Model *m, uint64_t max_position, char **text, char *err) {
    bt_buf b;
    bt_diag d;
    bt_buf_init(&b);
    bt_diag_init(&d);
    int rc = hf_config_write(m, max_position, "float32", &b, &d);
    *text = rc == 0 ? strdup(bt_buf_str(&b)) : NULL;
    snprintf(err, sizeof d.msg, "%s", d.msg);
    bt_buf_free(&b);
    return rc;
}

static void test_llama3(void) {
    model_fx f;
    char *t, err[2048];
    fx_init(&f, BATON__ROPE_SCALING__TYPE__LLAMA3, 4, 128);
    f.s.low_freq_factor = 1, f.s.high_freq_factor = 4;
    CHECK(write_config(&f.m, 0, &t, err) == 0);
    CHECK_STR_CONTAINS(t, "\"rope_scaling\": {\n    \"rope_type\": \"llama3\",\n"
                          "    \"factor\": 4.0,\n    \"low_freq_factor\": 1.0,\n"
                          "    \"high_freq_factor\": 4.0,\n"
                          "    \"original_max_position_embeddings\": 128\n  }");
    /* twice original x factor, as plan and eval take llama3's context (recipe_rope_extent) */
    CHECK_STR_CONTAINS(t, "\"max_position_embeddings\": 1024,");
    hf_model h;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(hf_config_read(t, strlen(t), "c.json", &h, &d) == 0);
    CHECK(h.rope.scaling == &h.scaling && h.scaling.type == BATON__ROPE_SCALING__TYPE__LLAMA3);
    CHECK(h.scaling.factor == 4 && h.scaling.original_max_position == 128);
    CHECK(h.scaling.low_freq_factor == 1 && h.scaling.high_freq_factor == 4);
    CHECK_EQ_U64(h.max_position, 1024);
    free(t);
    /* Llama 3.1's config.json: 131072 for original 8192 and factor 8 (not 65536) */
    fx_init(&f, BATON__ROPE_SCALING__TYPE__LLAMA3, 8, 8192);
    f.s.low_freq_factor = 1, f.s.high_freq_factor = 4;
    CHECK(write_config(&f.m, 0, &t, err) == 0);
    CHECK_STR_CONTAINS(t, "\"max_position_embeddings\": 131072,");
    free(t);
}

/* The context a checkpoint records (a trained stage's seq_len, an import's
 * max_position_embeddings) wins over the derived one where it is longer than the
 * original: Llama 3.2's config.json, factor 32 for 8192, says 131072, which twice
 * original x factor (524288) does not give. */
static void test_llama3_recorded(void) {
    static const char l32[] =
        "{\"hidden_size\": 64, \"intermediate_size\": 176, \"num_hidden_layers\": 2, "
        "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 272, "
        "\"max_position_embeddings\": 131072, \"rope_theta\": 500000.0, \"rope_scaling\": "
        "{\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}";
    hf_model h;
    bt_diag d;
    bt_diag_init(&d);
    int known;
    CHECK(hf_config_read(l32, strlen(l32), "l32.json", &h, &d) == 0);
    CHECK_EQ_U64(h.max_position, 131072); /* what the import records as the seq_len */
    CHECK_EQ_U64(hf_config_max_position(&h.model, 0, h.max_position, &known), 131072);
    CHECK(known == 1);
    CHECK_EQ_U64(hf_config_max_position(&h.model, 0, 100000, &known), 100000);
    /* --max-position still wins; a recorded context not beyond the original, or none,
     * leaves the derived one (transformers wants the original below it) */
    CHECK_EQ_U64(hf_config_max_position(&h.model, 4096, h.max_position, &known), 4096);
    model_fx f;
    fx_init(&f, BATON__ROPE_SCALING__TYPE__LLAMA3, 8, 8192);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 0, 8192, &known), 131072);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 0, 0, &known), 131072);
    /* unscaled: the recorded context, else the default (known 0) */
    fx_init(&f, BATON__ROPE_SCALING__TYPE__NONE, 1, 0);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 0, 64, &known), 64);
    CHECK(known == 1);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 0, 0, &known), HF_DEFAULT_MAX_POSITION);
    CHECK(known == 0);
}

static void test_yarn(void) {
    model_fx f;
    char *t, err[2048];
    fx_init(&f, BATON__ROPE_SCALING__TYPE__YARN, 4, 2048);
    f.s.beta_fast = 32, f.s.beta_slow = 1;
    CHECK(write_config(&f.m, 0, &t, err) == 0);
    CHECK_STR_CONTAINS(t, "\"rope_type\": \"yarn\",\n    \"factor\": 4.0,\n"
                          "    \"original_max_position_embeddings\": 2048,\n"
                          "    \"beta_fast\": 32.0,\n    \"beta_slow\": 1.0,\n"
                          "    \"attention_factor\": ");
    CHECK_STR_CONTAINS(t, "\"max_position_embeddings\": 8192,");
    free(t);
    /* trained at 64K to extend to 128K (the YaRN paper's): original x factor, never the
     * trained seq_len, from which transformers would derive factor 16 */
    int known;
    fx_init(&f, BATON__ROPE_SCALING__TYPE__YARN, 32, 4096);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 0, 65536, &known), 131072);
    CHECK(known == 1);
    fx_init(&f, BATON__ROPE_SCALING__TYPE__LINEAR, 4, 4096);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 0, 8192, &known), 16384);
}

/* YaRN's "truncate": false read, kept and written back (only when false); other values
 * and keys transformers does not read for the type refused naming the key, as is a
 * partial_rotary_factor other than 1 (baton rotates whole heads). */
static void check_scaling(const char *scaling, const char *top, int rc_want, const char *want,
                          hf_model *h) {
    char t[1024];
    snprintf(t, sizeof t,
             "{\"hidden_size\": 64, \"intermediate_size\": 176, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 4, \"vocab_size\": 272, %s\"rope_scaling\": %s}",
             top, scaling);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(hf_config_read(t, strlen(t), "c.json", h, &d) == rc_want);
    if (want) CHECK_STR_CONTAINS(d.msg, want);
}

/* A config read whole (dims as check_scaling's) with rope given by `rope`. */
static int read_rope(const char *rope, hf_model *h, bt_diag *d) {
    char t[1024];
    snprintf(t, sizeof t,
             "{\"hidden_size\": 64, \"intermediate_size\": 176, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 4, \"vocab_size\": 272, \"max_position_embeddings\": "
             "1024%s}",
             rope);
    bt_diag_init(d);
    return hf_config_read(t, strlen(t), "c.json", h, d);
}

/* transformers 5's layout: rope_theta (and partial_rotary_factor) inside
 * "rope_parameters", which also names plain RoPE ("default"); the older "rope_scaling"
 * is read the same way. A null rope_theta is never taken for the default 10000, and a
 * top-level and a block rope_theta that differ are refused (versions read different ones). */
static void test_rope_parameters(void) {
    hf_model h;
    bt_diag d;
    CHECK(read_rope(", \"rope_theta\": null, \"rope_scaling\": null, \"rope_parameters\": "
                    "{\"rope_theta\": 500000, \"rope_type\": \"llama3\", \"factor\": 8, "
                    "\"low_freq_factor\": 1, \"high_freq_factor\": 4, "
                    "\"original_max_position_embeddings\": 128}",
                    &h, &d) == 0);
    CHECK(h.rope.theta == 500000 && h.rope.scaling == &h.scaling);
    CHECK(h.scaling.type == BATON__ROPE_SCALING__TYPE__LLAMA3 && h.scaling.factor == 8);
    CHECK(read_rope(", \"rope_parameters\": {\"rope_theta\": 500000, \"rope_type\": \"default\"}",
                    &h, &d) == 0);
    CHECK(h.rope.theta == 500000 && h.rope.scaling == NULL);
    CHECK(read_rope(", \"rope_parameters\": {\"rope_theta\": 1e6}", &h, &d) == 0);
    CHECK(h.rope.theta == 1e6 && h.rope.scaling == NULL);
    /* inside the older name too (transformers 5 reads rope_scaling as rope_parameters) */
    CHECK(read_rope(", \"rope_scaling\": {\"rope_theta\": 1e6, \"rope_type\": \"linear\", "
                    "\"factor\": 2}",
                    &h, &d) == 0);
    CHECK(h.rope.theta == 1e6 && h.scaling.type == BATON__ROPE_SCALING__TYPE__LINEAR);
    CHECK(read_rope(", \"rope_theta\": 1e6, \"rope_parameters\": {\"rope_theta\": 1000000.0, "
                    "\"rope_type\": \"default\", \"partial_rotary_factor\": 1.0}",
                    &h, &d) == 0);
    CHECK(h.rope.theta == 1e6);
    CHECK(read_rope("", &h, &d) == 0);
    CHECK(h.rope.theta == 10000);
    CHECK(read_rope(", \"rope_theta\": null", &h, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "c.json: \"rope_theta\" is null: give the base as a number");
    CHECK(read_rope(", \"rope_parameters\": {\"rope_theta\": null, \"rope_type\": \"default\"}", &h,
                    &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "\"rope_parameters.rope_theta\" is null");
    CHECK(read_rope(", \"rope_theta\": 10000, \"rope_scaling\": {\"rope_theta\": 1e6, "
                    "\"rope_type\": \"default\"}",
                    &h, &d) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(d.msg, "\"rope_theta\" 10000 and \"rope_scaling.rope_theta\" 1000000 "
                              "differ: transformers 5 reads the one in rope_scaling");
    CHECK(read_rope(", \"rope_parameters\": {\"rope_theta\": -1}", &h, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "\"rope_parameters.rope_theta\": -1: must be a positive number");
    CHECK(read_rope(", \"rope_parameters\": {\"rope_type\": \"default\", "
                    "\"partial_rotary_factor\": 0.5}",
                    &h, &d) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(d.msg, "rope_parameters: \"partial_rotary_factor\": 0.5 is not supported");
    CHECK(read_rope(", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\"}, "
                    "\"sliding_attention\": {\"rope_type\": \"default\"}}",
                    &h, &d) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(d.msg, "rope_parameters: \"full_attention\" is an object: RoPE parameters "
                              "per layer type are not supported");
    CHECK(read_rope(", \"rope_parameters\": {\"rope_type\": \"default\"}, \"rope_scaling\": "
                    "{\"rope_type\": \"default\"}",
                    &h, &d) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(d.msg, "both \"rope_parameters\" and \"rope_scaling\" are set");
    CHECK(read_rope(", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                    "\"mscale\": 1}",
                    &h, &d) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(d.msg, "c.json: rope_parameters: YaRN's mscale");
    CHECK(read_rope(", \"rope_parameters\": [1]", &h, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "\"rope_parameters\" must be null or an object, not an array");
}

static void test_yarn_truncate(void) {
    static const char yarn[] = "{\"rope_type\": \"yarn\", \"factor\": 4, "
                               "\"original_max_position_embeddings\": 128";
    char s[512], *t, err[2048];
    hf_model h;
    snprintf(s, sizeof s, "%s, \"truncate\": false}", yarn);
    check_scaling(s, "", 0, NULL, &h);
    CHECK(h.scaling.type == BATON__ROPE_SCALING__TYPE__YARN && h.scaling.truncate == 0);
    CHECK(write_config(&h.model, 0, &t, err) == 0);
    CHECK_STR_CONTAINS(t, "\"attention_factor\": 1.138629436111989,\n    \"truncate\": false\n");
    free(t);
    snprintf(s, sizeof s, "%s, \"truncate\": true}", yarn);
    check_scaling(s, "", 0, NULL, &h);
    CHECK(h.scaling.truncate == 1);
    CHECK(write_config(&h.model, 0, &t, err) == 0);
    CHECK(strstr(t, "truncate") == NULL);
    free(t);
    snprintf(s, sizeof s, "%s}", yarn);
    check_scaling(s, "", 0, NULL, &h);
    CHECK(h.scaling.truncate == 1);
    snprintf(s, sizeof s, "%s, \"truncate\": 0}", yarn);
    check_scaling(s, "", BT_EINVAL, "\"truncate\": 0: must be true or false", &h);
    /* transformers' get("truncate", True) is None: it does not round */
    snprintf(s, sizeof s, "%s, \"truncate\": null}", yarn);
    check_scaling(s, "", BT_EINVAL,
                  "\"truncate\" must be true or false (transformers reads null as false", &h);
    snprintf(s, sizeof s, "%s, \"unknown_key\": 3}", yarn);
    check_scaling(s, "", BT_EUNSUPPORTED,
                  "c.json: rope_scaling: key \"unknown_key\" is not read by baton for rope_type "
                  "'yarn' (baton reads rope_type, rope_theta, factor, "
                  "original_max_position_embeddings, beta_fast, beta_slow, attention_factor, "
                  "truncate): transformers ignores a key it does not know",
                  &h);
    /* the key as the message shows it: control characters escaped */
    snprintf(s, sizeof s, "%s, \"x\\u001b[2J\\nFAKE\": 3}", yarn);
    check_scaling(s, "", BT_EUNSUPPORTED, "key \"x\\x1b[2J\\nFAKE\" is not read", &h);
    check_scaling("{\"rope_type\": \"x\\u001b\"}", "", BT_EUNSUPPORTED,
                  "rope_scaling type 'x\\x1b' is not supported", &h);
    check_scaling("{\"rope_type\": \"linear\", \"factor\": 2, \"partial_rotary_factor\": 0.5}", "",
                  BT_EUNSUPPORTED,
                  "c.json: rope_scaling: \"partial_rotary_factor\": 0.5 is not supported", &h);
    check_scaling("{\"type\": \"llama3\", \"factor\": 2, \"low_freq_factor\": 1, "
                  "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 64, "
                  "\"truncate\": false}",
                  "", BT_EUNSUPPORTED,
                  "key \"truncate\" is not read by baton for rope_type 'llama3'", &h);
    check_scaling("{\"rope_type\": \"default\", \"factor\": 2}", "", BT_EUNSUPPORTED,
                  "key \"factor\" is not read by baton for rope_type 'default' (baton reads "
                  "rope_type, rope_theta)",
                  &h);
    check_scaling("null", "\"partial_rotary_factor\": 0.5, ", BT_EUNSUPPORTED,
                  "\"partial_rotary_factor\": 0.5 is not supported", &h);
    check_scaling("null", "\"partial_rotary_factor\": 1.0, ", 0, NULL, &h);
}

/* linear and ntk give the extended context when the recipe names the original one; a
 * linear import keeps max_position_embeddings / factor so that it exports back. */
static void test_linear_ntk_context(void) {
    model_fx f;
    char *t, err[2048];
    int known;
    fx_init(&f, BATON__ROPE_SCALING__TYPE__LINEAR, 2, 0);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 0, 0, &known), HF_DEFAULT_MAX_POSITION);
    CHECK(known == 0);
    CHECK_EQ_U64(hf_config_max_position(&f.m, 300, 0, &known), 300);
    CHECK(known == 1);
    f.s.original_max_position = 1024;
    CHECK(write_config(&f.m, 0, &t, err) == 0);
    CHECK_STR_CONTAINS(t, "\"rope_scaling\": {\n    \"rope_type\": \"linear\",\n"
                          "    \"factor\": 2.0\n  },\n  \"max_position_embeddings\": 2048,");
    hf_model h;
    bt_diag d;
    bt_diag_init(&d);
    static const char lin[] = "{\"hidden_size\": 64, \"intermediate_size\": 176, "
                              "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                              "\"vocab_size\": 272, \"max_position_embeddings\": 6000, "
                              "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 3.0}}";
    CHECK(hf_config_read(lin, strlen(lin), "lin.json", &h, &d) == 0);
    CHECK(h.scaling.type == BATON__ROPE_SCALING__TYPE__LINEAR && h.scaling.factor == 3);
    CHECK_EQ_U64(h.scaling.original_max_position, 2000);
    CHECK_EQ_U64(hf_config_max_position(&h.model, 0, 0, &known), 6000);
    CHECK_EQ_U64(hf_config_max_position(&h.model, 0, h.max_position, &known), 6000);
    CHECK(known == 1);
    free(t);
    fx_init(&f, BATON__ROPE_SCALING__TYPE__NTK, 4, 4096);
    CHECK(write_config(&f.m, 0, &t, err) == 0);
    CHECK_STR_CONTAINS(t, "\"rope_scaling\": null,\n  \"max_position_embeddings\": 16384,");
    free(t);
}

/* What has no Hugging Face form is refused, saying why; nothing is half written. */
static void test_refused(void) {
    model_fx f;
    char *t, err[2048];
    fx_init(&f, BATON__ROPE_SCALING__TYPE__NONE, 1, 0);
    f.m.arch = BATON__MODEL__ARCH__MOE;
    f.moe.n_experts = 8, f.moe.top_k = 2;
    f.m.moe = &f.moe;
    CHECK(write_config(&f.m, 0, &t, err) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "mixture of experts (n_experts 8, top_k 2): MoE models are not "
                            "exportable to the Hugging Face LLaMA format");
    fx_init(&f, (Baton__RopeScaling__Type)99, 2, 0);
    CHECK(write_config(&f.m, 0, &t, err) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "rope.scaling type 99 (head_dim 16) has no Hugging Face rope_scaling "
                            "equivalent");
    fx_init(&f, BATON__ROPE_SCALING__TYPE__NTK, 2, 0);
    f.m.n_heads = 32; /* head_dim 2: NTK's exponent hd / (hd - 2) has no value */
    CHECK(write_config(&f.m, 0, &t, err) == BT_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "has no Hugging Face rope_scaling equivalent");
}

/* A config.json whose key `key` holds the JSON text `value`: the message says what the
 * value is and what is wrong with it (not "not a number" for a number). */
static void check_bad_value(const char *key, const char *value, const char *want) {
    char t[1024];
    const char *scaling =
        strcmp(key, "factor") == 0 ? "{\"rope_type\": \"linear\", \"factor\": " : NULL;
    snprintf(t, sizeof t,
             "{\"hidden_size\": %s, \"intermediate_size\": 176, \"num_hidden_layers\": %s, "
             "\"num_attention_heads\": 4, \"vocab_size\": %s, \"rope_scaling\": %s%s%s}",
             strcmp(key, "hidden_size") == 0 ? value : "64",
             strcmp(key, "num_hidden_layers") == 0 ? value : "2",
             strcmp(key, "vocab_size") == 0 ? value : "272", scaling ? scaling : "null",
             scaling ? value : "", scaling ? "}" : "");
    hf_model h;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(hf_config_read(t, strlen(t), "c.json", &h, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, want);
    CHECK(strstr(d.msg, "not a number") == NULL);
}

static void test_bad_values(void) {
    check_bad_value("num_hidden_layers", "-1",
                    "\"num_hidden_layers\": -1: must be a positive integer");
    check_bad_value("hidden_size", "128.5", "\"hidden_size\": 128.5: must be a positive integer");
    check_bad_value("vocab_size", "1099511627776",
                    "\"vocab_size\": 1099511627776: must be a positive integer of at most");
    check_bad_value("num_hidden_layers", "0",
                    "\"num_hidden_layers\": 0: must be a positive integer");
    check_bad_value("factor", "-2", "\"factor\": -2: must be a positive number");
    check_bad_value("hidden_size", "\"64\"",
                    "\"hidden_size\" must be a positive integer, not a string");
}

int main(void) {
    test_bad_values();
    test_llama3();
    test_llama3_recorded();
    test_yarn();
    test_yarn_truncate();
    test_rope_parameters();
    test_linear_ntk_context();
    test_refused();
    return check_status();
}
