/* Blockwise attention with explicit positions on the CPU, for ring attention (context
 * parallelism, model_cp.c): blocks of query rows are multiplied with cblas_sgemm against
 * the whole key block, the scores of keys a row may not see are dropped by position, and
 * the probabilities are formed as exp(scale * s - lse) as in cpu_attention.c. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "cpu_math.h"
#include "cpu_ops.h"

/* Query rows per block; scratch holds two (PART_BLOCK, Tk) blocks (the backward's P and
 * dP; the forward uses the first). */
#define PART_BLOCK 64

static int part_rows(int Tq) {
    return Tq < PART_BLOCK ? Tq : PART_BLOCK;
}

size_t cpu_attention_part_scratch_floats(backend *be, int Tq, int Tk) {
    (void)be;
    return 2 * (size_t)part_rows(Tq) * Tk;
}

/* One (sequence, query head) pair of a block pair. */
typedef struct part_head {
    const float *q, *k, *v; /* q rows stride ldq, k and v rows stride ldkv */
    int ldq, ldkv, Tq, Tk, hd;
    float scale;
    const int32_t *qpos, *kpos;
} part_head;

static part_head part_view(const float *q, int ldq, const float *k, const float *v, int ldkv, int b,
                           int h, int Tq, int Tk, int H, int KV, int hd) {
    int g = h / (H / KV);
    part_head a = {
        .q = q + (size_t)b * Tq * ldq + (size_t)h * hd,
        .k = k + (size_t)b * Tk * ldkv + (size_t)g * hd,
        .v = v + (size_t)b * Tk * ldkv + (size_t)g * hd,
        .ldq = ldq,
        .ldkv = ldkv,
        .Tq = Tq,
        .Tk = Tk,
        .hd = hd,
    };
    return a;
}

/* Scores of query rows [i0, i0 + rows) against every key, into S (row stride Tk). */
static void part_scores(float *S, const part_head *a, int i0, int rows) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, a->Tk, a->hd, 1.0f,
                a->q + (size_t)i0 * a->ldq, a->ldq, a->k, a->ldkv, 0.0f, S, a->Tk);
}

/* max of scale * s[j] over the visible keys (kpos[j] <= p), -INFINITY if none, NaN
 * ignored: in CPU_LANES lanes, which gcc vectorizes. Which of two equal zeros wins may
 * differ from one pass in index order, and nothing downstream tells them apart: exp(x - m)
 * and m + log(sum) (log(1) = +0) are the same for m = +0 and -0. */
CPU_INLINE float part_row_max(const float *s, const int32_t *kpos, int Tk, int32_t p, float scale) {
    float mx[CPU_LANES];
    for (int l = 0; l < CPU_LANES; l++)
        mx[l] = -INFINITY;
    int j = 0;
    for (; j + CPU_LANES <= Tk; j += CPU_LANES)
        for (int l = 0; l < CPU_LANES; l++) {
            float v = kpos[j + l] <= p ? s[j + l] * scale : -INFINITY;
            mx[l] = v > mx[l] ? v : mx[l];
        }
    float m = -INFINITY;
    for (; j < Tk; j++) {
        float v = kpos[j] <= p ? s[j] * scale : -INFINITY;
        m = v > m ? v : m;
    }
    for (int l = 0; l < CPU_LANES; l++)
        m = mx[l] > m ? mx[l] : m;
    return m;
}

/* The sum of exp(scale s[j] - m) over the visible keys, in the order cpu_sum_exp sums
 * (CPU_LANES float lanes per chunk of CPU_SUM_CHUNK keys, each chunk's lanes added into a
 * double in lane order), fixed by Tk alone: deterministic. Each term replaces its score
 * in s; an invisible key's is +0.0, which changes no sum (no branch: gcc vectorizes). */
