/* The deterministic sample loader; the method is described in loader.h. */
#include "loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "recipe.pb-c.h"
#include "splitmix.h"

#define FEISTEL_ROUNDS 6
#define MIX_SALT       0x6d69787475726573ull /* "mixtures": keys the block shuffles */

/* One pass of the balanced Feistel network on 2*half bits. */
static uint64_t feistel(uint64_t x, unsigned half, uint64_t key) {
    uint64_t mask = ((uint64_t)1 << half) - 1; /* half <= 32 */
    uint64_t l = x >> half, r = x & mask;
    for (unsigned i = 0; i < FEISTEL_ROUNDS; i++) {
        uint64_t k = splitmix64_mix(key + (i + 1) * SPLITMIX64_GAMMA);
        uint64_t f = splitmix64_mix(r ^ k) & mask;
        uint64_t t = l ^ f;
        l = r;
        r = t;
    }
    return (l << half) | r;
}

uint64_t loader_permute(uint64_t n, uint64_t key, uint64_t x) {
    if (n <= 1) return 0;
    unsigned bits = 64 - (unsigned)__builtin_clzll(n - 1); /* 2^bits >= n */
    unsigned half = (bits + 1) / 2;
    do /* cycle walking: x's cycle in the full domain returns into [0, n) */
        x = feistel(x, half, key);
    while (x >= n);
    return x;
}

uint64_t loader_global_index(uint64_t step, uint32_t global_batch, uint32_t dp, uint32_t dp_rank,
                             uint32_t j) {
    return step * global_batch + (uint64_t)dp_rank * (global_batch / dp) + j;
}

/* The slots' sources and the scratch of a block's draws (loader_locate). */
static int mix_tables(loader *ld, uint32_t block, bt_diag *diag) {
    ld->slot_src = malloc(block * sizeof *ld->slot_src);
    ld->draw_src = malloc(block * sizeof *ld->draw_src);
    ld->draw_rank = malloc(block * sizeof *ld->draw_rank);
    ld->count = malloc(ld->n_src * sizeof *ld->count);
    if (!ld->slot_src || !ld->draw_src || !ld->draw_rank || !ld->count) {
        bt_diag_set(diag, "loader: out of memory for a mixture block of %u slots", block);
        return BT_ENOMEM;
    }
    for (uint32_t s = 0; s < ld->n_src; s++)
        for (uint32_t p = 0; p < ld->src[s].quota; p++)
            ld->slot_src[ld->src[s].slot0 + p] = s;
    return BT_OK;
}

/* Largest-remainder shares of `block` slots, at least one each. */
static int mix_quotas(loader *ld, const loader_source *src, uint32_t block, bt_diag *diag) {
    double total = 0;
    for (size_t s = 0; s < ld->n_src; s++) {
        double w = src[s].weight;
        if (!(w > 0) || !isfinite(w)) {
            bt_diag_set(diag, "%s: mixture weight %g is invalid; weights must be positive",
                        src[s].prefix, w);
            return BT_EINVAL;
        }
        total += w;
    }
    if (block < ld->n_src) {
        bt_diag_set(diag, "mixture block of %u slots is smaller than the %zu sources", block,
                    ld->n_src);
        return BT_EINVAL;
    }
    uint32_t used = 0;
    for (size_t s = 0; s < ld->n_src; s++) {
        double share = src[s].weight / total * block;
        ld->src[s].quota = share < 1 ? 1 : (uint32_t)floor(share);
        used += ld->src[s].quota;
    }
    while (used != block) { /* hand out (or take back) one slot at a time */
        size_t best = 0;
        double best_gap = -INFINITY;
        for (size_t s = 0; s < ld->n_src; s++) {
            double gap = src[s].weight / total * block - ld->src[s].quota;
            if (used > block) gap = ld->src[s].quota > 1 ? -gap : -INFINITY;
            if (gap > best_gap) {
                best_gap = gap;
                best = s;
            }
        }
        ld->src[best].quota += used < block ? 1 : (uint32_t)-1;
        used += used < block ? 1 : (uint32_t)-1;
    }
    uint32_t slot = 0;
    for (size_t s = 0; s < ld->n_src; s++) {
        ld->src[s].slot0 = slot;
        slot += ld->src[s].quota;
    }
    return mix_tables(ld, block, diag);
}

