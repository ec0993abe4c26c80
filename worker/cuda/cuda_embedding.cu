/* The embedding lookup (whole or vocabulary-parallel) and its backward.
 *
 * Rules: the backward accumulates (+=) into the table's gradient, each token's rows n
 * added in n order, as the CPU backend adds them (test_cuda_ops compares bit for bit: a
 * token seen twice is a chain of float additions whose order fixes the bits), with no
 * atomics, so that it is deterministic run to run. No thread walks every token; the
 * backward runs in two steps:
 *  1. A stable sort of the (key, row) pairs by key, key = token - v0 inside the shard
 *     [0, Vl) and EMB_NONE outside (sorted last, then skipped): a least-significant-digit
 *     radix sort, EMB_DIGIT_BITS a pass. Each pass counts each chunk's digits (a block per
 *     chunk of EMB_CHUNK pairs, a thread per digit value walking its chunk in shared
 *     memory), scans the counts digit-major (one block, a thread per digit value walking
 *     the chunks), then places each chunk's pairs at their digit's offsets in chunk
 *     order (the count's walk again): stable, so each token's rows end in n order. Four
 *     passes sort 32-bit keys; a shard of Vl <= 0xffff needs two: its keys are below
 *     0xffff, the low 16 bits of EMB_NONE, which so still sorts last (the same order, so
 *     the same sums, bit for bit).
 *  2. The sums: a block takes EMB_SPAN sorted positions (or more for very large N) and
 *     128 columns; for each token whose run of positions starts in its span, a thread
 *     adds the run's dout rows to the table value in order and stores the sum once.
 * A thread's work is EMB_CHUNK steps per sort pass, the chunks over a block's 256
 * threads in the scan, and in the sums its span plus the lengths of the runs starting
 * there: a token repeated r times is a chain of r additions whatever the scheme, if the
 * sums are to be the CPU's. The sort's scratch, c->emb_sort, grows at the first call
 * with more rows than before, by a stream-ordered free and allocation on the backend's
 * stream (cudaFreeAsync, cudaMallocAsync): cudaFree and cudaMalloc would synchronize the
 * device, waiting with no deadline behind NCCL kernels in flight on other streams.
 * Launchers take the backend, queue on its stream and check the launch. */
#include "cuda_internal.cuh"

#define EMB_THREADS    256
#define EMB_DIGIT_BITS 8
#define EMB_DIGITS     (1 << EMB_DIGIT_BITS) /* = EMB_CHUNK = the sort kernels' threads */
#define EMB_PASSES     (32 / EMB_DIGIT_BITS)
#define EMB_CHUNK      256
#define EMB_SPAN       32
#define EMB_NONE       0xffffffffu /* the key of a row outside the shard */
static_assert(EMB_CHUNK == EMB_DIGITS, "a sort block's threads load its chunk, one key each");
static_assert(EMB_PASSES % 2 == 0, "the sorted pairs end where the first pass read them");

/* out (N, C) = wte[tokens[n] - v0] when in [0, Vl), else 0 (v0 0, Vl INT_MAX: plain). */
__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte, int N,
                                         int C, int v0, int Vl) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, c = i % C;
        int t = tokens[n] - v0;
        out[i] = (t >= 0 && t < Vl) ? wte[(size_t)t * C + c] : 0.0f;
    }
}

/* key[n], row[n] = the pair of row n. */
__global__ void emb_keys_kernel(uint32_t *key, int32_t *row, const int32_t *tokens, int N, int v0,
                                int Vl) {
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        int t = tokens[n] - v0; /* as the CPU's, which checks the difference */
        key[n] = t >= 0 && t < Vl ? (uint32_t)t : EMB_NONE;
        row[n] = n;
    }
}

/* The digits at shift of chunk blockIdx.x's keys into dig; returns the chunk's length. */
__device__ __forceinline__ int emb_chunk_digits(unsigned char *dig, const uint32_t *key, int N,
                                                int shift) {
    const int p0 = blockIdx.x * EMB_CHUNK, len = N - p0 < EMB_CHUNK ? N - p0 : EMB_CHUNK;
    if ((int)threadIdx.x < len) dig[threadIdx.x] = (unsigned char)(key[p0 + threadIdx.x] >> shift);
    __syncthreads();
    return len;
}

/* hist[d G + g] = the keys of chunk g whose digit is d (thread d). */
__global__ void __launch_bounds__(EMB_DIGITS)
    emb_count_kernel(uint32_t *hist, const uint32_t *key, int N, int G, int shift) {
    __shared__ unsigned char dig[EMB_CHUNK];
    const int len = emb_chunk_digits(dig, key, N, shift), d = threadIdx.x;
    uint32_t n = 0;
    for (int i = 0; i < len; i++)
        n += dig[i] == d;
    hist[(size_t)d * G + blockIdx.x] = n;
}

/* hist becomes its exclusive prefix sum in digit-major order: where chunk g's pairs of
 * digit d go. Thread d sums its digit's chunks, thread 0 the digits' totals. */
__global__ void __launch_bounds__(EMB_DIGITS) emb_scan_kernel(uint32_t *hist, int G) {
    __shared__ uint32_t base[EMB_DIGITS];
    const int d = threadIdx.x;
    uint32_t *h = hist + (size_t)d * G, run = 0;
    for (int g = 0; g < G; g++) {
        uint32_t n = h[g];
        h[g] = run;
        run += n;
    }
    base[d] = run;
    __syncthreads();
    if (d == 0) {
        uint32_t sum = 0;
        for (int i = 0; i < EMB_DIGITS; i++) {
            uint32_t n = base[i];
            base[i] = sum;
            sum += n;
        }
    }
    __syncthreads();
    for (int g = 0; g < G; g++)
        h[g] += base[d];
}

