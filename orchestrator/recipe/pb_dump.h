/* Prints any protobuf-c message as YAML in the recipe's own vocabulary (field names,
 * lowercase enum values), so a resolved StageSpec reads like the recipe that made it. */
#ifndef BATON_PB_DUMP_H
#define BATON_PB_DUMP_H

#include <protobuf-c/protobuf-c.h>

#include "util/buf.h"

/* Appends m as a YAML block mapping indented by indent spaces; a real number in the
 * fewest digits that read back as the same value, with a dot and a signed, unpadded exponent
 * (8.0e-5, 3.5e+20, 10000.0: a float to YAML 1.1 readers as to 1.2 ones). Fields that are not
 * present (proto2 has_ unset, a string left at its default) are printed only when with_defaults is
 * set: a scalar with the value it holds, its default (what a reader of the message gets), followed
 * by "  # default"; a NULL message, an empty repeated field, a string without a default and bytes
 * are left out. */
void pb_dump_yaml(bt_buf *out, const ProtobufCMessage *m, int indent, int with_defaults);

/* Appends one scalar element of field f, at p (a pointer to the C storage of the value), as
 * the recipe loader reads it back: a number, true/false, an enum value's name, a string
 * double-quoted. */
void pb_dump_scalar(bt_buf *out, const ProtobufCFieldDescriptor *f, const void *p);

#endif
