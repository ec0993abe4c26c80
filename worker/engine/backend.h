/* The compute-backend interface: a table of operations over raw float buffers and
 * shape integers. The model calls only these; the CPU backend (worker/cpu) implements
 * them with OpenBLAS and plain C, the CUDA backend implements the same table. Every
 * pointer an op receives is a *device* pointer of that backend (the CPU backend's
 * device memory is host memory), obtained from alloc; tokens and targets too.
 *
 * Rules every implementation keeps:
 *  - Backward ops ACCUMULATE (+=) into parameter gradients (dweight) and WRITE (=)
 *    activation gradients (dinp, dq, ...). Where an activation receives gradient from
 *    two branches the model adds them explicitly with add().
 *  - Ops never allocate. Scratch is passed by the caller, sized by the *_scratch_floats
 *    queries of the same backend.
 *  - Ops are deterministic: the same inputs and shapes give bitwise-identical outputs,
 *    whatever the buffer addresses. Recomputation relies on this.
 *  - Ops do not return errors. A backend that can fail asynchronously (a kernel launch)
 *    records the first failure and reports it from sync().
 *
 * Shapes. N = B*T rows (sequences of T tokens, row n is position n % T of sequence
 * n / T). A linear layer's weight is stored (OC, C) row-major, output features by input
 * features, as torch.nn.Linear and Hugging Face store it: out = inp @ weight^T. The
 * attention inputs q, k, v live in the rows of one fused buffer with a row stride ld
 * (q at column 0, k and v further along the same rows); grouped-query attention maps
 * query head h to key/value head h / (H / KV), as Hugging Face's repeat_kv does. */
#ifndef BATON_BACKEND_H
#define BATON_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* The precision a GEMM's inputs are rounded to before a float32-accumulating product. */
typedef enum backend_prec {
    BACKEND_PREC_FP32 = 0,
    BACKEND_PREC_BF16 = 1, /* both inputs rounded to bf16 (round-to-nearest-even) */
    BACKEND_PREC_FP8 = 2,  /* both inputs quantized->dequantized with per-tensor scales */
    BACKEND_PREC_FP16 = 3, /* both inputs rounded to IEEE half (RNE; overflow to Inf) */
} backend_prec;

/* Operand slots of a GEMM's fp8 metadata. */
enum { BACKEND_FP8_X = 0, BACKEND_FP8_W = 1, BACKEND_FP8_DY = 2, BACKEND_FP8_SLOTS = 3 };

/* Per-GEMM precision. The caller owns the delayed-scaling state: before the call it puts
 * the scales into scale[], after the call it reads the amaxes the op saw (forward writes
 * amax[X] and amax[W], backward writes amax[DY] and, again, amax[X] and amax[W]) and
 * feeds them to its history. Forward quantizes x and w to E4M3; backward quantizes the
 * incoming gradient to E5M2 when dy_e5m2 is set ("hybrid"), else E4M3, and x and w to
 * E4M3. A NULL backend_gemm means float32.
 *
 * amax_acc, when not NULL, is device memory of BACKEND_FP8_SLOTS floats (>= 0, zeroed by
 * the caller) into which every fp8 call folds the amaxes it sees as a running maximum,
 * acc[k] = max(acc[k], amax); amax[] is then not written, so the op need not wait for
 * them (the CUDA backend otherwise synchronizes once per fp8 GEMM). The trainer reads
 * all GEMMs' accumulators once per step.
 *
 * wcache, when not NULL, is backend memory of matmul_wcache_floats(C, OC, prec) floats
 * where a backend that converts the weight for its products (the CUDA one: to bf16, fp16
 * or fp8, and a transposed fp8 copy for the backward) keeps the conversions, so that the
 * micro-batches of a step, and the backward after its forward, convert the weight once.
 * The op records in wcache_forms which conversions it holds, of which weight (wcache_w);
 * the caller sets wcache_forms to 0 whenever the weight's values or the fp8 scale of W
 * may have changed, and whenever it zeroes amax_acc (the trainer: before every step and
 * every evaluation). Under fp8 the
 * cache is used only with amax_acc (a cached conversion does not measure W again: its
 * amax is already in the running maximum). Results are bit-equal with and without. */
