/* The RoPE a checkpoint's model was trained with against the one a stage trains with:
 * for the worker's note when a stage starts from another run's checkpoint (init), whose
 * RoPE it may change on purpose (a context extension) or by a slip (a rope block copied
 * from a config without its truncate: false). */
#ifndef BATON_CKPT_ROPE_H
#define BATON_CKPT_ROPE_H

#include <stddef.h>

#include "recipe.pb-c.h"

/* The RoPE fields in which ckpt and stage differ, each as "KEY OLD -> NEW" (KEY as the
 * recipe writes it: "rope.theta", "rope.scaling.type", "rope.scaling.truncate", ...), joined
 * by ", " into out; the scaling's fields only where both have the same type, and those
 * the type uses. Returns how many differ (0: the same RoPE; out then ""). */
/* t as a recipe writes it ("yarn", "llama3"), in buf. */
const char *ckpt_rope_type_name(Baton__RopeScaling__Type t, char buf[16]);

int ckpt_rope_diff(const Baton__Model *ckpt, const Baton__Model *stage, char *out, size_t cap);

#endif