/* Thread d moves chunk g's pairs of digit d, in order, to their places. */
__global__ void __launch_bounds__(EMB_DIGITS)
    emb_place_kernel(uint32_t *key_out, int32_t *row_out, const uint32_t *key, const int32_t *row,
                     const uint32_t *hist, int N, int G, int shift) {
    __shared__ unsigned char dig[EMB_CHUNK];
    const int len = emb_chunk_digits(dig, key, N, shift), d = threadIdx.x;
    const int p0 = blockIdx.x * EMB_CHUNK;
    uint32_t at = hist[(size_t)d * G + blockIdx.x];
    for (int i = 0; i < len; i++)
        if (dig[i] == d) {
            key_out[at] = key[p0 + i];
            row_out[at] = row[p0 + i];
            at++;
        }
}

/* dwte[key][c] += dout[row][c] along each run of equal keys that starts in this block's
 * span of sorted positions, in the run's (row) order. */
__global__ void emb_sum_kernel(float *dwte, const float *dout, const uint32_t *key,
                               const int32_t *row, int N, int C, int span) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int i0 = blockIdx.y * span, i1 = N - i0 < span ? N : i0 + span;
    for (int i = i0; i < i1; i++) {
        const uint32_t t = key[i];
        if (t == EMB_NONE) return; /* the rest are outside the shard too */
        if (i > 0 && key[i - 1] == t) continue;
        float *w = dwte + (size_t)t * C + c, acc = *w;
        for (int j = i; j < N && key[j] == t; j++)
            acc += dout[(size_t)row[j] * C + c];
        *w = acc;
    }
}

/* c->emb_sort holding at least words (grown, in stream order; the old contents are not
 * kept). */
static uint32_t *emb_scratch(cuda_ctx *c, size_t words) {
    if (c->emb_sort_words >= words) return c->emb_sort;
    if (c->emb_sort) cudaFreeAsync(c->emb_sort, c->stream);
    c->emb_sort = NULL, c->emb_sort_words = 0;
    cudaError_t e = cudaMallocAsync((void **)&c->emb_sort, words * sizeof(uint32_t), c->stream);
    cuda_check(c, e, "embedding backward: cudaMallocAsync of the sort's scratch");
    if (e != cudaSuccess) return c->emb_sort = NULL;
    c->emb_sort_words = words;
    return c->emb_sort;
}

void cuda_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte, int N,
                            int C) {
    cuda_vocab_embedding_forward(be, out, tokens, wte, N, C, 0, 0x7fffffff);
}

void cuda_embedding_backward(backend *be, float *dwte, const float *dout, const int32_t *tokens,
                             int N, int C) {
    cuda_vocab_embedding_backward(be, dwte, dout, tokens, N, C, 0, 0x7fffffff);
}

void cuda_vocab_embedding_forward(backend *be, float *out, const int32_t *tokens, const float *wte,
                                  int N, int C, int v0, int Vl) {
    cuda_ctx *c = cuda_ctx_of(be);
    size_t n = (size_t)N * C;
    if (n == 0) return;
    embedding_forward_kernel<<<cuda_grid(n, EMB_THREADS), EMB_THREADS, 0, c->stream>>>(
        out, tokens, wte, N, C, v0, Vl);
    CUDA_LAUNCHED(c, "embedding_forward_kernel");
}

void cuda_vocab_embedding_backward(backend *be, float *dwte, const float *dout,
                                   const int32_t *tokens, int N, int C, int v0, int Vl) {
    cuda_ctx *c = cuda_ctx_of(be);
    if (N <= 0 || C <= 0) return;
    const int G = (N + EMB_CHUNK - 1) / EMB_CHUNK;
    /* Two (key, row) arrays, the passes reading one and writing the other, then hist. */
    uint32_t *s = emb_scratch(c, 4 * (size_t)N + (size_t)EMB_DIGITS * G);
    if (s == NULL) return;
    uint32_t *key[2] = {s, s + N}, *hist = s + 4 * (size_t)N;
    int32_t *row[2] = {(int32_t *)(s + 2 * (size_t)N), (int32_t *)(s + 3 * (size_t)N)};
    emb_keys_kernel<<<cuda_grid(N, EMB_THREADS), EMB_THREADS, 0, c->stream>>>(key[0], row[0],
                                                                              tokens, N, v0, Vl);
    const int passes = Vl <= 0xffff ? 2 : EMB_PASSES; /* even, as EMB_PASSES */
    for (int p = 0; p < passes; p++) {
        const int in = p & 1, shift = p * EMB_DIGIT_BITS;
        emb_count_kernel<<<G, EMB_DIGITS, 0, c->stream>>>(hist, key[in], N, G, shift);
        emb_scan_kernel<<<1, EMB_DIGITS, 0, c->stream>>>(hist, G);
        emb_place_kernel<<<G, EMB_DIGITS, 0, c->stream>>>(key[!in], row[!in], key[in], row[in],
                                                          hist, N, G, shift);
    }
    /* An even number of passes: the sorted pairs are back in key[0], row[0]. */
    const int span = N / 65535 + 1 > EMB_SPAN ? N / 65535 + 1 : EMB_SPAN;
    dim3 grid((unsigned)(C + 127) / 128, (unsigned)((N + span - 1) / span));
    emb_sum_kernel<<<grid, 128, 0, c->stream>>>(dwte, dout, key[0], row[0], N, C, span);
    CUDA_LAUNCHED(c, "embedding backward kernels");
}
