/* The rendezvous store's table of keys (orchestrator/launch/kv_table.c): what a set and
 * a get answer, and that a lookup looks at a few entries whatever the number of keys
 * (counted, not timed): with the keys of a 131072-rank start-up, a search of every key
 * (as the store once made) looks at tens of thousands per lookup; out of memory, a key set
 * already still answers so. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kv_table.h"
#include "util/clock.h"
#include "util/kv_wire.h"

enum { RANKS = 131072, BATCH = 4096 };

static int has(kv_table *t, const char *key, size_t klen, const char *val, size_t len) {
    const kv_entry *e = kv_table_get(t, key, klen);
    return e != NULL && e->len == len && memcmp(e->val, val, len) == 0;
}

/* A key is set once (the first value kept), an empty value is one, keys are compared
 * whole as bytes (one a prefix of another, one with a NUL inside, are others). */
static void check_rules(void) {
    kv_table t = {0};
    CHECK(kv_table_get(&t, "a", 1) == NULL);
    CHECK(kv_table_set(&t, "job/a", 5, "hello", 5) == KV_OK);
    CHECK(kv_table_set(&t, "job/a", 5, "again", 5) == KV_EXISTS);
    CHECK(has(&t, "job/a", 5, "hello", 5));
    CHECK(kv_table_get(&t, "job/", 4) == NULL && kv_table_get(&t, "job/ab", 6) == NULL);
    CHECK(kv_table_set(&t, "empty", 5, "", 0) == KV_OK && has(&t, "empty", 5, "", 0));
    CHECK(kv_table_set(&t, "n\0a", 3, "1", 1) == KV_OK);
    CHECK(kv_table_set(&t, "n\0b", 3, "2", 1) == KV_OK);
    CHECK(has(&t, "n\0a", 3, "1", 1) && has(&t, "n\0b", 3, "2", 1));
    CHECK(kv_table_get(&t, "n", 1) == NULL);
    CHECK(t.n == 4);
    kv_table_free(&t);
    CHECK(t.n == 0 && kv_table_get(&t, "job/a", 5) == NULL);
}

/* The table's calloc (its index growing) fails while this is set: the test is linked with
 * --wrap=calloc (tests/CMakeLists.txt). */
static int fail_calloc;
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size) {
    return fail_calloc ? NULL : __real_calloc(n, size);
}

/* Out of memory when a set would grow the index: a key set already still answers
 * KV_EXISTS (the worker then says the prefix was used before), a new one KV_BAD, and the
 * table is as it was. */
static void check_out_of_memory(void) {
    kv_table t = {0};
    char key[16];
    for (int i = 0; i < 32; i++) {
        int n = snprintf(key, sizeof key, "k%d", i);
        CHECK(kv_table_set(&t, key, (size_t)n, "v", 1) == KV_OK);
    }
    CHECK(t.n_slots == 64); /* half full: the next new key grows it */
    fail_calloc = 1;
    CHECK(kv_table_set(&t, "k0", 2, "w", 1) == KV_EXISTS);
    CHECK(kv_table_set(&t, "k32", 3, "w", 1) == KV_BAD);
    fail_calloc = 0;
    CHECK(t.n == 32 && has(&t, "k0", 2, "v", 1) && kv_table_get(&t, "k32", 3) == NULL);
    CHECK(kv_table_set(&t, "k32", 3, "w", 1) == KV_OK && has(&t, "k32", 3, "w", 1));
    CHECK(t.n_slots == 128 && has(&t, "k31", 3, "v", 1));
    kv_table_free(&t);
}

/* Looked at at most 4 entries a lookup so far (a few more at the start)? Said once. */
static int few_probes(const kv_table *t, size_t lookups, const char *what) {
    if (t->probes <= 4 * (uint64_t)lookups + 64) return 1;
    fprintf(stderr, "%s: %llu entries looked at for %zu lookups among %zu keys\n", what,
            (unsigned long long)t->probes, lookups, t->n);
    CHECK(t->probes <= 4 * (uint64_t)lookups + 64);
    return 0;
}

/* Each rank sets its key and every one is got once, then as many keys never set are asked
 * for (ranks polling before their peers set): every answer right, the entries looked at
 * counted every BATCH lookups, so that a search of every key fails within seconds. */
static void check_frontier(void) {
    kv_table t = {0};
    char key[64], val[64];
    size_t lookups = 0;
    int ok = 1;
    double t0 = bt_clock_now();
    for (int phase = 0; phase < 3 && ok; phase++)
        for (int r = 0; r < RANKS && ok; r++) {
            int kn = snprintf(key, sizeof key, phase < 2 ? "s01-a0/rank/%d/addr" : "miss/%d", r);
            int vn = snprintf(val, sizeof val, "10.%d.%d.1:29500", r >> 8, r & 255);
            if (phase == 0) ok &= kv_table_set(&t, key, (size_t)kn, val, (size_t)vn) == KV_OK;
            if (phase == 1) ok &= has(&t, key, (size_t)kn, val, (size_t)vn);
            if (phase == 2) ok &= kv_table_get(&t, key, (size_t)kn) == NULL;
            if (++lookups % BATCH == 0) ok &= few_probes(&t, lookups, "frontier");
        }
    CHECK(ok && t.n == RANKS);
    printf("kv_table: %d keys set, got, missed: %.3f s, %.2f entries a lookup\n", RANKS,
           bt_clock_now() - t0, (double)t.probes / (double)lookups);
    kv_table_free(&t);
}

int main(void) {
    check_rules();
    check_out_of_memory();
    check_frontier();
    return check_status();
}
