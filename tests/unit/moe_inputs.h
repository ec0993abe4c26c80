/* Random inputs of the MoE tests (test_moe.c, test_moe_dev.c): a xorshift generator of
 * uniform floats in (-a, a), reproducible from a seed. */
#ifndef BATON_TEST_MOE_INPUTS_H
#define BATON_TEST_MOE_INPUTS_H

#include <stddef.h>
#include <stdint.h>

static uint64_t rng_state;

static inline void rng_seed(uint64_t seed) {
    rng_state = seed * 2654435761u + 88172645463325252ull;
}

static inline float urand(float a) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return a * (2.0f * (float)((rng_state >> 40) / 16777216.0) - 1.0f);
}

static inline void fill(float *p, size_t n, float a) {
    for (size_t i = 0; i < n; i++)
        p[i] = urand(a);
}

#endif
