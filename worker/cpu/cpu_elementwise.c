/* Elementwise CPU operations: fill, add, scale, sum of squares, embedding lookup (whole
 * or vocabulary-parallel), and SwiGLU. Backward ops accumulate (+=) into parameter gradients
 * and write (=) activation gradients. Loops run in index order, so results never
 * depend on buffer addresses. */
#include <math.h>
#include <string.h>

#include "cpu_math.h"
#include "cpu_ops.h"

void cpu_zero(backend *be, float *x, size_t n) {
    (void)be;
    if (n) memset(x, 0, n * sizeof *x);
}

CPU_CLONES void cpu_add(backend *be, float *out, const float *a, const float *b, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void cpu_copy2d(backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                size_t width) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * ldd, src + r * lds, width * sizeof *dst);
}

void cpu_scale(backend *be, float *x, float s, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

double cpu_sumsq(backend *be, const float *x, size_t n) {
    (void)be;
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * (double)x[i];
    return acc;
}

double cpu_sumsq_segs(backend *be, const float *x, const backend_seg *segs, size_t nseg) {
    double total = 0.0;
    for (size_t s = 0; s < nseg; s++)
        total += segs[s].n ? cpu_sumsq(be, x + segs[s].offset, segs[s].n) : 0.0;
    return total;
}

void cpu_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte, int N,
                           int C) {
    (void)be;
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)tokens[n] * C, (size_t)C * sizeof *out);
}

/* Rows are visited in order, so a token seen twice always sums in the same order. */
void cpu_embedding_backward(backend *be, float *dwte, const float *dout, const int32_t *tokens,
                            int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        float *dst = dwte + (size_t)tokens[n] * C;
        const float *src = dout + (size_t)n * C;
        for (int c = 0; c < C; c++)
            dst[c] += src[c];
    }
}

void cpu_vocab_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                                 int N, int C, int v0, int Vl) {
    (void)be;
    for (int n = 0; n < N; n++) {
        float *dst = out + (size_t)n * C;
        int t = tokens[n] - v0;
        if (t >= 0 && t < Vl)
            memcpy(dst, wte + (size_t)t * C, (size_t)C * sizeof *out);
        else
            memset(dst, 0, (size_t)C * sizeof *out);
    }
}

void cpu_vocab_embedding_backward(backend *be, float *dwte, const float *dout,
                                  const int32_t *tokens, int N, int C, int v0, int Vl) {
    (void)be;
    for (int n = 0; n < N; n++) {
        int t = tokens[n] - v0;
        if (t < 0 || t >= Vl) continue;
        float *dst = dwte + (size_t)t * C;
        const float *src = dout + (size_t)n * C;
        for (int c = 0; c < C; c++)
            dst[c] += src[c];
    }
}

CPU_INLINE float sigmoidf(float x) {
    return 1.0f / (1.0f + cpu_expf(-x));
}

CPU_CLONES void cpu_swiglu_forward(backend *be, float *out, const float *inp, int N, int F) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F;
        const float *up = gate + F;
        float *o = out + (size_t)n * F;
        for (int i = 0; i < F; i++)
            o[i] = gate[i] * sigmoidf(gate[i]) * up[i];
    }
}

/* d up = dout * silu(gate); d gate = dout * up * s * (1 + gate * (1 - s)), s = sigmoid(gate). */
CPU_CLONES void cpu_swiglu_backward(backend *be, float *dinp, const float *dout, const float *inp,
                                    int N, int F) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F;
        const float *up = gate + F;
        const float *d = dout + (size_t)n * F;
        float *dgate = dinp + (size_t)n * 2 * F;
        float *dup = dgate + F;
        for (int i = 0; i < F; i++) {
            float s = sigmoidf(gate[i]);
            dup[i] = d[i] * gate[i] * s;
            dgate[i] = d[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
        }
    }
}