typedef struct backend_gemm {
    backend_prec prec;
    int dy_e5m2;
    float scale[BACKEND_FP8_SLOTS];
    float amax[BACKEND_FP8_SLOTS];
    float *amax_acc;
    float *wcache;
    const float *wcache_w;
    unsigned wcache_forms;
} backend_gemm;

/* A range of a flat parameter buffer for the optimizer: elements [offset, offset + n), with
 * weight decay (decay 1) or without (norm weights). */
typedef struct backend_seg {
    size_t offset;
    size_t n;
    int decay;
} backend_seg;

/* One AdamW step's scalars (optim.h computes them in double once per step). */
typedef struct backend_adamw {
    float b1, b2;                     /* beta1, beta2 */
    float one_minus_b1, one_minus_b2; /* (float)(1 - beta), rounded once */
    float eps;
    float keep;         /* the parameter multiplier of decayed segments: 1 - lr * weight_decay */
    float step_size;    /* lr / (1 - beta1^t) */
    float inv_bc2_sqrt; /* 1 / sqrt(1 - beta2^t) */
    float grad_coef;    /* clipping: 1, or every gradient is first multiplied by it, in place */
} backend_adamw;

typedef struct backend backend;

struct backend {
    const char *name;
    void *ctx; /* the implementation's state */

    /* Memory. alloc returns zeroed device memory or NULL. */
    void *(*alloc)(backend *be, size_t bytes);
    void (*free)(backend *be, void *ptr);
    void (*to_host)(backend *be, void *host_dst, const void *src, size_t bytes);
    void (*from_host)(backend *be, void *dst, const void *host_src, size_t bytes);
    /* Waits for queued work; returns 0 or the first error recorded since the last sync. */
    int (*sync)(backend *be);
    /* The message of the failure sync() last reported; NULL where sync never fails (CPU). */
    const char *(*error)(backend *be);

    /* Scratch each op needs, in floats. */
    size_t (*matmul_scratch_floats)(backend *be, int N, int C, int OC, backend_prec prec);
    /* Floats of a weight cache (backend_gemm.wcache) for a (OC, C) weight; NULL, or 0 for
     * a precision, where there is nothing to cache (the CPU backend, float32). */
    size_t (*matmul_wcache_floats)(backend *be, int C, int OC, backend_prec prec);
    size_t (*attention_scratch_floats)(backend *be, int T);

    /* x[i] = 0 for i < n */
    void (*zero)(backend *be, float *x, size_t n);
    /* out[i] = a[i] + b[i]; out may alias a or b. Residual add, and the sum of the two
     * gradients reaching a residual branch point. */
    void (*add)(backend *be, float *out, const float *a, const float *b, size_t n);
    /* dst[r * ldd + c] = src[r * lds + c] for r < rows, c < width (cudaMemcpy2D). */
    void (*copy2d)(backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                   size_t width);
    /* x[i] *= s */
    void (*scale)(backend *be, float *x, float s, size_t n);
    /* Sum of x[i]^2 accumulated in double, returned to the host (synchronizes). */
    double (*sumsq)(backend *be, const float *x, size_t n);
    /* dst[i] = src[i] for i < n (device to device; the ranges do not overlap). */
    void (*copy)(backend *be, float *dst, const float *src, size_t n);
    /* 16-bit transfers: dst[i] = src[i] rounded to bf16 (round-to-nearest-even, as a bf16
     * product rounds its operands), and back (exact). A tensor that only a bf16 product
     * reads can so travel in half the bytes with the same results. Optional (NULL:
     * transfers stay float32). */
    void (*pack_bf16)(backend *be, uint16_t *dst, const float *src, size_t n);
    void (*unpack_bf16)(backend *be, float *dst, const uint16_t *src, size_t n);
    /* The gradient norm's sum of squares over segments: 0.0 plus, in segment order and
     * in double, each segment's sumsq(x + offset, n) exactly as sumsq computes it (an
     * empty segment adds 0.0). One synchronization for all of them. */
    double (*sumsq_segs)(backend *be, const float *x, const backend_seg *segs, size_t nseg);

