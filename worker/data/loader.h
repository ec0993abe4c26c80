/* The deterministic sample loader.
 *
 * Samples. A source's tokens are concatenated in document order (documents end in
 * EOS, so no separator is added) and cut into windows of seq_len + 1 tokens with
 * stride seq_len: window w covers tokens [w*seq_len, w*seq_len + seq_len], so
 * consecutive windows share one token and every token after the first is a target
 * exactly once. A source of T tokens has (T - 1) / seq_len windows; the tail that
 * does not fill a window is dropped. A sample's input is the window's first seq_len
 * tokens and its target the last seq_len (the input shifted by one).
 *
 * Order. Each source counts its own samples k = 0, 1, 2, ...; sample k belongs to
 * epoch e = k / n_windows and is window P_e(k mod n_windows), where P_e is a
 * pseudo-random permutation of [0, n_windows) keyed by the source's seed + e: a
 * 6-round Feistel network over the smallest even number of bits that covers
 * n_windows (round function: SplitMix64's finalizer), restricted to [0, n_windows)
 * by cycle walking (re-applying the network until the value falls inside, fewer
 * than 4 applications on average). It is a bijection by construction, costs O(1) per
 * sample, needs no table and no state, and gives each epoch a fresh order. Source s
 * has seed = config seed + s * 0x9E3779B97F4A7C15.
 *
 * Addressing. A sample is named by its GLOBAL SAMPLE INDEX g alone: loader_get(g)
 * depends on nothing else (no cursor, no history), so any rank can compute any
 * sample, a checkpoint's data position is one integer, and a change of
 * data-parallel size neither skips nor repeats samples: at optimizer step t with
 * global batch GB, data-parallel rank r of dp takes g = t*GB + r*(GB/dp) + j for
 * j in [0, GB/dp) (loader_global_index).
 *
 * Mixtures. With several sources, the global indices are grouped in blocks of B
 * (mix_block, default 1024) slots. Each source owns a fixed quota of every block,
 * q_s = its weight's share of B by largest remainder (ties to the earlier source;
 * at least 1 slot for every source: a weight under 1/B of the total is raised to 1/B,
 * and at most B sources), laid out as consecutive slot ranges; the slots of block b
 * are shuffled by a Feistel permutation keyed by (seed, b). So global index
 * g = b*B + o takes slot Q_b(o), which falls in source s's range: a seeded weighted
 * draw without replacement inside each block (stratified), the weights exact (to 1/B)
 * over every block of B samples. The d-th draw of source s in block b (d counting the
 * block's indices o in order) is that source's sample k = b*q_s + d: each source takes
 * its samples in its own counter order, so its epochs stay whole (all of epoch e's
 * windows before any of epoch e+1's) and nothing repeats before a source's epoch wraps,
 * as in Megatron's blended datasets. Finding d takes the whole block's draws: they are
 * computed once per block (B permutations) and kept (loader_locate).
 *
 * By slot (mix_by_slot): the order of baton before, where the draw taking slot p was
 * sample b*q_s + (p - first slot of s), the block's samples of a source taken in the
 * shuffled order (a small source, with fewer windows than its quota, then drew from up to
 * q_s / n_windows epochs at once, repeating windows before its epoch was seen). Kept to
 * resume the checkpoints saved under it exactly (their manifests record no sample_order).
 * A single source skips the blocks: its sample k is g itself.
 *
 * No allocation happens per sample; one loader is used by one thread at a time (its
 * window scratch is shared by calls). */
#ifndef BATON_LOADER_H
#define BATON_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "indexed.h"
#include "util/err.h"

#define LOADER_MIX_BLOCK 1024

typedef struct loader_source {
    const char *prefix; /* Megatron indexed dataset prefix (PREFIX.bin/.idx) */
    double weight;      /* relative mixture weight, > 0 (ignored for a single source) */
} loader_source;

typedef struct loader_config {
    uint32_t seq_len;    /* tokens per sample; a window holds seq_len + 1 */
    uint64_t seed;       /* fixes the sample order and the mixture interleaving */
    uint32_t vocab_size; /* 0: no check; else every token must be < vocab_size */
    uint32_t mix_block;  /* mixture slots per block; 0: LOADER_MIX_BLOCK */
    int allow_empty;     /* a source with no whole window opens (n_windows 0; nothing to
                          * get from it) instead of failing: an evaluation set too small */
    int mix_by_slot;     /* the mixture order of older checkpoints (above); may be changed
                          * after loader_open */
} loader_config;

typedef struct loader_stream {
    indexed_dataset ds;
    uint64_t n_windows;
    uint64_t *starts; /* n_sequences + 1 token offsets, only when !ds.contiguous */
    uint64_t seed;    /* this source's sample-order seed */
    uint32_t quota;   /* slots of each mixture block */
    uint32_t slot0;   /* first of them, before the block's shuffle */
} loader_stream;

typedef struct loader {
    loader_config cfg;
    loader_stream *src; /* n_src sources */
    size_t n_src;
    int32_t *window; /* seq_len + 1 tokens of scratch */
    /* mixtures: each slot's source; the draws of block `drawn` (source, d), per index */
    uint32_t *slot_src, *draw_src, *draw_rank, *count;
    uint64_t drawn; /* UINT64_MAX: none yet */
    bt_diag diag;   /* why the last loader_get failed */
} loader;

/* Where a global sample index lands. */
typedef struct loader_pos {
    uint32_t source; /* index into the sources given to loader_open */
    uint64_t sample; /* the source's own sample counter k */
    uint64_t epoch;  /* k / n_windows */
    uint64_t window; /* the window read */
} loader_pos;

/* Opens every source and checks that each holds at least one window. */
int loader_open(loader *ld, const loader_source *src, size_t n_src, const loader_config *cfg,
                bt_diag *diag);
void loader_close(loader *ld);

/* Where a global index lands (it computes and keeps the index's block of draws). */
loader_pos loader_locate(loader *ld, uint64_t global_index);

/* Fills tokens[0..seq_len) and targets[0..seq_len) for a global sample index.
 * Returns BT_OK, or a negative BT_ code with the reason in loader_error(). */
int loader_get(loader *ld, uint64_t global_index, int32_t *tokens, int32_t *targets);
/* The same for window `window` of the first source in file order, no permutation: what
 * validation reads (its first n windows), the same set whatever the seed, and what
 * `baton eval` reads. */
int loader_get_window(loader *ld, uint64_t window, int32_t *tokens, int32_t *targets);
const char *loader_error(const loader *ld);

/* The global sample index of the j-th sample (j < global_batch / dp) that
 * data-parallel rank dp_rank takes at optimizer step `step`. global_batch must be a
 * multiple of dp. */
uint64_t loader_global_index(uint64_t step, uint32_t global_batch, uint32_t dp, uint32_t dp_rank,
                             uint32_t j);

/* The training sources a recipe's data section names (schema/recipe.proto): its mix
 * when given, else train with weight 1. Writes up to cap entries, which point into
 * data's strings, and returns how many there are (0 when neither is set). */
struct Baton__Data;
size_t loader_sources_from_data(const struct Baton__Data *data, loader_source *out, size_t cap);

/* The permutation of [0, n) keyed by key, applied to x < n (exposed for tests). */
uint64_t loader_permute(uint64_t n, uint64_t key, uint64_t x);

#endif
