/* What the recipe checks (validate.c, validate_rope.c) share: the context of the check
 * under way and how a problem is reported, placed at the key that set the value. */
#pragma once

#include <stdint.h>

#include "recipe.h"
#include "recipe_load.h"

typedef struct vctx {
    const recipe_doc *doc;
    bt_diag *diag;
    long stage;              /* index of the stage being checked, -1 for recipe level */
    const Baton__Stage *eff; /* the effective (merged) stage */
    const char *stage_name;
    bt_diag *naming; /* non-NULL: the stage-name rules only note their first problem here */
    uint64_t tokens; /* the earlier stages' steps x global_batch x seq_len (check_tokens) */
} vctx;

/* Reports a problem with field: a stage-relative name when checking a stage,
 * else a recipe path ("model.n_heads"). The place is the file's line and column, or the
 * --set override that wrote the value. A block's check names the fields it reads in
 * braces, "parallel{tp,pp,cp}": only an override of one of them is its cause. Returns
 * BT_ERECIPE. */
int vc_err(vctx *v, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A warning about field, placed as vc_err places an error, on doc->warn: "FILE:LINE:COL:
 * warning: ..." as a compiler writes one, or "baton CMD: warning: --set ...: ..." for a
 * value an override wrote. */
void vc_warn(vctx *v, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define REQUIRE(cond, v, field, ...)                                                               \
    do {                                                                                           \
        if (!(cond)) return vc_err((v), (field), __VA_ARGS__);                                     \
    } while (0)

/* The RoPE the stage v->stage trains with (model.rope, overlaid by the defaults' and every
 * stage's up to it) checked against the worker's rules (validate_rope.c). */
int vc_check_rope(vctx *v, const Baton__Recipe *r);

/* The stage's RoPE warnings: a seq_len beyond the context its scaling extends to, or,
 * where it turns the scaling off, beyond the one it extended; a scaling that starts from
 * another context than the previous stage (prev, NULL for the first) trained at. */
void vc_warn_rope_context(vctx *v, const Baton__Recipe *r, const Baton__Stage *prev);

/* A RoPE scaling field a rope block sets that the type it trains under does not use. */
void vc_warn_rope_unread(vctx *v, const Baton__Recipe *r);
