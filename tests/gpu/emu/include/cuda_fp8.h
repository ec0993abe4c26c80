/* CPU emulation (cuda_emu_core.h): fp8 conversions (saturating) through precision.h. */
#pragma once
#include "cuda_fp16.h"
extern "C" uint8_t prec_fp8_encode(float x, int fmt);
extern "C" float prec_fp8_decode(uint8_t bits, int fmt);
typedef uint8_t __nv_fp8_storage_t;
enum __nv_fp8_interpretation_t { __NV_E4M3 = 0, __NV_E5M2 = 1 };
enum __nv_saturation_t { __NV_NOSAT = 0, __NV_SATFINITE = 1 };
inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float f, __nv_saturation_t,
                                                __nv_fp8_interpretation_t t) {
    return prec_fp8_encode(f, (int)t);
}
inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t q, __nv_fp8_interpretation_t t) {
    return __half_raw{prec_fp16_bits(prec_fp8_decode(q, (int)t))};
}
