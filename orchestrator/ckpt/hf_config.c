/* config.json of a Hugging Face LLaMA; the mapping is in hf_config.h. */
#include "hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_json.h"
#include "recipe.h"

/* ---- writing ---- */

/* The shortest rendering that reads back as exactly v; whole numbers as "10000.0",
 * the way Python writes a float. */
static void put_double(bt_buf *b, double v) {
    char s[64];
    if (v == floor(v) && fabs(v) < 1e15) {
        bt_buf_printf(b, "%.1f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v) break;
    }
    bt_buf_printf(b, "%s", s);
}

static void put_key_double(bt_buf *b, const char *indent, const char *key, double v) {
    bt_buf_printf(b, ",\n%s\"%s\": ", indent, key);
    put_double(b, v);
}

static void put_rope_scaling(bt_buf *b, const Baton__RopeScaling *s) {
    static const char *in = "    ";
    if (s->type == BATON__ROPE_SCALING__TYPE__LINEAR) {
        bt_buf_printf(b, "{\n%s\"rope_type\": \"linear\"", in);
        put_key_double(b, in, "factor", s->factor);
    } else if (s->type == BATON__ROPE_SCALING__TYPE__LLAMA3) {
        bt_buf_printf(b, "{\n%s\"rope_type\": \"llama3\"", in);
        put_key_double(b, in, "factor", s->factor);
        put_key_double(b, in, "low_freq_factor", s->low_freq_factor);
        put_key_double(b, in, "high_freq_factor", s->high_freq_factor);
        bt_buf_printf(b, ",\n%s\"original_max_position_embeddings\": %llu", in,
                      (unsigned long long)s->original_max_position);
    } else { /* yarn: export_rope lets no other type through */
        double af = s->attn_factor > 0 ? s->attn_factor
                    : s->factor <= 1.0 ? 1.0
                                       : 0.1 * log(s->factor) + 1.0;
        bt_buf_printf(b, "{\n%s\"rope_type\": \"yarn\"", in);
        put_key_double(b, in, "factor", s->factor);
        bt_buf_printf(b, ",\n%s\"original_max_position_embeddings\": %llu", in,
                      (unsigned long long)s->original_max_position);
        put_key_double(b, in, "beta_fast", s->beta_fast);
        put_key_double(b, in, "beta_slow", s->beta_slow);
        put_key_double(b, in, "attention_factor", af);
        if (!s->truncate) bt_buf_printf(b, ",\n%s\"truncate\": false", in);
    }
    bt_buf_printf(b, "\n  }");
}

/* The scaling transformers should see (*out NULL: none) and the base it goes with;
 * BT_EUNSUPPORTED for a scaling with no Hugging Face equivalent, rather than a
 * config.json that would give the model other frequencies than it was trained with. */
static int export_rope(const Baton__Model *m, double *theta, const Baton__RopeScaling **out,
                       bt_diag *diag) {
    const Baton__Rope *r = m->rope;
    *theta = r ? r->theta : 10000.0;
    const Baton__RopeScaling *s = r ? r->scaling : NULL;
    double hd = m->n_heads ? (double)(m->dim / m->n_heads) : 0;
    *out = NULL;
    switch (s ? s->type : BATON__ROPE_SCALING__TYPE__NONE) {
    case BATON__ROPE_SCALING__TYPE__NONE:
        return 0;
    case BATON__ROPE_SCALING__TYPE__NTK:
        if (hd > 2) {
            *theta *= pow(s->factor, hd / (hd - 2));
            return 0;
        }
        break;
    case BATON__ROPE_SCALING__TYPE__LINEAR:
    case BATON__ROPE_SCALING__TYPE__LLAMA3:
    case BATON__ROPE_SCALING__TYPE__YARN:
        *out = s;
        return 0;
    default:
        break;
    }
    bt_diag_set(diag,
                "rope.scaling type %d (head_dim %g) has no Hugging Face rope_scaling "
                "equivalent (exportable: none, linear, ntk with head_dim > 2, llama3, yarn)",
                (int)s->type, hd);
    return BT_EUNSUPPORTED;
}

uint64_t hf_config_max_position(const Baton__Model *m, uint64_t max_position, uint64_t seq_len,
                                int *known) {
    const Baton__RopeScaling *s = m->rope ? m->rope->scaling : NULL;
    /* the context the scaling extends to as plan and eval measure it; llama3's, twice
     * original × factor, is Llama 3.1's (131072 for 8192 and factor 8) but not 3.2's
     * (131072 for 8192 and factor 32): only a guess where the checkpoint says nothing */
    double ext = recipe_rope_extent(s);
    uint64_t orig = ext > 0 ? s->original_max_position : 0;
    *known = 1;
    if (max_position) return max_position;
    /* llama3 (and no scaling): the recorded context, where beyond the original (which
     * transformers wants below it); yarn, linear and ntk keep original x factor, from
     * which transformers derives the factor when the config's does not say it */
    int recorded = ext <= 0 || s->type == BATON__ROPE_SCALING__TYPE__LLAMA3;
    if (recorded && seq_len > orig) return seq_len;
    if (ext > 0) return (uint64_t)llround(ext);
    *known = 0;
    return HF_DEFAULT_MAX_POSITION;
}

int hf_config_write(const Baton__Model *m, uint64_t max_position, const char *torch_dtype,
                    bt_buf *out, bt_diag *diag) {
    if (m->arch != BATON__MODEL__ARCH__LLAMA) {
        const Baton__Moe *e = m->moe;
        bt_diag_set(diag,
                    "the model is a mixture of experts (n_experts %u, top_k %u): MoE models are "
                    "not exportable to the Hugging Face LLaMA format (yet; LlamaForCausalLM has "
                    "no experts); only dense models (model.arch: llama) are",
                    e ? e->n_experts : 0, e ? e->top_k : 0);
        return BT_EUNSUPPORTED;
    }
    double theta;
    const Baton__RopeScaling *s;
    int known, rc = export_rope(m, &theta, &s, diag);
    if (rc) return rc;
    unsigned kv = m->n_kv_heads ? m->n_kv_heads : m->n_heads;
    bt_buf_printf(out,
                  "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                  "  \"hidden_size\": %u,\n  \"intermediate_size\": %u,\n"
                  "  \"num_hidden_layers\": %u,\n  \"num_attention_heads\": %u,\n"
                  "  \"num_key_value_heads\": %u,\n  \"head_dim\": %u,\n  \"vocab_size\": %u,\n"
                  "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n"
                  "  \"mlp_bias\": false,\n  \"tie_word_embeddings\": false",
                  m->dim, m->ffn_dim, m->n_layers, m->n_heads, kv, m->dim / m->n_heads,
                  m->vocab_size);
    put_key_double(out, "  ", "rms_norm_eps", m->norm_eps);
    put_key_double(out, "  ", "rope_theta", theta);
    bt_buf_printf(out, ",\n  \"rope_scaling\": ");
    if (s == NULL)
        bt_buf_printf(out, "null");
    else
        put_rope_scaling(out, s);
    bt_buf_printf(out, ",\n  \"max_position_embeddings\": %llu,\n  \"torch_dtype\": \"%s\"\n}\n",
                  (unsigned long long)hf_config_max_position(m, max_position, 0, &known),
                  torch_dtype);
    return out->oom ? BT_ENOMEM : 0;
}

/* ---- reading ---- */

typedef struct cfg_ctx {
    const hf_json *root;
    const char *path;
    bt_diag *diag;
    const char *block; /* "rope_scaling" or "rope_parameters", the RoPE block's name */
} cfg_ctx;

static int cfg_bad(const cfg_ctx *c, const char *key, const char *want, const hf_json *got) {
    if (got == NULL)
        bt_diag_set(c->diag, "%s: missing \"%s\" (%s)", c->path, key, want);
    else if (got->type == HF_JSON_NUMBER && got->is_u64)
        bt_diag_set(c->diag, "%s: \"%s\": %llu: must be %s", c->path, key,
                    (unsigned long long)got->u64, want);
    else if (got->type == HF_JSON_NUMBER)
        bt_diag_set(c->diag, "%s: \"%s\": %.17g: must be %s", c->path, key, got->num, want);
    else
        bt_diag_set(c->diag, "%s: \"%s\" must be %s, not %s", c->path, key, want,
                    hf_json_type_name(got->type));
    return BT_EINVAL;
}

/* obj[key] as a positive integer; absent gives dflt (0: required). */
static int cfg_uint(const cfg_ctx *c, const hf_json *obj, const char *key, uint64_t dflt,
                    uint64_t max, uint64_t *out) {
    const hf_json *v = hf_json_get(obj, key);
    if ((v == NULL || v->type == HF_JSON_NULL) && dflt) return *out = dflt, 0;
    if (v != NULL && v->type == HF_JSON_NUMBER && v->is_u64 && v->u64 > max) {
        char want[64];
        snprintf(want, sizeof want, "a positive integer of at most %llu", (unsigned long long)max);
        return cfg_bad(c, key, want, v);
    }
    if (v == NULL || v->type != HF_JSON_NUMBER || !v->is_u64 || v->u64 == 0)
        return cfg_bad(c, key, "a positive integer", v);
    *out = v->u64;
    return 0;
}

/* obj[key] as a finite positive number; absent gives dflt (NAN: required). */
static int cfg_num(const cfg_ctx *c, const hf_json *obj, const char *key, double dflt,
                   double *out) {
    const hf_json *v = hf_json_get(obj, key);
    if ((v == NULL || v->type == HF_JSON_NULL) && !isnan(dflt)) return *out = dflt, 0;
    if (v == NULL || v->type != HF_JSON_NUMBER || !(v->num > 0) || isinf(v->num))
        return cfg_bad(c, key, "a positive number", v);
    *out = v->num;
    return 0;
}

/* A key that must be absent or hold exactly the value baton's model has. */
static int cfg_expect(const cfg_ctx *c, const char *key, hf_json_type t, const char *str, int b) {
    const hf_json *v = hf_json_get(c->root, key);
    if (v == NULL || v->type == HF_JSON_NULL) return 0;
    int ok = v->type == t && (t == HF_JSON_STRING ? strcmp(v->str, str) == 0 : v->boolean == b);
    if (ok) return 0;
    bt_diag_set(c->diag, "%s: \"%s\" must be %s for a LLaMA model baton can train", c->path, key,
                t == HF_JSON_STRING ? str
                : b                 ? "true"
                                    : "false");
    return BT_EUNSUPPORTED;
}

static int cfg_architecture(const cfg_ctx *c) {
    int rc = cfg_expect(c, "model_type", HF_JSON_STRING, "llama", 0);
    const hf_json *a = hf_json_get(c->root, "architectures");
    if (rc || a == NULL || a->type == HF_JSON_NULL) return rc;
    for (size_t i = 0; a->type == HF_JSON_ARRAY && i < a->n; i++)
        if (a->items[i].type == HF_JSON_STRING && strcmp(a->items[i].str, "LlamaForCausalLM") == 0)
            return 0;
    bt_diag_set(c->diag, "%s: \"architectures\" must list \"LlamaForCausalLM\"", c->path);
    return BT_EUNSUPPORTED;
}

static int cfg_dims(const cfg_ctx *c, hf_model *h) {
    const uint64_t big = 1u << 24;
    uint64_t v[6];
    Baton__Model *m = &h->model;
    int rc = cfg_uint(c, c->root, "hidden_size", 0, big, &v[0]);
    if (!rc) rc = cfg_uint(c, c->root, "intermediate_size", 0, big, &v[1]);
    if (!rc) rc = cfg_uint(c, c->root, "num_hidden_layers", 0, big, &v[2]);
    if (!rc) rc = cfg_uint(c, c->root, "num_attention_heads", 0, big, &v[3]);
    if (!rc) rc = cfg_uint(c, c->root, "num_key_value_heads", v[3], big, &v[4]);
    if (!rc) rc = cfg_uint(c, c->root, "vocab_size", 0, big, &v[5]);
    if (!rc)
        rc = cfg_uint(c, c->root, "max_position_embeddings", HF_DEFAULT_MAX_POSITION, UINT32_MAX,
                      &h->max_position);
    if (rc) return rc;
    m->has_dim = m->has_ffn_dim = m->has_n_layers = m->has_n_heads = 1;
    m->has_n_kv_heads = m->has_vocab_size = m->has_arch = 1;
    m->dim = (uint32_t)v[0], m->ffn_dim = (uint32_t)v[1], m->n_layers = (uint32_t)v[2];
    m->n_heads = (uint32_t)v[3], m->n_kv_heads = (uint32_t)v[4], m->vocab_size = (uint32_t)v[5];
    m->arch = BATON__MODEL__ARCH__LLAMA;
    uint64_t hd;
    if (cfg_uint(c, c->root, "head_dim", m->dim / m->n_heads, big, &hd)) return BT_EINVAL;
    if (hd * m->n_heads != m->dim) {
        bt_diag_set(c->diag,
                    "%s: \"head_dim\" %llu is not hidden_size / num_attention_heads (%u / %u); "
                    "baton needs head_dim * num_attention_heads == hidden_size",
                    c->path, (unsigned long long)hd, m->dim, m->n_heads);
        return BT_EUNSUPPORTED;
    }
    return 0;
}

static const char *cfg_rope_type(const hf_json *rs) {
    const hf_json *t = hf_json_get(rs, "rope_type");
    if (t == NULL) t = hf_json_get(rs, "type");
    return t != NULL && t->type == HF_JSON_STRING ? t->str : NULL;
}

/* The rope_scaling keys transformers reads for each rope_type (type names the same
 * rope_type in older configs); a key it does not read for that type is refused rather
 * than left out silently, since a newer transformers may read it (as "truncate"). */
static const char *const rope_keys[][8] = {
    {"default"},
    {"linear", "factor"},
    {"llama3", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
    {"yarn", "factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
     "attention_factor", "truncate"},
};

static int cfg_rope_key_known(const char *const *keys, const char *k) {
    static const char *const any[] = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    for (size_t j = 0; j < sizeof any / sizeof any[0]; j++)
        if (strcmp(k, any[j]) == 0) return 1;
    for (int j = 1; j < 8 && keys[j] != NULL; j++)
        if (strcmp(k, keys[j]) == 0) return 1;
    return 0;
}

static int cfg_rope_keys(const cfg_ctx *c, const hf_json *rs, const char *type) {
    const char *const *keys = rope_keys[0];
    for (size_t i = 0; i < sizeof rope_keys / sizeof rope_keys[0]; i++)
        if (strcmp(type, rope_keys[i][0]) == 0) keys = rope_keys[i];
    for (size_t i = 0; i < rs->n; i++) {
        if (cfg_rope_key_known(keys, rs->items[i].key)) continue;
        char list[256] = "rope_type, rope_theta";
        for (int j = 1; j < 8 && keys[j] != NULL; j++)
            snprintf(list + strlen(list), sizeof list - strlen(list), ", %s", keys[j]);
        bt_buf b;
        bt_buf_init(&b);
        bt_diag_set(c->diag,
                    "%s: %s: key \"%s\" is not read by baton for rope_type '%s' (baton reads "
                    "%s): transformers ignores a key it does not know for the type (with a "
                    "warning) but may read it in another version; remove it only if you know "
                    "it does not change the model",
                    c->path, c->block, bt_buf_text_of(&b, rs->items[i].key), type, list);
        bt_buf_free(&b);
        return BT_EUNSUPPORTED;
    }
    return 0;
}

/* YaRN's "truncate": absent or true rounds the correction range's ends (the default);
 * null is refused: transformers' rope_scaling.get("truncate", True) gives None, which
 * does not round, while a reader that takes null for absent would. */
static int cfg_yarn_truncate(const cfg_ctx *c, const hf_json *rs, Baton__RopeScaling *s) {
    const hf_json *v = hf_json_get(rs, "truncate");
    s->has_truncate = 1, s->truncate = 1;
    if (v == NULL) return 0;
    if (v->type != HF_JSON_BOOL)
        return cfg_bad(c, "truncate",
                       "true or false (transformers reads null as false, no rounding; other "
                       "readers may take it for absent, true)",
                       v);
    s->truncate = v->boolean != 0;
    return 0;
}

static int cfg_rope_params(const cfg_ctx *c, const hf_json *rs, hf_model *h) {
    Baton__RopeScaling *s = &h->scaling;
    s->has_factor = s->has_type = 1;
    int rc = cfg_num(c, rs, "factor", NAN, &s->factor);
    if (!rc && s->type == BATON__ROPE_SCALING__TYPE__LINEAR) {
        /* HF's linear scaling has no original context; baton keeps max_position_embeddings
         * / factor there (linear RoPE does not use it), so that an export of the import
         * writes max_position_embeddings back as it was. */
        uint64_t orig = (uint64_t)llround((double)h->max_position / s->factor);
        if (orig > 0 && llround((double)orig * s->factor) == (long long)h->max_position)
            s->original_max_position = orig, s->has_original_max_position = 1;
    }
    if (rc || s->type == BATON__ROPE_SCALING__TYPE__LINEAR) return rc;
    uint64_t orig;
    rc = cfg_uint(c, rs, "original_max_position_embeddings",
                  s->type == BATON__ROPE_SCALING__TYPE__YARN ? h->max_position : 0, UINT32_MAX,
                  &orig);
    if (rc) return rc;
    s->original_max_position = orig, s->has_original_max_position = 1;
    if (s->type == BATON__ROPE_SCALING__TYPE__LLAMA3) {
        s->has_low_freq_factor = s->has_high_freq_factor = 1;
        rc = cfg_num(c, rs, "low_freq_factor", NAN, &s->low_freq_factor);
        if (!rc) rc = cfg_num(c, rs, "high_freq_factor", NAN, &s->high_freq_factor);
        return rc;
    }
    if (hf_json_get(rs, "mscale") || hf_json_get(rs, "mscale_all_dim")) {
        bt_diag_set(c->diag,
                    "%s: %s: YaRN's mscale / mscale_all_dim (DeepSeek's) are not supported",
                    c->path, c->block);
        return BT_EUNSUPPORTED;
    }
    s->has_beta_fast = s->has_beta_slow = s->has_attn_factor = 1;
    rc = cfg_num(c, rs, "beta_fast", 32.0, &s->beta_fast);
    if (!rc) rc = cfg_num(c, rs, "beta_slow", 1.0, &s->beta_slow);
    if (!rc) rc = cfg_num(c, rs, "attention_factor", -1.0, &s->attn_factor);
    if (s->attn_factor < 0) s->attn_factor = 0;
    return rc ? rc : cfg_yarn_truncate(c, rs, s);
}

/* transformers rotates only the first partial_rotary_factor of each head when it is
 * below 1; baton's RoPE rotates all of it. obj: the top level, or the RoPE block, where
 * transformers 5 keeps the key. */
static int cfg_partial_rotary(const cfg_ctx *c, const hf_json *obj) {
    const hf_json *v = hf_json_get(obj, "partial_rotary_factor");
    if (v == NULL || v->type == HF_JSON_NULL || (v->type == HF_JSON_NUMBER && v->num == 1.0))
        return 0;
    if (v->type != HF_JSON_NUMBER) return cfg_bad(c, "partial_rotary_factor", "a number", v);
    bt_diag_set(c->diag,
                "%s: %s%s\"partial_rotary_factor\": %g is not supported: baton's RoPE rotates the "
                "whole head (1.0)",
                c->path, obj == c->root ? "" : c->block, obj == c->root ? "" : ": ", v->num);
    return BT_EUNSUPPORTED;
}

/* The RoPE block into *out (NULL: none) and its name into c->block: transformers 5
 * writes "rope_parameters" (rope_theta and partial_rotary_factor inside it) and reads
 * "rope_scaling", the older name, as the same thing. */
static int cfg_rope_block(cfg_ctx *c, const hf_json **out) {
    const hf_json *p = hf_json_get(c->root, "rope_parameters");
    const hf_json *s = hf_json_get(c->root, "rope_scaling");
    if (p != NULL && p->type == HF_JSON_NULL) p = NULL;
    if (s != NULL && s->type == HF_JSON_NULL) s = NULL;
    *out = p ? p : s;
    c->block = p ? "rope_parameters" : "rope_scaling";
    if (p && s) {
        bt_diag_set(c->diag,
                    "%s: both \"rope_parameters\" and \"rope_scaling\" are set: transformers "
                    "reads them as one (which wins depends on the version); keep one",
                    c->path);
        return BT_EUNSUPPORTED;
    }
    if (*out == NULL) return 0;
    if ((*out)->type != HF_JSON_OBJECT) return cfg_bad(c, c->block, "null or an object", *out);
    for (size_t i = 0; i < (*out)->n && cfg_rope_type(*out) == NULL; i++) {
        if ((*out)->items[i].type != HF_JSON_OBJECT) continue;
        bt_buf b;
        bt_buf_init(&b);
        bt_diag_set(c->diag,
                    "%s: %s: \"%s\" is an object: RoPE parameters per layer type are not "
                    "supported (baton uses one RoPE for every layer)",
                    c->path, c->block, bt_buf_text_of(&b, (*out)->items[i].key));
        bt_buf_free(&b);
        return BT_EUNSUPPORTED;
    }
    return 0;
}

/* obj's rope_theta into *v (NULL: absent); a value other than null must be a positive
 * number. */
static int cfg_theta_at(const cfg_ctx *c, const hf_json *obj, const char *key, const hf_json **v) {
    *v = obj ? hf_json_get(obj, "rope_theta") : NULL;
    if (*v == NULL || (*v)->type == HF_JSON_NULL) return 0;
    if ((*v)->type != HF_JSON_NUMBER || !((*v)->num > 0) || isinf((*v)->num))
        return cfg_bad(c, key, "a positive number", *v);
    return 0;
}

/* The base from the top-level rope_theta and the RoPE block's: transformers 5 reads the
 * block's first, older versions only the top-level one, so two that differ are refused;
 * so is a null with no number beside it (absent everywhere: HF's default 10000). */
static int cfg_theta(const cfg_ctx *c, const hf_json *blk, double *theta) {
    char key[64];
    snprintf(key, sizeof key, "%s.rope_theta", c->block);
    const hf_json *top, *in;
    int rc = cfg_theta_at(c, c->root, "rope_theta", &top);
    if (!rc) rc = cfg_theta_at(c, blk, key, &in);
    if (rc) return rc;
    int nt = top && top->type == HF_JSON_NUMBER, ni = in && in->type == HF_JSON_NUMBER;
    if (nt && ni && top->num != in->num) {
        bt_diag_set(c->diag,
                    "%s: \"rope_theta\" %.17g and \"%s\" %.17g differ: transformers 5 reads the "
                    "one in %s, older versions the top-level one; make them agree",
                    c->path, top->num, key, in->num, c->block);
        return BT_EUNSUPPORTED;
    }
    if (ni || nt) return *theta = ni ? in->num : top->num, 0;
    if (top || in) {
        bt_diag_set(c->diag,
                    "%s: \"%s\" is null: give the base as a number (baton takes the default "
                    "10000 only when rope_theta is absent)",
                    c->path, top ? "rope_theta" : key);
        return BT_EINVAL;
    }
    *theta = 10000.0;
    return 0;
}

/* The scaling the block's rope_type names (t NULL: none given). */
static int cfg_rope_kind(const cfg_ctx *c, const hf_json *rs, const char *t, hf_model *h) {
    static const struct {
        const char *name;
        Baton__RopeScaling__Type type;
    } types[] = {{"linear", BATON__ROPE_SCALING__TYPE__LINEAR},
                 {"llama3", BATON__ROPE_SCALING__TYPE__LLAMA3},
                 {"yarn", BATON__ROPE_SCALING__TYPE__YARN}};
    if (t != NULL && strcmp(t, "default") == 0) return cfg_rope_keys(c, rs, t);
    for (size_t i = 0; t != NULL && i < sizeof types / sizeof types[0]; i++) {
        if (strcmp(t, types[i].name) != 0) continue;
        h->scaling.type = types[i].type;
        h->rope.scaling = &h->scaling;
        int rc = cfg_rope_params(c, rs, h);
        return rc ? rc : cfg_rope_keys(c, rs, t);
    }
    bt_buf b;
    bt_buf_init(&b);
    bt_diag_set(c->diag,
                "%s: %s type '%s' is not supported (valid: default, linear, llama3, yarn; "
                "\"dynamic\" NTK depends on the sequence length)",
                c->path, c->block, t ? bt_buf_text_of(&b, t) : "(missing rope_type)");
    bt_buf_free(&b);
    return BT_EUNSUPPORTED;
}

static int cfg_rope(const cfg_ctx *ctx, hf_model *h) {
    cfg_ctx c = *ctx;
    const hf_json *rs;
    h->rope.has_theta = 1;
    int rc = cfg_rope_block(&c, &rs);
    if (!rc) rc = cfg_partial_rotary(&c, c.root);
    if (!rc && rs) rc = cfg_partial_rotary(&c, rs);
    if (!rc) rc = cfg_theta(&c, rs, &h->rope.theta);
    if (rc || rs == NULL) return rc;
    const char *t = cfg_rope_type(rs);
    /* transformers 5 takes a rope_parameters without a type for plain RoPE */
    int untyped = !hf_json_get(rs, "rope_type") && !hf_json_get(rs, "type");
    if (untyped && strcmp(c.block, "rope_parameters") == 0) t = "default";
    return cfg_rope_kind(&c, rs, t, h);
}

static int cfg_fill(const cfg_ctx *c, hf_model *h) {
    int rc = cfg_architecture(c);
    if (!rc) rc = cfg_expect(c, "hidden_act", HF_JSON_STRING, "silu", 0);
    if (!rc) rc = cfg_expect(c, "attention_bias", HF_JSON_BOOL, NULL, 0);
    if (!rc) rc = cfg_expect(c, "mlp_bias", HF_JSON_BOOL, NULL, 0);
    if (!rc) rc = cfg_dims(c, h);
    h->model.has_norm_eps = 1;
    if (!rc) rc = cfg_num(c, c->root, "rms_norm_eps", 1e-6, &h->model.norm_eps);
    if (!rc) rc = cfg_rope(c, h);
    const hf_json *tie = hf_json_get(c->root, "tie_word_embeddings");
    if (!rc && tie != NULL && tie->type != HF_JSON_NULL && tie->type != HF_JSON_BOOL)
        rc = cfg_bad(c, "tie_word_embeddings", "true or false", tie);
    /* transformers' PretrainedConfig defaults tie_word_embeddings to true; LlamaConfig
     * to false. */
    h->tied = tie != NULL && tie->type == HF_JSON_BOOL && tie->boolean;
    return rc;
}

int hf_config_read(const char *text, size_t len, const char *path, hf_model *out, bt_diag *diag) {
    *out = (hf_model){.model = BATON__MODEL__INIT,
                      .rope = BATON__ROPE__INIT,
                      .scaling = BATON__ROPE_SCALING__INIT};
    out->model.rope = &out->rope;
    hf_json root;
    int rc = hf_json_parse(text, len, path, &root, diag);
    if (rc) return rc;
    cfg_ctx c = {&root, path, diag, "rope_scaling"};
    if (root.type != HF_JSON_OBJECT)
        rc = cfg_bad(&c, "(top level)", "an object", &root);
    else
        rc = cfg_fill(&c, out);
    hf_json_free(&root);
    return rc;
}