/* Token offsets of every sequence, for datasets not stored back to back. */
static int stream_index(loader_stream *st, bt_diag *diag) {
    if (st->ds.contiguous) return BT_OK;
    st->starts = malloc((st->ds.n_sequences + 1) * sizeof *st->starts);
    if (st->starts == NULL) {
        bt_diag_set(diag, "%s: out of memory for the sequence table", st->ds.idx_path);
        return BT_ENOMEM;
    }
    st->starts[0] = 0;
    for (uint64_t i = 0; i < st->ds.n_sequences; i++)
        st->starts[i + 1] = st->starts[i] + indexed_seq_length(&st->ds, i);
    return BT_OK;
}

static int stream_open(loader *ld, size_t s, const char *prefix, bt_diag *diag) {
    loader_stream *st = &ld->src[s];
    int rc = indexed_open(&st->ds, prefix, diag);
    if (rc != BT_OK) return rc;
    uint64_t n = st->ds.n_tokens, L = ld->cfg.seq_len;
    st->n_windows = n > L ? (n - 1) / L : 0;
    st->seed = ld->cfg.seed + s * SPLITMIX64_GAMMA;
    if (st->n_windows == 0 && !ld->cfg.allow_empty) {
        bt_diag_set(diag,
                    "%s: %llu tokens are fewer than one sample of seq_len + 1 = %llu tokens; "
                    "use more data or a shorter sequence",
                    prefix, (unsigned long long)n, (unsigned long long)(L + 1));
        return BT_EINVAL;
    }
    return stream_index(st, diag);
}

int loader_open(loader *ld, const loader_source *src, size_t n_src, const loader_config *cfg,
                bt_diag *diag) {
    memset(ld, 0, sizeof *ld);
    ld->cfg = *cfg;
    ld->drawn = UINT64_MAX;
    if (ld->cfg.mix_block == 0) ld->cfg.mix_block = LOADER_MIX_BLOCK;
    if (n_src == 0 || cfg->seq_len == 0) {
        bt_diag_set(diag, "loader: need at least one source and seq_len >= 1 (got %zu, %u)", n_src,
                    cfg->seq_len);
        return BT_EINVAL;
    }
    int rc = BT_ENOMEM;
    ld->src = calloc(n_src, sizeof *ld->src);
    ld->window = malloc(((size_t)cfg->seq_len + 1) * sizeof *ld->window);
    if (ld->src == NULL || ld->window == NULL) {
        bt_diag_set(diag, "loader: out of memory");
        goto error;
    }
    ld->n_src = n_src;
    rc = n_src > 1 ? mix_quotas(ld, src, ld->cfg.mix_block, diag) : BT_OK;
    for (size_t s = 0; rc == BT_OK && s < n_src; s++)
        rc = stream_open(ld, s, src[s].prefix, diag);
    if (rc != BT_OK) goto error;
    return BT_OK;
error:
    loader_close(ld);
    return rc;
}

void loader_close(loader *ld) {
    for (size_t s = 0; ld->src != NULL && s < ld->n_src; s++) {
        indexed_close(&ld->src[s].ds);
        free(ld->src[s].starts);
    }
    free(ld->src);
    free(ld->window);
    free(ld->slot_src);
    free(ld->draw_src);
    free(ld->draw_rank);
    free(ld->count);
    memset(ld, 0, sizeof *ld);
}

static uint64_t mix_key(const loader *ld, uint64_t block) {
    return splitmix64_mix(splitmix64_mix(ld->cfg.seed ^ MIX_SALT) + block);
}

/* Block b's draws: for each index o, the source of its slot and how many of that
 * source's draws come before it in the block. */
static void mix_draw_block(loader *ld, uint64_t b) {
    uint32_t B = ld->cfg.mix_block;
    uint64_t key = mix_key(ld, b);
    memset(ld->count, 0, ld->n_src * sizeof *ld->count);
    for (uint32_t o = 0; o < B; o++) {
        uint32_t s = ld->slot_src[loader_permute(B, key, o)];
        ld->draw_src[o] = s;
        ld->draw_rank[o] = ld->count[s]++;
    }
    ld->drawn = b;
}

