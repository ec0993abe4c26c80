/* bench_gpu's reference attention path (bench_attention_ref.cu), callable from C. */
#ifndef BATON_BENCH_GPU_H
#define BATON_BENCH_GPU_H

#ifdef __cplusplus
extern "C" {
#endif

/* Device time on one stream: bench_timer_start records an event on stream (a cudaStream_t,
 * NULL the legacy default stream), bench_timer_stop another after everything queued
 * since, waits for it and returns the seconds between the two (negative on a CUDA
 * failure); the events are released either way (and by a start that fails, which
 * returns -1 and needs no stop). */
typedef struct bench_timer {
    void *start, *stop, *stream;
} bench_timer;
int bench_timer_start(bench_timer *t, void *stream);
double bench_timer_stop(bench_timer *t);

/* Causal attention forward through cuBLAS float32 GEMMs and a softmax kernel: q, k, v,
 * out dense (B*T, H*hd) device arrays, S (H*T*T floats) device scratch. Runs one warm-up
 * and reps (>= 1) timed passes on stream, timed by a bench_timer on it; *seconds per pass.
 * 0 or negative. */
int bench_ref_attention(const float *q, const float *k, const float *v, float *out, float *S, int B,
                        int T, int H, int hd, float scale, int reps, void *stream, double *seconds);

#ifdef __cplusplus
}
#endif

#endif
