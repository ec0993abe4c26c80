/* Cross-entropy over the vocabulary on the CPU: the forward pass keeps each row's
 * log-sum-exp so the backward pass forms softmax - onehot in one sweep, in place of the
 * logits when the caller wishes. Rows whose target is negative are ignored: loss 0,
 * gradient 0. The log-sum-exp accumulates in double. */
#include <math.h>

#include "cpu_ops.h"

static float row_lse(const float *x, int V) {
    float m = -INFINITY;
    for (int j = 0; j < V; j++)
        m = fmaxf(m, x[j]);
    double sum = 0.0;
    for (int j = 0; j < V; j++)
        sum += exp((double)(x[j] - m));
    return (float)((double)m + log(sum));
}

void cpu_crossentropy_forward(backend *be, float *losses, float *lse, const float *logits,
                              const int32_t *targets, int N, int V) {
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

void cpu_crossentropy_backward(backend *be, float *dlogits, const float *logits, const float *lse,
                               const int32_t *targets, float dloss, int N, int V) {
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
            dx[j] = expf(x[j] - lse[n]) * dloss;
        dx[t] -= dloss;
    }
}
