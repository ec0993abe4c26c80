/* The recipe's RoPE checks (validate.c calls them for each stage): the rules of the
 * worker's RoPE tables, and the warnings about a context beyond what the scaling extends or
 * about scaling fields a type does not use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_rope.h"
#include "pb_util.h"
#include "validate_ctx.h"

/* The rules of the worker's RoPE tables (worker/engine/rope.c), kept at least as strict. */
static int check_rope_scaling(vctx *v, const char *where, const Baton__RopeScaling *s) {
    char f[96];
    snprintf(f, sizeof f, "%s.scaling.factor", where);
    REQUIRE(s->factor >= 1, v, f, "scaling factor must be at least 1, got %g", s->factor);
    int needs_orig =
        s->type == BATON__ROPE_SCALING__TYPE__LLAMA3 || s->type == BATON__ROPE_SCALING__TYPE__YARN;
    snprintf(f, sizeof f, "%s.scaling.original_max_position", where);
    REQUIRE(!needs_orig || s->original_max_position > 0, v, f,
            "llama3 and yarn scaling need original_max_position (the pretraining context, "
            "e.g. 8K)");
    int llama3 = s->type == BATON__ROPE_SCALING__TYPE__LLAMA3;
    snprintf(f, sizeof f, "%s.scaling.high_freq_factor", where);
    REQUIRE(!llama3 || (s->low_freq_factor > 0 && s->high_freq_factor > s->low_freq_factor), v, f,
            "llama3 scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g)",
            s->low_freq_factor, s->high_freq_factor);
    int yarn = s->type == BATON__ROPE_SCALING__TYPE__YARN;
    snprintf(f, sizeof f, "%s.scaling.beta_fast", where);
    REQUIRE(!yarn || (s->beta_slow > 0 && s->beta_fast > s->beta_slow), v, f,
            "yarn scaling needs 0 < beta_slow (%g) < beta_fast (%g)", s->beta_slow, s->beta_fast);
    snprintf(f, sizeof f, "%s.scaling.attn_factor", where);
    REQUIRE(!yarn || s->attn_factor >= 0, v, f, "attn_factor must not be negative, got %g",
            s->attn_factor);
    return 0;
}

static int check_rope(vctx *v, const char *where, const Baton__Rope *r) {
    char f[96];
    snprintf(f, sizeof f, "%s.theta", where);
    REQUIRE(r->theta > 1, v, f, "rope theta must be greater than 1, got %g", r->theta);
    if (r->scaling == NULL || r->scaling->type == BATON__ROPE_SCALING__TYPE__NONE) return 0;
    return check_rope_scaling(v, where, r->scaling);
}

/* The RoPE the stage trains with: model.rope, overlaid by the defaults' and by every
 * stage's up to this one, as recipe_resolve_stage builds it. */
int vc_check_rope(vctx *v, const Baton__Recipe *r) {
    Baton__Rope *eff = r->model->rope ? (Baton__Rope *)pb_clone(&r->model->rope->base) : NULL;
    if (eff == NULL && (eff = malloc(sizeof *eff)) != NULL) baton__rope__init(eff);
    int rc = eff ? 0 : BT_ENOMEM;
    if (rc == 0 && r->defaults && r->defaults->rope)
        rc = pb_merge(&eff->base, &r->defaults->rope->base);
    for (long k = 0; rc == 0 && k <= v->stage; k++)
        if (r->stages[k]->rope) rc = pb_merge(&eff->base, &r->stages[k]->rope->base);
    if (rc == 0)
        rc = check_rope(v, "rope", eff);
    else
        bt_diag_set(v->diag, "%s: %s", v->doc->file, bt_strerror(rc));
    if (eff != NULL) protobuf_c_message_free_unpacked(&eff->base, NULL);
    return rc;
}

/* The RoPE scaling the stage trains with (vc_check_rope's overlay), or NULL. */
static Baton__RopeScaling *effective_scaling(const Baton__Recipe *r, long stage) {
    const Baton__RopeScaling *s = r->model->rope ? r->model->rope->scaling : NULL;
    Baton__RopeScaling *eff = s ? (Baton__RopeScaling *)pb_clone(&s->base) : NULL;
    const Baton__Rope *over[2] = {r->defaults ? r->defaults->rope : NULL, NULL};
    for (long k = -1; k <= stage; k++) {
        const Baton__Rope *o = k < 0 ? over[0] : r->stages[k]->rope;
        if (o == NULL || o->scaling == NULL) continue;
        if (eff == NULL && (eff = malloc(sizeof *eff)) != NULL) baton__rope_scaling__init(eff);
        if (eff == NULL || pb_merge(&eff->base, &o->scaling->base) != 0) break;
    }
    if (eff != NULL && eff->type == BATON__ROPE_SCALING__TYPE__NONE) {
        protobuf_c_message_free_unpacked(&eff->base, NULL);
        eff = NULL;
    }
    return eff;
}

