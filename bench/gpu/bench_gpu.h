/* bench_gpu's reference attention path (bench_attention_ref.cu), callable from C. */
#ifndef BATON_BENCH_GPU_H
#define BATON_BENCH_GPU_H

#ifdef __cplusplus
extern "C" {
#endif

/* Causal attention forward through cuBLAS float32 GEMMs and a softmax kernel: q, k, v,
 * out dense (B*T, H*hd) device arrays, S (H*T*T floats) device scratch. Runs one warm-up
 * and reps timed passes on the default stream; *seconds per pass. 0 or negative. */
int bench_ref_attention(const float *q, const float *k, const float *v, float *out, float *S, int B,
                        int T, int H, int hd, float scale, int reps, double *seconds);

#ifdef __cplusplus
}
#endif

#endif
