/* The CUDA backend's optimizer ops (backend.h: adamw, copy).
 *
 * Rules: AdamW is one multi-tensor kernel over a table of chunks. The host splits every
 * segment into chunks of at most CUDA_ADAMW_CHUNK elements, fills a pinned table of at
 * most CUDA_ADAMW_TABLE chunks, copies it to the device and launches one block per chunk;
 * a longer list goes in several such batches. The table lives in the backend's context
 * (allocated at init, two halves used in turn) and a half is refilled only after the
 * event recorded behind its last copy has completed, so a batch never overwrites a table
 * the stream has not yet read. Every element is computed independently with the
 * round-to-nearest intrinsics (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn),
 * which the compiler never contracts into a fused multiply-add, in exactly the order of
 * backend.h's contract: the result equals the CPU backend's bit for bit. The update is
 * elementwise, so it is deterministic whatever the chunking. Launchers take the backend,
 * queue on its stream and check the launch. */
#include "cuda_internal.cuh"

#define ADAMW_THREADS 256
#define ADAMW_ILP     4 /* elements in flight per thread: loads issued before the math */

/* One block's element loop over chunk blockIdx.x of the table. */
__global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel(float *__restrict__ param, float *__restrict__ grad, float *__restrict__ m,
                 float *__restrict__ v, const cuda_adamw_chunk *__restrict__ chunks,
                 backend_adamw a, int scale_grad) {
    const cuda_adamw_chunk ch = chunks[blockIdx.x];
    float *p = param + ch.offset, *g = grad + ch.offset, *mm = m + ch.offset, *vv = v + ch.offset;
    const float keep = ch.decay ? a.keep : 1.0f;
    const unsigned n = ch.n, stride = blockDim.x;
    for (unsigned base = threadIdx.x; base < n; base += ADAMW_ILP * stride) {
        float rp[ADAMW_ILP], rg[ADAMW_ILP], rm[ADAMW_ILP], rv[ADAMW_ILP];
#pragma unroll
        for (int k = 0; k < ADAMW_ILP; k++) {
            unsigned i = base + k * stride;
            rp[k] = rg[k] = rm[k] = rv[k] = 0.0f;
            if (i < n) {
                rp[k] = p[i];
                rg[k] = g[i];
                rm[k] = mm[i];
                rv[k] = vv[i];
            }
        }
#pragma unroll
        for (int k = 0; k < ADAMW_ILP; k++) {
            unsigned i = base + k * stride;
            if (i >= n) continue;
            float gi = rg[k];
            if (scale_grad) {
                gi = __fmul_rn(gi, a.grad_coef);
                g[i] = gi;
            }
            float mi = __fadd_rn(__fmul_rn(a.b1, rm[k]), __fmul_rn(a.one_minus_b1, gi));
            float vi =
                __fadd_rn(__fmul_rn(a.b2, rv[k]), __fmul_rn(__fmul_rn(a.one_minus_b2, gi), gi));
            mm[i] = mi;
            vv[i] = vi;
            float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), a.inv_bc2_sqrt), a.eps);
            p[i] = __fsub_rn(__fmul_rn(rp[k], keep), __fdiv_rn(__fmul_rn(a.step_size, mi), denom));
        }
    }
}

/* The host half `half` of the chunk table, once the stream has read its previous contents. */
static cuda_adamw_chunk *adamw_table(cuda_ctx *c, int half) {
    cudaError_t e = cudaEventSynchronize(c->adamw_copied[half]);
    if (e != cudaSuccess) {
        cuda_check(c, e, "adamw: cudaEventSynchronize");
        return NULL;
    }
    return c->adamw_host + (size_t)half * CUDA_ADAMW_TABLE;
}

/* Copies the first n chunks of host half `half` to the device and launches their blocks. */
static void adamw_launch(cuda_ctx *c, int half, unsigned n, float *param, float *grad, float *m,
                         float *v, const backend_adamw *a) {
    size_t at = (size_t)half * CUDA_ADAMW_TABLE;
    cuda_check(c,
               cudaMemcpyAsync(c->adamw_dev + at, c->adamw_host + at, n * sizeof(cuda_adamw_chunk),
                               cudaMemcpyHostToDevice, c->stream),
               "adamw: cudaMemcpyAsync");
    cuda_check(c, cudaEventRecord(c->adamw_copied[half], c->stream), "adamw: cudaEventRecord");
    adamw_kernel<<<n, ADAMW_THREADS, 0, c->stream>>>(param, grad, m, v, c->adamw_dev + at, *a,
                                                     a->grad_coef != 1.0f);
    CUDA_LAUNCHED(c, "adamw_kernel");
}

void cuda_adamw(backend *be, float *param, float *grad, float *m, float *v, const backend_seg *segs,
                size_t nseg, const backend_adamw *a) {
    cuda_ctx *c = cuda_ctx_of(be);
    cuda_adamw_chunk *tab = NULL;
    unsigned n = 0;
    int half = c->adamw_half; /* not the half the previous call's last batch used */
    for (size_t s = 0; s < nseg; s++) {
        for (size_t done = 0; done < segs[s].n; done += CUDA_ADAMW_CHUNK) {
            if (tab == NULL && (tab = adamw_table(c, half)) == NULL) return;
            size_t left = segs[s].n - done;
            tab[n].offset = segs[s].offset + done;
            tab[n].n = (unsigned)(left < CUDA_ADAMW_CHUNK ? left : CUDA_ADAMW_CHUNK);
            tab[n].decay = segs[s].decay != 0;
            if (++n == CUDA_ADAMW_TABLE) {
                adamw_launch(c, half, n, param, grad, m, v, a);
                half ^= 1;
                n = 0;
                tab = NULL;
            }
        }
    }
    if (n) adamw_launch(c, half, n, param, grad, m, v, a), half ^= 1;
    c->adamw_half = half;
}

void cuda_copy(backend *be, float *dst, const float *src, size_t n) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (n == 0) return;
    cuda_check(c, cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice, c->stream),
               "copy: cudaMemcpyAsync");
}
