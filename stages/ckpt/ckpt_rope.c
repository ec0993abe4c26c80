/* A checkpoint's RoPE against a stage's (ckpt_rope.h). */
#include "ckpt_rope.h"

#include <stdio.h>
#include <string.h>

static void put(char *out, size_t cap, int *n, const char *key, const char *a, const char *b) {
    size_t used = strlen(out);
    if (used < cap) snprintf(out + used, cap - used, "%s%s %s -> %s", *n ? ", " : "", key, a, b);
    ++*n;
}

static void put_num(char *out, size_t cap, int *n, const char *key, double a, double b) {
    char x[32], y[32];
    if (a == b) return;
    snprintf(x, sizeof x, "%.17g", a);
    snprintf(y, sizeof y, "%.17g", b);
    put(out, cap, n, key, x, y);
}

const char *ckpt_rope_type_name(Baton__RopeScaling__Type t, char buf[16]) {
    const ProtobufCEnumValue *e =
        protobuf_c_enum_descriptor_get_value(&baton__rope_scaling__type__descriptor, (int)t);
    size_t k = 0;
    for (const char *p = e ? e->name : "?"; *p != '\0' && k + 1 < 16; p++)
        buf[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    buf[k] = '\0';
    return buf;
}

/* The scaling fields a and b's type (the same) uses. */
static void scaling_diff(const Baton__RopeScaling *a, const Baton__RopeScaling *b, char *out,
                         size_t cap, int *n) {
    int yarn = a->type == BATON__ROPE_SCALING__TYPE__YARN;
    int llama3 = a->type == BATON__ROPE_SCALING__TYPE__LLAMA3;
    put_num(out, cap, n, "rope.scaling.factor", a->factor, b->factor);
    if (a->original_max_position != b->original_max_position)
        put_num(out, cap, n, "rope.scaling.original_max_position", (double)a->original_max_position,
                (double)b->original_max_position);
    if (llama3) {
        put_num(out, cap, n, "rope.scaling.low_freq_factor", a->low_freq_factor,
                b->low_freq_factor);
        put_num(out, cap, n, "rope.scaling.high_freq_factor", a->high_freq_factor,
                b->high_freq_factor);
    }
    if (!yarn) return;
    put_num(out, cap, n, "rope.scaling.beta_fast", a->beta_fast, b->beta_fast);
    put_num(out, cap, n, "rope.scaling.beta_slow", a->beta_slow, b->beta_slow);
    put_num(out, cap, n, "rope.scaling.attn_factor", a->attn_factor, b->attn_factor);
    if (!a->truncate != !b->truncate)
        put(out, cap, n, "rope.scaling.truncate", a->truncate ? "true" : "false",
            b->truncate ? "true" : "false");
}

int ckpt_rope_diff(const Baton__Model *ckpt, const Baton__Model *stage, char *out, size_t cap) {
    static const Baton__Rope none = BATON__ROPE__INIT;
    const Baton__Rope *a = ckpt && ckpt->rope ? ckpt->rope : &none;
    const Baton__Rope *b = stage && stage->rope ? stage->rope : &none;
    const Baton__RopeScaling *sa = a->scaling, *sb = b->scaling;
    Baton__RopeScaling__Type ta = sa ? sa->type : BATON__ROPE_SCALING__TYPE__NONE;
    Baton__RopeScaling__Type tb = sb ? sb->type : BATON__ROPE_SCALING__TYPE__NONE;
    int n = 0;
    if (cap > 0) out[0] = '\0';
    put_num(out, cap, &n, "rope.theta", a->theta, b->theta);
    char na[16], nb[16];
    if (ta != tb)
        put(out, cap, &n, "rope.scaling.type", ckpt_rope_type_name(ta, na),
            ckpt_rope_type_name(tb, nb));
    else if (ta != BATON__ROPE_SCALING__TYPE__NONE)
        scaling_diff(sa, sb, out, cap, &n);
    return n;
}
