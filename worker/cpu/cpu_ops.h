/* The CPU backend's operations, one family per file, gathered into the backend table
 * by cpu_backend.c. Semantics, shapes and the accumulate/write rule are those of
 * backend.h; these declarations exist only so the table can name them. */
#ifndef BATON_CPU_OPS_H
#define BATON_CPU_OPS_H

#include "backend.h"

/* cpu_elementwise.c */
void cpu_zero(backend *be, float *x, size_t n);
void cpu_add(backend *be, float *out, const float *a, const float *b, size_t n);
void cpu_scale(backend *be, float *x, float s, size_t n);
void cpu_copy2d(backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                size_t width);
double cpu_sumsq(backend *be, const float *x, size_t n);
double cpu_sumsq_segs(backend *be, const float *x, const backend_seg *segs, size_t nseg);
void cpu_copy_floats(backend *be, float *dst, const float *src, size_t n);
void cpu_pack_bf16(backend *be, uint16_t *dst, const float *src, size_t n);
void cpu_unpack_bf16(backend *be, float *dst, const uint16_t *src, size_t n);
void cpu_adamw(backend *be, float *param, float *grad, float *m, float *v, const backend_seg *segs,
               size_t nseg, const backend_adamw *a);
/* backend.h's AdamW on one range (decay: whether keep applies), also optim.h's host loop. */
void cpu_adamw_range(float *param, float *grad, float *m, float *v, size_t n,
                     const backend_adamw *a, int decay);
void cpu_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte, int N,
                           int C);
void cpu_embedding_backward(backend *be, float *dwte, const float *dout, const int32_t *tokens,
                            int N, int C);
void cpu_vocab_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                                 int N, int C, int v0, int Vl);
void cpu_vocab_embedding_backward(backend *be, float *dwte, const float *dout,
                                  const int32_t *tokens, int N, int C, int v0, int Vl);
void cpu_swiglu_forward(backend *be, float *out, const float *inp, int N, int F);
void cpu_swiglu_backward(backend *be, float *dinp, const float *dout, const float *inp, int N,
                         int F);

/* cpu_norm.c */
void cpu_rmsnorm_forward(backend *be, float *out, float *rstd, const float *inp,
                         const float *weight, int N, int C, float eps);
void cpu_rmsnorm_backward(backend *be, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int N, int C);
void cpu_rope_forward(backend *be, float *out, const float *inp, const float *cos, const float *sin,
                      int B, int T, int nh, int hd, int ld);
void cpu_rope_backward(backend *be, float *dinp, const float *dout, const float *cos,
                       const float *sin, int B, int T, int nh, int hd, int ld);

/* cpu_matmul.c */
size_t cpu_matmul_scratch_floats(backend *be, int N, int C, int OC, backend_prec prec);
void cpu_matmul_forward(backend *be, float *out, const float *inp, const float *weight, int N,
                        int C, int OC, backend_gemm *p, float *scratch);
void cpu_matmul_backward(backend *be, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC,
                         backend_gemm *p, float *scratch);

/* cpu_attention.c: float32 whatever prec says (backend.h allows it); backward does not read
 * out (it forms delta from the probabilities). */
size_t cpu_attention_scratch_floats(backend *be, int T);
void cpu_attention_forward(backend *be, float *out, float *lse, float *att, const float *q,
                           const float *k, const float *v, int ld, int B, int T, int H, int KV,
                           int hd, float scale, backend_prec prec, float *scratch);
void cpu_attention_backward(backend *be, float *dq, float *dk, float *dv, const float *dout,
                            const float *out, const float *att, const float *lse, const float *q,
                            const float *k, const float *v, int ld, int B, int T, int H, int KV,
                            int hd, float scale, backend_prec prec, float *scratch);

/* cpu_attention_part.c */
size_t cpu_attention_part_scratch_floats(backend *be, int Tq, int Tk);
void cpu_attention_part_forward(backend *be, float *out, float *lse, const float *q, int ldq,
                                const float *k, const float *v, int ldkv, int B, int Tq, int Tk,
                                int H, int KV, int hd, float scale, const int32_t *qpos,
                                const int32_t *kpos, float *scratch);
void cpu_attention_merge(backend *be, float *out, float *lse, const float *out2, const float *lse2,
                         int B, int T, int H, int hd);
void cpu_attention_delta(backend *be, float *delta, const float *dout, const float *out, int B,
                         int T, int H, int hd);
void cpu_attention_part_backward(backend *be, float *dq, int ldq, float *dk, float *dv, int ldkv,
                                 const float *dout, const float *delta, const float *lse,
                                 const float *q, const float *k, const float *v, int B, int Tq,
                                 int Tk, int H, int KV, int hd, float scale, const int32_t *qpos,
                                 const int32_t *kpos, float *scratch);

/* cpu_loss.c */
void cpu_crossentropy_forward(backend *be, float *losses, float *lse, const float *logits,
                              const int32_t *targets, int N, int V);
void cpu_crossentropy_backward(backend *be, float *dlogits, const float *logits, const float *lse,
                               const int32_t *targets, float dloss, int N, int V);
void cpu_vocab_ce_partial(backend *be, float *part, const float *logits, const int32_t *targets,
                          int N, int Vl, int v0);
void cpu_vocab_ce_combine(backend *be, float *losses, float *lse, const float *parts,
                          const int32_t *targets, int N, int R);
void cpu_vocab_ce_backward(backend *be, float *dlogits, const float *logits, const float *lse,
                           const int32_t *targets, float dloss, int N, int Vl, int v0);

/* cpu_moe.c */
void cpu_moe_route(backend *be, float *scores, float *ssum, int32_t *topk, float *gate,
                   const float *bias, int N, int E, int K, int score, int norm_topk);
void cpu_moe_assign(backend *be, int32_t *row, int32_t *tok, int32_t *slot, int32_t *counts,
                    const int32_t *topk, int N, int K, int E, int capacity, const int32_t *limit);
void cpu_moe_score_mean(backend *be, float *pmean, const float *scores, const float *ssum, int N,
                        int E);
void cpu_gather_rows(backend *be, float *dst, const float *src, const int32_t *idx, int M, int C);
void cpu_moe_combine(backend *be, float *y, const float *src, const float *gate, const int32_t *row,
                     int N, int K, int C);
void cpu_moe_combine_backward(backend *be, float *dout, float *dgate, const float *dy,
                              const float *out, const float *gate, const int32_t *tok,
                              const int32_t *slot, int M, int K, int C);
void cpu_moe_router_backward(backend *be, float *dl, const float *scores, const float *ssum,
                             const int32_t *topk, const float *gate, const float *dgate,
                             const int32_t *routed, int N, int n_aux, int E, int K, int score,
                             int norm_topk, double aux_coef);

#endif