CPU_INLINE double part_row_exps(float *s, const int32_t *kpos, int Tk, int32_t p, float scale,
                                float m) {
    double sum = 0.0;
    for (int c = 0; c < Tk; c += CPU_SUM_CHUNK) {
        int end = Tk - c < CPU_SUM_CHUNK ? Tk : c + CPU_SUM_CHUNK;
        float acc[CPU_LANES] = {0};
        int j = c;
        for (; j + CPU_LANES <= end; j += CPU_LANES)
            for (int l = 0; l < CPU_LANES; l++) {
                float x = cpu_expf(s[j + l] * scale - m);
                s[j + l] = kpos[j + l] <= p ? x : 0.0f;
                acc[l] += s[j + l];
            }
        for (int l = 0; j + l < end; l++) {
            float x = cpu_expf(s[j + l] * scale - m);
            s[j + l] = kpos[j + l] <= p ? x : 0.0f;
            acc[l] += s[j + l];
        }
        for (int l = 0; l < CPU_LANES; l++)
            sum += (double)acc[l];
    }
    return sum;
}

/* The forward's row: s (scores of query position p) becomes the probabilities
 * exp(scale s - m) / sum on the visible keys, 0 elsewhere, each exponential computed once;
 * returns the log-sum-exp m + log(sum) (-INFINITY when no key is visible). The backward
 * recomputes them as exp(scale s - lse) (part_row_probs), equal but for the last bits, as
 * FlashAttention's passes are. */
CPU_INLINE float part_row_softmax(float *s, const part_head *a, int32_t p) {
    float m = part_row_max(s, a->kpos, a->Tk, p, a->scale);
    if (m == -INFINITY) {
        memset(s, 0, (size_t)a->Tk * sizeof *s);
        return m;
    }
    double sum = part_row_exps(s, a->kpos, a->Tk, p, a->scale, m);
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < a->Tk; j++)
        s[j] *= inv;
    return m + (float)log(sum);
}

/* Row s becomes the probabilities exp(scale s - lse) on the visible keys, 0 elsewhere. */
CPU_INLINE void part_row_probs(float *s, const part_head *a, int32_t p, float lse) {
    const int32_t *kpos = a->kpos;
    const float scale = a->scale;
    const int Tk = a->Tk;
    if (lse == -INFINITY) { /* no visible key */
        memset(s, 0, (size_t)Tk * sizeof *s);
        return;
    }
    for (int j = 0; j < Tk; j++) {
        float x = cpu_expf(s[j] * scale - lse);
        s[j] = kpos[j] <= p ? x : 0.0f;
    }
}

/* S: the scratch's first block. */
CPU_CLONES static void part_head_forward(const part_head *a, float *out, int ldo, float *lse,
                                         float *S) {
    for (int i0 = 0; i0 < a->Tq; i0 += PART_BLOCK) {
        int rows = a->Tq - i0 < PART_BLOCK ? a->Tq - i0 : PART_BLOCK;
        part_scores(S, a, i0, rows);
        for (int r = 0; r < rows; r++) {
            float *s = S + (size_t)r * a->Tk;
            int32_t p = a->qpos[i0 + r];
            lse[i0 + r] = part_row_softmax(s, a, p);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, a->hd, a->Tk, 1.0f, S, a->Tk,
                    a->v, a->ldkv, 0.0f, out + (size_t)i0 * ldo, ldo);
    }
}

void cpu_attention_part_forward(backend *be, float *out, float *lse, const float *q, int ldq,
                                const float *k, const float *v, int ldkv, int B, int Tq, int Tk,
                                int H, int KV, int hd, float scale, const int32_t *qpos,
                                const int32_t *kpos, float *scratch) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            part_head a = part_view(q, ldq, k, v, ldkv, b, h, Tq, Tk, H, KV, hd);
            a.scale = scale, a.qpos = qpos, a.kpos = kpos;
            size_t row0 = (size_t)b * Tq;
            part_head_forward(&a, out + row0 * H * hd + (size_t)h * hd, H * hd,
                              lse + ((size_t)b * H + h) * Tq, scratch);
        }
}