    /* The optimizer, fused over segments: for every segment and every i in it, float32
     * operations in exactly this order, no fused multiply-add (the CUDA result equals the
     * CPU one bit for bit):
     *   g = grad[i];  if (grad_coef != 1) { g = g * grad_coef; grad[i] = g; }
     *   mi = b1 * m[i] + one_minus_b1 * g;          m[i] = mi;
     *   vi = b2 * v[i] + (one_minus_b2 * g) * g;    v[i] = vi;
     *   denom = sqrtf(vi) * inv_bc2_sqrt + eps;     (IEEE sqrt)
     *   param[i] = param[i] * (decay ? keep : 1) - (step_size * mi) / denom;
     * param, grad, m and v are indexed alike (segment offsets apply to all four). */
    void (*adamw)(backend *be, float *param, float *grad, float *m, float *v,
                  const backend_seg *segs, size_t nseg, const backend_adamw *a);
    /* 1 when device memory is host memory (the CPU backend): the trainer may then read and
     * write parameters, gradients and moments directly; else only through to_host and
     * from_host. */
    int host_memory;
    /* The queue its ops run on (a cudaStream_t), NULL for the CPU backend: communication on
     * its memory is put on it (comm_set_stream) so that it orders with the ops. */
    void *stream;
    /* Side queues, for communication that overlaps the ops (train_dp.h); NULL where the
     * backend has none (the CPU's: its ops and Gloo's collectives complete before they
     * return). stream_new returns a new queue or NULL; stream_wait makes the work later
     * put on `waiter` wait for all the work put on `waitee` before the call (either NULL:
     * the ops' queue, be->stream), without blocking the host. */
    void *(*stream_new)(backend *be);
    void (*stream_free)(backend *be, void *s);
    void (*stream_wait)(backend *be, void *waiter, void *waitee);

    /* out (N, C) = wte[tokens[n]]; tokens (N) must lie in [0, V). */
    void (*embedding_forward)(backend *be, float *out, const int32_t *tokens, const float *wte,
                              int N, int C);
    /* dwte[tokens[n]] += dout[n] */
    void (*embedding_backward)(backend *be, float *dwte, const float *dout, const int32_t *tokens,
                               int N, int C);

    /* RMSNorm: rstd (N) = 1 / sqrt(mean(inp^2) + eps); out (N, C) = inp * rstd * weight. */
    void (*rmsnorm_forward)(backend *be, float *out, float *rstd, const float *inp,
                            const float *weight, int N, int C, float eps);
    void (*rmsnorm_backward)(backend *be, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int N,
                             int C);

    /* out (N, OC) = inp (N, C) @ weight (OC, C)^T in the precision p (NULL: float32).
     * scratch: matmul_scratch_floats(N, C, OC, prec) floats. */
    void (*matmul_forward)(backend *be, float *out, const float *inp, const float *weight, int N,
                           int C, int OC, backend_gemm *p, float *scratch);
    /* dinp (N, C) = dout @ weight (may be NULL: not needed); dweight (OC, C) += dout^T @ inp. */
    void (*matmul_backward)(backend *be, float *dinp, float *dweight, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC,
                            backend_gemm *p, float *scratch);

    /* Rotary embedding, Hugging Face's rotate-half convention: within a head of hd
     * values, element i < hd/2 pairs with i + hd/2:
     *   out[i]        = x[i] * cos[t][i] - x[i + hd/2] * sin[t][i]
     *   out[i + hd/2] = x[i + hd/2] * cos[t][i] + x[i] * sin[t][i]
     * cos, sin: (T, hd/2) for positions t of a sequence (any attention scaling of the
     * RoPE variant already folded in). inp/out: rows of nh heads of hd values, row
     * stride ld; out may alias inp. Backward applies the transposed rotation. */
    void (*rope_forward)(backend *be, float *out, const float *inp, const float *cos,
                         const float *sin, int B, int T, int nh, int hd, int ld);
    void (*rope_backward)(backend *be, float *dinp, const float *dout, const float *cos,
                          const float *sin, int B, int T, int nh, int hd, int ld);

