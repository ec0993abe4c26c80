/* Generic, descriptor-driven operations on protobuf-c messages. */
#ifndef BATON_PB_UTIL_H
#define BATON_PB_UTIL_H

#include <protobuf-c/protobuf-c.h>

/* Bytes one element of a field of this type takes in the C struct (the stride of a
 * repeated field's array). */
size_t pb_elem_size(ProtobufCType type);

/* A deep copy (pack + unpack); free it with protobuf_c_message_free_unpacked(m, NULL).
 * Returns NULL when out of memory. */
ProtobufCMessage *pb_clone(const ProtobufCMessage *m);

/* Overlays src onto dst, both of the same type: every field present in src replaces
 * the one in dst, except singular message fields, which are merged recursively.
 * Repeated fields present in src replace dst's: non-empty ones, and ones given empty,
 * whose array is allocated with no items (the recipe loader makes them for `key: []`, so
 * that a stage can empty an inherited list; a packed copy loses the mark). dst must own
 * its memory in the free_unpacked sense. Returns 0 or BT_ENOMEM. */
int pb_merge(ProtobufCMessage *dst, const ProtobufCMessage *src);

/* Replaces element i of dst's repeated field f with a deep copy of src's element i (a
 * message element keeps its lists given empty); both hold more than i elements. dst is
 * untouched on failure. Returns 0, BT_EINVAL (i out of range) or BT_ENOMEM. */
int pb_repeated_set(ProtobufCMessage *dst, const ProtobufCMessage *src,
                    const ProtobufCFieldDescriptor *f, size_t i);

/* Whether singular field f is set in m: a message not NULL, a string not NULL nor its
 * default's storage, a has_ flag or oneof case set, a required field always. */
int pb_has_field(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f);

#endif
