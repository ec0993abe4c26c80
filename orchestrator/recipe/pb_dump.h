/* Prints any protobuf-c message as YAML in the recipe's own vocabulary (field names,
 * lowercase enum values), so a resolved StageSpec reads like the recipe that made it. */
#ifndef BATON_PB_DUMP_H
#define BATON_PB_DUMP_H

#include <protobuf-c/protobuf-c.h>

#include "util/buf.h"

/* Appends m as a YAML block mapping indented by indent spaces. Fields that are not
 * present (proto2 has_ unset, NULL messages, empty repeated) are printed only when
 * with_defaults is set, then with their default values. */
void pb_dump_yaml(bt_buf *out, const ProtobufCMessage *m, int indent, int with_defaults);

#endif