double recipe_rope_extent(const Baton__RopeScaling *sc) {
    if (sc == NULL || sc->type == BATON__ROPE_SCALING__TYPE__NONE ||
        sc->original_max_position == 0 || !(sc->factor >= 1))
        return 0;
    double ext = (double)sc->original_max_position * sc->factor;
    return sc->type == BATON__ROPE_SCALING__TYPE__LLAMA3 ? 2 * ext : ext;
}

/* The context a linear or NTK scaling without original_max_position scales, for the
 * warnings: the seq_len of the latest stage before `stage` that trained unscaled, or the
 * original_max_position of the scaling it trained under; 0 when none says (the first stage,
 * a model that starts scaled). */
static uint64_t implicit_original(const vctx *v, const Baton__Recipe *r, long stage) {
    uint64_t orig = 0;
    int unscaled = 0;
    for (long k = stage - 1; k >= 0 && orig == 0 && !unscaled; k--) {
        Baton__RopeScaling *sk = effective_scaling(r, k);
        Baton__Stage *st = NULL;
        unscaled = sk == NULL; /* out of memory too: taken as unscaled */
        if (sk != NULL)
            orig = sk->original_max_position;
        else if (recipe_effective_stage(v->doc, (size_t)k, &st) == 0)
            orig = st->seq_len;
        if (sk) protobuf_c_message_free_unpacked(&sk->base, NULL);
        if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
    }
    return orig;
}

/* sc with the implicit original context of a linear or NTK scaling filled in; 1 when it
 * was (the warnings then say where it comes from). */
static int fill_original(const vctx *v, const Baton__Recipe *r, long stage,
                         Baton__RopeScaling *sc) {
    if (sc == NULL || sc->original_max_position != 0 ||
        (sc->type != BATON__ROPE_SCALING__TYPE__LINEAR &&
         sc->type != BATON__ROPE_SCALING__TYPE__NTK))
        return 0;
    sc->original_max_position = implicit_original(v, r, stage);
    return sc->original_max_position != 0;
}

/* sc's original context for a warning: "original_max_position N", or where fill_original
 * filled it in (implicit), where N comes from. */
static void original_text(char *buf, size_t cap, const Baton__RopeScaling *sc, int implicit) {
    unsigned long long n = sc ? (unsigned long long)sc->original_max_position : 0;
    if (implicit)
        snprintf(buf, cap,
                 "%llu (the seq_len trained at before the scaling; original_max_position is "
                 "not set)",
                 n);
    else
        snprintf(buf, cap, "original_max_position %llu", n);
}

/* Whether a stage of seq_len under scaling sc trains beyond the context sc extends to. */
static int beyond_scaling(uint64_t seq_len, const Baton__RopeScaling *sc) {
    double ext = recipe_rope_extent(sc);
    return ext > 0 && (double)seq_len > ext;
}

/* Whether a stage of seq_len that turns off the scaling the stage before it had (before)
 * trains beyond the context that scaling extended, the one RoPE covers unscaled. */
static int beyond_unscaled(uint64_t seq_len, const Baton__RopeScaling *before) {
    return before != NULL && before->original_max_position > 0 &&
           seq_len > before->original_max_position;
}

/* The scaling fields block sets that a scaling of type does not read (truncate,
 * beta_fast, beta_slow, attn_factor: yarn's; low_freq_factor, high_freq_factor:
 * llama3's), as "truncate, beta_fast" into out ("" when none); the first into first. */
static void unread_fields(const Baton__RopeScaling *block, Baton__RopeScaling__Type type, char *out,
                          size_t cap, const char **first) {
    int yarn = type == BATON__ROPE_SCALING__TYPE__YARN;
    int llama3 = type == BATON__ROPE_SCALING__TYPE__LLAMA3;
    const struct {
        int set, read;
        const char *name;
    } f[] = {{block->has_truncate, yarn, "truncate"},
             {block->has_beta_fast, yarn, "beta_fast"},
             {block->has_beta_slow, yarn, "beta_slow"},
             {block->has_attn_factor, yarn, "attn_factor"},
             {block->has_low_freq_factor, llama3, "low_freq_factor"},
             {block->has_high_freq_factor, llama3, "high_freq_factor"}};
    out[0] = '\0', *first = NULL;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].set || f[i].read) continue;
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? ", " : "", f[i].name);
        if (*first == NULL) *first = f[i].name;
    }
}

