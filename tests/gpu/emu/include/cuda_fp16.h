/* CPU emulation (cuda_emu_core.h): fp16 conversions through precision.h. */
#pragma once
#include <cstdint>
extern "C" uint16_t prec_fp16_bits(float x);
extern "C" float prec_fp16_from_bits(uint16_t h);
struct __half_raw {
    unsigned short x;
};
struct __half {
    uint16_t x;
    __half() : x(0) {}
    __half(__half_raw r) : x(r.x) {}
};
inline __half __float2half_rn(float f) {
    return __half(__half_raw{prec_fp16_bits(f)});
}
inline float __half2float(__half h) {
    return prec_fp16_from_bits(h.x);
}