    /* Causal multi-head attention with GQA: for each sequence b and query head h,
     * out = softmax(scale * q k^T + causal mask) v. q (rows of H*hd), k and v (rows of
     * KV*hd) have row stride ld; out (N, H*hd) is dense. lse (B, H, T) receives each
     * softmax row's log-sum-exp of the scaled scores. att (B, H, T, T), when not NULL,
     * receives the probabilities (zero above the diagonal) and backward reads them;
     * when NULL backward recomputes them bitwise-identically from q, k and lse.
     *
     * prec: the precision of the products. BACKEND_PREC_FP32 computes in float32
     * throughout. Any other precision lets a backend compute q k^T, P v and backward's
     * products (dout v^T, dS k, dS^T q, P^T dout) from bf16-rounded operands (round to
     * nearest even) with float32 accumulation, the softmax, lse and delta staying float32:
     * results are then within bf16 tolerance of float32 and still bitwise deterministic
     * run to run. Forward and backward must be called with the same prec (backward
     * recomputes the forward's probabilities). The CPU backend always computes float32
     * and ignores prec; the CUDA backend takes its tensor-core kernels for att NULL and
     * head sizes that are multiples of 16 up to 128 (cuda_attention_tc.cu).
     * scratch: attention_scratch_floats(T) floats. */
    void (*attention_forward)(backend *be, float *out, float *lse, float *att, const float *q,
                              const float *k, const float *v, int ld, int B, int T, int H, int KV,
                              int hd, float scale, backend_prec prec, float *scratch);
    /* dq, dk, dv: written with row stride ld (the layout of q, k, v). out: the forward's
     * output for these inputs (N, H*hd), from attention_forward with the same prec; a
     * backend may read it for delta = rowsum(dout * out) instead of recomputing delta from
     * q, k and v (the CUDA tensor-core kernels do; the float32 kernels ignore it). */
    void (*attention_backward)(backend *be, float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *att, const float *lse, const float *q,
                               const float *k, const float *v, int ld, int B, int T, int H, int KV,
                               int hd, float scale, backend_prec prec, float *scratch);

    /* Blockwise attention for context parallelism (ring attention): the queries of one
     * block of rows against the keys of another, with explicit positions. Query row i
     * (of Tq per sequence, at position qpos[i]) sees key j (of Tk, at kpos[j]) iff
     * kpos[j] <= qpos[i]. q has row stride ldq, k and v row stride ldkv; GQA as above.
     * Forward writes out (B*Tq, H*hd) dense = softmax over the visible keys of this block
     * times v, and lse (B, H, Tq) of those scores; a row that sees no key gets out 0 and
     * lse -INFINITY. qpos, kpos: device int32 arrays. scratch:
     * attention_part_scratch_floats(Tq, Tk) floats. */
    size_t (*attention_part_scratch_floats)(backend *be, int Tq, int Tk);
    void (*attention_part_forward)(backend *be, float *out, float *lse, const float *q, int ldq,
                                   const float *k, const float *v, int ldkv, int B, int Tq, int Tk,
                                   int H, int KV, int hd, float scale, const int32_t *qpos,
                                   const int32_t *kpos, float *scratch);
    /* Merges a block's partial result into the running one: with l = logaddexp(lse, lse2),
     * out = out e^(lse - l) + out2 e^(lse2 - l) and lse = l. out, out2 (B*T, H*hd). */
    void (*attention_merge)(backend *be, float *out, float *lse, const float *out2,
                            const float *lse2, int B, int T, int H, int hd);
    /* delta (B, H, T) = sum over hd of dout * out, per row and head (backward's row term). */
    void (*attention_delta)(backend *be, float *delta, const float *dout, const float *out, int B,
                            int T, int H, int hd);
    /* Backward of one block pair, from the final lse and delta of the query rows:
     * P = exp(scale q k^T - lse) on the visible keys, dS = P (dout v^T - delta) scale;
     * ACCUMULATES dq (stride ldq) += dS k, dk += dS^T q, dv += P^T dout (stride ldkv). */
    void (*attention_part_backward)(backend *be, float *dq, int ldq, float *dk, float *dv, int ldkv,
                                    const float *dout, const float *delta, const float *lse,
                                    const float *q, const float *k, const float *v, int B, int Tq,
                                    int Tk, int H, int KV, int hd, float scale, const int32_t *qpos,
                                    const int32_t *kpos, float *scratch);

