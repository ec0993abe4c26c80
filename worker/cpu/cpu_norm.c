/* RMSNorm and rotary embedding on the CPU. Backward ops accumulate (+=) into parameter
 * gradients and write (=) activation gradients. Row reductions accumulate in double in
 * index order: accurate for wide rows and independent of buffer addresses. */
#include <math.h>

#include "cpu_math.h"
#include "cpu_ops.h"

CPU_CLONES void cpu_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                                    const float *weight, int N, int C, float eps) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * (double)x[c];
        float r = (float)(1.0 / sqrt(ss / C + (double)eps));
        for (int c = 0; c < C; c++)
            o[c] = x[c] * r * weight[c];
        rstd[n] = r;
    }
}

/* With g = weight * dout and r = rstd:
 *   dinp = r * (g - inp * r^2 * mean(g * inp)),  dweight += dout * inp * r. */
CPU_CLONES void cpu_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                                     const float *inp, const float *weight, const float *rstd,
                                     int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float r = rstd[n];
        double dot = 0.0;
        for (int c = 0; c < C; c++)
            dot += (double)(weight[c] * dy[c]) * (double)x[c];
        float k = (float)(dot / C) * r * r;
        for (int c = 0; c < C; c++) {
            dx[c] = r * (weight[c] * dy[c] - x[c] * k);
            dweight[c] += dy[c] * x[c] * r;
        }
    }
}

/* One head's rotation by the angle table row (cs, sn), sign +1 forward, -1 backward
 * (the transpose). Pairs are (i, i + hd/2): Hugging Face's rotate_half. */
CPU_INLINE void rope_head(float *out, const float *x, const float *cs, const float *sn, int half,
                          float sign) {
    for (int i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half];
        float s = sign * sn[i];
        out[i] = x0 * cs[i] - x1 * s;
        out[i + half] = x1 * cs[i] + x0 * s;
    }
}

CPU_CLONES static void rope_apply(float *out, const float *inp, const float *cos, const float *sin,
                                  int B, int T, int nh, int hd, int ld, float sign) {
    int half = hd / 2;
    for (int n = 0; n < B * T; n++) {
        const float *cs = cos + (size_t)(n % T) * half;
        const float *sn = sin + (size_t)(n % T) * half;
        for (int h = 0; h < nh; h++) {
            size_t off = (size_t)n * ld + (size_t)h * hd;
            rope_head(out + off, inp + off, cs, sn, half, sign);
        }
    }
}

void cpu_rope_forward(backend *be, float *out, const float *inp, const float *cos, const float *sin,
                      int B, int T, int nh, int hd, int ld) {
    (void)be;
    rope_apply(out, inp, cos, sin, B, T, nh, hd, ld, 1.0f);
}

void cpu_rope_backward(backend *be, float *dinp, const float *dout, const float *cos,
                       const float *sin, int B, int T, int nh, int hd, int ld) {
    (void)be;
    rope_apply(dinp, dout, cos, sin, B, T, nh, hd, ld, -1.0f);
}