void cpu_attention_merge(backend *be, float *out, float *lse, const float *out2, const float *lse2,
                         int B, int T, int H, int hd) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                float *l1 = lse + ((size_t)b * H + h) * T + t;
                float l2 = lse2[((size_t)b * H + h) * T + t];
                if (l2 == -INFINITY) continue;
                float *o1 = out + ((size_t)b * T + t) * H * hd + (size_t)h * hd;
                const float *o2 = out2 + ((size_t)b * T + t) * H * hd + (size_t)h * hd;
                float m = *l1 > l2 ? *l1 : l2;
                float l = m + log1pf(expf(-fabsf(*l1 - l2)));
                float w1 = *l1 == -INFINITY ? 0.0f : expf(*l1 - l), w2 = expf(l2 - l);
                for (int d = 0; d < hd; d++)
                    o1[d] = o1[d] * w1 + o2[d] * w2;
                *l1 = l;
            }
}

void cpu_attention_delta(backend *be, float *delta, const float *dout, const float *out, int B,
                         int T, int H, int hd) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                size_t off = ((size_t)b * T + t) * H * hd + (size_t)h * hd;
                double s = 0.0;
                for (int d = 0; d < hd; d++)
                    s += (double)dout[off + d] * out[off + d];
                delta[((size_t)b * H + h) * T + t] = (float)s;
            }
}

/* The gradient pointers of one pair. */
typedef struct part_grads {
    const float *dout; /* rows stride ldo */
    int ldo;
    float *dq, *dk, *dv;
    const float *delta, *lse;
} part_grads;

CPU_CLONES static void part_head_backward(const part_head *a, const part_grads *d, float *scratch) {
    int Tk = a->Tk, hd = a->hd;
    float *P = scratch, *dP = scratch + (size_t)part_rows(a->Tq) * Tk;
    for (int i0 = 0; i0 < a->Tq; i0 += PART_BLOCK) {
        int rows = a->Tq - i0 < PART_BLOCK ? a->Tq - i0 : PART_BLOCK;
        const float *dO = d->dout + (size_t)i0 * d->ldo;
        part_scores(P, a, i0, rows);
        for (int r = 0; r < rows; r++)
            part_row_probs(P + (size_t)r * Tk, a, a->qpos[i0 + r], d->lse[i0 + r]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, Tk, hd, 1.0f, dO, d->ldo, a->v,
                    a->ldkv, 0.0f, dP, Tk);
        for (int r = 0; r < rows; r++) {
            float *dp = dP + (size_t)r * Tk;
            const float *p = P + (size_t)r * Tk;
            float dl = d->delta[i0 + r];
            for (int j = 0; j < Tk; j++)
                dp[j] = p[j] * (dp[j] - dl) * a->scale;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, Tk, 1.0f, dP, Tk, a->k,
                    a->ldkv, 1.0f, d->dq + (size_t)i0 * a->ldq, a->ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hd, rows, 1.0f, dP, Tk,
                    a->q + (size_t)i0 * a->ldq, a->ldq, 1.0f, d->dk, a->ldkv);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hd, rows, 1.0f, P, Tk, dO, d->ldo,
                    1.0f, d->dv, a->ldkv);
    }
}

void cpu_attention_part_backward(backend *be, float *dq, int ldq, float *dk, float *dv, int ldkv,
                                 const float *dout, const float *delta, const float *lse,
                                 const float *q, const float *k, const float *v, int B, int Tq,
                                 int Tk, int H, int KV, int hd, float scale, const int32_t *qpos,
                                 const int32_t *kpos, float *scratch) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            part_head a = part_view(q, ldq, k, v, ldkv, b, h, Tq, Tk, H, KV, hd);
            a.scale = scale, a.qpos = qpos, a.kpos = kpos;
            int g = h / (H / KV);
            size_t qrow0 = (size_t)b * Tq, krow0 = (size_t)b * Tk, stat = ((size_t)b * H + h) * Tq;
            part_grads d = {
                .dout = dout + qrow0 * H * hd + (size_t)h * hd,
                .ldo = H * hd,
                .dq = dq + qrow0 * ldq + (size_t)h * hd,
                .dk = dk + krow0 * ldkv + (size_t)g * hd,
                .dv = dv + krow0 * ldkv + (size_t)g * hd,
                .delta = delta + stat,
                .lse = lse + stat,
            };
            part_head_backward(&a, &d, scratch);
        }
}