    /* SwiGLU: inp (N, 2F) holds the gate projection in columns [0, F) and the up
     * projection in [F, 2F); out (N, F) = silu(gate) * up. */
    void (*swiglu_forward)(backend *be, float *out, const float *inp, int N, int F);
    void (*swiglu_backward)(backend *be, float *dinp, const float *dout, const float *inp, int N,
                            int F);

    /* Cross-entropy. losses (N) = lse - logits[target] and lse (N) = log-sum-exp of the
     * row, for targets >= 0; rows whose target is negative (ignored) get loss 0. */
    void (*crossentropy_forward)(backend *be, float *losses, float *lse, const float *logits,
                                 const int32_t *targets, int N, int V);
    /* dlogits (N, V) = (softmax(logits) - onehot(target)) * dloss on rows with a target,
     * 0 on ignored rows. dlogits may alias logits. */
    void (*crossentropy_backward)(backend *be, float *dlogits, const float *logits,
                                  const float *lse, const int32_t *targets, float dloss, int N,
                                  int V);

    /* Vocabulary-parallel pieces (tensor parallelism): this rank holds rows [v0, v0 + Vl)
     * of the embedding table and of the LM head, so its logits are the columns
     * [v0, v0 + Vl) of the full row. With one rank (v0 0, Vl V) they reduce to the ops
     * above, which the model uses then.
     *
     * Embedding: out (N, C) = wte[tokens[n] - v0] for tokens in the range, 0 for the
     * others (the sum over the ranks completes the lookup); backward accumulates
     * dwte[tokens[n] - v0] += dout[n] for tokens in the range only. */
    void (*vocab_embedding_forward)(backend *be, float *out, const int32_t *tokens,
                                    const float *wte, int N, int C, int v0, int Vl);
    void (*vocab_embedding_backward)(backend *be, float *dwte, const float *dout,
                                     const int32_t *tokens, int N, int C, int v0, int Vl);
    /* Cross-entropy partials of logits (N, Vl): part (N, 3) per row = the shard's max m,
     * sum of exp(logit - m) (accumulated in double) and the target's logit when the
     * target is in [v0, v0 + Vl), else 0. Rows whose target is ignored get (0, 0, 0). */
    void (*vocab_ce_partial)(backend *be, float *part, const float *logits, const int32_t *targets,
                             int N, int Vl, int v0);
    /* From every shard's partials parts (R, N, 3): lse (N) = M + log(sum_r s_r e^(m_r - M))
     * with M = max_r m_r, losses (N) = lse - (the target's logit); 0 and 0 on ignored
     * rows. Every rank combining the same parts gets bitwise the same result. */
    void (*vocab_ce_combine)(backend *be, float *losses, float *lse, const float *parts,
                             const int32_t *targets, int N, int R);
    /* dlogits (N, Vl) = (exp(logits - lse) - onehot(target - v0)) * dloss on rows with a
     * target (the onehot only on the shard that holds it), 0 on ignored rows. dlogits may
     * alias logits. */
    void (*vocab_ce_backward)(backend *be, float *dlogits, const float *logits, const float *lse,
                              const int32_t *targets, float dloss, int N, int Vl, int v0);

