/* train_ckpt_arena: the checkpoints' host copy is one buffer kept from save to save. A
 * save of the same size (or smaller) gets the same buffer back, its pages already touched
 * (a fresh one costs a page fault per page: most of an async save's stall); a larger one
 * replaces it; train_ckpt_free frees it. That a save in flight never shares it with the
 * next snapshot is tests/ckpt/check-faults.sh async-in-flight's. */
#include <string.h>

#include "check.h"
#include "train_ckpt.h"

enum { N = 1 << 22 }; /* 16 MB: mapped apart from the heap, as a checkpoint's copy is */

/* Every float of the buffer still holds its index: the same pages (a new buffer, even at
 * the same address, is zeroed, or holds the allocator's links at its start). */
static int holds_indices(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != (float)i) return 0;
    return 1;
}

static void check_reuse(void) {
    train_ckpt c;
    memset(&c, 0, sizeof c);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(train_ckpt_arena(&c, N, &d) == 0 && c.arena != NULL && c.arena_cap == N);
    float *first = c.arena;
    for (size_t i = 0; i < N; i++)
        first[i] = (float)i;
    CHECK(train_ckpt_arena(&c, N, &d) == 0); /* the next save, the same size */
    CHECK(c.arena == first && c.arena_cap == N && holds_indices(c.arena, N));
    CHECK(train_ckpt_arena(&c, N / 2, &d) == 0); /* a smaller one */
    CHECK(c.arena == first && c.arena_cap == N && holds_indices(c.arena, N));
    CHECK(train_ckpt_arena(&c, 2 * N, &d) == 0 && c.arena != NULL && c.arena_cap == 2 * N);
    c.arena[2 * N - 1] = 1.0f; /* all of it usable */
    train_ckpt_free(&c);
    CHECK(c.arena == NULL && c.arena_cap == 0);
    CHECK(train_ckpt_arena(&c, 0, &d) == 0 && c.arena != NULL); /* nothing to copy */
    train_ckpt_free(&c);
}

int main(void) {
    check_reuse();
    return check_status();
}
