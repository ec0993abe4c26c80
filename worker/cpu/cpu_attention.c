/* Causal grouped-query attention on the CPU: per sequence and query head, blocks of
 * query rows are multiplied with cblas_sgemm against the keys they may see (columns up
 * to the block's last row), so the work above the diagonal is at most one block wide.
 * Softmax rows keep their log-sum-exp; the probabilities are always formed as
 * exp(scale * s - lse) by one function, so recomputing them in backward gives the
 * very bits the forward pass produced. Backward writes (=) dq, dk and dv. Everything is
 * float32 whatever precision the caller names (backend.h lets a backend round the
 * products' operands to bf16; this one never does), and backward does not read the
 * forward's output. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "cpu_math.h"
#include "cpu_ops.h"

/* Query rows per block; scratch holds two (ATT_BLOCK, T) blocks. */
#define ATT_BLOCK 64

/* Query rows per block actually used for a sequence of T. */
static int block_rows(int T) {
    return T < ATT_BLOCK ? T : ATT_BLOCK;
}

/* One (sequence, query head) pair: its q, k, v rows and where its softmax rows live. */
typedef struct att_head {
    const float *q, *k, *v; /* row stride ld */
    size_t row0;            /* first row of the sequence */
    size_t stat0;           /* offset of the pair's (T) lse row and (T, T) probabilities */
    int g;                  /* the key/value head */
    int ld, ldo, T, hd;
    float scale;
} att_head;

size_t cpu_attention_scratch_floats(backend *be, int T) {
    (void)be;
    return 2 * (size_t)block_rows(T) * T;
}

static att_head head_view(const float *q, const float *k, const float *v, int ld, int b, int h,
                          int T, int H, int KV, int hd, float scale) {
    int g = h / (H / KV);
    size_t row0 = (size_t)b * T;
    att_head a = {
        .q = q + row0 * ld + (size_t)h * hd,
        .k = k + row0 * ld + (size_t)g * hd,
        .v = v + row0 * ld + (size_t)g * hd,
        .row0 = row0,
        .stat0 = ((size_t)b * H + h) * T,
        .g = g,
        .ld = ld,
        .ldo = H * hd,
        .T = T,
        .hd = hd,
        .scale = scale,
    };
    return a;
}

/* Row i of a block: probabilities for columns j <= i, zero for i < j < ncols. */
CPU_INLINE void probs_row(float *s, int i, int ncols, float scale, float lse) {
    for (int j = 0; j <= i; j++)
        s[j] = cpu_expf(s[j] * scale - lse);
    for (int j = i + 1; j < ncols; j++)
        s[j] = 0.0f;
}

CPU_INLINE float row_lse(const float *s, int i, float scale) {
    float m = cpu_max_scaled(s, i + 1, scale);
    return m + (float)log(cpu_sum_exp(s, i + 1, scale, m));
}

/* Scores of rows [i0, i0 + rows) against keys [0, i1) into S (row stride T). */
static void block_scores(float *S, const att_head *a, int i0, int rows, int i1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, a->hd, 1.0f,
                a->q + (size_t)i0 * a->ld, a->ld, a->k, a->ld, 0.0f, S, a->T);
}