    /* Mixture-of-experts routing and token permutation: the pieces of moe.h's layer that
     * are not GEMMs or SwiGLU, for its device path (moe_dev.c); the definitions are
     * moe.h's. E experts (1..512), K = top_k (1..E), N tokens. Integers are int32.
     *
     * moe_route, per token n: scores (N, E) holds the router logits on entry and the
     * scores s on return (score 0: softmax, max-subtracted, expf, divided by the float sum
     * accumulated in index order; 1: sigmoid 1 / (1 + expf(-l))); ssum (N) = the float sum
     * of the row's scores in index order for sigmoid, 1 for softmax; topk (N, K) = the
     * experts with the largest s + bias (bias NULL: 0) in decreasing order, ties to the
     * lower index; gate (N, K) = s[topk], with norm_topk each divided by their float sum
     * accumulated in j order. */
    void (*moe_route)(backend *be, float *scores, float *ssum, int32_t *topk, float *gate,
                      const float *bias, int N, int E, int K, int score, int norm_topk);
    /* Capacity and grouping. Pairs p = n K + j in increasing p. counts (3E + 1):
     * routed[e] = counts[e] = pairs selecting e; kept[e] = counts[E + e] = min(routed,
     * capacity) (capacity 0: unlimited); offset = counts + 2E (E + 1): offset[0] = 0,
     * offset[e + 1] = offset[e] + kept[e]. A pair is kept when fewer than capacity pairs
     * with a lower p selected its expert; the i-th kept pair of expert e (in p order) gets
     * row[p] = offset[e] + i, tok[r] = n, slot[r] = j for that r; a dropped pair gets
     * row[p] = -1. row (N K); tok, slot (N K), written at rows < offset[E] only. limit
     * (E) or NULL: with it kept[e] = min(routed[e], limit[e]) and capacity is ignored (a
     * per-expert share of a capacity counted over more tokens than these, moe_dev.c). */
    void (*moe_assign)(backend *be, int32_t *row, int32_t *tok, int32_t *slot, int32_t *counts,
                       const int32_t *topk, int N, int K, int E, int capacity,
                       const int32_t *limit);
    /* pmean (E) = (float)(P / N), P = the double sum of the floats s[n][e] / ssum[n]
     * (the aux loss's P_e) in a fixed order: over chunks of moe_mean_chunk(N) consecutive
     * n (moe.h), each chunk's sum in n order, the chunks' sums in chunk order (with N up
     * to MOE_MEAN_CHUNK_MIN, the plain sum in n order), so that a GPU sums the chunks in
     * parallel. The reference (moe.c's aux_loss) keeps the plain sum in n order. */
    void (*moe_score_mean)(backend *be, float *pmean, const float *scores, const float *ssum, int N,
                           int E);
    /* dst (M, C) row r = src row idx[r], for r < M (the permutation into expert order). */
    void (*gather_rows)(backend *be, float *dst, const float *src, const int32_t *idx, int M,
                        int C);
    /* The un-permutation: for each token n and each j < K in increasing j whose
     * row[n K + j] >= 0, y[n][i] += w * src[row][i] (float, no fused multiply-add), w =
     * gate[n K + j], or 1 with gate NULL. y (N, C), src (rows, C). */
    void (*moe_combine)(backend *be, float *y, const float *src, const float *gate,
                        const int32_t *row, int N, int K, int C);
    /* Its backward for the M grouped rows r, p = tok[r] K + slot[r]: dout (M, C) row r =
     * gate[p] * dy[tok[r]]; dgate[p] = the float dot product of dy[tok[r]] and out row r
     * (any fixed order). dgate of dropped pairs is not written. */
    void (*moe_combine_backward)(backend *be, float *dout, float *dgate, const float *dy,
                                 const float *out, const float *gate, const int32_t *tok,
                                 const int32_t *slot, int M, int K, int C);
    /* The router's logit gradients dl (N, E), written, per token n (moe.c's router
     * backward): ds = 0; through the combine weights ds[topk[j]] += dgate[j] (norm_topk:
     * += (dgate[j] - dot) / sum, sum = float sum of s[topk[j]] and dot = float sum of
     * dgate[j] gate[j], both in j order); with aux_coef != 0, f_e = (float)(routed[e] /
     * (double)(Na K)), dp_e = (float)(((aux_coef * E) * f_e) / Na) (in double), dot = float
     * sum in e order of dp_e * (s_e / ssum[n]), ds[e] += (dp_e - dot) / ssum[n]; then
     * sigmoid: dl = ds * (s * (1 - s)); softmax: dl = s * (ds - dot2), dot2 = the float sum
     * in e order of ds * s. Float operations as bracketed, no fused multiply-add. routed
     * (E): the pairs per expert among the Na = n_aux tokens the aux loss's means run over:
     * the counts of moe_assign with Na = N, or (context parallelism) those of the whole
     * sequences these N tokens are a part of. Topk entries must lie in [0, E),
     * 1 <= K <= E <= 512 (a backend may record BT_EINVAL for sync to report otherwise). */
    void (*moe_router_backward)(backend *be, float *dl, const float *scores, const float *ssum,
                                const int32_t *topk, const float *gate, const float *dgate,
                                const int32_t *routed, int N, int n_aux, int E, int K, int score,
                                int norm_topk, double aux_coef);
};

#endif
