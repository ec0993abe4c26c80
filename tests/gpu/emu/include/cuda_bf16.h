/* CPU emulation (cuda_emu_core.h): bf16 conversion through precision.h. */
#pragma once
#include <cstdint>
#include <cstring>
extern "C" uint16_t prec_bf16_bits(float x);
struct __nv_bfloat16 {
    uint16_t x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    return __nv_bfloat16{prec_bf16_bits(f)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
