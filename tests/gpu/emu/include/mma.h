/* CPU emulation (cuda_emu_core.h) of the part of nvcuda::wmma that worker/cuda uses:
 * 16x16x16 fragments of bf16 (matrix_a, matrix_b; row_major or col_major) and float
 * (accumulator), fill_fragment, load_matrix_sync, mma_sync, store_matrix_sync, and a
 * fragment's num_elements and x[] for element-wise work applied uniformly.
 *
 * Semantics, not layout: on the GPU a fragment's elements are spread over the warp's lanes
 * in an unspecified way; here every lane holds the whole tile, element (r, c) at
 * x[r * 16 + c] (a: M x K, b: K x N, accumulator: M x N). Code that treats x[] as opaque
 * (the same operation on every element, or an element's row looked up through a fragment
 * loaded from a table of row numbers) computes the same on both. A load reads the whole
 * tile in every lane; a store is made by the warp's lane 0 alone; neither is a barrier,
 * as on the GPU, so a kernel must order them with __syncwarp/__syncthreads itself.
 * mma_sync multiplies bf16 values (exact in float) and adds them to the accumulator in
 * float, k in ascending order (the GPU's order within a 16-step is unspecified). The
 * alignment rules of the GPU are checked: pointers 256-bit aligned, ldm a multiple of 16
 * bytes; a violation aborts the run. */
#pragma once
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_emu_core.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16x16x16 fragments only");
    enum { num_elements = 256 };
    T x[256];
};

namespace detail {
inline float to_float(float v) {
    return v;
}
inline float to_float(__nv_bfloat16 v) {
    uint32_t u = (uint32_t)v.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline void check(const void *p, unsigned ldm, size_t elem, const char *what) {
    if ((uintptr_t)p % 32 != 0 || (ldm * elem) % 16 != 0) {
        fprintf(stderr, "emulated wmma %s: pointer %p (needs 32-byte alignment), ldm %u\n", what, p,
                ldm);
        abort();
    }
}
} // namespace detail

template <class Use, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
    for (int e = 0; e < 256; e++)
        f.x[e] = v;
}
template <class Use, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, float v) {
    for (int e = 0; e < 256; e++)
        f.x[e] = __float2bfloat16_rn(v);
}

/* matrix_a / matrix_b: the layout is the fragment's. */
template <class Use, class T, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "accumulator loads name a layout");
    detail::check(p, ldm, sizeof(T), "load_matrix_sync");
    bool col = std::is_same<L, col_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t l) {
    detail::check(p, ldm, sizeof(float), "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t l) {
    detail::check(p, ldm, sizeof(float), "store_matrix_sync");
    if (emu::tid % 32 != 0) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float *d = l == mem_col_major ? p + (size_t)c * ldm + r : p + (size_t)r * ldm + c;
            *d = f.x[r * 16 + c];
        }
}

/* d = a b + c (d may be c). */
template <class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    float out[256];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float s = c.x[m * 16 + n];
            for (int k = 0; k < 16; k++)
                s += detail::to_float(a.x[m * 16 + k]) * detail::to_float(b.x[k * 16 + n]);
            out[m * 16 + n] = s;
        }
    for (int e = 0; e < 256; e++)
        d.x[e] = out[e];
}
} // namespace wmma
} // namespace nvcuda