/* A RoPE scaling field that a rope block sets and the type it trains under does not use
 * (a truncate: false copied onto llama3, say): the type the block names, else the one
 * the stage trains with (eff: NULL none). The stage's own block; model.rope's and
 * defaults.rope's once, at stage 0. Fields a block inherits through the field-by-field
 * overlay are not warned about: a stage cannot unset them. */
static void warn_unread(vctx *v, const Baton__Recipe *r, const Baton__RopeScaling *eff) {
    const Baton__Rope *rope[3] = {r->stages[v->stage]->rope, NULL, NULL};
    if (v->stage == 0) rope[1] = r->model->rope, rope[2] = r->defaults ? r->defaults->rope : NULL;
    for (int i = 0; i < 3; i++) {
        const Baton__RopeScaling *b = rope[i] ? rope[i]->scaling : NULL;
        if (b == NULL) continue;
        Baton__RopeScaling__Type t = b->has_type ? b->type
                                     : eff       ? eff->type
                                                 : BATON__ROPE_SCALING__TYPE__NONE;
        char now[128], field[64], type[16];
        const char *first;
        unread_fields(b, t, now, sizeof now, &first);
        if (first == NULL) continue;
        snprintf(field, sizeof field, "rope.scaling.%s", first);
        vc_warn(v, field,
                "rope.scaling sets %s, which %s scaling does not use (truncate, beta_fast, "
                "beta_slow and attn_factor are yarn's; low_freq_factor and high_freq_factor "
                "llama3's)",
                now, ckpt_rope_type_name(t, type));
    }
}

void vc_warn_rope_unread(vctx *v, const Baton__Recipe *r) {
    Baton__RopeScaling *sc = effective_scaling(r, v->stage);
    warn_unread(v, r, sc);
    if (sc) protobuf_c_message_free_unpacked(&sc->base, NULL);
}

void vc_warn_rope_context(vctx *v, const Baton__Recipe *r, const Baton__Stage *prev) {
    const Baton__Stage *s = v->eff;
    Baton__RopeScaling *sc = effective_scaling(r, v->stage);
    Baton__RopeScaling *before = prev ? effective_scaling(r, v->stage - 1) : NULL;
    uint64_t orig = sc ? sc->original_max_position : 0; /* as the recipe gives it */
    char o_now[160], o_before[160], type[16];
    original_text(o_now, sizeof o_now, sc, fill_original(v, r, v->stage, sc));
    original_text(o_before, sizeof o_before, before, fill_original(v, r, v->stage - 1, before));
    int same = prev && before && sc && prev->seq_len == s->seq_len &&
               before->original_max_position == sc->original_max_position &&
               before->factor == sc->factor;
    if (beyond_scaling(s->seq_len, sc) && !same)
        vc_warn(v, "seq_len",
                "seq_len %llu is beyond the context the RoPE scaling extends to, %s%s × factor "
                "%g = %.0f",
                (unsigned long long)s->seq_len,
                sc->type == BATON__ROPE_SCALING__TYPE__LLAMA3 ? "for llama3 twice " : "", o_now,
                sc->factor, recipe_rope_extent(sc));
    if (sc == NULL && beyond_unscaled(s->seq_len, before))
        vc_warn(v, "rope.scaling",
                "RoPE scaling is off from this stage, but seq_len %llu is beyond %s, the context "
                "the previous stage's %s scaling extended (to %.0f): the positions beyond it get "
                "rotations the model did not train at",
                (unsigned long long)s->seq_len, o_before, ckpt_rope_type_name(before->type, type),
                recipe_rope_extent(before));
    if (orig > 0 && prev != NULL && before == NULL && prev->seq_len != orig)
        vc_warn(v, "rope.scaling.original_max_position",
                "original_max_position %llu is not the seq_len %llu the previous stage (\"%s\") "
                "trained at, the context the scaling extends",
                (unsigned long long)orig, (unsigned long long)prev->seq_len,
                prev->name ? prev->name : "");
    if (before) protobuf_c_message_free_unpacked(&before->base, NULL);
    if (sc) protobuf_c_message_free_unpacked(&sc->base, NULL);
}
