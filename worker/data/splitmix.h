/* SplitMix64 (Steele, Lea and Flood, 2014): the one pseudo-random source of the data
 * pipeline, chosen because it is tiny, stateless when used as a hash, and gives the
 * same stream on every platform. Everything the data code draws (sample order,
 * mixture slots, passkeys) derives from it, so a seed fully determines the data. */
#ifndef BATON_SPLITMIX_H
#define BATON_SPLITMIX_H

#include <stdint.h>

#define SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ull

/* The finalizer: a bijective 64-bit mix, used as a keyed hash. */
static inline uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Advances *state and returns the next value of the stream. */
static inline uint64_t splitmix64_next(uint64_t *state) {
    *state += SPLITMIX64_GAMMA;
    return splitmix64_mix(*state);
}

/* A uniform integer in [0, n) (n > 0) from the stream, by rejection so that no value
 * is favoured. */
static inline uint64_t splitmix64_below(uint64_t *state, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = splitmix64_next(state);
    while (x >= limit);
    return x % n;
}

#endif
