/* train_spike_map_sample: the samples a stage reads after rollbacks. Each rollback's
 * window is reported in the logical indices the trainer computed under the windows
 * before it (StageSpec.skip_samples in the order they were recorded); a window may lie
 * before an earlier one (a second spike run between the rollback checkpoint and the first
 * window). Simulated here: the physical samples each window covered at the time it was
 * reported must never be read again, no physical sample may be read twice, and nothing
 * else may be skipped. */
#include <stdlib.h>

#include "check.h"
#include "train_spike.h"

#define MAXW 4
#define SPAN 200

static Baton__SkipRange ranges[MAXW];
static Baton__SkipRange *range_ptrs[MAXW];

static void spec_windows(Baton__StageSpec *spec, const uint64_t (*w)[2], size_t n) {
    baton__stage_spec__init(spec);
    for (size_t i = 0; i < n; i++) {
        baton__skip_range__init(&ranges[i]);
        ranges[i].has_from = ranges[i].has_to = 1;
        ranges[i].from = w[i][0], ranges[i].to = w[i][1];
        range_ptrs[i] = &ranges[i];
    }
    spec->skip_samples = range_ptrs, spec->n_skip_samples = n;
}

/* Windows added one at a time, each a logical range under the ones before. */
static void check_sequence(const uint64_t (*w)[2], size_t n) {
    unsigned char banned[SPAN * 2] = {0};
    Baton__StageSpec spec;
    for (size_t k = 0; k < n; k++) { /* what window k covered when it was reported */
        spec_windows(&spec, w, k);
        for (uint64_t g = w[k][0]; g < w[k][1]; g++)
            banned[train_spike_map_sample(&spec, g)] = 1;
    }
    spec_windows(&spec, w, n);
    unsigned char seen[SPAN * 2] = {0};
    uint64_t skipped = 0, last = 0;
    for (uint64_t g = 0; g < SPAN; g++) {
        uint64_t p = train_spike_map_sample(&spec, g);
        CHECK(p < sizeof seen);
        if (p >= sizeof seen) return;
        CHECK(!banned[p]); /* a skipped sample read again */
        CHECK(!seen[p]);   /* read twice */
        CHECK(g == 0 || p > last);
        seen[p] = 1, last = p;
    }
    for (uint64_t p = 0; p < last; p++) { /* nothing but the windows is skipped */
        if (seen[p]) continue;
        CHECK(banned[p]);
        skipped++;
    }
    uint64_t want = 0;
    for (size_t k = 0; k < n; k++)
        want += w[k][1] - w[k][0];
    CHECK_EQ_U64(skipped, want);
}

int main(void) {
    static const uint64_t in_order[][2] = {{10, 12}, {20, 22}};
    check_sequence(in_order, 2);
    static const uint64_t backwards[][2] = {{20, 22}, {10, 12}}; /* the second before */
    check_sequence(backwards, 2);
    static const uint64_t mixed[][2] = {{40, 48}, {16, 24}, {30, 34}, {0, 4}};
    check_sequence(mixed, 4);
    static const uint64_t adjacent[][2] = {{8, 16}, {8, 16}}; /* the samples right after */
    check_sequence(adjacent, 2);
    return check_status();
}
