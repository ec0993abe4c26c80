/* Cross-entropy over the vocabulary on the CPU: the forward pass keeps each row's
 * log-sum-exp so the backward pass forms softmax - onehot in one sweep, in place of the
 * logits when the caller wishes. Rows whose target is negative are ignored: loss 0,
 * gradient 0. The sum of exponentials accumulates in float lanes added into a double in a
 * fixed order (cpu_math.h). The vocabulary-parallel variant
 * splits the forward into per-shard partials and their combination (Megatron's
 * vocab-parallel cross-entropy, with the max and the sum of exponentials exchanged as one
 * gather of (max, sum, target logit) per row instead of three all-reduces). */
#include <math.h>

#include "cpu_math.h"
#include "cpu_ops.h"

CPU_INLINE float row_lse(const float *x, int V) {
    float m = cpu_max_scaled(x, V, 1.0f);
    return (float)((double)m + log(cpu_sum_exp(x, V, 1.0f, m)));
}

CPU_CLONES void cpu_crossentropy_forward(backend *be, float *losses, float *lse,
                                         const float *logits, const int32_t *targets, int N,
                                         int V) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        if (targets[n] < 0) {
            losses[n] = 0.0f;
            lse[n] = 0.0f;
            continue;
        }
        lse[n] = row_lse(x, V);
        losses[n] = lse[n] - x[targets[n]];
    }
}

CPU_CLONES void cpu_crossentropy_backward(backend *be, float *dlogits, const float *logits,
                                          const float *lse, const int32_t *targets, float dloss,
                                          int N, int V) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits + (size_t)n * V;
        int t = targets[n];
        if (t < 0) {
            for (int j = 0; j < V; j++)
                dx[j] = 0.0f;
            continue;
        }
        for (int j = 0; j < V; j++)
            dx[j] = cpu_expf(x[j] - lse[n]) * dloss;
        dx[t] -= dloss;
    }
}

CPU_CLONES void cpu_vocab_ce_partial(backend *be, float *part, const float *logits,
                                     const int32_t *targets, int N, int Vl, int v0) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float *p = part + (size_t)n * 3;
        int t = targets[n];
        p[0] = p[1] = p[2] = 0.0f;
        if (t < 0) continue;
        float m = cpu_max_scaled(x, Vl, 1.0f);
        p[0] = m;
        p[1] = (float)cpu_sum_exp(x, Vl, 1.0f, m);
        if (t >= v0 && t < v0 + Vl) p[2] = x[t - v0];
    }
}

void cpu_vocab_ce_combine(backend *be, float *losses, float *lse, const float *parts,
                          const int32_t *targets, int N, int R) {
    (void)be;
    size_t stride = (size_t)N * 3;
    for (int n = 0; n < N; n++) {
        losses[n] = lse[n] = 0.0f;
        if (targets[n] < 0) continue;
        float m = -INFINITY, target = 0.0f;
        for (int r = 0; r < R; r++)
            m = fmaxf(m, parts[r * stride + (size_t)n * 3]);
        double sum = 0.0;
        for (int r = 0; r < R; r++) {
            const float *p = parts + r * stride + (size_t)n * 3;
            sum += (double)p[1] * exp((double)(p[0] - m));
            target += p[2]; /* one shard holds the target; the others add 0 exactly */
        }
        lse[n] = (float)((double)m + log(sum));
        losses[n] = lse[n] - target;
    }
}

CPU_CLONES void cpu_vocab_ce_backward(backend *be, float *dlogits, const float *logits,
                                      const float *lse, const int32_t *targets, float dloss, int N,
                                      int Vl, int v0) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float *dx = dlogits + (size_t)n * Vl;
        int t = targets[n];
        if (t < 0) {
            for (int j = 0; j < Vl; j++)
                dx[j] = 0.0f;
            continue;
        }
        for (int j = 0; j < Vl; j++)
            dx[j] = cpu_expf(x[j] - lse[n]) * dloss;
        if (t >= v0 && t < v0 + Vl) dx[t - v0] -= dloss;
    }
}
