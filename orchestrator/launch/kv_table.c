/* The rendezvous store's table of keys (kv_table.h). */
#include "kv_table.h"

#include <stdlib.h>
#include <string.h>

#include "util/kv_wire.h"

#define KV_TABLE_MIN_SLOTS 64

/* FNV-1a, its bits then mixed (MurmurHash3's finalizer) so that the low ones, which pick
 * the slot, depend on every byte. Keys come only from clients that showed the run's
 * token, so no seed against chosen collisions is needed. */
static uint64_t kv_hash(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* The slot of key: the one holding its entry, or the empty one where it would go. */
static size_t kv_slot(kv_table *t, const uint8_t *key, size_t klen, uint64_t h) {
    size_t mask = t->n_slots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint32_t at = t->slots[i];
        if (at == 0) return i;
        const kv_entry *e = &t->entries[at - 1];
        t->probes++;
        if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0) return i;
    }
}

const kv_entry *kv_table_get(kv_table *t, const void *key, size_t klen) {
    if (t->n_slots == 0) return NULL;
    uint32_t at = t->slots[kv_slot(t, key, klen, kv_hash(key, klen))];
    return at ? &t->entries[at - 1] : NULL;
}

/* Room for one entry more, the index at most half full. 0, or -1 out of memory. */
static int kv_table_room(kv_table *t) {
    if (t->n >= UINT32_MAX - 1) return -1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : KV_TABLE_MIN_SLOTS;
        kv_entry *e = realloc(t->entries, cap * sizeof *e);
        if (e == NULL) return -1;
        t->entries = e, t->cap = cap;
    }
    if (2 * (t->n + 1) <= t->n_slots) return 0;
    size_t n_slots = t->n_slots ? 2 * t->n_slots : KV_TABLE_MIN_SLOTS, mask = n_slots - 1;
    uint32_t *slots = calloc(n_slots, sizeof *slots);
    if (slots == NULL) return -1;
    for (size_t k = 0; k < t->n; k++) { /* every key differs: the first empty slot is its */
        size_t i = (size_t)t->entries[k].hash & mask;
        while (slots[i] != 0)
            i = (i + 1) & mask;
        slots[i] = (uint32_t)k + 1;
    }
    free(t->slots);
    t->slots = slots, t->n_slots = n_slots;
    return 0;
}

uint32_t kv_table_set(kv_table *t, const void *key, size_t klen, const void *val, size_t vlen) {
    uint64_t h = kv_hash(key, klen);
    size_t n_slots = t->n_slots, i = 0;
    /* looked up before growing: a key set already answers so out of memory too */
    if (n_slots != 0 && t->slots[i = kv_slot(t, key, klen, h)] != 0) return KV_EXISTS;
    if (kv_table_room(t) != 0) return KV_BAD;
    if (t->n_slots != n_slots) i = kv_slot(t, key, klen, h); /* the index grew */
    kv_entry e = {.key = malloc(klen ? klen : 1),
                  .klen = klen,
                  .val = malloc(vlen ? vlen : 1),
                  .len = vlen,
                  .hash = h};
    if (e.key == NULL || e.val == NULL) {
        free(e.key), free(e.val);
        return KV_BAD;
    }
    if (klen) memcpy(e.key, key, klen);
    if (vlen) memcpy(e.val, val, vlen);
    t->entries[t->n++] = e;
    t->slots[i] = (uint32_t)t->n;
    return KV_OK;
}

void kv_table_free(kv_table *t) {
    for (size_t k = 0; k < t->n; k++)
        free(t->entries[k].key), free(t->entries[k].val);
    free(t->entries);
    free(t->slots);
    memset(t, 0, sizeof *t);
}
