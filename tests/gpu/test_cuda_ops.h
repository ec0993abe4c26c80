/* What test_cuda_ops.c and test_cuda_ops_moe.c share: the two backends, the failure count,
 * random inputs, device copies on both backends and their comparisons (tolerances
 * relative to the reference's largest magnitude, see test_cuda_ops.c). */
#ifndef BATON_TEST_CUDA_OPS_H
#define BATON_TEST_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define TOL_F32  2e-5
#define TOL_LOWP 5e-4

extern int failures;
extern backend cpu, gpu;

float urand(void); /* uniform in [-1, 1) */
float *host_rand(size_t n, float amp);

/* Device copies of a host array on each backend. */
typedef struct pair {
    float *c, *g;
    size_t n;
} pair;

pair pair_from(const float *h, size_t n);
pair pair_rand(size_t n, float amp);
void pair_free(pair *p);
int32_t *ints_on(backend *be, const int32_t *h, size_t n);
/* max |g - c| <= tol * max |c| over n values (c is the reference). */
void compare(const char *what, const float *c, const float *g, size_t n, double tol);
void compare_pair(const char *what, const pair *p, double tol);
/* 1 if the pair's two copies are bitwise equal; else a failure naming the first difference. */
int compare_pair_bits(const char *what, const pair *p);
void check_sync(const char *what);
/* 1 if the gpu buffers a and b (n floats) are bitwise equal. */
int gpu_bitwise_equal(const float *a, const float *b, size_t n);

/* test_cuda_ops_moe.c: every MoE op against the CPU. */
void test_moe_all(void);
/* test_cuda_ops_wcache.c: the GEMMs' weight cache against converting in each product. */
void test_wcache_all(void);
/* test_cuda_ops_stream.c: the backend beside a poll of a busy stream and another busy
 * stream (NCCL's, in training). */
void test_stream_all(void);

#endif