/* Forward for one pair: out (T rows, stride ldo), lse (T), att (T, T) or NULL. */
CPU_CLONES static void head_forward(const att_head *a, float *out, float *lse, float *att,
                                    float *scratch) {
    int T = a->T;
    for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
        int rows = T - i0 < ATT_BLOCK ? T - i0 : ATT_BLOCK, i1 = i0 + rows;
        float *S = att ? att + (size_t)i0 * T : scratch;
        block_scores(S, a, i0, rows, i1);
        for (int r = 0; r < rows; r++) {
            float *s = S + (size_t)r * T;
            lse[i0 + r] = row_lse(s, i0 + r, a->scale);
            probs_row(s, i0 + r, att ? T : i1, a->scale, lse[i0 + r]);
        }
        /* out rows = P (rows, i1) @ V (i1, hd) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, a->hd, i1, 1.0f, S, T, a->v,
                    a->ld, 0.0f, out + (size_t)i0 * a->ldo, a->ldo);
    }
}

void cpu_attention_forward(backend *be, float *out, float *lse, float *att, const float *q,
                           const float *k, const float *v, int ld, int B, int T, int H, int KV,
                           int hd, float scale, backend_prec prec, float *scratch) {
    (void)be;
    (void)prec; /* float32 always (backend.h) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            att_head a = head_view(q, k, v, ld, b, h, T, H, KV, hd, scale);
            head_forward(&a, out + a.row0 * a.ldo + (size_t)h * hd, lse + a.stat0,
                         att ? att + a.stat0 * T : NULL, scratch);
        }
}

/* dS = P * (dP - rowsum(P * dP)) * scale over j <= i, zero beyond, in place of dP. */
CPU_INLINE void dscores_row(float *dp, const float *p, int i, int ncols, float scale) {
    double dot = 0.0;
    for (int j = 0; j <= i; j++)
        dot += (double)p[j] * (double)dp[j];
    float d = (float)dot;
    for (int j = 0; j <= i; j++)
        dp[j] = p[j] * (dp[j] - d) * scale;
    for (int j = i + 1; j < ncols; j++)
        dp[j] = 0.0f;
}

/* The pair's gradient pointers: dout rows (stride ldo); dq, dk, dv rows (stride ld). */
typedef struct att_grads {
    const float *dout;
    float *dq, *dk, *dv;
} att_grads;

/* The probabilities of rows [i0, i0 + rows): stored, or recomputed into P. */
static const float *block_probs(const att_head *a, const float *att, const float *lse, float *P,
                                int i0, int rows, int i1) {
    if (att != NULL) return att + (size_t)i0 * a->T;
    block_scores(P, a, i0, rows, i1);
    for (int r = 0; r < rows; r++)
        probs_row(P + (size_t)r * a->T, i0 + r, i1, a->scale, lse[i0 + r]);
    return P;
}

CPU_CLONES static void head_backward(const att_head *a, const att_grads *d, const float *att,
                                     const float *lse, float *scratch) {
    int T = a->T, hd = a->hd, ld = a->ld;
    float *dP = scratch + (size_t)block_rows(T) * T;
    for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
        int rows = T - i0 < ATT_BLOCK ? T - i0 : ATT_BLOCK, i1 = i0 + rows;
        const float *P = block_probs(a, att, lse, scratch, i0, rows, i1);
        const float *dO = d->dout + (size_t)i0 * a->ldo;
        /* dP (rows, i1) = dO (rows, hd) @ V^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hd, 1.0f, dO, a->ldo, a->v,
                    ld, 0.0f, dP, T);
        for (int r = 0; r < rows; r++)
            dscores_row(dP + (size_t)r * T, P + (size_t)r * T, i0 + r, i1, a->scale);
        /* dq rows = dS @ K;  dK += dS^T @ Q rows;  dV += P^T @ dO */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, i1, 1.0f, dP, T, a->k, ld,
                    0.0f, d->dq + (size_t)i0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hd, rows, 1.0f, dP, T,
                    a->q + (size_t)i0 * ld, ld, 1.0f, d->dk, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hd, rows, 1.0f, P, T, dO, a->ldo,
                    1.0f, d->dv, ld);
    }
}

static void zero_rows(float *x, int rows, int width, int ld) {
    for (int n = 0; n < rows; n++)
        memset(x + (size_t)n * ld, 0, (size_t)width * sizeof *x);
}

void cpu_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                            const float *out, const float *att, const float *lse, const float *q,
                            const float *k, const float *v, int ld, int B, int T, int H, int KV,
                            int hd, float scale, backend_prec prec, float *scratch) {
    (void)be;
    (void)out;  /* delta comes from the probabilities, as in the forward's float32 */
    (void)prec; /* float32 always (backend.h) */
    /* dk and dv gather from every query head of their group and every row block. */
    zero_rows(dk, B * T, KV * hd, ld);
    zero_rows(dv, B * T, KV * hd, ld);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            att_head a = head_view(q, k, v, ld, b, h, T, H, KV, hd, scale);
            size_t qoff = a.row0 * ld + (size_t)h * hd, kvoff = a.row0 * ld + (size_t)a.g * hd;
            att_grads d = {
                .dout = dout + a.row0 * a.ldo + (size_t)h * hd,
                .dq = dq + qoff,
                .dk = dk + kvoff,
                .dv = dv + kvoff,
            };
            head_backward(&a, &d, att ? att + a.stat0 * T : NULL, lse + a.stat0, scratch);
        }
}
