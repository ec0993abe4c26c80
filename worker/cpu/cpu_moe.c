/* The CPU backend's MoE routing and permutation ops (backend.h: moe_route ...
 * moe_router_backward): moe.c's loops over device (here: host) buffers, libm's expf as
 * moe.c uses, so the routing equals moe.c's bit for bit. */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"
#include "moe.h"

static float route_score_row(float *s, int E, int score) {
    float sum = 0.0f;
    if (score == MOE_SCORE_SIGMOID) {
        for (int e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-s[e]));
            sum += s[e];
        }
        return sum;
    }
    float mx = s[0];
    for (int e = 1; e < E; e++)
        mx = s[e] > mx ? s[e] : mx;
    for (int e = 0; e < E; e++) {
        s[e] = expf(s[e] - mx);
        sum += s[e];
    }
    for (int e = 0; e < E; e++)
        s[e] /= sum;
    return 1.0f;
}

static void route_topk(const float *s, const float *bias, int E, int K, int32_t *topk) {
    unsigned char taken[MOE_MAX_EXPERTS] = {0};
    for (int j = 0; j < K; j++) {
        int best = -1;
        float bv = 0.0f;
        for (int e = 0; e < E; e++) {
            float v = s[e] + (bias ? bias[e] : 0.0f);
            if (!taken[e] && (best < 0 || v > bv)) best = e, bv = v;
        }
        taken[best] = 1;
        topk[j] = best;
    }
}

void cpu_moe_route(backend *be, float *scores, float *ssum, int32_t *topk, float *gate,
                   const float *bias, int N, int E, int K, int score, int norm_topk) {
    (void)be;
    for (int n = 0; n < N; n++) {
        float *s = scores + (size_t)n * E, *g = gate + (size_t)n * K;
        int32_t *tk = topk + (size_t)n * K;
        ssum[n] = route_score_row(s, E, score);
        route_topk(s, bias, E, K, tk);
        float gsum = 0.0f;
        for (int j = 0; j < K; j++) {
            g[j] = s[tk[j]];
            gsum += g[j];
        }
        if (norm_topk)
            for (int j = 0; j < K; j++)
                g[j] /= gsum;
    }
}

void cpu_moe_assign(backend *be, int32_t *row, int32_t *tok, int32_t *slot, int32_t *counts,
                    const int32_t *topk, int N, int K, int E, int capacity, const int32_t *limit) {
    (void)be;
    int32_t *routed = counts, *kept = counts + E, *offset = counts + 2 * E;
    memset(counts, 0, (size_t)(3 * E + 1) * sizeof *counts);
    size_t P = (size_t)N * K;
    for (size_t p = 0; p < P; p++) {
        int e = topk[p];
        routed[e]++;
        if (limit != NULL ? kept[e] < limit[e] : capacity == 0 || kept[e] < capacity) kept[e]++;
    }
    for (int e = 0; e < E; e++)
        offset[e + 1] = offset[e] + kept[e];
    int32_t fill[MOE_MAX_EXPERTS] = {0};
    for (size_t p = 0; p < P; p++) {
        int e = topk[p];
        row[p] = -1;
        if (fill[e] == kept[e]) continue;
        int32_t r = offset[e] + fill[e]++;
        row[p] = r;
        tok[r] = (int32_t)(p / (size_t)K);
        slot[r] = (int32_t)(p % (size_t)K);
    }
}

void cpu_moe_score_mean(backend *be, float *pmean, const float *scores, const float *ssum, int N,
                        int E) {
    (void)be;
    /* No rows when N <= 0 (P = 0, pmean = 0 / N, as the CUDA backend's): (size_t)N of a
     * negative N would be huge. */
    const size_t rows = N > 0 ? (size_t)N : 0, CH = moe_mean_chunk(rows);
    for (int e = 0; e < E; e++) {
        double P = 0.0;
        for (size_t n0 = 0; n0 < rows; n0 += CH) {
            const size_t n1 = rows - n0 < CH ? rows : n0 + CH;
            double part = 0.0;
            for (size_t n = n0; n < n1; n++)
                part += scores[n * E + e] / ssum[n];
            P += part;
        }
        pmean[e] = (float)(P / N);
    }
}