loader_pos loader_locate(loader *ld, uint64_t g) {
    loader_pos p = {0, g, 0, 0};
    if (ld->n_src > 1) {
        uint64_t B = ld->cfg.mix_block, block = g / B, o = g % B, d;
        uint32_t s;
        if (ld->cfg.mix_by_slot) {
            uint64_t slot = loader_permute(B, mix_key(ld, block), o);
            s = ld->slot_src[slot];
            d = slot - ld->src[s].slot0;
        } else {
            if (ld->drawn != block) mix_draw_block(ld, block);
            s = ld->draw_src[o];
            d = ld->draw_rank[o];
        }
        p.source = s;
        p.sample = block * ld->src[s].quota + d;
    }
    const loader_stream *st = &ld->src[p.source];
    p.epoch = p.sample / st->n_windows;
    p.window =
        loader_permute(st->n_windows, splitmix64_mix(st->seed + p.epoch), p.sample % st->n_windows);
    return p;
}

/* The sequence holding token t of a non-contiguous stream: starts[i] <= t <
 * starts[i + 1], skipping empty sequences. */
static uint64_t stream_find(const loader_stream *st, uint64_t t) {
    uint64_t lo = 0, hi = st->ds.n_sequences; /* starts[lo] <= t < starts[hi] */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (st->starts[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Reads n tokens from token offset t of the concatenated stream into out. */
static int stream_read(const loader_stream *st, uint64_t t, size_t n, int32_t *out, bt_diag *diag) {
    const indexed_dataset *ds = &st->ds;
    if (ds->contiguous) {
        if (indexed_decode(ds->dtype, ds->bin + t * ds->itemsize, n, out) == BT_OK) return BT_OK;
        bt_diag_set(diag, "%s: a token id near token %llu does not fit in int32", ds->bin_path,
                    (unsigned long long)t);
        return BT_ERANGE;
    }
    uint64_t seq = stream_find(st, t);
    while (n > 0) {
        uint64_t off = t - st->starts[seq], avail = st->starts[seq + 1] - t;
        size_t k = n < avail ? n : (size_t)avail;
        int rc = indexed_read(ds, seq, off, k, out, diag);
        if (rc != BT_OK) return rc;
        out += k;
        t += k;
        n -= k;
        seq++;
    }
    return BT_OK;
}

static int check_vocab(loader *ld, const loader_stream *st, uint64_t window) {
    uint32_t V = ld->cfg.vocab_size;
    for (uint32_t i = 0; V != 0 && i <= ld->cfg.seq_len; i++) {
        if (ld->window[i] < 0 || (uint32_t)ld->window[i] >= V) {
            bt_diag_set(&ld->diag,
                        "%s: token id %ld at token %llu is outside the model's vocabulary "
                        "[0, %u): model.vocab_size is too small for this data, or the data was "
                        "prepared with another tokenizer",
                        st->ds.bin_path, (long)ld->window[i],
                        (unsigned long long)(window * ld->cfg.seq_len + i), V);
            return BT_ERANGE;
        }
    }
    return BT_OK;
}

static int get_window(loader *ld, size_t source, uint64_t window, int32_t *tokens,
                      int32_t *targets) {
    const loader_stream *st = &ld->src[source];
    uint32_t L = ld->cfg.seq_len;
    int rc = stream_read(st, window * L, (size_t)L + 1, ld->window, &ld->diag);
    rc = rc ? rc : check_vocab(ld, st, window);
    if (rc != BT_OK) return rc;
    memcpy(tokens, ld->window, L * sizeof *tokens);
    memcpy(targets, ld->window + 1, L * sizeof *targets);
    return BT_OK;
}

int loader_get(loader *ld, uint64_t global_index, int32_t *tokens, int32_t *targets) {
    bt_diag_init(&ld->diag);
    loader_pos p = loader_locate(ld, global_index);
    return get_window(ld, p.source, p.window, tokens, targets);
}

int loader_get_window(loader *ld, uint64_t window, int32_t *tokens, int32_t *targets) {
    bt_diag_init(&ld->diag);
    if (window >= ld->src[0].n_windows) {
        bt_diag_set(&ld->diag, "window %llu of a set of %llu", (unsigned long long)window,
                    (unsigned long long)ld->src[0].n_windows);
        return BT_EINVAL;
    }
    return get_window(ld, 0, window, tokens, targets);
}

const char *loader_error(const loader *ld) {
    return ld->diag.msg;
}

size_t loader_sources_from_data(const Baton__Data *data, loader_source *out, size_t cap) {
    if (data == NULL) return 0;
    if (data->n_mix > 0) {
        for (size_t i = 0; i < data->n_mix && i < cap; i++)
            out[i] = (loader_source){data->mix[i]->path, data->mix[i]->weight};
        return data->n_mix;
    }
    if (data->train == NULL) return 0;
    if (cap > 0) out[0] = (loader_source){data->train, 1.0};
    return 1;
}
