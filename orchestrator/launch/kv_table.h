/* The rendezvous store's keys (kv_store.c): each set once and kept until the store
 * closes, found through a hash index (open addressing, linear probing, at most half
 * full), so that a set or a get costs about the same with a frontier run's keys (131072
 * ranks' and more) as with a few; a search of every key made a start-up's sets and gets
 * cost the square of its ranks. Keys are byte strings compared whole, as the wire carries
 * them (a NUL is a byte like any other). Only the store's thread touches a table. */
#ifndef BATON_KV_TABLE_H
#define BATON_KV_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_entry {
    uint8_t *key;
    size_t klen;
    void *val;
    size_t len;
    uint64_t hash; /* of the key (kv_table.c): compared first, kept for growing */
} kv_entry;

typedef struct kv_table {
    kv_entry *entries; /* n of them, in the order set */
    size_t n, cap;
    uint32_t *slots; /* n_slots (a power of two; 0 before the first set): an entry's index
                        + 1, or 0 for none */
    size_t n_slots;
    uint64_t probes; /* entries looked at by lookups so far (the unit test's measure) */
} kv_table;

/* The entry under key (klen bytes), or NULL. A zeroed table is an empty one. The table is
 * not const only for its probes count. */
const kv_entry *kv_table_get(kv_table *t, const void *key, size_t klen);

/* Sets key to a copy of val (vlen bytes, may be 0): KV_OK (util/kv_wire.h); KV_EXISTS
 * when the key is set already (its value kept: a key is set once), out of memory too;
 * KV_BAD out of memory. */
uint32_t kv_table_set(kv_table *t, const void *key, size_t klen, const void *val, size_t vlen);

/* Frees every key and value; the table is empty again. */
void kv_table_free(kv_table *t);

#endif