void cpu_gather_rows(backend *be, float *dst, const float *src, const int32_t *idx, int M, int C) {
    (void)be;
    for (int r = 0; r < M; r++)
        memcpy(dst + (size_t)r * C, src + (size_t)idx[r] * C, (size_t)C * sizeof(float));
}

void cpu_moe_combine(backend *be, float *y, const float *src, const float *gate, const int32_t *row,
                     int N, int K, int C) {
    (void)be;
    for (size_t p = 0; p < (size_t)N * K; p++) {
        if (row[p] < 0) continue;
        float w = gate ? gate[p] : 1.0f, *yn = y + (p / (size_t)K) * C;
        const float *o = src + (size_t)row[p] * C;
        for (int i = 0; i < C; i++)
            yn[i] += w * o[i];
    }
}

void cpu_moe_combine_backward(backend *be, float *dout, float *dgate, const float *dy,
                              const float *out, const float *gate, const int32_t *tok,
                              const int32_t *slot, int M, int K, int C) {
    (void)be;
    for (int r = 0; r < M; r++) {
        size_t p = (size_t)tok[r] * K + slot[r];
        const float *d = dy + (size_t)tok[r] * C, *o = out + (size_t)r * C;
        float *dr = dout + (size_t)r * C, dot = 0.0f;
        for (int i = 0; i < C; i++) {
            dr[i] = gate[p] * d[i];
            dot += d[i] * o[i];
        }
        dgate[p] = dot;
    }
}

/* ds (E) += the gradient through the combine weights g = s[topk] (/ sum). */
static void router_dgate(const float *s, const int32_t *tk, const float *g, const float *dg, int K,
                         int norm_topk, float *ds) {
    if (!norm_topk) {
        for (int j = 0; j < K; j++)
            ds[tk[j]] += dg[j];
        return;
    }
    float sum = 0.0f, dot = 0.0f;
    for (int j = 0; j < K; j++) {
        sum += s[tk[j]];
        dot += dg[j] * g[j];
    }
    for (int j = 0; j < K; j++)
        ds[tk[j]] += (dg[j] - dot) / sum;
}

/* ds (E) += the aux loss's gradient through p = s / ssum; dp (E) precomputed. */
static void router_daux(const float *s, float ssum, const float *dp, int E, float *ds) {
    float dot = 0.0f;
    for (int e = 0; e < E; e++)
        dot += dp[e] * (s[e] / ssum);
    for (int e = 0; e < E; e++)
        ds[e] += (dp[e] - dot) / ssum;
}

static void router_dlogits(const float *s, int E, int score, float *d) {
    if (score == MOE_SCORE_SIGMOID) {
        for (int e = 0; e < E; e++)
            d[e] *= s[e] * (1.0f - s[e]);
        return;
    }
    float dot = 0.0f;
    for (int e = 0; e < E; e++)
        dot += d[e] * s[e];
    for (int e = 0; e < E; e++)
        d[e] = s[e] * (d[e] - dot);
}

void cpu_moe_router_backward(backend *be, float *dl, const float *scores, const float *ssum,
                             const int32_t *topk, const float *gate, const float *dgate,
                             const int32_t *routed, int N, int n_aux, int E, int K, int score,
                             int norm_topk, double aux_coef) {
    (void)be;
    float dp[MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) {
        float f = (float)((double)routed[e] / ((double)n_aux * K));
        dp[e] = (float)(aux_coef * E * f / n_aux);
    }
    for (int n = 0; n < N; n++) {
        const float *s = scores + (size_t)n * E;
        float *d = dl + (size_t)n * E;
        size_t p = (size_t)n * K;
        memset(d, 0, (size_t)E * sizeof *d);
        router_dgate(s, topk + p, gate + p, dgate + p, K, norm_topk, d);
        if (aux_coef != 0.0) router_daux(s, ssum[n], dp, E, d);
        router_dlogits(s, E, score, d);
    }
}
