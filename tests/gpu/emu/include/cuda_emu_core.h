/* A CPU emulation of CUDA's execution model, only for checking the *logic* of baton's
 * kernels (worker/cuda) on a machine without a GPU: test_cuda_ops_emulated runs the real
 * test (tests/gpu/test_cuda_ops.c) with every kernel executed here. It is not a GPU and
 * not a substitute for the GPU run: it cannot show races the barriers hide, the GPU's
 * memory model, its intrinsics' exact results, or cuBLASLt's behaviour (cublasLt.h here
 * is a plain triple loop), and it is slow.
 *
 * Model: one persistent host thread per CUDA thread of a block, blocks one after another;
 * __syncthreads and __syncwarp are barriers (an exited thread leaves them, as on sm_70+);
 * warp shuffles go through a per-warp exchange buffer between two warp barriers;
 * __shared__ variables are statics (one block runs at a time); a launch's dynamic shared
 * memory (extern __shared__, which convert.py turns into emu::dyn_shared()) is a buffer of
 * the launch's size per block, filled with garbage; atomics take a mutex. The
 * 16-bit and fp8 conversions call baton's exact CPU emulations (precision.h). Built with
 * AddressSanitizer and EMU_EXACT_ALLOC (-DBATON_CUDA_EMU_ASAN=ON), every device allocation
 * is exactly its size, so a kernel's out-of-bounds access stops the run. */
#pragma once
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <tuple>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__   static
#define __align__(n) alignas(n)

struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
    return float4{x, y, z, w};
}

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
struct Bar {
    std::mutex m;
    std::condition_variable cv;
    int expected = 0, count = 0;
    unsigned gen = 0;
    void wait() {
        std::unique_lock<std::mutex> l(m);
        unsigned g = gen;
        if (++count == expected) {
            count = 0;
            gen++;
            cv.notify_all();
        } else
            cv.wait(l, [&] { return gen != g; });
    }
    void leave() {
        std::unique_lock<std::mutex> l(m);
        expected--;
        if (count > 0 && count == expected) {
            count = 0;
            gen++;
            cv.notify_all();
        }
    }
};
struct Block {
    Bar bar;
    Bar warpbar[32];
    uint64_t xbuf[32][32];
    unsigned char *dyn = nullptr; /* dynamic shared memory (cfg.shm bytes) */
};
extern thread_local Block *cur;
extern thread_local int tid;
extern std::mutex atomic_mu;

struct cfg {
    dim3 g, b;
    size_t shm;
    void *stream;
    cfg(dim3 g_, dim3 b_, size_t shm_ = 0, void *s = nullptr)
        : g(g_), b(b_), shm(shm_), stream(s) {}
};

/* Work was queued on stream s (nullptr: the default stream); unfinished until waited for
 * or queried (emu.cpp, the completion model of cuda_runtime_api.h). */
void queued(void *s);

/* The running block's dynamic shared memory (128-byte aligned). */
inline void *dyn_shared() {
    return cur->dyn;
}

/* Persistent worker threads (as many as the largest block so far); run(n, f) runs f(0..n-1)
 * on workers 0..n-1 and waits for all of them. */
struct Pool {
    std::mutex m;
    std::condition_variable cv, done_cv;
    unsigned gen = 0;
    int pending = 0, nt = 0;
    std::function<void(int)> task;
    std::vector<std::thread> th;
    void grow(int n) {
        while ((int)th.size() < n) {
            int i = (int)th.size();
            th.emplace_back([this, i] {
                unsigned seen = 0;
                for (;;) {
                    std::function<void(int)> t;
                    {
                        std::unique_lock<std::mutex> l(m);
                        cv.wait(l, [&] { return gen != seen; });
                        seen = gen;
                        if (i >= nt) continue;
                        t = task;
                    }
                    t(i);
                    std::lock_guard<std::mutex> l(m);
                    if (--pending == 0) done_cv.notify_one();
                }
            });
            th.back().detach();
        }
    }
    void run(int n, std::function<void(int)> f) {
        grow(n);
        std::unique_lock<std::mutex> l(m);
        task = f;
        nt = n;
        pending = n;
        gen++;
        cv.notify_all();
        done_cv.wait(l, [&] { return pending == 0; });
    }
};
extern Pool &pool; /* never destroyed: its detached workers wait on it until exit */

template <class... P, class... A> void launch(cfg c, void (*f)(P...), A... a0) {
    std::tuple<P...> args(a0...); /* converted to the kernel's parameter types (NULL too) */
    unsigned nt = c.b.x * c.b.y * c.b.z;
    for (unsigned bz = 0; bz < c.g.z; bz++)
        for (unsigned by = 0; by < c.g.y; by++)
            for (unsigned bx = 0; bx < c.g.x; bx++) {
                Block *blk = new Block();
                blk->bar.expected = (int)nt;
                if (c.shm) {
                    size_t n = (c.shm + 127) / 128 * 128;
                    blk->dyn = (unsigned char *)aligned_alloc(128, n);
                    memset(blk->dyn, 0xA5, n); /* garbage, as a GPU would give */
                }
                for (unsigned w = 0; w < 32; w++) {
                    int lanes = (int)nt - (int)w * 32;
                    blk->warpbar[w].expected = lanes > 32 ? 32 : (lanes > 0 ? lanes : 0);
                }
                pool.run((int)nt, [&](int t) {
                    cur = blk;
                    tid = t;
                    threadIdx = dim3(t % c.b.x, t / c.b.x % c.b.y, t / c.b.x / c.b.y);
                    blockIdx = dim3(bx, by, bz);
                    blockDim = c.b;
                    gridDim = c.g;
                    std::apply(f, args);
                    blk->bar.leave();
                    blk->warpbar[t / 32].leave();
                });
                free(blk->dyn);
                delete blk;
            }
    queued(c.stream);
}
} // namespace emu

inline void __syncthreads() {
    emu::cur->bar.wait();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
    emu::cur->warpbar[emu::tid / 32].wait();
}
template <class T> inline T __shfl_sync(unsigned, T v, int src) {
    int w = emu::tid / 32, lane = emu::tid % 32;
    static_assert(sizeof(T) <= 8, "shfl");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    emu::cur->xbuf[w][lane] = u;
    emu::cur->warpbar[w].wait();
    uint64_t r = emu::cur->xbuf[w][src & 31];
    emu::cur->warpbar[w].wait();
    T out;
    memcpy(&out, &r, sizeof out);
    return out;
}
template <class T> inline T __shfl_xor_sync(unsigned m, T v, int o) {
    return __shfl_sync(m, v, (emu::tid % 32) ^ o);
}
inline float __fmaf_rn(float a, float b, float c) {
    return fmaf(a, b, c);
}
/* The round-to-nearest intrinsics: one IEEE single-precision operation each (the build
 * has -ffp-contract=off, so none of them fuses with its neighbours). */
inline float __fmul_rn(float a, float b) {
    return a * b;
}
inline float __fadd_rn(float a, float b) {
    return a + b;
}
inline float __fsub_rn(float a, float b) {
    return a - b;
}
inline float __fdiv_rn(float a, float b) {
    return a / b;
}
inline float __fsqrt_rn(float a) {
    return std::sqrt(a);
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
inline unsigned atomicMax(unsigned *p, unsigned v) {
    std::lock_guard<std::mutex> l(emu::atomic_mu);
    unsigned old = *p;
    if (v > old) *p = v;
    return old;
}

/* Kernel attributes: the emulation has no shared-memory limit to raise. */
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F> inline int cudaFuncSetAttribute(F *, cudaFuncAttribute, int) {
    return 0;
}
